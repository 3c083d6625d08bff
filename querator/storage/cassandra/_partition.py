r"""One partition of a queue on Cassandra: its owner epoch, its index, and the runs that write it.

A run (``CassandraPartition.run``) executes the engine's function against the index on a worker thread,
which plans the writes as ``Step``\s; the steps then go out in order from the event loop: a new tail
first when one is due, then the commit: one plain batch of the run's item rows and the rest, acknowledged
by a read of the owner epoch shared with the runs of the queue's other partitions (ADR 0038); a run that
writes dedup markers sends its item rows, then a fenced batch that commits them instead. Dedup claims
are answered within the transaction, which needs the duplicates before it inserts: ``_dedup.claim``
plans them and the worker thread sends them (``Cql.exchange``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from cassandra.query import BatchStatement, BatchType

from querator.clock import SystemClock
from querator.errors import StaleOwnerError
from querator.storage.base import ClearOptions, Deadlines, Item, PartitionStats, PartitionTx
from querator.storage.cassandra._codec import decode_states, encode_states, item_from_row, item_rows, log_key
from querator.storage.cassandra._dedup import Claimant, claim, max_ttl
from querator.storage.cassandra._errors import DRIVER_ERRORS, CassandraStorageError, storage_error
from querator.storage.cassandra._fence import FenceReads
from querator.storage.cassandra._index import Index, Meta, StateRow, Writes
from querator.storage.cassandra._session import Connection, Cql, Rows
from querator.storage.cassandra._statements import Statement

T = TypeVar("T")
_monotonic_s = SystemClock().monotonic
"""Where a run's phases are timed (``RunCounters.seconds``): observed, never decided on."""


@dataclass
class Segments:
    """How far a tail segment grows, shared by a store's partitions. Tests make segments small, and
    may lower ``rows`` between runs to make the next run open a new tail."""

    rows: int = 20_000
    """Items, states and markers a tail segment takes before the next run opens a new one (about 20 MB
    of 1 KiB items; the run that fills it may go past)."""
    carry_chunk: int = 2000
    """State rows per batch when a new segment is opened (keeps each mutation far below its size
    limit)."""


class _Reader:
    """The blocking reads the index needs, for one partition."""

    def __init__(self, cql: Cql, queue: str, number: int) -> None:
        self._cql = cql
        self._key = (queue, number)

    def items_after(self, segment: int, after: str, upto: str, limit: int, full: bool) -> list[Item]:
        cql = Statement.ITEMS_AFTER if full else Statement.ITEM_META_AFTER
        return [item_from_row(r) for r in self._cql.rows(cql, (*self._key, segment, after, upto, limit))]

    def items_by_id(self, segment: int, ids: Sequence[str]) -> list[Item]:
        return [
            item_from_row(r) for r in self._cql.rows(Statement.ITEMS_BY_ID, (*self._key, segment, list(ids)))
        ]


