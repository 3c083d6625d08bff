"""Keeping leases alive while their items are worked on: when to renew, and when to give up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from querator.client._errors import ConnectionFailed
from querator.clock import MICROS, SystemClock, from_datetime
from querator.duration import SECOND, parse_duration
from querator.errors import InvalidOption, RetryRequest
from querator.wire import messages as m

if TYPE_CHECKING:
    from querator.client._async import AsyncClient

MIN_RENEW_WAIT = 0.01
"""Seconds: the shortest wait between two renewals of a lease about to run out."""


async def keep_renewed(
    client: AsyncClient,
    queue_name: str,
    partition: int,
    ids: Collection[str],
    deadline: datetime | None,
    lease_timeout: str,
    lost: Callable[[str], None] | None = None,
    tokens: Mapping[str, str] | None = None,
) -> None:
    """Renews the leases of ``ids`` until cancelled or ``ids`` is empty (the caller may remove ids from a
    set as their items are done).

    A renewal comes each time a third of the time left on the lease has passed (measured against the
    server's lease deadline, first ``deadline``; with ``lease_timeout``, at least every third of it). A
    renewal answered 400 means a lease was lost (it expired and its item went back to the queue): without
    ``lost`` renewal stops there (settling the items will say so); with it, each id is renewed alone to
    find the lost ones, ``lost`` is told of each, and the others go on being renewed. ``tokens``: each
    id's lease token, for a queue that requires them.
    """
    clock = SystemClock()
    until = from_datetime(deadline) if deadline is not None else clock.now() + MICROS
    period_s = parse_duration(lease_timeout) / SECOND / 3 if lease_timeout else None
    while ids:
        third_s = (until - clock.now()) / MICROS / 3
        await asyncio.sleep(max(third_s if period_s is None else min(period_s, third_s), MIN_RENEW_WAIT))
        if not ids:
            return
        reply: m.QueueRenewResponse | None
        try:
            batch = list(ids)
            reply = await client.renew(
                queue_name, partition, batch, lease_timeout, lease_tokens=_proofs(tokens, batch)
            )
        except InvalidOption:
            if lost is None:
                return
            reply = await _renew_each(client, queue_name, partition, list(ids), lease_timeout, lost, tokens)
        except (RetryRequest, ConnectionFailed):
            continue  # the next try comes after a third of what is left
        if reply is not None and reply.items and reply.items[0].lease_deadline is not None:
            until = from_datetime(reply.items[0].lease_deadline)


async def _renew_each(
    client: AsyncClient,
    queue_name: str,
    partition: int,
    ids: list[str],
    lease_timeout: str,
    lost: Callable[[str], None],
    tokens: Mapping[str, str] | None,
) -> m.QueueRenewResponse | None:
    """Renews each id alone, telling ``lost`` of those whose lease is gone; the last good reply, if any."""
    good = None
    for item_id in ids:
        try:
            proof = _proofs(tokens, [item_id])
            good = await client.renew(queue_name, partition, [item_id], lease_timeout, lease_tokens=proof)
        except InvalidOption:
            lost(item_id)
        except (RetryRequest, ConnectionFailed):
            continue
    return good


def _proofs(tokens: Mapping[str, str] | None, ids: list[str]) -> list[str]:
    """The lease tokens of ``ids``, or none when the queue hands out none."""
    return [tokens[i] for i in ids] if tokens else []


async def stopped(task: asyncio.Task[None]) -> None:
    """Cancels ``task`` and waits for it to end. A renewal that had failed is ignored: completing or
    retrying the items on exit says whether the lease was kept."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
