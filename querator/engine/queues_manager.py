"""QueuesManager: the queues of this node -- their settings in storage and their running engines.

A queue's engine (``Queue`` and its logical queue) is spawned lazily on first use, so a restarted node
costs nothing for queues nobody touches; their partitions' lifecycles start with that first use. In a
cluster it runs over the partitions the ring gives this node (``Owned``), claimed in storage first. When
the ring moves some of them, the engine gives away those it lost and claims those it gained between two
batches, the others serving on (docs/adr/0039); a partition whose write storage refused (another node
claimed it) is given away the same way, and taken back after ``FENCED_RECHECK_S`` if the ring still
names this node. When it loses them all, or its lease is uncertain, the engine is handed off: it
finishes its batch, answers what waits with 454, and the next request spawns it over the new set.
``ClusterCounters`` counts the hand-offs by reason, the partitions moved and claimed, and the writes
storage refused (docs/cluster.md); ``hand_offs`` lists the recent ones, partition by partition
(``querator.engine.hand_off_log``).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from querator import _tasks
from querator.clock import Clock, micros
from querator.engine.hand_off_log import Direction, HandOffEntry, HandOffLog, Outcome
from querator.engine.logical_queue import DeadLetter
from querator.engine.queue import Queue
from querator.errors import InvalidOption, RetryRequest, no_such_queue, shutting_down
from querator.storage.base import QueueRecord, Store

Owned = Callable[[str, int], Sequence[int]]
"""The partitions (of a queue with that many) this node serves now."""

Owner = Callable[[str, int], str]
"""The node id that owns a partition of a queue now."""

log = logging.getLogger(__name__)

FENCED_RECHECK_S = 5.0
"""Seconds after a fenced write before the partition is taken back if the ring still gives it to this
node: longer than the cluster takes to settle a ring change (``querator.cluster.node``), so that a node
that claimed it a moment before this one heard of the change keeps it, and short enough that a node
with a wrong ring does not keep the partition unserved for long."""


class HandOff(enum.Enum):
    """Why an engine was handed off."""

    RING = "ring"
    """The ring moved partitions: this node owns another set of the queue's partitions now (only those
    that moved change hands, unless none is left here)."""
    LEASE = "lease"
    """This node's cluster lease is uncertain: it stops writing before another node can be given them."""
    FENCED = "fenced"
    """Storage refused a write: another node claimed the partition (only it is given up)."""


@dataclass(slots=True)
class ClusterCounters:
    """What the cluster did to this node's engines since it started (exported as Prometheus counters)."""

    hand_offs: dict[HandOff, int] = field(default_factory=lambda: dict.fromkeys(HandOff, 0))
    fenced_writes: int = 0
    """Writes storage refused because another node claimed the partition (``StaleOwnerError``)."""
    partitions_moved: dict[Direction, int] = field(default_factory=lambda: dict.fromkeys(Direction, 0))
    """Partitions this node stopped serving (given) or was given by the ring (taken), as logged."""
    partition_claims: int = 0
    """Claims made in storage before serving a partition (a Paxos round each on Cassandra)."""


