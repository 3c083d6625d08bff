"""Lease waiting across owners: a lease at a member that owns some of its queue's partitions waits on them
and *watches* the other owners, rather than asking each of them in turn for items (ADR 0042).

A watch (``queue.watch``) is a long poll the owner answers once it holds items a lease could take, or at
its timeout; it takes nothing. A member keeps one watch per (queue, other owner) while leases of the queue
wait on it, shared by all of them, so an idle consumer costs no message to the other owners beyond a
watch renewed every ``WATCH_S`` (whatever the number of consumers). A produce with no watch on its queue
sends nothing. When a watch says an owner has items, the leases waiting here ask that owner alone
(a probe: a lease that does not wait there).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from querator import _tasks
from querator.clock import MICROS, Clock, seconds, sleep_until
from querator.cluster.proxy import WATCH_PATH, Proxy
from querator.cluster.remote_queue import REPLY_MARGIN_S, RemoteQueue
from querator.cluster.router import Remote
from querator.errors import LeaseTimedOut, QueratorError
from querator.wire import messages as m

log = logging.getLogger(__name__)

WATCH_S = 60
"""Seconds an owner holds a watch before answering that nothing came: how often a member with waiting
leases renews each watch."""
WATCH_RETRY_US = MICROS
"""Microseconds before a watch that failed (the owner unreachable, restarting) is sent again."""
HERE_FIRST_US = MICROS
"""Microseconds a lease that finds items on this member's partitions waits for them there alone, without
watching (a task and a watch per lease cost a busy consumer measurably: docs/benchmarks-log.md)."""
RECHECK_US = 5 * MICROS
"""Microseconds a lease waits here before it reads the queue's owners again (the ring may have moved)."""
VAIN_PAUSE_US = 250_000
"""Microseconds a lease leaves out the owners it probed in vain (another consumer took the items first):
bounds the probes of an owner whose count of items is wrong."""
PROBE_TIMEOUT_S = 1.0
"""Seconds a probe of another owner may take, reply included."""
PROBE_MIN_S = 0.05
"""Seconds a lease must have left to probe another owner at all."""


@dataclass
class LeaseCounters:
    """What this member's waiting leases asked of the other owners (exported as Prometheus counters)."""

    probes: int = 0
    """Leases asked of another owner without waiting there."""
    watches: int = 0
    """Watches sent to other owners."""
    notifications: int = 0
    """Watches answered with "items arrived"."""


class LocalLease(Protocol):
    """This member's engine of a queue, as the service wraps it (``LocalQueue``): raises
    ``LeaseTimedOut`` when nothing came within ``timeout_us``."""

    def lease(self, req: m.QueueLeaseRequest, timeout_us: int) -> Awaitable[m.QueueLeaseResponse]: ...

    def has_items(self) -> bool: ...


L = TypeVar("L", bound=LocalLease)


