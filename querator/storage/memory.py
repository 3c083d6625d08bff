"""The memory backend: every item in process memory, nothing survives a restart. For tests and
ephemeral queues; it is also the reference the storage contract suite holds the others to."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial

from querator.storage._memory_records import MemoryRecords
from querator.storage.base import (
    ClearOptions,
    Deadlines,
    Item,
    Partition,
    PartitionStats,
    PartitionTx,
    QueueRecord,
    R,
    list_page,
)
from querator.storage.memory_schedules import MemorySchedules
from querator.storage.workflows import Entry, JournalRow, Workflow, encode_workflow, workflow_page

_Steps = list[tuple[dict[str, Item] | None, Item]]
"""What an update or a delete did so far, to undo: an item removed, with the state it was in, or an
item placed, with None."""


class MemoryPartition:
    """One partition: three id-ordered dicts, one per item state, plus the FIFO order of queued ids.

    Ids only ever grow and an item never re-enters the queued state under its old id, so appending keeps
    everything in id order. The head is read from ``order`` rather than from the ``queued`` dict: a dict
    drained from the front keeps the deleted slots until it resizes, so iterating it from the start
    would cost O(items ever dequeued) per lease. Ids that left ``queued`` are dropped from ``order``
    lazily, when they reach its front.

    ``run`` is a transaction: every change made inside it is journaled as its inverse, and the journal
    is played backwards if the function raises.
    """

    def __init__(self, dedup: dict[str, int] | None = None) -> None:
        self.dedup_records = {} if dedup is None else dedup
        """The queue's de-duplication records (dedup id -> expires at), shared by its partitions."""
        self.queued: dict[str, Item] = {}
        self.order: deque[str] = deque()
        self.leased: dict[str, Item] = {}
        self.scheduled: dict[str, Item] = {}
        self.sources: dict[str, str] = {}
        self.max_id = ""
        self._journal: list[Callable[[], None]] | None = None

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        journal: list[Callable[[], None]] = []
        self._journal = journal
        try:
            return fn(self)
        except BaseException:
            for undo in reversed(journal):
                undo()
            raise
        finally:
            self._journal = None

    async def claim(self) -> None:
        """Nothing to take over: only this process sees this store."""

    def last_id(self) -> str:
        return self.max_id

    def insert(self, items: Sequence[Item]) -> None:
        # Stored as given: stored items are never changed in place, only replaced (see base.py).
        # One journal entry per call, filled as the items are placed: an entry per item (a partial
        # around a bound method) was a measurable part of a produce (docs/benchmarks-log.md).
        placed: list[Item] = []
        if self._journal is not None:
            self._journal.append(partial(self._uninsert, placed, self.max_id))
        for item in items:
            self._place(item)
            placed.append(item)
            self.max_id = max(self.max_id, item.id)

    def _uninsert(self, placed: list[Item], max_id: str) -> None:
        """Undoes ``insert``."""
        for item in reversed(placed):
            self._unplace(item)
        self.max_id = max_id

    def _place(self, item: Item) -> None:
        if item.enqueue_at:
            self.scheduled[item.id] = item
        elif item.is_leased:
            self.leased[item.id] = item
        else:
            self.queued[item.id] = item
            self.order.append(item.id)
        if item.source_id:
            self.sources[item.source_id] = item.id

    def _unplace(self, item: Item) -> None:
        """Undoes ``_place``."""
        if item.enqueue_at:
            del self.scheduled[item.id]
        elif item.is_leased:
            del self.leased[item.id]
        else:
            del self.queued[item.id]
            if self.order and self.order[-1] == item.id:
                self.order.pop()
        if item.source_id:
            self.sources.pop(item.source_id, None)

    def _take(self, item_id: str) -> tuple[dict[str, Item], Item] | None:
        """Removes an item from the state holding it; returns both, for ``_restore``."""
        for state in (self.queued, self.leased, self.scheduled):
            item = state.pop(item_id, None)
            if item is not None:
                if item.source_id:
                    self.sources.pop(item.source_id, None)
                return state, item
        return None

    def _restore(self, state: dict[str, Item], item: Item) -> None:
        """Undoes ``_take``; a queued item's id is still in ``order`` (dropping it is journaled too)."""
        state[item.id] = item
        if item.source_id:
            self.sources[item.source_id] = item.id

    def head(self, limit: int) -> list[Item]:
        order, queued = self.order, self.queued
        while order and order[0] not in queued:
            dropped = order.popleft()
            if self._journal is not None:
                self._journal.append(partial(order.appendleft, dropped))
        found: list[Item] = []
        for item_id in order:
            item = queued.get(item_id)
            if item is not None:
                found.append(item)
                if len(found) == limit:
                    break
        return found

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        found = {}
        for item_id in ids:
            item = self.leased.get(item_id) or self.queued.get(item_id) or self.scheduled.get(item_id)
            if item is not None:
                found[item_id] = item
        return found

    def update(self, items: Sequence[Item]) -> None:
        steps: _Steps = []
        if self._journal is not None:
            self._journal.append(partial(self._undo, steps))
        for item in items:
            taken = self._take(item.id)
            if taken is None:
                continue
            steps.append(taken)
            if not item.is_leased and not item.enqueue_at:
                raise ValueError(f"item '{item.id}' cannot become queued again under the same id")
            self._place(item)
            steps.append((None, item))

    def _undo(self, steps: _Steps) -> None:
        """Undoes an update or a delete: one journal entry per call, as insert's."""
        for state, item in reversed(steps):
            if state is None:
                self._unplace(item)
            else:
                self._restore(state, item)

    def delete(self, ids: Collection[str]) -> None:
        steps: _Steps = []
        if self._journal is not None:
            self._journal.append(partial(self._undo, steps))
        for item_id in ids:
            taken = self._take(item_id)
            if taken is not None:
                steps.append(taken)

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        return {s for s in source_ids if s in self.sources}

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        found = [i for i in self.leased.values() if i.lease_deadline < now]
        return _earliest(found, limit, lambda i: i.lease_deadline)

    def expired(self, now: int, limit: int) -> list[Item]:
        found = [i for i in self._unscheduled() if i.expire_deadline and i.expire_deadline < now]
        return _earliest(found, limit, lambda i: i.expire_deadline)

    def due(self, now: int, limit: int) -> list[Item]:
        found = [i for i in self.scheduled.values() if i.enqueue_at < now]
        return _earliest(found, limit, lambda i: i.id)

    def deadlines(self) -> Deadlines:
        return Deadlines(
            lease_deadline=min((i.lease_deadline for i in self.leased.values()), default=0),
            expire_deadline=min(
                (i.expire_deadline for i in self._unscheduled() if i.expire_deadline), default=0
            ),
            enqueue_at=min((i.enqueue_at for i in self.scheduled.values()), default=0),
        )

    def list(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        source = self.scheduled.values() if scheduled else self._unscheduled()
        return list_page(sorted((i for i in source if i.id >= pivot), key=_id), limit)

    def stats(self, now: int) -> PartitionStats:
        total = len(self.queued) + len(self.leased)
        leased = len(self.leased)
        return PartitionStats(
            total=total,
            leased=leased,
            scheduled=len(self.scheduled),
            average_age=sum(now - i.created_at for i in self._unscheduled()) // total if total else 0,
            average_leased_age=(
                sum(i.lease_deadline - now for i in self.leased.values()) // leased if leased else 0
            ),
        )

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        records = self.dedup_records
        seen = {d for d in dedup_ids if records.get(d, 0) > now}
        for d in dedup_ids:
            if d not in seen:
                if self._journal is not None:
                    self._journal.append(partial(_put_back, records, d, records.get(d)))
                records[d] = expires_at
        return seen

    def clear(self, options: ClearOptions) -> None:
        doomed: list[str] = []
        if options.scheduled:
            doomed.extend(self.scheduled)
        if options.queue:
            doomed.extend(self.queued)
            if self._journal is not None:
                self._journal.append(partial(setattr, self, "order", self.order.copy()))
            self.order = deque()
            if options.destructive:
                doomed.extend(self.leased)
        self.delete(doomed)

    def _unscheduled(self) -> Iterable[Item]:
        yield from self.queued.values()
        yield from self.leased.values()


def _put_back(records: dict[str, int], key: str, value: int | None) -> None:
    if value is None:
        records.pop(key, None)
    else:
        records[key] = value


def _id(item: Item) -> str:
    return item.id


def _earliest(items: list[Item], limit: int, key: Callable[[Item], object]) -> list[Item]:
    items.sort(key=key)  # type: ignore[arg-type]
    return items[:limit]


class MemoryWorkflowRows:
    """Durable workflows' records in process memory (the rules never change a record in place, so the
    stored objects are handed out as they are)."""

    def __init__(self) -> None:
        self._workflows: dict[str, Workflow] = {}
        self._rows: dict[str, dict[int, JournalRow]] = {}
        """A workflow's journal rows by seq (a refused write adds none here)."""

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        return self._workflows.get(workflow_id)

    async def put_workflow(
        self, workflow: Workflow, expected_version: int, rows: Sequence[Entry] = ()
    ) -> bool:
        current = self._workflows.get(workflow.id)
        if (current.version if current is not None else 0) != expected_version:
            return False
        self._workflows[workflow.id] = workflow
        if rows:
            journal = self._rows.setdefault(workflow.id, {})
            journal.update((e.seq, JournalRow(workflow.version, e)) for e in rows)
        return True

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        journal = self._rows.get(workflow_id, {})
        if last_seq - first_seq < len(journal):
            found = (journal.get(seq) for seq in range(first_seq, last_seq + 1))
            return [r for r in found if r is not None]
        return [journal[seq] for seq in sorted(journal) if first_seq <= seq <= last_seq]

    async def drop_entries(self, workflow_id: str, last_seq: int) -> None:
        journal = self._rows.get(workflow_id, {})
        for seq in [seq for seq in journal if seq <= last_seq]:
            del journal[seq]

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        ids = sorted(
            i for i, w in self._workflows.items() if i >= pivot and (not status or w.status == status)
        )
        # Measured as stored elsewhere, so that every backend pages alike.
        return workflow_page((encode_workflow(self._workflows[i]) for i in ids), status, pivot, limit)

    async def purge_workflows(self, now: int) -> int:
        expired = [i for i, w in self._workflows.items() if w.expires_at and w.expires_at <= now]
        for i in expired:
            del self._workflows[i]
            self._rows.pop(i, None)
        return len(expired)


class MemoryStore(MemorySchedules, MemoryRecords):
    """Queues, partitions, schedules, durable workflows and tenancy's records in process memory."""

    def __init__(self) -> None:
        super().__init__()
        self.workflows = MemoryWorkflowRows()
        self._queues: dict[str, QueueRecord] = {}
        self._partitions: dict[tuple[str, int], MemoryPartition] = {}
        self._dedup: dict[str, dict[str, int]] = {}

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def partition(self, queue: str, number: int) -> Partition:
        key = (queue, number)
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = MemoryPartition(self._dedup.setdefault(queue, {}))
        return part

    async def partition_queues(self) -> list[str]:
        """The names of the queues with a partition here."""
        return sorted({queue for queue, _ in self._partitions})

    async def delete_partitions(self, queue: str, count: int) -> None:
        for number in range(count):
            self._partitions.pop((queue, number), None)
        self._dedup.pop(queue, None)

    async def purge_dedup(self, now: int) -> int:
        purged = 0
        for records in self._dedup.values():
            expired = [d for d, expires_at in records.items() if expires_at <= now]
            for d in expired:
                del records[d]
            purged += len(expired)
        return purged

    async def get_queue(self, name: str) -> QueueRecord | None:
        return self._queues.get(name)

    async def add_queue(self, record: QueueRecord) -> bool:
        if record.name in self._queues:
            return False
        self._queues[record.name] = record
        return True

    async def update_queue(self, record: QueueRecord) -> None:
        self._queues[record.name] = record

    async def delete_queue(self, name: str) -> None:
        self._queues.pop(name, None)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        names = sorted(n for n, r in self._queues.items() if n >= pivot and r.namespace == namespace)
        return [self._queues[n] for n in names[:limit]]

    async def check(self) -> None:
        """Nothing to know: memory has no file to damage or fill."""
