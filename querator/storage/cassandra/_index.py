"""The in-memory index of one Cassandra partition of a queue, and the ``PartitionTx`` over it.

The engine is the single writer of a partition, so the owner can know the partition's state without
asking Cassandra for it: the cursor (every queued item has an id greater than it), the leased and
scheduled items (metadata; payloads of leased items while known), the ids deleted above the cursor,
counters, and a bounded read-ahead window of the queued head. Queued items beyond the window stay in
Cassandra only, so memory does not grow with the depth of a queue.

A ``CassandraTx`` serves reads from the index (and from Cassandra through the ``Reader`` for what is not
in memory: the window's refill, payloads, listings), applies writes to the index at once and records the
rows they produce. ``Partition.run`` then writes those rows as the run's commit (one plain batch checked
by a read of the owner epoch, or, with dedup markers, the item rows then a conditional batch: ADR 0038);
if anything fails the whole index is thrown away and loaded again from Cassandra, so a failed run leaves
no trace in memory.

Row model (table ``items``, one Cassandra partition per (queue, partition, segment)):
- item rows (``record = 0``): an item as inserted, payload included; never changed afterwards. A segment
  may also hold *orphans*, rows of a run whose commit failed, was refused, or landed after a newer owner
  sealed the segment (ADR 0004, ADR 0038), all above its committed end
  (``committed_end``): every range read of item rows stops there;
- state log rows (``record = 1``): one per write that changed items that are not simply queued
  (leased, scheduled, or gone), holding their new states, appended to the tail segment whatever segment
  holds the item rows; replayed in order at load, so an item's latest state wins;
- static columns: the owner epoch (the fence) and, on the tail, the partition's cursor and counters.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol

from querator.storage.base import ClearOptions, Deadlines, Item, PartitionStats, list_page

WINDOW_MAX = 2000
"""Most queued items the read-ahead window holds: bounds memory per partition (2 MB of 1 KiB items)."""
READ_AHEAD = 1000
"""Rows one refill of the window asks Cassandra for."""
SCAN_PAGE = 1000
"""Rows per read when listing or scanning for expired items."""
FILL_BATCH = 100
"""Items of a storage list whose payloads are read from Cassandra at a time."""


class Reader(Protocol):
    """Blocking reads of a partition's item rows (the transaction runs on a worker thread)."""

    def items_after(self, segment: int, after: str, upto: str, limit: int, full: bool) -> list[Item]:
        """Item rows of ``segment`` with ``after < id <= upto`` in id order; without ``full``, no
        payload."""

    def items_by_id(self, segment: int, ids: Sequence[str]) -> list[Item]:
        """The item rows of ``segment`` among ``ids``."""


@dataclass(slots=True)
class StateRow:
    """An entry of the state log: the item's metadata, or ``gone`` for an item that no longer exists."""

    item: Item
    gone: bool = False


@dataclass(slots=True)
class Meta:
    """What the tail segment's static columns hold (the partition's durable counters)."""

    cursor: str = ""
    last_id: str = ""
    queued: int = 0
    queued_created: int = 0
    """Sum of ``created_at`` over queued items (for the average age of stats)."""
    min_expire: int = 0
    """Earliest expire_deadline of the queued items inserted into the tail (0: none); conservative."""
    rows: int = 0
    """Items, states and markers written into the tail segment: decides when to roll to a new one, and
    is the key of the next state log row (so it must only grow, and match what the batch stored)."""
    dedup_until: int = 0
    """Latest end of a dedup window among the markers in the tail: keeps the segment until then."""


@dataclass
class Writes:
    """What one run changed: rows for the tail segment and source ids for the dedup index."""

    items: list[Item] = field(default_factory=list)
    states: dict[str, StateRow] = field(default_factory=dict)
    sources: list[Item] = field(default_factory=list)
    markers: list[tuple[str, int]] = field(default_factory=list)
    """(dedup id, end of its window) of the stored items that carry a dedup id."""
    meta_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.items or self.states or self.markers or self.meta_changed)


