"""The storage contract: what a backend must do for a partition and for queue metadata.

A partition is used by exactly one writer, its LogicalQueue, so backends need no locking of their own.
The engine never issues one statement at a time: it hands the backend a function and the backend runs
it inside one transaction (``Partition.run``), giving that function a ``PartitionTx`` of small, indexed
primitives. The rules of produce, lease, complete, retry and the lifecycle are written once, over those
primitives, in ``operations.py``; a backend only stores rows. If ``run`` raises, the caller must assume
none of the function's writes were applied.

Rules every backend keeps:
- Items are ordered by id. Ids are KSUIDs handed out in increasing order by the engine, so an insert
  always lands at the tail; an item never returns to the queued state under its old id.
- Item states: *queued* (not leased, ``enqueue_at == 0``), *leased*, *scheduled* (``enqueue_at > 0``).
- Times are microseconds since the epoch; 0 means unset.
- Backends initialise lazily and must not keep every queued item in memory unless they are the memory
  backend.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import msgspec

from querator.storage.schedules import ScheduleStore
from querator.storage.workflows import WorkflowRows

R = TypeVar("R")

DEFAULT_DEDUP_WINDOW = 5 * 60 * 1_000_000
"""A queue's dedup_window unless set (extensions.md), in microseconds."""


class Item(msgspec.Struct, gc=False):
    """One item as stored in a partition.

    Not tracked by the cyclic garbage collector (``gc=False``: its fields are strings, numbers and bytes,
    which can form no cycle). The memory store holds every item, and a node makes and drops items on
    every request: tracked, each collection walked all of those the store held since the last one
    (docs/benchmarks-log.md, "Small requests").
    """

    id: str = ""
    source_id: str = ""
    is_leased: bool = False
    lease_deadline: int = 0
    expire_deadline: int = 0
    enqueue_at: int = 0
    created_at: int = 0
    attempts: int = 0
    max_attempts: int = 0
    reference: str = ""
    encoding: str = ""
    kind: str = ""
    payload: bytes = b""
    job_id: str = ""
    """The id of the item this one continues (retried or re-queued under a new id, dead-lettered): the
    first item's id, stable for the whole job; "" for that first item itself (``failures.job_id``)."""
    failures: bytes = b""
    """The item's recorded failures, newest last, as ``failures.py`` encodes them ("" none)."""
    dedup_id: str = ""
    """Only meaningful while an item is being produced; backends need not store it."""

    def copy(self) -> Item:
        """A snapshot that later writes to the stored item cannot change."""
        return Item(
            self.id,
            self.source_id,
            self.is_leased,
            self.lease_deadline,
            self.expire_deadline,
            self.enqueue_at,
            self.created_at,
            self.attempts,
            self.max_attempts,
            self.reference,
            self.encoding,
            self.kind,
            self.payload,
            self.job_id,
            self.failures,
            self.dedup_id,
        )


