"""Durable workflows' records in the keyspace: lightweight transactions on ``version``, and two indexes.

Finished workflows are listed from ``workflows_by_status``, a few buckets per status, each row with its
record's TTL. Running ones are listed from ``workflows_running``, by **generation** (the hour a workflow
started in, ``GENERATION_US``): finishing a workflow deletes nothing there, it only sets the row's
``done`` (deleting a row per finish piled tombstones into the partitions every listing of running
workflows reads, until those reads failed: docs/adr/0041). Once an hour one member **carries** the
workflows still running into the new generation (``purge_workflows``, claimed with a lightweight
transaction) and drops the older generations whole; lists read only the generations from the one
before the first carried (``workflows_carried.first``), so neither they nor the sweep of running
workflows ever read what finished before the last hour or two, nor a tombstone of it.

An index row is only a hint: a list reads each record it names and keeps those of the status asked,
so a stale row (a crash between record and index, a record expired before its row, ``done`` not set)
costs a read, never a wrong answer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from querator.clock import MICROS
from querator.storage.cassandra._errors import DRIVER_ERRORS, storage_error
from querator.storage.cassandra._session import Connection, Cql, Rows
from querator.storage.cassandra._statements import Statement
from querator.storage.workflows import (
    Entry,
    JournalRow,
    Workflow,
    decode_entry,
    decode_workflow,
    encode_entry,
    encode_workflow,
    workflow_page,
)
from querator.wire.workflows import RUNNING, STATUSES

BUCKETS: Final = 16
"""Partitions of ``workflows_by_status`` per status, and of ``workflows_running`` per generation."""
GENERATION_US: Final = 3600 * MICROS
"""How long a generation of running workflows lasts: a finished workflow's row is read (and skipped by
its ``done``) for at most about two, and each running workflow is written once per generation. Members'
clocks must agree to well within it."""
LOOKBACK: Final = 2
"""Generations before the current one read while no carry has ever completed (a keyspace written before
generations, or a first carry that failed)."""
_SCOPE: Final = "running"
"""The one row of ``workflows_carried``."""
_FINISHED: Final = tuple(s for s in STATUSES if s != RUNNING)
ENTRIES_PAGE: Final = 1000
"""Journal rows one read returns (the driver would page at 5,000, and the event loop's reads don't)."""
_LAST_SEQ: Final = 2**62

Row = tuple[str, bool]
"""An index row: a workflow id, and whether it is known to have finished."""


def _bucket(workflow_id: str) -> int:
    return zlib.crc32(workflow_id.encode()) % BUCKETS


def generation(now: int) -> int:
    """The generation of running workflows started at ``now``."""
    return now // GENERATION_US


def _rows(
    cql: Cql, first: Statement, after: Statement, key: tuple[object, ...], pivot: str, chunk: int
) -> Iterator[Row]:
    """The rows of one index partition from ``pivot`` (inclusive) in id order, read ``chunk`` at a time as
    they are taken: a partition whose first rows are all finished ones must not end a page early, which
    would skip the later rows of the others."""
    rows = cql.rows(first, (*key, pivot, chunk))
    while True:
        yield from ((str(r["id"]), bool(r.get("done"))) for r in rows)
        if len(rows) < chunk:
            return
        rows = cql.rows(after, (*key, rows[-1]["id"], chunk))


def _merged(streams: list[Iterator[Row]]) -> Iterator[tuple[str, bool]]:
    """Each id of ``streams`` once, in id order, with whether every row of it says finished."""
    for workflow_id, rows in itertools.groupby(heapq.merge(*streams), key=lambda row: row[0]):
        yield workflow_id, all(done for _, done in rows)


class CassandraWorkflowRows:
    """The ``WorkflowRows`` of ``CassandraStore``.

    A record is written with a lightweight transaction only (never mixed with plain writes, whose
    timestamps would order differently). The indexes are written after the record.

    A record's read and write are sent from the event loop (``Connection.execute_async``): a workflow's
    every step reads and then writes its record, and on the store's few worker threads each would hold
    one for a round trip and a Paxos round, ahead of the queues' runs (issue 38).

    A journal's rows are plain writes, sent before the record's transaction and keyed by the version
    it would write: a refused write leaves them, and ``journal.recorded_rows`` never reads them as
    recorded (docs/adr/0046). When a workflow finishes, its rows are written again with its record's TTL.
    """

    def __init__(self, connection: Connection, now: Callable[[], int]) -> None:
        self._connection = connection
        self.clock_now = now

    async def _send(self, statement: Statement, params: tuple[object, ...], writes: bool = False) -> Rows:
        """Sends one statement from the event loop; a failure of a write may have been applied."""
        bound = self._connection.opened().stmt(statement).bind(params)
        try:
            return await self._connection.execute_async(asyncio.get_running_loop(), bound)
        except DRIVER_ERRORS as e:
            raise storage_error(e, sent=writes) from e

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        rows = await self._send(Statement.GET_WORKFLOW, (workflow_id,))
        # A record first written by an INSERT (before ADD_WORKFLOW became an UPDATE) leaves its key alone
        # once its columns' TTL passes: such a row is a workflow dropped after its retention.
        record = rows[0]["record"] if rows else None
        return decode_workflow(record) if record is not None else None

    async def put_workflow(
        self, workflow: Workflow, expected_version: int, entries: Sequence[Entry] = ()
    ) -> bool:
        record = encode_workflow(workflow)
        now = self.clock_now()
        ttl_s = 0
        if workflow.expires_at:
            ttl_s = max(1, (workflow.expires_at - now) // MICROS)
        w = workflow
        # A finish rewrites every row with the record's TTL after the record; rows written before it
        # with that TTL could expire (a TTL of a second, on a loaded node) before the rewrite read them.
        rewrites = w.status != RUNNING and expected_version != 0 and w.length > 0
        await self._put_rows(w.id, [JournalRow(w.version, e) for e in entries], 0 if rewrites else ttl_s)
        if expected_version == 0:
            rows = await self._send(Statement.ADD_WORKFLOW, (ttl_s, w.version, record, w.id), writes=True)
        else:
            params = (ttl_s, w.version, record, w.id, expected_version)
            rows = await self._send(Statement.PUT_WORKFLOW, params, writes=True)
        if not (rows and rows[0]["[applied]"]):
            return False
        bucket = _bucket(w.id)
        current = generation(now)
        if w.status == RUNNING:
            if expected_version == 0:
                await self._send(Statement.INDEX_RUNNING, (bucket, current, w.id), writes=True)
            return True
        if expected_version != 0:  # it ran: its row, in one of the generations lists read, says so
            await self._send(Statement.MARK_DONE, (bucket, [current - 1, current], w.id), writes=True)
            # Its rows go when its record does. (A crash before this leaves them until a purge by hand:
            # they are never read without the record.) A journal with no rows costs no read.
            if rewrites:
                await self._put_rows(w.id, await self.get_entries(w.id, 1, _LAST_SEQ), ttl_s)
        await self._send(Statement.INDEX_WORKFLOW, (w.status, bucket, w.id, ttl_s), writes=True)
        return True

    async def _put_rows(self, workflow_id: str, rows: Sequence[JournalRow], ttl_s: int) -> None:
        """Writes ``rows`` (one partition), a page of them at a time."""
        for start in range(0, len(rows), ENTRIES_PAGE):
            page = rows[start : start + ENTRIES_PAGE]
            await asyncio.gather(
                *(
                    self._send(
                        Statement.PUT_ENTRY,
                        (workflow_id, r.entry.seq, r.version, encode_entry(r.entry), ttl_s),
                        writes=True,
                    )
                    for r in page
                )
            )

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        found: dict[tuple[int, int], JournalRow] = {}
        start = first_seq
        while True:
            page = await self._send(Statement.GET_ENTRIES, (workflow_id, start, last_seq, ENTRIES_PAGE))
            for r in page:
                found[(r["seq"], r["version"])] = JournalRow(r["version"], decode_entry(r["entry"]))
            if len(page) < ENTRIES_PAGE:
                return [found[key] for key in sorted(found)]
            # From the last seq again, whose rows of other versions the limit may have cut; past it if the
            # page held no other seq (ENTRIES_PAGE rows of one seq are never written).
            last = page[-1]["seq"]
            start = last if page[0]["seq"] != last else last + 1

    async def drop_entries(self, workflow_id: str, last_seq: int) -> None:
        await self._send(Statement.DROP_ENTRIES, (workflow_id, last_seq), writes=True)

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        now = self.clock_now()

        def list_(cql: Cql) -> list[Workflow]:
            streams: list[Iterator[Row]] = []
            if status in ("", RUNNING):
                generations, legacy = self._listed_generations(cql, now)
                streams += self._running(cql, generations, legacy, pivot, limit)
            for s in (status,) if status in _FINISHED else () if status else _FINISHED:
                streams += (
                    _rows(cql, Statement.LIST_WORKFLOWS, Statement.LIST_WORKFLOWS_AFTER, (s, b), pivot, limit)
                    for b in range(BUCKETS)
                )

            def records() -> Iterator[bytes]:
                # One read each, as the page takes them; an id may have a row under several statuses
                # and generations (grouped: they come together).
                for workflow_id, done in _merged(streams):
                    if done and status == RUNNING:
                        continue
                    rows = cql.rows(Statement.GET_WORKFLOW, (workflow_id,))
                    if rows and rows[0]["record"] is not None:  # (expired: see get_workflow)
                        yield rows[0]["record"]

            return workflow_page(records(), status, pivot, limit)

        return await self._connection.call(list_)

    @staticmethod
    def _listed_generations(cql: Cql, now: int) -> tuple[range, bool]:
        """The generations that may hold a running workflow, and whether the rows from before
        generations may too (no carry has completed yet)."""
        rows = cql.rows(Statement.GET_CARRIED, (_SCOPE,))
        first = rows[0]["first"] if rows else None
        current = generation(now)
        if first is None:
            return range(current - LOOKBACK, current + 2), True
        # The one before ``first``: a member whose clock is a little behind still starts workflows there.
        return range(first - 1, max(first, current) + 2), False

    @staticmethod
    def _running(cql: Cql, generations: range, legacy: bool, pivot: str, chunk: int) -> list[Iterator[Row]]:
        streams = [
            _rows(cql, Statement.LIST_RUNNING, Statement.LIST_RUNNING_AFTER, (b, g), pivot, chunk)
            for g in generations
            for b in range(BUCKETS)
        ]
        if legacy:
            streams += (
                _rows(
                    cql, Statement.LIST_WORKFLOWS, Statement.LIST_WORKFLOWS_AFTER, (RUNNING, b), pivot, chunk
                )
                for b in range(BUCKETS)
            )
        return streams

    async def purge_workflows(self, now: int) -> int:
        """Finished records and their index rows expire by their TTL; this carries running workflows into
        the generation of ``now`` once per generation (``carry``). Returns 0: it drops no record."""
        await self._connection.call(lambda cql: self.carry(cql, now), writes=True)
        return 0

    def carry(self, cql: Cql, now: int) -> bool:
        """Carries the workflows still running into the generation of ``now``, if no member has claimed
        that yet, and drops the generations no list reads any more; whether this member did it.

        Every member calls it each minute: one read, and one lightweight transaction per generation. The
        claim makes one member do the work; one that dies half-way leaves ``first`` where it was, which
        lists read from, and the next generation's carry starts from there too."""
        current = generation(now)
        claimed, first = self._claim(cql, current)
        if not claimed:
            return False
        start = current - LOOKBACK if first is None else first - 1
        # The rows from before generations are read every time, for those a member of an older version
        # started during a rolling upgrade.
        for workflow_id, done in _merged(self._running(cql, range(start, current), True, "", 1000)):
            found = [] if done else cql.rows(Statement.GET_WORKFLOW, (workflow_id,))
            record = found[0]["record"] if found else None
            if record is not None and decode_workflow(record).status == RUNNING:
                cql.rows(Statement.CARRY_RUNNING, (_bucket(workflow_id), current, workflow_id))
        if cql.applied(Statement.CARRIED, (current, _SCOPE, current))[0]:
            # Kept: the generation before the current one, where a member a little behind starts some.
            dropped = [(b, g) for g in range(start, current - 1) for b in range(BUCKETS)]
            for key in dropped:
                cql.rows(Statement.DROP_RUNNING, key)
            for b in range(BUCKETS):
                cql.rows(Statement.DROP_LEGACY_RUNNING, (RUNNING, b))
        return True

    @staticmethod
    def _claim(cql: Cql, current: int) -> tuple[bool, int | None]:
        """Whether this member claimed the carry into ``current``, and the first generation to carry
        from (None: none carried yet)."""
        rows = cql.rows(Statement.GET_CARRIED, (_SCOPE,))
        first: int | None = rows[0]["first"] if rows else None
        if first is not None and first >= current:
            return False, first
        if rows:
            claimed, _ = cql.applied(Statement.CLAIM_CARRY, (current, _SCOPE, current))
        else:
            claimed, _ = cql.applied(Statement.CLAIM_FIRST_CARRY, (_SCOPE, current))
        return claimed, first
