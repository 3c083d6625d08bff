"""The queue behind a lock or semaphore: its name, its settings, and keeping exactly ``limit`` tokens in it.

A semaphore ``<name>`` is the queue ``lock.<name>`` with one partition, holding one token item per slot
(docs/locks.md; ADR 0018). Its ``reference`` records the limit and a generation that every change of the
limit increases: ``querator.semaphore; limit=<n>; generation=<g>``. Tokens are produced with the dedup
ids ``token-<g>-<n>`` (their payload is the same string, the slot's name), so any number of processes
filling the queue at once store each token once.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from querator.client._arguments import Duration, go_duration, new_queue_info, seconds_of
from querator.client._errors import AcquireTimedOut, LockMismatch
from querator.clock import MICROS, SystemClock
from querator.errors import InvalidOption, QueratorError
from querator.wire import messages as m

if TYPE_CHECKING:
    from querator.client._async import AsyncClient

PREFIX = "lock."
"""Prefix of a lock's queue name, so lock queues sort together and do not clash with work queues."""
MIN_TTL_S = 1.0
"""The shortest ttl: the holder renews every third of it, and a shorter one would be a renewal storm."""
EXPIRE_TIMEOUT = "87600h"
"""Ten years: a token never reaches its expire deadline (a retry does not reset it, docs/semantics.md
§4.4), so it never dies of age."""
DEDUP_WINDOW = "168h"
"""The longest window: processes filling the queue at once must all fall inside it (they do, by far)."""
MAX_PRODUCE = 1000
"""Items per produce (docs/semantics.md §2.1), and so tokens added or taken out per request."""
_REFERENCE = re.compile(r"querator\.semaphore; limit=(\d+); generation=(\d+)")


class LockQueue(NamedTuple):
    """A lock queue's settings, as its ``reference`` records them."""

    queue_name: str
    limit: int
    generation: int
    lease_timeout: str


def queue_name(name: str) -> str:
    """The queue of the lock or semaphore ``name``; the server checks the characters (docs/semantics.md
    §2.2: no whitespace, no ``~``, at most 512 characters with the prefix).

    Raises:
        ValueError: an empty name.
    """
    if not name:
        raise ValueError("lock name is invalid; cannot be empty")
    return PREFIX + name