class QueuesManager:
    """Creates, finds, updates and deletes queues, and stops them all on shutdown."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        dead_letter: DeadLetter,
        max_requests_per_queue: int = 100,
        owned: Owned | None = None,
        owner: Owner | None = None,
    ) -> None:
        """``dead_letter``: stores dead items in their dead queue, wherever its partition 0 is served.
        ``owned`` None: this node serves every partition (a node alone). ``owner`` names the other node
        of each hand-off in ``hand_offs``."""
        self.store = store
        self.clock = clock
        self._max_requests = max_requests_per_queue
        self._owned = owned
        self._dead_letter_to = dead_letter
        self._queues: dict[str, Queue] = {}
        self._records: dict[str, QueueRecord] = {}
        """The settings of queues without an engine here, as last read: what requests for partitions of
        other nodes are checked and routed by. Dropped when the queue changes or the ring moves."""
        self._stopping: dict[str, asyncio.Task[None]] = {}
        self._spawning = asyncio.Lock()
        self._closing = False
        self.counters = ClusterCounters()
        self.hand_offs = HandOffLog()
        self._owner = owner
        self._owners: dict[str, tuple[str, ...]] = {}
        """The owner of each partition of a running queue as of its spawn or the last ring change: who
        had the partitions a hand-off gives this node."""

    async def get(self, name: str, within: float | None = None) -> Queue:
        """The running queue; 400 when no such queue exists.

        Starting its engine (the first request after a start, a hand-off or a ring change) waits for the
        engine being stopped and for the queue's settings from storage; with ``within`` it waits that many
        seconds at most (the request's own timeout), then answers 454.
        """
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if self._closing:
            raise shutting_down("service")
        if within is None:
            return await self._start(name)
        try:
            return await asyncio.wait_for(self._start(name), within)
        except TimeoutError:
            raise RetryRequest(
                f"request timeout; queue '{name}' is not served on this node yet, try again"
            ) from None

    async def _start(self, name: str) -> Queue:
        while True:
            if self._closing:
                raise shutting_down("service")
            # One writer per partition: an engine of this name that is stopping finishes first. Waited
            # for outside the lock, since a stopping engine may need another queue spawned (dead items).
            while (stopping := self._stopping.get(name)) is not None:
                await asyncio.wait({stopping})
            async with self._spawning:
                queue = self._queues.get(name)
                if queue is not None:
                    return queue
                record = await self.store.get_queue(name)
                if record is None:
                    raise no_such_queue(name)
                if name not in self._stopping:  # else: stopped again while its settings were read
                    self._records.pop(name, None)  # the engine's settings are the ones from now on
                    queue = self._queues[name] = self._spawn(record)
                    return queue

    def _stop(self, queue: Queue, moved: bool = False) -> asyncio.Task[None]:
        """Takes ``queue`` out of service now (it accepts nothing more) and stops its engine in the
        background; ``get`` spawns the name again only once that engine stopped writing."""
        name = queue.name
        if self._queues.get(name) is queue:
            del self._queues[name]
            self._owners.pop(name, None)
        queue.stop_accepting(moved)
        task = _tasks.start(queue.shutdown(), f"stop:{name}")
        self._stopping[name] = task

        def stopped(_: asyncio.Task[None]) -> None:
            if self._stopping.get(name) is task:
                del self._stopping[name]

        task.add_done_callback(stopped)
        return task

    def _spawn(self, record: QueueRecord) -> Queue:
        if self._owned is None:
            return Queue(record, self.store, self.clock, self._dead_letter_to, self._max_requests)
        queue: Queue | None = None

        def stale(number: int) -> None:
            self.counters.fenced_writes += 1
            if queue is not None:
                self._fenced(queue, number)

        def claimed() -> None:
            self.counters.partition_claims += 1

        queue = Queue(
            record,
            self.store,
            self.clock,
            self._dead_letter_to,
            self._max_requests,
            owned=self._owned(record.name, record.requested_partitions),
            on_stale=stale,
            on_claim=claimed,
        )
        self._note_owners(queue)
        return queue

    def _note_owners(self, queue: Queue) -> None:
        if self._owner is not None:
            count = queue.settings.requested_partitions
            self._owners[queue.name] = tuple(self._owner(queue.name, n) for n in range(count))

    def rebalance(self) -> None:
        """Moves, in every running queue, the partitions the ring now gives to another node (and takes
        those it gives this one); a queue left with none here is handed off."""
        if self._owned is None:
            return
        self._records.clear()  # read again: a queue may have changed while this node did not hear of it
        for queue in list(self._queues.values()):
            self._follow_ring(queue)

    def _follow_ring(self, queue: Queue) -> None:
        assert self._owned is not None
        owned = tuple(self._owned(queue.name, queue.settings.requested_partitions))
        if not owned:
            self.hand_off(queue, HandOff.RING)
            return
        if owned != queue.owned:
            self._move(queue, owned, HandOff.RING)
        self._note_owners(queue)  # others' partitions may have moved between nodes

    def _fenced(self, queue: Queue, number: int) -> None:
        """Storage refused a write to partition ``number``: another node claimed it. Gives that one up
        (the whole engine when it was the last); takes it back later if the ring still says so."""
        if self._queues.get(queue.name) is not queue or number not in queue.owned:
            return  # given up already: each refused write is counted, the hand-off happens once
        rest = tuple(n for n in queue.owned if n != number)
        if not rest:
            self.hand_off(queue, HandOff.FENCED)
            return
        self._move(queue, rest, HandOff.FENCED)

        def recheck() -> None:
            if self._queues.get(queue.name) is queue and not self._closing:
                self._follow_ring(queue)

        self.clock.call_at(self.clock.now() + micros(FENCED_RECHECK_S), recheck)

    def _move(self, queue: Queue, owned: tuple[int, ...], reason: HandOff) -> None:
        """Makes ``queue``'s engine serve ``owned``: only the partitions that change are given or taken."""
        was = list(queue.owned)
        log.info("queue %s: partitions %s now (were %s; %s)", queue.name, list(owned), was, reason.value)
        self.counters.hand_offs[reason] += 1
        entries = self._log_hand_off(queue, reason, set(owned))
        queue.move(owned).add_done_callback(functools.partial(_moved, entries))

    def hand_off_all(self) -> None:
        """Stops serving every partition (this node may lose them: its cluster lease is not certain)."""
        for queue in list(self._queues.values()):
            self.hand_off(queue, HandOff.LEASE)

    def hand_off(self, queue: Queue, reason: HandOff) -> None:
        """Stops ``queue``'s engine (waiting requests get 454); the next request spawns one over the
        partitions this node owns then. Counted once per engine, under the first ``reason``."""
        if self._queues.get(queue.name) is queue:
            log.info("queue %s: handing off partitions %s (%s)", queue.name, list(queue.owned), reason.value)
            self.counters.hand_offs[reason] += 1
            entries = self._log_hand_off(queue, reason, set())
            stopping = self._stop(queue, moved=True)
            stopping.add_done_callback(
                lambda task: _outcome(entries, task.cancelled() or task.exception() is not None)
            )

    def _log_hand_off(self, queue: Queue, reason: HandOff, after: set[int]) -> list[HandOffEntry]:
        """Adds the partitions ``queue``'s hand-off moves to ``hand_offs``: from those it serves to
        ``after``. A ring change moves those that changed owner, a fenced write the partition refused, a
        lost lease every partition the engine served."""
        name, count = queue.name, queue.settings.requested_partitions
        before = set(queue.owned)
        owned_now = set(self._owned(name, count)) if self._owned is not None else set()
        owners_before = self._owners.get(name, ())
        now = self.clock.now()
        entries: list[HandOffEntry] = []
        for partition in sorted(before ^ after):
            if partition in before:
                other = ""  # still this node's on the ring (a lost lease, a fenced write): no other yet
                if self._owner is not None and partition not in owned_now:
                    other = self._owner(name, partition)
                direction = Direction.GIVEN
            else:
                other = owners_before[partition] if partition < len(owners_before) else ""
                direction = Direction.TAKEN
            entries.append(HandOffEntry(now, name, partition, direction, other, reason.value))
        for entry in entries:
            self.hand_offs.add(entry)
            self.counters.partitions_moved[entry.direction] += 1
        return entries

    def find(self, name: str) -> Queue | None:
        """The queue if its engine runs on this node now (never waits for one to start)."""
        return self._queues.get(name)

    def running(self) -> list[Queue]:
        """The queues whose engines run on this node, by name."""
        return [self._queues[name] for name in sorted(self._queues)]

    async def settings(self, name: str) -> QueueRecord:
        """The queue's settings to check and route a request by, without starting its engine: the
        running engine's, else the ones last read; 400 when no such queue exists."""
        record = await self.known(name)
        if record is None:
            raise no_such_queue(name)
        return record

    async def known(self, name: str) -> QueueRecord | None:
        """``settings``, or None when no such queue exists."""
        queue = self._queues.get(name)
        if queue is not None:
            return queue.settings
        record = self._records.get(name)
        if record is None:
            record = await self.store.get_queue(name)
            if record is not None:
                self._records[name] = record
        return record

    async def record(self, name: str) -> QueueRecord | None:
        """The queue's current settings, or None."""
        queue = self._queues.get(name)
        return queue.settings if queue is not None else await self.store.get_queue(name)

    async def create(self, record: QueueRecord) -> None:
        if not await self.store.add_queue(record):
            raise InvalidOption(f"invalid queue; '{record.name}' already exists")

    async def update(self, record: QueueRecord) -> None:
        await self.store.update_queue(record)
        await self.refresh(record)

    async def refresh(self, record: QueueRecord) -> None:
        """Takes a queue's new settings into its running engine (respawning it for a new partition
        count); the queue must exist."""
        self._records.pop(record.name, None)
        queue = self._queues.get(record.name)
        if queue is None:
            return
        if record.requested_partitions == queue.settings.requested_partitions:
            queue.settings = record
        else:
            # New partitions need a new engine: the next request spawns it with the new count.
            await asyncio.wait({self._stop(queue)})

    async def delete(self, name: str, before_items: Callable[[str], Awaitable[None]] | None = None) -> None:
        """Removes the queue's settings and items; its waiting requests get 453. ``before_items`` runs
        once the settings are gone and this node's engine stopped, before the items go (in a cluster:
        the other nodes' engines stop)."""
        record = await self.record(name)
        if record is None:
            raise no_such_queue(name)
        await self.store.delete_queue(name)
        await self.forget(name)
        if before_items is not None:
            await before_items(name)
        await self.store.delete_partitions(name, record.requested_partitions)

    async def forget(self, name: str) -> None:
        """Stops the queue's engine (the queue was deleted); its waiting requests get 453."""
        self._records.pop(name, None)
        queue = self._queues.get(name)
        if queue is not None:
            await asyncio.wait({self._stop(queue)})

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        return await self.store.list_queues(pivot, limit, namespace)

    async def shutdown(self) -> None:
        """Stops every queue; requests still waiting get 453 ``queue is shutting down``."""
        self._closing = True
        stopping = [self._stop(q) for q in list(self._queues.values())]
        stopping.extend(self._stopping.values())
        if stopping:
            await asyncio.wait(set(stopping))


def _moved(entries: list[HandOffEntry], _: asyncio.Future[None]) -> None:
    _outcome(entries, False)


def _outcome(entries: list[HandOffEntry], failed: bool) -> None:
    """The hand-off of ``entries`` is over: this node no longer writes to the partitions it gave."""
    for entry in entries:
        entry.outcome = Outcome.FAILED if failed else Outcome.STOPPED
