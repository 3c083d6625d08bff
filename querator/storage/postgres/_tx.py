"""``PartitionTx`` over one partition's rows, in a run's statements: alone, or in its pipelined transaction.

A write is held back until the run's next statement: the last one goes out with the fence, as one
statement that commits the run (``end``). Reads before it are sent alone; a write followed by another
statement opens the pipeline first, so that they share the run's transaction: writes are then sent
without waiting, a read waits for its answer, and PostgreSQL has run every statement before it by
then, so a run reads its own writes (``_pool.Run``, docs/adr/0073).

The head bound: an item is queued from its insert (at the tail: its id is above every id in the partition)
until it is leased, scheduled or deleted, and never again under its id (``storage/base.py``). So once a
``head`` found its first queued item at id X, no item below X is ever queued again, and once a run
leased, scheduled or deleted every item its ``head`` returned, none at or below the last of them is.
The partition keeps that bound (``head_from``) across runs and ``head`` scans from it: a queue leases
from its head, and the index entries of the rows it leased and completed stay there until a vacuum
removes them, which every ``head`` would otherwise step over again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, TypeAlias

from querator.storage.base import ClearOptions, Deadlines, Item, PartitionStats, list_page
from querator.storage.postgres import _statements as sql
from querator.storage.postgres._arrays import ByteaArray
from querator.storage.postgres._codec import item_arrays, item_from_row, update_arrays
from querator.storage.postgres._pool import Run, text

_Statement: TypeAlias = tuple[str, Sequence[Any]]


class PostgresTx:
    """``PartitionTx`` over the items of one partition, in a run's statements (``run``)."""

    __slots__ = (
        "_head",
        "_head_from",
        "_held",
        "_number",
        "_queue",
        "_run",
        "_unqueued",
        "newest",
        "wrote",
    )

    def __init__(self, run: Run, queue_name: str, number: int, head_from: str = "") -> None:
        self._run = run
        self._queue = queue_name
        self._number = number
        self._head_from = head_from
        self._head: list[str] | None = None
        """The ids the run's last ``head`` returned."""
        self._unqueued: set[str] = set()
        """Ids the run leased, scheduled or deleted."""
        self._held: _Statement | None = None
        """The run's last write, not sent yet: it goes before the next statement, or with the fence."""
        self.wrote = False
        """Whether the run wrote: then its fence locks the partition's row (``end``), else only reads it."""
        self.newest = ""
        """The greatest id the run inserted: the fence raises the partition's ``last_id`` to it."""

    def _rows(
        self, statement: str, params: Sequence[Any] | dict[str, Any], writes: bool = False
    ) -> list[tuple[Any, ...]]:
        """The rows ``statement`` answers; one that ``writes`` must commit with the run, not alone."""
        self._send_held()
        if writes:
            self._run.pipeline()
        cursor = self._run.conn.cursor(binary=True)
        cursor.execute(statement, params)
        return cursor.fetchall()

    def _items(self, statement: str, *params: Any) -> list[Item]:
        return [item_from_row(r) for r in self._rows(statement, (self._queue, self._number, *params))]

    def _write(self, statement: str, params: Sequence[Any]) -> None:
        self.wrote = True
        self._send_held()
        self._held = (statement, params)

    def _send_held(self) -> None:
        """Sends the write held back, in its place: before the statement the run sends next, in the
        run's transaction."""
        if self._held is not None:
            statement, params = self._held
            self._held = None
            self._run.pipeline()
            self._run.conn.execute(statement, params)

    def end(self, epoch: int) -> None:
        """Sends the fence (``_schema``'s ``querator_fence``) with ``epoch``, the run's last statement, and
        with it the write held back, as one statement: one execute and one send fewer per run that wrote
        (docs/adr/0073). A run that wrote nothing only checks the epoch (``newest`` None)."""
        fence = (self._queue, self._number, epoch, self.newest if self.wrote else None)
        if self._held is None:
            self._run.commit(sql.FENCE, fence)
            return
        statement, params = self._held
        self._held = None
        self._run.commit(sql.fenced(statement), (*params, *fence))

    def last_id(self) -> str:
        rows = self._rows(sql.LAST_ID, (self._queue, self._number))
        return max(text(rows[0][0]) if rows else "", self.newest)

    def insert(self, items: Sequence[Item]) -> None:
        if not items:
            return
        self._write(sql.INSERT_ITEMS, (self._queue, self._number, *item_arrays(items)))
        self.newest = max(self.newest, *(i.id for i in items))

    def head(self, limit: int) -> list[Item]:
        items = self._items(sql.HEAD, self._head_from, limit)
        self._head = [i.id for i in items]
        return items

    def head_from(self) -> str:
        """The head bound once this run committed (module docstring)."""
        if not self._head:
            return self._head_from
        for item_id in self._head:
            if item_id not in self._unqueued:
                return item_id
        return self._head[-1] + "\x00"  # the least id above the last: the bytes sort first

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        if not ids:
            return {}
        return {i.id: i for i in self._items(sql.GET_ITEMS, ByteaArray(ids))}

    def update(self, items: Sequence[Item]) -> None:
        if items:
            self._write(sql.UPDATE_ITEMS, (*update_arrays(items), self._queue, self._number))
            self._unqueued.update(i.id for i in items if i.is_leased or i.enqueue_at)

    def delete(self, ids: Collection[str]) -> None:
        if ids:
            self._write(sql.DELETE_ITEMS, (self._queue, self._number, ByteaArray(ids)))
            self._unqueued.update(ids)

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        wanted = [s for s in source_ids if s]
        if not wanted:
            return set()
        return {text(r[0]) for r in self._rows(sql.SOURCES, (self._queue, self._number, wanted))}

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        return self._items(sql.EXPIRED_LEASES, now, limit)

    def expired(self, now: int, limit: int) -> list[Item]:
        return self._items(sql.EXPIRED, now, limit)

    def due(self, now: int, limit: int) -> list[Item]:
        return self._items(sql.DUE, now, limit)

    def deadlines(self) -> Deadlines:
        ((lease, expire, enqueue),) = self._rows(sql.DEADLINES, {"q": self._queue, "p": self._number})
        return Deadlines(lease_deadline=lease, expire_deadline=expire, enqueue_at=enqueue)

    def stats(self, now: int) -> PartitionStats:
        ((total, age, leased, left, scheduled),) = self._rows(
            sql.STATS, {"now": now, "q": self._queue, "p": self._number}
        )
        return PartitionStats.of_sums(total, age, leased, left, scheduled)

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        ids = list(dedup_ids)
        if not ids:
            return set()
        self.wrote = True
        query = {"q": self._queue, "ids": ids, "until": expires_at, "now": now}
        rows = self._rows(sql.DEDUP, query, writes=True)
        return set(ids).difference(text(r[0]) for r in rows)

    def clear(self, options: ClearOptions) -> None:
        key = (self._queue, self._number)
        if options.scheduled:
            self._write(sql.CLEAR_SCHEDULED, key)
        if options.queue:
            self._write(sql.CLEAR_UNSCHEDULED if options.destructive else sql.CLEAR_QUEUED, key)

    # Last, so that ``list`` in the annotations above is still the builtin.
    def list(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        statement = sql.LIST_SCHEDULED if scheduled else sql.LIST
        return list_page(self._items(statement, pivot, limit), limit)