def check(limit: int, ttl: Duration) -> str:
    """``ttl`` as a Go duration, after checking it and ``limit``.

    Raises:
        ValueError: a limit below 1, a ttl that is not a duration or is shorter than ``MIN_TTL_S``.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit is invalid; must be an integer of at least 1, but {limit!r} was given")
    try:
        ttl_s = seconds_of(ttl)
    except ValueError as e:
        raise ValueError(f"ttl is invalid; {e}") from None
    if ttl_s < MIN_TTL_S:
        raise ValueError(f"ttl is invalid; must be at least {MIN_TTL_S:g}s, but {ttl!r} was given")
    return go_duration(ttl)


def reference(limit: int, generation: int) -> str:
    return f"querator.semaphore; limit={limit}; generation={generation}"


def settings(info: m.QueueInfo) -> LockQueue:
    """The settings of an existing lock queue.

    Raises:
        LockMismatch: the queue is not a lock queue (its reference says otherwise).
    """
    found = _REFERENCE.fullmatch(info.reference)
    if found is None:
        raise LockMismatch(f"not a lock queue; '{info.queue_name}' has reference '{info.reference}'")
    return LockQueue(info.queue_name, int(found[1]), int(found[2]), info.lease_timeout)


async def ensure(client: AsyncClient, name: str, limit: int, ttl: str) -> LockQueue:
    """The queue of ``name``, created with ``limit`` tokens if it does not exist yet.

    Any number of processes may call this at once: one creation wins, the others read its settings, and
    all of them fill the queue up to its limit with the same dedup ids (see ``fill``).

    Raises:
        LockMismatch: the queue exists with another limit, or is not a lock queue.
        InvalidOption: the server refused the name (docs/semantics.md §2.2).
    """
    info = new_queue_info(
        queue_name(name), lease_timeout=ttl, expire_timeout=EXPIRE_TIMEOUT, reference=reference(limit, 0)
    )
    info = msgspec.structs.replace(info, dedup_window=DEDUP_WINDOW, lease_token="required")
    try:
        await client.create_queue(info)
    except InvalidOption as refused:
        # Taken, or a bad name: only reading it tells which, without reading the message.
        try:
            info = await client.queue_info(info.queue_name)
        except QueratorError:
            raise refused from None
    found = settings(info)
    if found.limit != limit:
        raise LockMismatch(
            f"limit mismatch; '{name}' has limit {found.limit}, not {limit} (set_limit changes it)"
        )
    await fill(client, found)
    return found


async def count(client: AsyncClient, queue: str) -> int:
    """Tokens in the queue, leased or not (a token is never scheduled: it is retried now)."""
    stats = await client.stats(queue)
    return sum(p.total for q in stats.logical_queues for p in q.partitions)


async def fill(client: AsyncClient, lock: LockQueue) -> None:
    """Produces the tokens missing below the limit, as slots ``token-<generation>-<n>``.

    Tokens only leave the queue through ``drain``, so fewer than ``limit`` means a creation not yet (or
    never, its process having died) filled. Every filler produces slots in ascending order, each produce
    stored whole, so a count names the slots that exist (those below it): fillers racing each other name
    the missing ones alike, and the dedup ids keep each slot to one token.
    """
    missing = range(await count(client, lock.queue_name), lock.limit)
    for start in range(missing.start, missing.stop, MAX_PRODUCE):
        slots = [f"token-{lock.generation}-{n}" for n in range(start, min(start + MAX_PRODUCE, missing.stop))]
        await client.produce(lock.queue_name, list(slots), dedup_id=slots)


def deadline_of(timeout: Duration | None) -> int | None:
    """The time (microseconds) ``timeout`` from now, or None for no timeout.

    Raises:
        ValueError: a negative timeout, or a string that is not a duration.
    """
    if timeout is None:
        return None
    timeout_s = seconds_of(timeout)
    if timeout_s < 0:
        raise ValueError(f"timeout is invalid; cannot be negative, but {timeout!r} was given")
    return SystemClock().now() + int(timeout_s * MICROS)


def seconds_left(deadline: int | None, most_s: float) -> float:
    """Seconds until ``deadline``, at most ``most_s`` (which is also the answer without a deadline)."""
    return most_s if deadline is None else min(most_s, (deadline - SystemClock().now()) / MICROS)


async def drain(client: AsyncClient, lock: LockQueue, timeout: Duration | None) -> None:
    """Takes tokens out of circulation (leases and completes them) until ``limit`` are left, waiting for
    holders to release them.

    Raises:
        AcquireTimedOut: ``timeout`` passed first; the tokens taken so far stay taken.
    """
    deadline = deadline_of(timeout)
    while (excess := await count(client, lock.queue_name) - lock.limit) > 0:
        wait_s = seconds_left(deadline, 60.0)
        if wait_s < 0.01:
            raise AcquireTimedOut(f"set limit timed out; {excess} tokens of '{lock.queue_name}' still held")
        reply = await client.lease(lock.queue_name, min(excess, MAX_PRODUCE), request_timeout=wait_s)
        if reply.items:
            ids = [i.id for i in reply.items]
            tokens = [i.lease_token for i in reply.items]
            await client.complete(lock.queue_name, reply.partition, ids, lease_tokens=tokens)


async def set_limit(client: AsyncClient, name: str, limit: int, timeout: Duration | None) -> None:
    """Changes the limit of an existing semaphore: records it, then adds or removes tokens.

    The new limit is recorded first (with the next generation), so that processes starting meanwhile fill
    towards the new limit, never the old one. Removing waits for holders to release the excess tokens.
    """
    check(limit, MIN_TTL_S)
    info = await client.queue_info(queue_name(name))
    lock = settings(info)
    if lock.limit != limit:
        info = msgspec.structs.replace(info, reference=reference(limit, lock.generation + 1))
        await client.update_queue(info)
        lock = lock._replace(limit=limit, generation=lock.generation + 1)
    await fill(client, lock)
    await drain(client, lock, timeout)
