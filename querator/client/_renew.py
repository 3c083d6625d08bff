"""Keeping a lease alive while ``leased()`` runs its body: when to renew, and when to give up."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from querator.client._errors import ConnectionFailed
from querator.clock import MICROS, SystemClock, from_datetime
from querator.duration import SECOND, parse_duration
from querator.errors import InvalidOption, RetryRequest

if TYPE_CHECKING:
    from querator.client._async import AsyncClient
    from querator.client._lease import Lease

MIN_RENEW_WAIT = 0.01
"""Seconds: the shortest wait between two renewals of a lease about to run out."""


async def keep_renewed(client: AsyncClient, lease: Lease, lease_timeout: str) -> None:
    """Renews ``lease``'s items until cancelled, or until a renewal says the lease is lost.

    A renewal comes each time a third of the time left on the lease has passed (measured against the
    server's ``lease_deadline``; with ``lease_timeout``, at least every third of it).
    """
    if not lease.items:
        return
    ids = [i.id for i in lease.items]
    tokens = [i.lease_token for i in lease.items if i.lease_token]
    clock = SystemClock()
    first = lease.items[0].lease_deadline
    deadline = from_datetime(first) if first is not None else clock.now() + MICROS
    period_s = parse_duration(lease_timeout) / SECOND / 3 if lease_timeout else None
    while True:
        third_s = (deadline - clock.now()) / MICROS / 3
        await asyncio.sleep(max(third_s if period_s is None else min(period_s, third_s), MIN_RENEW_WAIT))
        try:
            reply = await client.renew(
                lease.queue_name, lease.partition, ids, lease_timeout, lease_tokens=tokens
            )
        except InvalidOption:
            return  # lost; completing on exit will say so
        except (RetryRequest, ConnectionFailed):
            continue  # the next try comes after a third of what is left
        if reply.items and reply.items[0].lease_deadline is not None:
            deadline = from_datetime(reply.items[0].lease_deadline)


async def stopped(task: asyncio.Task[None]) -> None:
    """Cancels ``task`` and waits for it to end. A renewal that had failed is ignored: completing or
    retrying the items on exit says whether the lease was kept."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