@dataclass
class _Watch:
    owner: Remote
    waiters: set[asyncio.Future[Remote]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class Watches:
    """This member's watches at the other owners, by (queue, owner)."""

    def __init__(self, proxy: Proxy, clock: Clock, counters: LeaseCounters) -> None:
        self._proxy = proxy
        self._clock = clock
        self.counters = counters
        self._watches: dict[tuple[str, str], _Watch] = {}

    def items_at(self, queue: str, owners: list[Remote]) -> asyncio.Future[Remote]:
        """Answered with the first of ``owners`` that says it holds items of ``queue``; watches each one
        not watched yet. Cancel it when done waiting."""
        found: asyncio.Future[Remote] = asyncio.get_running_loop().create_future()
        joined: list[_Watch] = []
        for owner in owners:
            key = (queue, owner.node_id)
            watch = self._watches.get(key)
            if watch is None or watch.owner != owner:
                watch = self._watches[key] = _Watch(owner)
                watch.task = _tasks.start(
                    self._run(queue, key, watch), f"lease-watch:{queue}:{owner.node_id}"
                )
            watch.waiters.add(found)
            joined.append(watch)

        def leave(_: asyncio.Future[Remote]) -> None:
            for watch in joined:
                watch.waiters.discard(found)

        found.add_done_callback(leave)
        return found

    async def probe(
        self, owner: Remote, req: m.QueueLeaseRequest, within_s: float
    ) -> m.QueueLeaseResponse | None:
        """``owner``'s lease of items it has now, if any (see ``RemoteQueue.lease_now``)."""
        self.counters.probes += 1
        return await RemoteQueue(self._proxy, owner).lease_now(req, within_s)

    async def close(self) -> None:
        tasks = [w.task for w in self._watches.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._watches.clear()

    async def _run(self, queue: str, key: tuple[str, str], watch: _Watch) -> None:
        """Keeps ``watch`` at its owner while leases wait on it; tells them when the owner has items."""
        request = m.QueueLeaseRequest(
            queue_name=queue, client_id=f"watch:{queue}", batch_size=1, request_timeout=f"{WATCH_S}s"
        )
        try:
            while watch.waiters:
                self.counters.watches += 1
                try:
                    await self._proxy.call(
                        watch.owner, WATCH_PATH, request, m.Reply, WATCH_S + REPLY_MARGIN_S
                    )
                except LeaseTimedOut:
                    continue  # nothing came: renewed while leases still wait
                except QueratorError as e:
                    log.debug("watch of %s at %s: %s", queue, watch.owner.node_id, e)
                    await sleep_until(self._clock, self._clock.now() + WATCH_RETRY_US)
                    continue
                self.counters.notifications += 1
                for found in list(watch.waiters):
                    if not found.done():
                        found.set_result(watch.owner)
                return  # the leases told ask the owner; the next one to wait watches it again
        finally:
            if self._watches.get(key) is watch:
                del self._watches[key]


class SharedQueue(Generic[L]):
    """A queue whose partitions this member shares with other owners, for a lease: it waits on this
    member's engine and watches the others (see the module docstring)."""

    __slots__ = ("_clock", "_others", "_owners", "_watches", "local")

    def __init__(
        self,
        local: L,
        others: list[Remote],
        owners: Callable[[], list[Remote]],
        watches: Watches,
        clock: Clock,
    ) -> None:
        """``others``: the other owners of the queue's partitions now; ``owners`` reads them again (the
        lease does every ``RECHECK_US``)."""
        self.local = local
        self._others = others
        self._owners = owners
        self._watches = watches
        self._clock = clock

    async def lease(self, req: m.QueueLeaseRequest, timeout_us: int) -> m.QueueLeaseResponse:
        """Items from this member's partitions or, once a watch says another owner has some, from it;
        waits up to ``timeout_us`` in all.

        Raises:
            LeaseTimedOut: nothing came to lease within ``timeout_us``.
        """
        until = self._clock.now() + timeout_us
        if self.local.has_items():
            try:
                return await self.local.lease(req, min(timeout_us, HERE_FIRST_US))
            except LeaseTimedOut:
                if self._clock.now() >= until:
                    raise
        others, next_us = self._others, RECHECK_US
        while True:
            slice_us = max(1, min(until - self._clock.now(), next_us))
            owner, reply = await self._wait_or_watch(req, slice_us, others)
            if reply is not None:
                return reply
            others, next_us = self._owners(), RECHECK_US
            if owner is None:  # nothing came here in this slice
                if self._clock.now() >= until:
                    raise LeaseTimedOut()
                continue
            budget_s = min(PROBE_TIMEOUT_S, seconds(until - self._clock.now()) / 2)
            if budget_s > PROBE_MIN_S:
                found = await self._watches.probe(owner, req, budget_s)
                if found is not None:
                    return found
                # Another consumer was first, or the owner's count is wrong: not again for a while.
                others = [o for o in others if o.node_id != owner.node_id]
                next_us = VAIN_PAUSE_US

    async def _wait_or_watch(
        self, req: m.QueueLeaseRequest, slice_us: int, others: list[Remote]
    ) -> tuple[Remote | None, m.QueueLeaseResponse | None]:
        """This member's lease of ``slice_us``, unless an owner of ``others`` says it has items first:
        (None, the reply), (None, None) when nothing came here, or (that owner, None)."""
        here = asyncio.ensure_future(self.local.lease(req, slice_us))
        elsewhere = self._watches.items_at(req.queue_name, others)
        elsewhere.add_done_callback(functools.partial(_stop_waiting, here))
        try:
            return None, await here  # items here win, even if a watch fires at the same moment
        except LeaseTimedOut:
            return None, None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (
                (current is not None and current.cancelling())
                or not elsewhere.done()
                or elsewhere.cancelled()
            ):
                raise  # this lease's own caller went away
            return elsewhere.result(), None
        finally:
            elsewhere.cancel()


def _stop_waiting(here: asyncio.Future[m.QueueLeaseResponse], elsewhere: asyncio.Future[Remote]) -> None:
    """A watch answered: the lease waiting here stops (anything leased to it and not taken goes back,
    ``LogicalQueue.lease``)."""
    if not elsewhere.cancelled():
        here.cancel()
