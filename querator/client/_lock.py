"""Holding a lock or a semaphore slot: lease a token, renew it while the block runs, retry it on exit.

docs/locks.md describes the model and ADR 0018 the choices; ``_lock_queue`` keeps the tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from querator.client._arguments import Duration, go_duration, new_client_id, seconds_of
from querator.client._errors import AcquireTimedOut, ConnectionFailed, LockLost
from querator.client._lock_queue import LockQueue, check, deadline_of, ensure, seconds_left
from querator.client._renew import keep_renewed, stopped
from querator.errors import InvalidOption, RetryRequest
from querator.wire import messages as m

if TYPE_CHECKING:
    from querator.client._async import AsyncClient

MAX_POLL_S = 60.0
"""Seconds one lease long-polls for a token; an acquire without a timeout polls again after each."""


class Held:
    """What a ``lock()`` or ``semaphore()`` block holds.

    Attributes:
        name: the lock's name.
        slot: the token held (``token-<generation>-<n>``); a lock has one.
        fencing_token: the token's lease count: each acquisition of this slot gets a greater one than the
            last, across processes and restarts. A lock has one slot, so its fencing tokens increase
            across all its holders. Pass it to the resource you protect, which refuses smaller ones
            (docs/locks.md, "Fencing tokens").
    """

    __slots__ = ("_lost", "fencing_token", "name", "slot")

    def __init__(self, name: str, item: m.QueueLeaseItem) -> None:
        self.name = name
        self.slot = item.bytes.decode()
        self.fencing_token = item.attempts
        self._lost = False

    @property
    def lost(self) -> bool:
        """True once a renewal found the lease gone: another holder may have the slot now."""
        return self._lost


async def acquire(client: AsyncClient, queue: str, timeout: Duration | None) -> m.QueueLeaseResponse:
    """Leases one token, long-polling until one is free.

    Raises:
        AcquireTimedOut: ``timeout`` passed first.
    """
    deadline = deadline_of(timeout)
    client_id = new_client_id()
    while True:
        wait_s = seconds_left(deadline, MAX_POLL_S)
        # One short poll even when the timeout is 0: the lease's minimum wait.
        reply = await client.lease(queue, 1, client_id, request_timeout=max(wait_s, 0.01))
        if reply.items:
            return reply
        if seconds_left(deadline, MAX_POLL_S) <= 0:
            waited = go_duration(timeout if timeout is not None else 0)
            raise AcquireTimedOut(f"acquire timed out; no token of '{queue}' was free within {waited}")


@contextlib.asynccontextmanager
async def hold(
    client: AsyncClient,
    cache: dict[str, LockQueue],
    name: str,
    limit: int,
    ttl: Duration,
    timeout: Duration | None,
) -> AsyncIterator[Held]:
    """Holds one token of the semaphore ``name`` for the body of an ``async with``.

    ``cache`` maps names to the settings of queues this client already made sure of, so only the first
    acquisition of a name pays for creating or checking its queue.
    """
    lease_timeout = check(limit, ttl)
    deadline_of(timeout)  # checked before any request
    lock = cache.get(name)
    if lock is None or lock.limit != limit:
        lock = cache[name] = await ensure(client, name, limit, lease_timeout)
    try:
        reply = await acquire(client, lock.queue_name, timeout)
    except InvalidOption:
        # The queue went away under this client (an in-memory node restarted): make it again, once.
        lock = cache[name] = await ensure(client, name, limit, lease_timeout)
        reply = await acquire(client, lock.queue_name, timeout)
    item, partition = reply.items[0], reply.partition
    tokens = {item.id: item.lease_token}
    held = Held(name, item)
    deadline = item.lease_deadline
    if seconds_of(lease_timeout) != seconds_of(lock.lease_timeout):
        # The queue's lease timeout is its creator's ttl: this holder's own applies before its body runs.
        try:
            renewed = await client.renew(
                lock.queue_name, partition, [item.id], lease_timeout, lease_tokens=[item.lease_token]
            )
        except BaseException:
            await _release(client, lock.queue_name, partition, item, held)
            raise
        deadline = renewed.items[0].lease_deadline if renewed.items else deadline
    ids = {item.id}

    def lose(item_id: str) -> None:
        held._lost = True
        ids.discard(item_id)

    renewing = asyncio.create_task(
        keep_renewed(client, lock.queue_name, partition, ids, deadline, lease_timeout, lose, tokens)
    )
    try:
        yield held
    finally:
        await stopped(renewing)
        await _release(client, lock.queue_name, partition, item, held)
    if held.lost:
        raise LockLost(f"lock lost; the lease on '{held.slot}' of '{name}' ended before the block did")


async def _release(
    client: AsyncClient, queue: str, partition: int, item: m.QueueLeaseItem, held: Held
) -> None:
    """Retries the token now: the next holder gets the same item, one attempt further.

    A transient failure leaves the token leased until its ttl runs out (the retry is not tried again: a
    second retry of an applied first one would find the id gone and look like a lost lease).
    """
    if held.lost:
        return
    try:
        await client.retry(queue, partition, [m.QueueRetryItem(id=item.id, lease_token=item.lease_token)])
    except InvalidOption:
        held._lost = True
    except (RetryRequest, ConnectionFailed):
        pass