class CassandraTx:
    """``PartitionTx`` over a partition's index (see ``_index.py``); runs on a worker thread."""

    __slots__ = ("_index", "_partition")

    def __init__(self, partition: CassandraPartition, index: Index) -> None:
        self._partition = partition
        self._index = index

    def last_id(self) -> str:
        return self._index.meta.last_id

    def insert(self, items: Sequence[Item]) -> None:
        self._index.insert(items)

    def head(self, limit: int) -> list[Item]:
        return self._index.head(limit)

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        return self._index.get(ids)

    def update(self, items: Sequence[Item]) -> None:
        self._index.update(items)

    def delete(self, ids: Collection[str]) -> None:
        self._index.delete(ids)

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        return self._partition.existing_source_ids(self._index, source_ids)

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        return self._index.expired_leases(now, limit)

    def expired(self, now: int, limit: int) -> list[Item]:
        return self._index.expired(now, limit)

    def due(self, now: int, limit: int) -> list[Item]:
        return self._index.due(now, limit)

    def deadlines(self) -> Deadlines:
        return self._index.deadlines()

    def stats(self, now: int) -> PartitionStats:
        return self._index.stats(now)

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        return self._partition.dedup(self._index, dedup_ids, now, expires_at)

    def clear(self, options: ClearOptions) -> None:
        self._index.clear(options)

    # Last, so that ``list`` in the annotations above is still the builtin.
    def list(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        return self._index.list_items(pivot, limit, scheduled)


_FENCED: Final = frozenset({"seal", "roll", "open", "carry", "commit"})
_DURABLE: Final = frozenset({"write", "commit", "verify"})
"""Steps after which a failure may leave the run applied: its commit was sent."""


@dataclass(frozen=True, slots=True)
class Step:
    """One write of a run, in the order it is sent: ``seal`` (the old tail, see ``_roll``), ``drop`` (a
    drained segment), ``roll`` (the tail pointer), ``open`` (the new tail's epoch), ``carry`` (states the
    new tail starts with), ``sources`` (import's dedup index), then either ``write`` (the plain commit:
    item rows, statics, state log row) and ``verify`` (the read of the owner epoch that acknowledges it;
    no statement), or, for a run with dedup markers, ``items`` (the run's item rows),
    ``commit`` (the fenced batch that makes the run durable and visible)."""

    kind: Literal["seal", "sources", "drop", "roll", "open", "carry", "write", "verify", "items", "commit"]
    statement: Any

    @property
    def fenced(self) -> bool:
        """Must be applied, or the owner is stale."""
        return self.kind in _FENCED


Send = Callable[[Step], Awaitable[Rows]]
SendHook = Callable[["CassandraPartition", Step, Send], Awaitable[Rows]]
"""Wraps every step a run sends, given the partition, the step and what sends it (the fault tests break
runs there)."""


class CassandraPartition:
    """One partition of a queue: its index (loaded on first use) and its owner epoch.

    Args:
        connection: The store's connection, open before the first run.
        fences: The store's reads of owner epochs, which acknowledge plain commits.
        threads: The worker threads runs execute on.
        queue: The queue's name.
        number: The partition's number in the queue.
        epoch: The owner epoch it claims the partition with on first use (see ``CassandraStore``).
        now: The clock's ``now`` (microseconds): TTLs of import's dedup index, live segments.
        segments: How far tail segments grow.
        send: Wraps every step a run sends (tests); None sends it as it is.
    """

    def __init__(
        self,
        connection: Connection,
        fences: FenceReads,
        threads: Executor,
        queue: str,
        number: int,
        epoch: int,
        now: Callable[[], int],
        segments: Segments,
        send: SendHook | None = None,
    ) -> None:
        self._connection = connection
        self._fences = fences
        self._segments = segments
        self._send_hook = send
        self._threads = threads
        self._now = now
        self.queue = queue
        self.number = number
        self.epoch = epoch
        self._index: Index | None = None
        self._stale: StaleOwnerError | None = None
        self._own_tail: int | None = None
        """The tail segment this owner opened in this life with no failed run since: the only segment
        a run may write item rows into without opening a new one (ADR 0004). An older tail may hold
        orphans that this owner's ids, seeded from the committed ``last_id``, would pass."""
        self._tail_rows: int | None = None
        """The tail's ``rows`` as the last load found them (None: nothing committed there), or -1 if
        it was sealed already."""
        self._lock = asyncio.Lock()

    @property
    def _key(self) -> tuple[str, int]:
        return (self.queue, self.number)

    async def run(self, fn: Callable[[PartitionTx], T]) -> T:
        """Runs ``fn`` against the index on a worker thread, then writes what it changed on the tail
        segment (see ``_commit``; a new tail is opened first when the run must, see ``_must_roll``).

        Raises:
            StaleOwnerError: another owner claimed the partition with a newer epoch; the partition
                refuses every run until ``claim`` is called again. Nothing is applied, unless
                ``maybe_applied`` (the read after a plain commit found the newer epoch).
            CassandraStorageError: Cassandra failed; the index is dropped and reloaded from Cassandra by
                the next run. ``maybe_applied`` when a write was sent: it may have been applied.
            Exception: whatever ``fn`` raised; nothing of it was written.
        """
        counters = self._connection.counters
        counters.runs += 1
        at_s = _monotonic_s()
        async with self._lock:
            # Phases: "lock", waiting for the partition's previous run; "thread", queued for and on a
            # worker thread (a load, the function, the plan); then each step kind's round trip.
            at_s = self._timed("lock", at_s)
            if self._stale is not None:
                raise self._stale
            loop = asyncio.get_running_loop()
            try:
                result, steps = await loop.run_in_executor(self._threads, self._execute, fn)
                at_s = self._timed("thread", at_s)
                for step in steps:
                    try:
                        rows = await self._send(loop, step)
                        at_s = self._timed(step.kind, at_s)
                    except DRIVER_ERRORS as e:
                        # Nothing before the commit is visible: item rows above the committed last_id
                        # are never read, a roll that did not finish is redone.
                        raise storage_error(e, sent=step.kind in _DURABLE) from e
                    if step.kind == "verify":
                        self._verified(rows)
                    elif step.fenced and not (rows and rows[0].get("[applied]")):
                        self._refused(step, rows[0] if rows else {})
            except BaseException as e:
                # Applied or not, the run may have left orphan item rows in the tail: the next run opens
                # a new one (ADR 0004).
                self._index, self._own_tail = None, None
                if isinstance(e, StaleOwnerError):
                    self._stale = e
                if isinstance(e, DRIVER_ERRORS):
                    raise storage_error(e) from e
                raise
            assert self._index is not None
            self._index.end()
            return result

    def _timed(self, phase: str, since_s: float) -> float:
        """Adds the time since ``since_s`` to ``phase``; returns now."""
        now_s = _monotonic_s()
        self._connection.counters.add_seconds(phase, now_s - since_s)
        return now_s

    async def _send(self, loop: asyncio.AbstractEventLoop, step: Step) -> list[dict[str, Any]]:
        """Where every step of a run goes out."""

        def send(step: Step) -> Awaitable[Rows]:
            if step.kind == "verify":
                return self._fences.read(loop, self.queue, self.number)
            # The plain commit writes the tail's statics, which a run with markers writes with Paxos.
            return self._connection.execute_async(loop, step.statement, server_timed=step.kind == "write")

        if self._send_hook is None:
            return await send(step)
        return await self._send_hook(self, step, send)

    def _verified(self, rows: Rows) -> None:
        """Acknowledges the run if the read after its commit found this owner's epoch (ADR 0038); its
        outcome is unknown otherwise."""
        found = rows[0].get("epoch") if rows else None
        if found == self.epoch:
            return
        if found is not None and found > self.epoch:
            raise self._stale_error(rows[0], maybe_applied=True)
        # No row, or an older epoch: only a reset of the partition's rows under this owner leaves that.
        what = "no row" if found is None else f"epoch {found}"
        raise CassandraStorageError(
            f"cassandra storage error; the verify step found {what}", maybe_applied=True
        )

    def _refused(self, step: Step, row: dict[str, Any]) -> None:
        """Raises what a fenced step refused by its condition means, ``row`` being what Cassandra found."""
        found = row.get("epoch")
        if found is not None and found not in (self.epoch, -self.epoch):
            raise self._stale_error(row)
        # Not a newer owner's write. Either this owner's own: the driver sends a failed request again to
        # the next host, and a step whose first attempt was applied is refused the second time (a roll
        # finds its tail moved, an open its segment made, a seal its tail sealed); a seal is also refused
        # by a commit that landed on the old tail since the load. Or no row at all, which only replica
        # faults leave (a segment whose opening timed out, seen by one read and not by the next): no
        # owner is in it, and the partition row, which the reload claims again, is the fence that says
        # whether a newer owner exists (ADR 0015). The next run reloads and goes on, where a stale owner
        # would refuse every run until it claims the partition again (on a single node: never).
        what = "no row" if found is None else "this owner's own write since the load"
        raise CassandraStorageError(
            f"cassandra storage error; the {step.kind} step found {what}",
            maybe_applied=step.kind == "commit" and found is not None,
        )

    def _stale_error(self, row: dict[str, Any], maybe_applied: bool = False) -> StaleOwnerError:
        current = row.get("epoch")
        return StaleOwnerError(
            f"stale owner; partition {self.number} of '{self.queue}' is owned by epoch {current}, "
            f"not {self.epoch}",
            maybe_applied=maybe_applied,
        )

    def _execute(self, fn: Callable[[PartitionTx], T]) -> tuple[T, list[Step]]:
        """Worker thread: loads the index if needed, opens a new tail if it must, runs ``fn``, plans
        the writes."""
        index = self._index or self._load()
        self._index = index
        index.begin()
        # The roll is made from the committed state, before ``fn`` changes the index: what it writes
        # ahead of the commit (segments dropped, the segment list) must hold even if the commit fails.
        steps = self._roll(index) if self._must_roll(index) else []
        result = fn(CassandraTx(self, index))
        steps.extend(self._plan(index))
        return result, steps

    # -- loading and claiming --------------------------------------------------------------------------

    def _claim(self, takeover: bool = False) -> dict[str, Any]:
        """Makes ``self.epoch`` the owner of the partition row and of its tail segment; returns the row.
        With ``takeover``, an owner with a newer epoch is replaced too, by one newer still."""
        cql = self._connection.opened()
        key = self._key
        applied, row = cql.applied(Statement.CREATE_PARTITION, (*key, self.epoch))
        while not applied:
            current = row["epoch"]
            if current == self.epoch and not takeover:
                break  # this owner's already
            if current >= self.epoch:
                # Newer, or, for a takeover, the very epoch it meant to write: another takeover read the
                # same owner (or the same microsecond on its clock) and wrote first, and sharing it would
                # make both writers pass the fence. (A takeover finding its own earlier write goes higher
                # too, harmlessly.)
                if not takeover:
                    raise self._stale_error(row)
                self.epoch = current + 1
            applied, row = cql.applied(Statement.CLAIM_PARTITION, (self.epoch, *key, current))
        (row,) = cql.rows(Statement.GET_PARTITION, key)
        if row["epoch"] != self.epoch:
            raise self._stale_error(row)
        tail = row["tail"]
        before = self._claim_segment(tail)
        # The tail stays this owner's own if this claim opened it (nobody wrote it), or if it was its
        # own already (a claim, then the load after it), with no failed run since.
        self._own_tail = tail if before is None or (before == self.epoch and self._own_tail == tail) else None
        return row

    def _claim_segment(self, segment: int) -> int | None:
        """Makes ``self.epoch`` the segment's owner unless it is sealed; returns the owner it had (None:
        this opened it; negative: sealed, see ``_roll``)."""
        cql = self._connection.opened()
        applied, current = cql.applied(Statement.OPEN_SEGMENT, (*self._key, segment, self.epoch))
        before: int | None = None if applied else current.get("epoch")
        while not applied and current.get("epoch") != self.epoch:
            epoch = current.get("epoch")
            if epoch is not None and epoch < 0:
                return int(epoch)  # sealed: it takes no commit again, and the next run opens a new tail
            if epoch is not None and epoch > self.epoch:
                # Only a newer owner of the partition row writes a newer segment epoch: even after a
                # takeover, this means another node took the partition since.
                raise self._stale_error(current)
            applied, current = cql.applied(Statement.FENCE, (self.epoch, *self._key, segment, epoch))
        return before

    def _load(self) -> Index:
        cql = self._connection.opened()
        row = self._claim()
        tail, base = row["tail"], row["base"]
        segments: dict[int, str] = dict(row["segments"] or {})
        meta_rows = cql.rows(Statement.SEGMENT_META, (*self._key, tail))
        if meta_rows and (meta_rows[0]["epoch"] or 0) < 0:
            self._tail_rows = -1
        else:
            self._tail_rows = meta_rows[0]["rows"] if meta_rows else None
        source = tail
        if not (meta_rows and meta_rows[0]["opened"]) and tail > base:
            # Opening this segment did not finish: the state is still the previous tail's, and the next
            # write opens a fresh segment (this one holds at most carried states, never items).
            source = max(n for n in segments if n < tail) if any(n < tail for n in segments) else tail
            meta_rows = cql.rows(Statement.SEGMENT_META, (*self._key, source))
        meta = Meta()
        if meta_rows and meta_rows[0]["opened"]:
            m = meta_rows[0]
            meta = Meta(
                cursor=m["cursor"] or "",
                last_id=m["last_id"] or "",
                queued=m["queued"] or 0,
                queued_created=m["queued_created"] or 0,
                min_expire=m["min_expire"] or 0,
                rows=m["rows"] or 0,
                dedup_until=m["dedup_until"] or 0,
            )
        live = {n: a for n, a in segments.items() if n <= source}
        index = Index(
            _Reader(cql, *self._key), live, dict(row["expires"] or {}), dict(row["markers"] or {}), meta
        )
        if source != tail:
            index.needs_roll, index.abandoned = True, tail
        if meta_rows and meta_rows[0]["opened"]:
            latest: dict[str, StateRow] = {}
            for r in cql.rows(Statement.STATES, (*self._key, source)):
                latest.update((state.item.id, state) for state in decode_states(r["states"]))
            index.load_state(latest.values())
        return index

    # -- writing ---------------------------------------------------------------------------------------

    def _must_roll(self, index: Index) -> bool:
        """Whether the run opens a new tail first: the tail is full, its opening did not finish, or it
        is not this owner's own (it may hold orphans, ADR 0004). Full means ``Segments.rows`` rows more
        than a new tail would start with: with more leased and scheduled items than that, a bare count
        would make every run open a tail."""
        full = index.meta.rows >= self._segments.rows + index.carried_count()
        return full or index.needs_roll or self._own_tail != index.tail

    def _plan(self, index: Index) -> list[Step]:
        """The statements that make the run durable: import's dedup index, then the commit."""
        writes = index.writes
        if not writes:
            return []
        steps = [Step("sources", s) for s in self._source_statements(writes)]
        steps.extend(self._commit(index, index.tail, writes.items, writes.states.values()))
        return steps

    def _source_statements(self, writes: Writes) -> list[Any]:
        cql = self._connection.opened()
        now = self._now()
        statements = []
        longest = max_ttl(now)
        for item in writes.sources:
            ttl = longest
            if item.expire_deadline:
                ttl = max(1, min(longest, (item.expire_deadline - now) // 1_000_000 + 1))
            statements.append(cql.stmt(Statement.PUT_SOURCE).bind((*self._key, item.source_id, item.id, ttl)))
        return statements

    def _commit(
        self, index: Index, segment: int, items: Sequence[Item], states: Collection[StateRow]
    ) -> list[Step]:
        """Without dedup markers: the item rows, statics and state log row as one plain batch, then the
        read that acknowledges it (``verify``, ADR 0038). With markers: the item rows as a plain batch,
        then the fenced batch that commits them with the rest, since a marker that lands after a newer
        owner's load would make a retry of its items read as a duplicate (they are never put in the
        fenced batch: in the Paxos round, Cassandra writes every byte of the batch twice, ADR 0004)."""
        cql = self._connection.opened()
        key = (*self._key, segment)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for statement in item_rows(cql.stmt(Statement.INSERT_ITEM), key, items):
            batch.add(statement)
        if not index.writes.markers:
            batch.consistency_level = cql.fence_level
            self._batch(batch, index, segment, len(items), states)
            return [Step("write", batch), Step("verify", None)]
        steps = [Step("items", batch)] if items else []
        fenced = BatchStatement(batch_type=BatchType.UNLOGGED)
        steps.append(Step("commit", self._batch(fenced, index, segment, len(items), states)))
        return steps

    def _batch(
        self, batch: BatchStatement, index: Index, segment: int, items: int, states: Collection[StateRow]
    ) -> BatchStatement:
        """Adds the rest of the commit to ``batch``: the partition's counters (fenced when the run has
        markers), the state log row and the markers."""
        cql = self._connection.opened()
        key = (*self._key, segment)
        meta = index.meta
        markers = index.writes.markers
        rows = meta.rows + items + len(states) + len(markers)
        counters = (meta.cursor, meta.last_id, meta.queued, meta.queued_created, meta.min_expire, rows)
        if markers:
            batch.add(cql.stmt(Statement.FENCED_META), (*counters, meta.dedup_until, *key, self.epoch))
        else:
            batch.add(cql.stmt(Statement.PUT_META), (*counters, meta.dedup_until, *key))
        if states:
            batch.add(cql.stmt(Statement.PUT_STATES), (*key, log_key(meta.rows), encode_states(states)))
        # The counter now says what the batch stores (a failed run drops the index): the next log row's
        # key must be above this one, carried states of a roll included.
        meta.rows = rows
        put_marker = cql.stmt(Statement.PUT_MARKER)
        for dedup_id, expires_at in markers:
            batch.add(put_marker, (*key, dedup_id, expires_at))
        return batch

    def _roll(self, index: Index) -> list[Step]:
        """Opens a new tail segment: drop drained segments, move the tail pointer (fenced), claim the new
        segment, carry the states of non-queued items over. The last chunk of them goes into the run's
        commit, which also marks the new tail opened; until then a loader ignores it."""
        cql = self._connection.opened()
        old_tail = index.tail if index.abandoned is None else index.abandoned
        new = old_tail + 1
        after = index.committed_last_id
        live = index.live_segments(self._now())
        steps = []
        if self._own_tail != old_tail and self._tail_rows != -1:
            # A run that failed before this owner's load may still commit there (a coordinator retries
            # a Paxos round it lost for up to cas_contention_timeout): its items would lie above the new
            # tail's bound, never read, and its dedup markers would answer "duplicate" for them. Sealed,
            # the old tail refuses it; a commit that landed since the load makes the seal fail instead,
            # and the next run loads it.
            seal = (-self.epoch, *self._key, old_tail, self.epoch, self._tail_rows)
            steps.append(Step("seal", cql.stmt(Statement.SEAL).bind(seal)))
        steps.extend(
            Step("drop", cql.stmt(Statement.DROP_SEGMENT).bind((*self._key, n)))
            for n in index.segment_numbers
            if n not in live
        )
        if index.abandoned is not None:
            steps.append(Step("drop", cql.stmt(Statement.DROP_SEGMENT).bind((*self._key, index.abandoned))))
        index.drop_segments(live)
        index.add_segment(new, after)
        index.needs_roll, index.abandoned = False, None
        segments = dict(zip(index.segment_numbers, index.segment_after, strict=True))
        steps.append(
            Step(
                "roll",
                cql.stmt(Statement.ROLL).bind(
                    (new, segments, index.expires, index.markers, *self._key, self.epoch, old_tail)
                ),
            )
        )
        steps.append(Step("open", cql.stmt(Statement.OPEN_SEGMENT).bind((*self._key, new, self.epoch))))
        # Once opened by this owner, the new tail takes item rows (if the run fails, it is not its own).
        self._own_tail = new
        states = index.carried()
        size = self._segments.carry_chunk
        while len(states) > size:
            chunk, states = states[:size], states[size:]
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            batch.add(cql.stmt(Statement.FENCE), (self.epoch, *self._key, new, self.epoch))
            batch.add(
                cql.stmt(Statement.PUT_STATES),
                (*self._key, new, log_key(index.meta.rows), encode_states(chunk)),
            )
            steps.append(Step("carry", batch))
            index.meta.rows += len(chunk)
        # The run's own states, recorded after these, win over the carried ones of the same items.
        index.writes.states.update((row.item.id, row) for row in states)
        index.writes.meta_changed = True
        return steps

    def dedup(self, index: Index, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        """Claims the dedup ids for this run (see ``_dedup``); the run's batch writes the markers of the
        ones its items carry."""
        claimant = Claimant(self.queue, self.number, self.epoch)
        seen = self._connection.opened().exchange(claim(claimant, dedup_ids, index.tail, now, expires_at))
        index.claimed.update(dict.fromkeys(set(dedup_ids) - seen, expires_at))
        return seen

    def existing_source_ids(self, index: Index, source_ids: Collection[str]) -> set[str]:
        cql = self._connection.opened()
        found = {}
        for source_id in source_ids:
            for row in cql.rows(Statement.GET_SOURCES, (*self._key, source_id)):
                found[row["source_id"]] = row["id"]
        return index.existing_source_ids(found)

    # -- ownership -------------------------------------------------------------------------------------

    async def claim(self, epoch: int | None = None) -> None:
        """Takes the partition for ``epoch`` (see ``CassandraStore.claim``); without one, takes it over
        from whoever owns it, with an epoch newer than theirs (an owner newly chosen by the ring)."""
        async with self._lock:
            takeover = epoch is None
            self.epoch = max(self.epoch, self._now()) if epoch is None else epoch
            self._stale = None
            self._index = None
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._threads, self._claim, takeover)
            except StaleOwnerError as e:
                self._stale = e
                raise
            except DRIVER_ERRORS as e:
                raise storage_error(e) from e

    def forget(self) -> None:
        """Drops the index (the partition's rows were reset under it)."""
        self._index = None