@dataclass(slots=True)
class RunCounters:
    """What a networked store's partition runs cost since it started (exported by /metrics): the
    statements they sent and where their time went. Run times are counted on the event loop; statements
    also on the store's worker threads, under a lock of the store's."""

    runs: int = 0
    """Partition runs (``Partition.run``), whatever the caller."""
    paxos: int = 0
    """Paxos rounds: conditional writes (lightweight transactions) and serial reads."""
    plain: int = 0
    """Every other statement (a batch is one)."""
    fence_reads: int = 0
    """Of the plain statements, the reads that acknowledge plain commits (Cassandra's epoch reads, ADR
    0038): what they cost beside the commits themselves."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Run time by phase (the backend names them), summed over the runs."""

    def add_seconds(self, phase: str, spent_s: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + spent_s


@runtime_checkable
class CountsRuns(Protocol):
    """A store that keeps ``RunCounters`` (Cassandra: its runs are network round trips)."""

    run_counters: RunCounters


@dataclass(slots=True)
class Deadlines:
    """The earliest times at which a partition's lifecycle has something to do (0: nothing)."""

    lease_deadline: int = 0
    expire_deadline: int = 0
    enqueue_at: int = 0


@dataclass(slots=True)
class PartitionStats:
    """Counts and ages of one partition, read from storage."""

    total: int = 0
    """Non-scheduled items, leased or not."""
    leased: int = 0
    scheduled: int = 0
    average_age: int = 0
    """Mean of ``now - created_at`` over non-scheduled items, in microseconds."""
    average_leased_age: int = 0
    """Mean time left until ``lease_deadline`` over leased items, in microseconds."""

    @classmethod
    def of_sums(cls, total: int, age_sum: int, leased: int, left_sum: int, scheduled: int) -> PartitionStats:
        """The stats of a store that sums ages in a query (SQL stores): the means of those sums."""
        return cls(
            total=total,
            leased=leased,
            scheduled=scheduled,
            average_age=int(age_sum) // total if total else 0,
            average_leased_age=int(left_sum) // leased if leased else 0,
        )


@dataclass(slots=True)
class ClearOptions:
    """What queue.clear removes."""

    queue: bool = False
    scheduled: bool = False
    destructive: bool = False


class PartitionTx(Protocol):
    """The primitives a backend offers inside one transaction on one partition."""

    def last_id(self) -> str:
        """The greatest id ever stored in the partition, or "" for an empty one (seeds the id generator)."""

    def insert(self, items: Sequence[Item]) -> None:
        """Stores new items; their ids are greater than every id in the partition.

        The backend may keep the given objects: the caller must not change them afterwards.
        """

    def head(self, limit: int) -> list[Item]:
        """Up to ``limit`` queued items (not leased, not scheduled) in id order.

        Reads may return the stored objects themselves: a caller copies an item before changing it.
        """

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        """The stored items among ``ids``, in any state; absent ids are left out."""

    def update(self, items: Sequence[Item]) -> None:
        """Stores new lease and schedule fields of existing items, by id.

        Only ``is_leased``, ``lease_deadline``, ``attempts``, ``enqueue_at``, ``expire_deadline`` (a retry
        later extends it, ``operations.expires_at``) and ``failures`` change while an item keeps its id
        (anything else moving means a new id); a backend may write just those. Never
        used to make an item queued again. As with ``insert``, the backend may keep the given objects.
        """

    def delete(self, ids: Collection[str]) -> None:
        """Removes items; absent ids are ignored."""

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        """The given source ids that an item in the partition already carries."""

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        """Up to ``limit`` leased items with ``lease_deadline < now``, earliest deadline first."""

    def expired(self, now: int, limit: int) -> list[Item]:
        """Up to ``limit`` non-scheduled items with ``expire_deadline < now``, earliest first."""

    def due(self, now: int, limit: int) -> list[Item]:
        """Up to ``limit`` scheduled items with ``enqueue_at < now``, in id order."""

    def deadlines(self) -> Deadlines:
        """The earliest lease deadline, expire deadline (non-scheduled) and enqueue_at."""

    def list(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        """Non-scheduled (or, with ``scheduled``, scheduled) items with ``id >= pivot`` in id order: a
        ``list_page`` of them, read no further than it needs."""

    def stats(self, now: int) -> PartitionStats:
        """Counts and ages for queue.stats."""

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        """Produce de-duplication, queue-wide: records each id as seen until ``expires_at`` unless it is
        already recorded for this queue (by any partition) and not yet expired; returns those ids.

        Runs in the same transaction as the insert of the items it lets through, so a failed produce
        leaves no record behind and a retried produce is not mistaken for a duplicate.
        """

    def clear(self, options: ClearOptions) -> None:
        """Removes what queue.clear asks for."""


class Partition(Protocol):
    """One partition of one queue in a backend."""

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        """Runs ``fn`` in one transaction and returns its result; on error nothing of it is applied."""

    async def claim(self) -> None:
        """Makes this process the partition's only writer from now on: a store shared by several nodes
        fences out the previous owner (whose next write raises ``StaleOwnerError``). A no-op for a
        store only one process can open.
        """


@dataclass(slots=True)
class QueueRecord:
    """A queue's settings as stored. Durations are in microseconds."""

    name: str
    namespace: str = "_system"
    lease_timeout: int = 0
    expire_timeout: int = 0
    dead_queue: str = ""
    max_attempts: int = 0
    reference: str = ""
    requested_partitions: int = 1
    created_at: int = 0
    updated_at: int = 0
    extra: dict[str, str] = field(default_factory=dict)
    dedup_window: int = DEFAULT_DEDUP_WINDOW


class Records(Protocol):
    """Small documents by kind and key, beside the queues: tenancy's namespaces, users, keys, roles and
    bindings (docs/tenancy.md). Each write is atomic on its own record only; rules that span records
    (uniqueness, cascades) are written once above this, in ``querator.tenancy``.
    """

    async def get_record(self, kind: str, key: str) -> bytes | None:
        """The record's value, or None when there is none."""

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        """Stores a new record; False (and no change) when the key is taken."""

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        """Stores a record, replacing any value it had."""

    async def delete_record(self, kind: str, key: str) -> None:
        """Removes a record; absent is not an error."""

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        """Up to ``limit`` (key, value) pairs of ``kind`` with ``start <= key < end`` ("" end: no bound),
        in key order (code point order, which is UTF-8 byte order)."""

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        """Raises each key's stamp (a time, kept apart from the records) to the value given: a lower
        value changes nothing. Written by every member, often, for many keys (an API key's last use), so
        a backend writes without reading and without a per-key transaction, and spreads the keys over
        partitions (docs/adr/0041)."""

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        """The stamps of ``keys`` that have one."""

    async def delete_stamp(self, kind: str, key: str) -> None:
        """Removes a key's stamp; absent is not an error. A raise that a member sends at the same time
        may leave it behind (harmless: its key is gone, and keys are never reused)."""


class Store(ScheduleStore, Records, Protocol):
    """A storage backend: queue metadata, the partitions of every queue, schedules (``ScheduleStore``),
    durable workflows, and ``Records`` (tenancy)."""

    @property
    def workflows(self) -> WorkflowRows:
        """Durable workflows' records (docs/durable.md)."""

    async def open(self) -> None:
        """Connects and prepares schema; idempotent."""

    async def close(self) -> None:
        """Releases connections; pending work is finished first."""

    def partition(self, queue: str, number: int) -> Partition:
        """The partition object (lazy: never fails, never does I/O)."""

    async def delete_partitions(self, queue: str, count: int) -> None:
        """Removes every item of the queue's partitions 0..count-1, and its de-duplication records."""

    async def purge_dedup(self, now: int) -> int:
        """Drops de-duplication records that expired before ``now``; returns how many (0 if the backend
        expires them by itself)."""

    async def get_queue(self, name: str) -> QueueRecord | None:
        """The queue's settings, or None when it does not exist."""

    async def add_queue(self, record: QueueRecord) -> bool:
        """Stores a new queue; False (and no change) when the name is taken."""

    async def update_queue(self, record: QueueRecord) -> None:
        """Replaces an existing queue's settings."""

    async def delete_queue(self, name: str) -> None:
        """Removes a queue's settings; absent is not an error."""

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        """Queues of ``namespace`` with ``name >= pivot``, sorted by name, at most ``limit``."""

    async def check(self) -> None:
        """Raises ``StorageError`` when the store knows it cannot take writes now (a damaged file, a full
        disk): the readiness probe's question beyond "does a read answer"."""


LIST_PAGE_BYTES = 4 * 1024 * 1024
"""Payload bytes of one page of a storage list (items.list, scheduled.list): one request must not hold a
partition's payloads in memory (docs/extensions.md, "Storage lists")."""


def list_page(items: Iterable[Item], limit: int, max_bytes: int = LIST_PAGE_BYTES) -> list[Item]:
    """The first ``limit`` of ``items``, taken lazily, ending early before the item whose payload would
    pass ``max_bytes`` in all. The first item is always taken, whatever its size, so a caller paging by
    pivot always moves on."""
    page: list[Item] = []
    size = 0
    for item in items:
        size += len(item.payload)
        if len(page) >= limit or (page and size > max_bytes):
            break
        page.append(item)
    return page