class Index:
    """A partition's state as the owner knows it. Not thread-safe: one run at a time (the owner's)."""

    def __init__(
        self,
        reader: Reader,
        segments: dict[int, str],
        expires: dict[int, int],
        markers: dict[int, int],
        meta: Meta,
    ) -> None:
        self.reader = reader
        self.segment_numbers = sorted(segments)
        self.segment_after = [segments[n] for n in self.segment_numbers]
        """Segment n holds the ids greater than ``segment_after[i]`` (up to the next segment's)."""
        self.expires = dict(expires)
        """Conservative earliest expire_deadline of queued items per closed segment."""
        self.markers = dict(markers)
        """Latest end of a dedup window among the markers of each closed segment (0: none)."""
        self.meta = meta
        self.leased: dict[str, Item] = {}
        self.scheduled: dict[str, Item] = {}
        self.deleted: set[str] = set()
        """Ids above the cursor that are gone (expired or cleared while queued)."""
        self.partial: set[str] = set()
        """Leased or scheduled ids whose payload is not in memory."""
        self.window: OrderedDict[str, Item] = OrderedDict()
        self.window_end = meta.cursor
        """Every queued item with ``cursor < id <= window_end`` is in the window."""
        self.committed_last_id = meta.last_id
        self.writes = Writes()
        self.inserted: list[Item] = []
        """Queued items inserted by the open run (not yet readable from Cassandra), in id order."""
        self.claimed: dict[str, int] = {}
        """Dedup ids the open run claimed, with the end of their window: stored items get a marker."""
        self.left: list[str] = []
        """Ids that left the queue since the cursor last moved."""
        self.needs_roll = False
        """The next write must open a new tail segment (the loaded tail's opening did not finish)."""
        self.abandoned: int | None = None
        """That unfinished tail segment: dropped when the new one is opened."""

    # -- loading -----------------------------------------------------------------------------------------

    def load_state(self, rows: Iterable[StateRow]) -> None:
        """Takes the tail's latest states (read at load): the leased, scheduled and deleted items."""
        cursor = self.meta.cursor
        for row in rows:
            item = row.item
            if row.gone:
                if item.id > cursor:
                    self.deleted.add(item.id)
            elif item.enqueue_at:
                self.scheduled[item.id] = item
                self.partial.add(item.id)
            elif item.is_leased:
                self.leased[item.id] = item
                self.partial.add(item.id)

    def carried_count(self) -> int:
        """How many states ``carried`` returns."""
        return len(self.leased) + len(self.scheduled) + len(self.deleted)

    def carried(self) -> list[StateRow]:
        """The states a new tail segment must start with: everything not simply queued."""
        rows = [StateRow(_state_only(i)) for i in (*self.leased.values(), *self.scheduled.values())]
        rows.extend(StateRow(Item(id=i), gone=True) for i in self.deleted)
        return rows

    # -- segments ---------------------------------------------------------------------------------------

    @property
    def tail(self) -> int:
        return self.segment_numbers[-1]

    def segment_of(self, item_id: str) -> int:
        index = bisect.bisect_left(self.segment_after, item_id) - 1
        return self.segment_numbers[max(index, 0)]

    def committed_end(self, segment: int) -> str:
        """The greatest id ``segment`` may hold as a committed item row: the tail's is the committed
        ``last_id``; a closed segment's is where the next one starts (a roll opens the next segment at
        the committed ``last_id``, and no run writes item rows into a segment after it is closed). Rows
        above it are orphans of failed runs (ADR 0004). Range reads run from the cursor's segment on,
        where no segment was dropped, so the next one in the list is the next one opened."""
        position = self.segment_numbers.index(segment) + 1
        if position == len(self.segment_numbers):
            return self.committed_last_id
        return self.segment_after[position]

    def segments_from(self, item_id: str) -> list[int]:
        start = self.segment_numbers.index(self.segment_of(item_id))
        return self.segment_numbers[start:]

    def add_segment(self, number: int, after: str) -> None:
        closed = self.tail
        self.expires[closed] = self.meta.min_expire
        if self.meta.dedup_until:
            self.markers[closed] = self.meta.dedup_until
        self.segment_numbers.append(number)
        self.segment_after.append(after)
        self.meta.min_expire = self.meta.dedup_until = 0
        self.meta.rows = 0

    def live_segments(self, now: int) -> set[int]:
        """Segments that may hold a live item: those of leased and scheduled items, and every segment
        from the cursor's on (queued items); and those holding a dedup marker of an open window (its
        claim relies on it). A drained segment between them can go too: the ids it held are all gone,
        so no lookup ever lands in it again."""
        live = {self.segment_of(i) for i in (*self.leased, *self.scheduled)}
        live.update(n for n, until in self.markers.items() if until > now)
        floor = self.segment_of(self.meta.cursor + "\x00")
        live.update(n for n in self.segment_numbers if n >= floor)
        return live

    def drop_segments(self, keep: Collection[int]) -> None:
        pairs = [(n, a) for n, a in zip(self.segment_numbers, self.segment_after, strict=True) if n in keep]
        self.segment_numbers = [n for n, _ in pairs]
        self.segment_after = [a for _, a in pairs]
        self.expires = {n: e for n, e in self.expires.items() if n in keep}
        self.markers = {n: m for n, m in self.markers.items() if n in keep}

    # -- the run ----------------------------------------------------------------------------------------

    def begin(self) -> None:
        self.writes = Writes()
        self.inserted = []
        self.claimed = {}

    def end(self) -> None:
        """The run's writes are durable."""
        self.committed_last_id = self.meta.last_id
        self.begin()

    # -- queued items ------------------------------------------------------------------------------------

    def _is_state_item(self, item_id: str) -> bool:
        return item_id in self.leased or item_id in self.scheduled or item_id in self.deleted

    def queued_item(self, item_id: str) -> Item | None:
        """The queued item with this id, reading Cassandra when the window does not decide."""
        if item_id <= self.meta.cursor or self._is_state_item(item_id):
            return None
        found = self.window.get(item_id)
        if found is not None or item_id <= self.window_end:
            return found
        for item in self.inserted:
            if item.id == item_id:
                return item
        if item_id > self.committed_last_id:
            return None
        rows = self.reader.items_by_id(self.segment_of(item_id), [item_id])
        return rows[0] if rows else None

    def _queued_rows_after(self, after: str, full: bool) -> Iterator[Item]:
        """Queued items with ``id > after`` in id order: committed ones from Cassandra, then this run's."""
        after = max(after, self.meta.cursor)
        for segment in self.segments_from(after + "\x00"):
            end = self.committed_end(segment)
            while after < end:
                rows = self.reader.items_after(segment, after, end, SCAN_PAGE, full)
                for row in rows:
                    after = row.id
                    if not self._is_state_item(row.id):
                        yield row
                if len(rows) < SCAN_PAGE:
                    break
        for item in self.inserted:
            if item.id > after and not self._is_state_item(item.id):
                yield item

    def head(self, limit: int) -> list[Item]:
        if len(self.window) < limit and self.window_end < self.meta.last_id:
            self._refill(max(limit - len(self.window), READ_AHEAD))
        found = []
        for item in self.window.values():
            found.append(item)
            if len(found) == limit:
                break
        return found

    # Long on purpose: one pass over the segments with each reason to stop or skip one beside it.
    def _refill(self, wanted: int) -> None:  # noqa: C901
        added = 0
        end = self.window_end
        for segment in self.segments_from(end + "\x00"):
            committed = self.committed_end(segment)
            while end < committed and added < wanted:
                rows = self.reader.items_after(segment, end, committed, READ_AHEAD, True)
                for row in rows:
                    end = row.id
                    if not self._is_state_item(row.id):
                        self.window[row.id] = row
                        added += 1
                if len(rows) < READ_AHEAD:
                    break
            if added >= wanted:
                break
        if end >= self.committed_last_id:
            for item in self.inserted:
                if item.id > end:
                    end = item.id
                    if not self._is_state_item(item.id):
                        self.window[item.id] = item
        self.window_end = max(self.window_end, end)

    def _leave_queue(self, item: Item) -> None:
        """Bookkeeping for a queued item that becomes leased, scheduled or gone."""
        self.meta.queued -= 1
        self.meta.queued_created -= item.created_at
        self.window.pop(item.id, None)
        self.left.append(item.id)

    def _advance_cursor(self) -> None:
        """Moves the cursor over the items that just left the queue, as far as the window proves safe."""
        meta = self.meta
        if self.window:
            first = next(iter(self.window))
            below = [i for i in self.left if i < first]
            cursor = max(below, default=meta.cursor)
        else:
            # The window held every queued item up to window_end, and none is left.
            cursor = self.window_end
        self.left.clear()
        if cursor <= meta.cursor:
            return
        meta.cursor = cursor
        self.deleted = {i for i in self.deleted if i > cursor}
        self.writes.meta_changed = True

    # -- primitives (see base.PartitionTx) ----------------------------------------------------------------

    def insert(self, items: Sequence[Item]) -> None:
        writes, meta = self.writes, self.meta
        window_complete = self.window_end >= meta.last_id
        for item in items:
            writes.items.append(item)
            if item.source_id:
                writes.sources.append(item)
            window_end = self.claimed.get(item.dedup_id) if item.dedup_id else None
            if window_end is not None:
                writes.markers.append((item.dedup_id, window_end))
                meta.dedup_until = max(meta.dedup_until, window_end)
            meta.last_id = max(meta.last_id, item.id)
            if item.enqueue_at:
                self.scheduled[item.id] = _state_only(item)
                self.partial.add(item.id)
                writes.states[item.id] = StateRow(item)
            elif item.is_leased:
                self.leased[item.id] = item
                writes.states[item.id] = StateRow(item)
            else:
                meta.queued += 1
                meta.queued_created += item.created_at
                if item.expire_deadline and (not meta.min_expire or item.expire_deadline < meta.min_expire):
                    meta.min_expire = item.expire_deadline
                self.inserted.append(item)
                if window_complete and len(self.window) < WINDOW_MAX:
                    self.window[item.id] = item
                    self.window_end = item.id
                else:
                    window_complete = False
        writes.meta_changed = True

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        found: dict[str, Item] = {}
        for item_id in ids:
            item = self.leased.get(item_id) or self.queued_item(item_id)
            if item is None and item_id in self.scheduled:
                item = self.scheduled[item_id].copy()  # its payload is read for the caller, not kept
            if item is not None:
                found[item_id] = item
        self._fill_payloads(found.values())
        return found

    def _fill_payloads(self, items: Iterable[Item]) -> None:
        """Reads the payload (and other item fields) of leased or scheduled items not held in memory."""
        missing = [i for i in items if i.id in self.partial]
        by_segment: dict[int, list[Item]] = {}
        for item in missing:
            by_segment.setdefault(self.segment_of(item.id), []).append(item)
        for segment, wanted in by_segment.items():
            rows = {r.id: r for r in self.reader.items_by_id(segment, [i.id for i in wanted])}
            for item in wanted:
                row = rows.get(item.id)
                if row is not None:
                    item.reference, item.encoding, item.kind = row.reference, row.encoding, row.kind
                    item.payload, item.source_id = row.payload, row.source_id
        for item in missing:
            if item.id in self.leased:
                self.partial.discard(item.id)  # leased payloads stay; scheduled ones are dropped again

    def update(self, items: Sequence[Item]) -> None:
        for item in items:
            current = self.leased.pop(item.id, None) or self.scheduled.pop(item.id, None)
            if current is None:
                queued = self.queued_item(item.id)
                if queued is None:
                    continue
                self._leave_queue(queued)
            if not item.is_leased and not item.enqueue_at:
                raise ValueError(f"item '{item.id}' cannot become queued again under the same id")
            if item.enqueue_at:
                self.scheduled[item.id] = _state_only(item)
                self.partial.add(item.id)
            else:
                self.leased[item.id] = item
                if item.payload or item.id not in self.partial:
                    self.partial.discard(item.id)
            self.writes.states[item.id] = StateRow(item)
        self._advance_cursor()

    def delete(self, ids: Collection[str]) -> None:
        for item_id in ids:
            current = self.leased.pop(item_id, None) or self.scheduled.pop(item_id, None)
            if current is None:
                queued = self.queued_item(item_id)
                if queued is None:
                    continue
                self._leave_queue(queued)
            self._gone(item_id)
        self._advance_cursor()

    def _gone(self, item_id: str) -> None:
        """Records that an item no longer exists; its item row above the cursor must not read as queued."""
        if item_id > self.meta.cursor:
            self.deleted.add(item_id)
        self.partial.discard(item_id)
        self.writes.states[item_id] = StateRow(Item(id=item_id), gone=True)

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        found = sorted((i for i in self.leased.values() if i.lease_deadline < now), key=_lease_deadline)
        found = found[:limit]
        self._fill_payloads(found)
        return found

    def expired(self, now: int, limit: int) -> list[Item]:
        found = [i for i in self.leased.values() if i.expire_deadline and i.expire_deadline < now]
        found.extend(self._expired_queued(now, limit))
        found.sort(key=_expire_deadline)
        found = found[:limit]
        self._fill_payloads(found)
        return found

    # Long on purpose: as _refill, a scan that says where each segment is skipped.
    def _expired_queued(self, now: int, limit: int) -> list[Item]:  # noqa: C901
        """Queued items past their expire_deadline, scanning only segments that may hold one."""
        found: list[Item] = []
        for segment in self.segments_from(self.meta.cursor + "\x00"):
            if not 0 < self._segment_min_expire(segment) < now:
                continue
            start = self.segment_after[self.segment_numbers.index(segment)]
            remaining = None
            complete = True
            for row in self._queued_rows_after(start, full=False):
                if self.segment_of(row.id) != segment:
                    break
                if row.expire_deadline and row.expire_deadline < now:
                    if len(found) >= limit:
                        complete = False
                        break
                    found.append(row)
                elif row.expire_deadline and (remaining is None or row.expire_deadline < remaining):
                    remaining = row.expire_deadline
            if complete:
                # What is left once these expired items are deleted: later deadlines stop firing early.
                self._set_segment_min_expire(segment, remaining or 0)
        if not found:
            return found
        full = {}
        for segment in {self.segment_of(i.id) for i in found}:
            ids = [i.id for i in found if self.segment_of(i.id) == segment]
            full.update({r.id: r for r in self.reader.items_by_id(segment, ids)})
        full.update({i.id: i for i in self.inserted})
        return [full.get(i.id, i) for i in found]

    def _segment_min_expire(self, segment: int) -> int:
        return self.meta.min_expire if segment == self.tail else self.expires.get(segment, 0)

    def _set_segment_min_expire(self, segment: int, value: int) -> None:
        if segment == self.tail:
            self.meta.min_expire = value
            self.writes.meta_changed = True
        else:
            self.expires[segment] = value

    def due(self, now: int, limit: int) -> list[Item]:
        found = sorted((i for i in self.scheduled.values() if i.enqueue_at < now), key=_id)[:limit]
        found = [i.copy() for i in found]
        self._fill_payloads(found)
        return found

    def deadlines(self) -> Deadlines:
        lease = min((i.lease_deadline for i in self.leased.values()), default=0)
        expires = [i.expire_deadline for i in self.leased.values() if i.expire_deadline]
        if self.meta.queued:
            segments = self.segments_from(self.meta.cursor + "\x00")
            expires.extend(e for e in map(self._segment_min_expire, segments) if e)
        enqueue = min((i.enqueue_at for i in self.scheduled.values()), default=0)
        return Deadlines(lease_deadline=lease, expire_deadline=min(expires, default=0), enqueue_at=enqueue)

    def stats(self, now: int) -> PartitionStats:
        meta = self.meta
        leased = len(self.leased)
        total = meta.queued + leased
        created = meta.queued_created + sum(i.created_at for i in self.leased.values())
        left = sum(i.lease_deadline - now for i in self.leased.values())
        return PartitionStats(
            total=total,
            leased=leased,
            scheduled=len(self.scheduled),
            average_age=(total * now - created) // total if total else 0,
            average_leased_age=left // leased if leased else 0,
        )

    def clear(self, options: ClearOptions) -> None:
        gone: list[str] = []
        if options.scheduled:
            gone.extend(self.scheduled)
        if options.queue and options.destructive:
            gone.extend(self.leased)
        for item_id in gone:
            self.leased.pop(item_id, None)
            self.scheduled.pop(item_id, None)
            self._gone(item_id)
        if options.queue:
            # Every queued item is at or below the new cursor: gone, with no row written per item.
            meta = self.meta
            meta.cursor = meta.last_id
            meta.queued = meta.queued_created = meta.min_expire = 0
            self.expires = dict.fromkeys(self.expires, 0)
            self.window.clear()
            self.window_end = meta.cursor
            self.deleted.clear()
        self.writes.meta_changed = True

    def list_items(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        found: Iterable[Item]
        if scheduled:
            found = (i.copy() for i in sorted((i for i in self.scheduled.values() if i.id >= pivot), key=_id))
        else:
            leased = sorted((i for i in self.leased.values() if i.id >= pivot), key=_id)
            found = heapq.merge(leased, self._queued_rows_after(_before(pivot), full=True), key=_id)
        return list_page(self._with_payloads(found), limit)

    def _with_payloads(self, items: Iterable[Item]) -> Iterator[Item]:
        """``items`` with their payloads read, ``FILL_BATCH`` at a time: a page that ends early reads
        no more of them."""
        iterator = iter(items)
        while batch := list(islice(iterator, FILL_BATCH)):
            self._fill_payloads(batch)
            yield from batch

    def existing_source_ids(self, found: dict[str, str]) -> set[str]:
        """The source ids (mapped to item ids by the dedup index) whose item still exists. The item must
        carry the source id too: an entry written for an orphan (ADR 0004) may point at an id that a
        newer owner has since given to another item."""
        live = set()
        for source_id, item_id in found.items():
            item = self.leased.get(item_id) or self.scheduled.get(item_id) or self.queued_item(item_id)
            if item is not None and item.source_id == source_id:
                live.add(source_id)
        return live


def _state_only(item: Item) -> Item:
    """A copy without payload: what memory keeps of an item whose payload stays in Cassandra."""
    copy = item.copy()
    copy.payload = b""
    return copy


def _before(item_id: str) -> str:
    """A string just below ``item_id`` in the order of ids, for ``id >= pivot`` reads as ``id > x``."""
    if not item_id:
        return ""
    return item_id[:-1] + chr(ord(item_id[-1]) - 1) + "\U0010ffff"


def _id(item: Item) -> str:
    return item.id


def _lease_deadline(item: Item) -> int:
    return item.lease_deadline


def _expire_deadline(item: Item) -> int:
    return item.expire_deadline
