"""The Cassandra backend: the cluster's store, built the way queues on Cassandra work (docs/storage.md).

- One writer per partition, fenced: ``partitions`` holds the owner epoch, taken with a lightweight
  transaction by ``claim``; every segment's static ``epoch`` column carries it too, and every run commits
  with ONE conditional single-partition batch (``IF epoch = ?``) on the tail segment. A refused batch
  raises ``StaleOwnerError`` and the partition stops serving until it is claimed again.
- A run's item rows go out just before that batch, as a plain one (ADR 0004: in the Paxos round their
  bytes were written twice). Rows of a run that then failed are orphans: they lie above the committed
  ``last_id`` of their segment, which bounds every read, and they stay there because the owner opens a
  new tail before writing item rows into a segment it did not open itself in this life.
- Items live in segments (Cassandra partitions of about ``SEGMENT_ROWS`` rows); a new tail is opened when
  the old one is full (or not the owner's own), before the run, from the committed state, carrying over
  the few rows that describe non-queued items, and drained segments
  are dropped whole (one partition tombstone, never read). Nothing deletes an item row on the hot path:
  completing records the item gone in the tail's state log (one row per write).
- Reads start at the persisted cursor, never at the head of a segment, so they never meet tombstones.
- The partition's state lives in an in-memory index (``_cassandra_index.py``) loaded on first use;
  ``Partition.run`` runs ``fn`` on a worker thread (reads it needs beyond the index are blocking driver
  calls there) and then awaits the batch through ``execute_async``, bridged into the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import msgspec
from cassandra import ConsistencyLevel, DriverException, RequestExecutionException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.connection import ConnectionException
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.protocol import ErrorMessage
from cassandra.query import BatchStatement, BatchType, BoundStatement, PreparedStatement, dict_factory

from querator.errors import StaleOwnerError, StorageError
from querator.storage._cassandra_dedup import Dedup, max_ttl
from querator.storage._cassandra_index import Index, Meta, StateRow, Writes
from querator.storage._cassandra_statements import Statement
from querator.storage.base import (
    DEFAULT_DEDUP_WINDOW,
    ClearOptions,
    Deadlines,
    Item,
    Partition,
    PartitionStats,
    PartitionTx,
    QueueRecord,
)

__all__ = ["CassandraSettings", "CassandraStorageError", "CassandraStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION: Final = 2
SEGMENT_ROWS: Final = 20_000
"""Items, states and markers a tail segment takes before the next run opens a new one (about 20 MB of
1 KiB items; the run that fills it may go past)."""
CARRY_CHUNK: Final = 2000
"""State rows per batch when a new segment is opened (keeps each mutation far below its size limit)."""
THREADS: Final = 4
"""Worker threads for transactions: one per partition at a time, a few partitions in parallel."""

# --- schema -------------------------------------------------------------------------------------------

# Item rows, state log rows and markers share one table with the partition's statics because a
# conditional batch may not span tables or partitions: the fence must sit in the partition it protects.
SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS {ks}.schema_version (
        name text PRIMARY KEY, version int)""",
    """CREATE TABLE IF NOT EXISTS {ks}.queues (
        name text PRIMARY KEY, namespace text, lease_timeout bigint, expire_timeout bigint,
        dead_queue text, max_attempts int, reference text, requested_partitions int,
        created_at bigint, updated_at bigint, extra map<text, text>, dedup_window bigint)""",
    # list_queues reads one namespace in name order: a partition per namespace, rows sorted by name.
    """CREATE TABLE IF NOT EXISTS {ks}.queues_by_namespace (
        namespace text, name text, PRIMARY KEY ((namespace), name))""",
    # Written only with lightweight transactions (claim, opening a segment, reset): one row per partition.
    """CREATE TABLE IF NOT EXISTS {ks}.partitions (
        queue text, partition int, epoch bigint, base int, tail int,
        segments map<int, text>, expires map<int, bigint>, markers map<int, bigint>,
        PRIMARY KEY ((queue, partition)))""",
    # Segments are written for a while, read from the cursor on, then dropped whole: rows are never
    # deleted one by one, so tombstones are rare partition deletions of segments nobody reads again,
    # and a short gc_grace is safe (a resurrected dropped segment holds only dead items, unreferenced).
    # Columns by record: item rows (0) meta and payload, state log rows (1) states, dedup markers (2)
    # expire_deadline.
    """CREATE TABLE IF NOT EXISTS {ks}.items (
        queue text, partition int, segment int, record tinyint, id text,
        epoch bigint static, opened boolean static, cursor text static, last_id text static,
        queued bigint static, queued_created varint static, min_expire bigint static, rows int static,
        dedup_until bigint static,
        meta blob, payload blob, states blob, expire_deadline bigint,
        PRIMARY KEY ((queue, partition, segment), record, id))
        WITH compaction = {{'class': 'LeveledCompactionStrategy'}} AND gc_grace_seconds = 3600""",
    # Produce de-duplication claims (_cassandra_dedup.py): one row per dedup id, gone with its window.
    """CREATE TABLE IF NOT EXISTS {ks}.dedup (
        queue text, dedup_id text, partition int, epoch bigint, segment int, claimed_at bigint,
        expires_at bigint, PRIMARY KEY ((queue, dedup_id)))
        WITH gc_grace_seconds = 3600""",
    # The dedup index of import (dead-lettering): an entry lives as long as its item may (TTL), and is
    # only trusted after the item is found live, so stale entries are harmless.
    """CREATE TABLE IF NOT EXISTS {ks}.sources (
        queue text, partition int, source_id text, id text,
        PRIMARY KEY ((queue, partition, source_id)))
        WITH gc_grace_seconds = 3600""",
)


class CassandraStorageError(StorageError):
    """Cassandra failed or could not be reached."""


def _storage_error(exc: BaseException, sent: bool = False) -> CassandraStorageError:
    """The one place a driver error becomes ours. A write that was ``sent`` may have been applied even
    though it failed, whatever the error: a timeout, a connection cut before the answer, "no host
    available" (also what the driver says when the connection a write went out on died and no other host
    could take the retry), and even ``Unavailable``: Paxos v1 (Cassandra's default) answers it when the
    commit's replicas are missing after a quorum accepted the proposal, and the driver retries an
    unavailable or failed request on the next host, so the error may be the retry's while the first
    attempt was applied."""
    error = CassandraStorageError(f"cassandra storage error; {type(exc).__name__}: {exc}", maybe_applied=sent)
    error.__cause__ = exc
    return error


# ErrorMessage: what Cassandra answered that the driver raises as it came (overloaded, server error,
# bootstrapping) or has no class for (CAS_WRITE_UNKNOWN, protocol v5: a conditional write a later Paxos
# round may still commit); before, these escaped as bugs (500) instead of 454, as did a connection's
# failure when the driver does not retry it on another host.
_DRIVER_ERRORS = (
    DriverException, RequestExecutionException, ErrorMessage, ConnectionException, NoHostAvailable, OSError
)  # fmt: skip


@dataclass(frozen=True)
class CassandraSettings:
    """How to reach Cassandra and where to keep Querator's tables.

    Args:
        hosts: Contact points; the driver discovers the rest of the cluster from them.
        port: The native protocol (CQL) port.
        keyspace: Created when missing, with ``replication``.
        local_dc: The data center whose replicas serve requests ("" lets the driver pick the first
            contact point's).
        replication: ``SimpleStrategy:<rf>`` or ``NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>...]``;
            only used to create a missing keyspace.
        consistency: Of every read and write (``LOCAL_QUORUM`` by default); lightweight transactions
            use ``LOCAL_SERIAL`` (or ``SERIAL`` with a non-local consistency) for their Paxos round.
        username: With ``password``, authenticates with Cassandra's PasswordAuthenticator.
        tls_ca_file: A PEM file of CAs: connect with TLS and verify the server against them.
        request_timeout: Seconds before a request counts as failed (the partition answers 454).
    """

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "querator"
    local_dc: str = ""
    replication: str = "SimpleStrategy:1"
    consistency: str = "LOCAL_QUORUM"
    username: str = ""
    password: str = ""
    tls_ca_file: str = ""
    request_timeout: float = 10.0

    def replication_cql(self) -> str:
        """The keyspace's replication map as CQL; raises ValueError on a malformed setting."""
        strategy, _, spec = self.replication.partition(":")
        if strategy == "SimpleStrategy" and spec.isdigit():
            return f"{{'class': 'SimpleStrategy', 'replication_factor': {int(spec)}}}"
        if strategy == "NetworkTopologyStrategy" and spec:
            pairs = [p.partition("=") for p in spec.split(",")]
            if all(
                dc.strip().replace("-", "").replace("_", "").isalnum() and rf.isdigit() for dc, _, rf in pairs
            ):
                dcs = ", ".join(f"'{dc.strip()}': {int(rf)}" for dc, _, rf in pairs)
                return f"{{'class': 'NetworkTopologyStrategy', {dcs}}}"
        raise ValueError(
            f"'{self.replication}' is not SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>[,...]"
        )

    def consistency_level(self) -> int:
        """The driver's consistency level; raises ValueError for an unknown name."""
        level = ConsistencyLevel.name_to_value.get(self.consistency.upper())
        if level is None or level in (ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL):
            raise ValueError(f"'{self.consistency}' is not a consistency level for reads and writes")
        return int(level)

    def _cluster_kwargs(self) -> dict[str, Any]:
        """The driver's ``Cluster`` arguments (the conversion stays here, at the edge)."""
        level = self.consistency_level()
        serial = (
            ConsistencyLevel.LOCAL_SERIAL if "LOCAL" in self.consistency.upper() else ConsistencyLevel.SERIAL
        )
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=self.local_dc or None)),
            consistency_level=level,
            serial_consistency_level=serial,
            request_timeout=self.request_timeout,
            row_factory=dict_factory,
        )
        kwargs: dict[str, Any] = {
            "contact_points": list(self.hosts),
            "port": self.port,
            "execution_profiles": {EXEC_PROFILE_DEFAULT: profile},
            # Reconnect quickly after a Cassandra restart: the default waits up to ten minutes.
            "reconnection_policy": ExponentialReconnectionPolicy(0.5, 5.0),
            "connect_timeout": 5,
            "protocol_version": 5,
            # Without it, Nagle's algorithm holds the end of a large request (a batch of a hundred rows)
            # until its start is acknowledged, which Linux delays by up to 40 ms: a batch then took
            # 47 ms instead of 4 (docs/benchmarks.md).
            "sockopts": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        }
        if self.username:
            kwargs["auth_provider"] = PlainTextAuthProvider(self.username, self.password)
        if self.tls_ca_file:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            kwargs["ssl_context"] = context
        return kwargs


# --- the connection -----------------------------------------------------------------------------------


class _Cql:
    """The session and its prepared statements; every call here is blocking (worker threads only)."""

    def __init__(self, session: Session, keyspace: str) -> None:
        self.session = session
        self.keyspace = keyspace
        self.statements: dict[Statement, PreparedStatement] = {}

    def prepare_all(self) -> None:
        for statement in Statement:
            self.statements[statement] = self.session.prepare(statement.cql(self.keyspace))

    def stmt(self, cql: Statement) -> PreparedStatement:
        return self.statements[cql]

    def rows(self, cql: Statement, params: Sequence[Any]) -> list[dict[str, Any]]:
        return self.rows_statement(self.statements[cql].bind(params))

    def rows_statement(self, statement: Any) -> list[dict[str, Any]]:
        # No driver error is raised before the request exists: "no host available" is the future's too.
        return self.result(self.session.execute_async(statement))

    def first(self, response: Any) -> dict[str, Any]:
        """The first row of a driver ``ResponseFuture`` (waits for it): a conditional write's verdict."""
        rows = self.result(response)
        return rows[0] if rows else {"[applied]": False}

    @staticmethod
    def result(response: Any) -> list[dict[str, Any]]:
        """The rows of a driver ``ResponseFuture`` (waits for it)."""
        try:
            return list(response.result())
        except _DRIVER_ERRORS as e:
            raise _storage_error(e) from e
        finally:
            _finished(response)

    def applied(self, cql: Statement, params: Sequence[Any]) -> tuple[bool, dict[str, Any]]:
        return self.applied_statement(self.statements[cql].bind(params))

    def applied_statement(self, statement: Any) -> tuple[bool, dict[str, Any]]:
        row = self.first(self.session.execute_async(statement))
        return bool(row["[applied]"]), row


def _finished(response: Any) -> None:
    """Breaks the reference cycle the driver leaves in a request that is over (its ``ResponseFuture``
    holds its timer, whose callback is the future's own method), so that the request, its statement and
    every payload in it are freed at once rather than by the cyclic collector: under load, most of the
    server's garbage collection time (docs/benchmarks.md). Never while the request runs: it needs its
    timer."""
    response._timer = None


def _bridge(loop: asyncio.AbstractEventLoop, response: Any) -> asyncio.Future[list[dict[str, Any]]]:
    """An asyncio future settled (on ``loop``) by a driver ``ResponseFuture``."""
    future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def ok(rows: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, list(rows or ()), None)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def failed(exc: BaseException) -> None:
        try:
            loop.call_soon_threadsafe(settle, None, exc)
        except RuntimeError:
            pass

    response.add_callbacks(ok, failed)
    return future


# An item's metadata is one msgpack cell, not a column each: Cassandra's cost per row grows with its
# cells (a 100-row batch of 1 KiB items went 30-40% faster with 2 cells than with 13, docs/benchmarks.md).
_Metadata = tuple[str, bool, int, int, int, int, int, int, str, str, str]
_ENCODER: Final = msgspec.msgpack.Encoder()
_METADATA: Final = msgspec.msgpack.Decoder(_Metadata)
# State rows are a log: each write appends ONE row holding the new states of every item it changed
# (a lease of a hundred items is one row, not a hundred), keyed by the tail's row count before the write,
# so a loader replays them in order and the latest state of an item wins.
_STATES: Final = msgspec.msgpack.Decoder(list[tuple[str, bool, _Metadata]])


def _metadata(i: Item) -> _Metadata:
    return (
        i.source_id, i.is_leased, i.lease_deadline, i.expire_deadline, i.enqueue_at, i.created_at,
        i.attempts, i.max_attempts, i.reference, i.encoding, i.kind,
    )  # fmt: skip


def _item(row: dict[str, Any]) -> Item:
    item = Item(row["id"], *_METADATA.decode(row["meta"]))
    item.payload = row.get("payload") or b""
    return item


_INT: Final = struct.Struct(">i")


def _item_rows(insert: PreparedStatement, key: tuple[str, int, int], items: Iterable[Item]) -> Iterator[Any]:
    """``Statement.INSERT_ITEM`` bound to each item, its values serialized here rather than by the driver's
    ``bind``: the key is serialized once per batch and the rest are bytes already, which makes a produce
    of 100 items bind in 0.23 ms instead of 1.04 (the driver type-checks and serializes every column of
    every row)."""
    queue, partition, segment = key
    serialized_key = (queue.encode(), _INT.pack(partition), _INT.pack(segment))
    for item in items:
        statement = BoundStatement(insert)
        meta = _ENCODER.encode(_metadata(item))
        statement.values = [*serialized_key, item.id.encode(), meta, item.payload]
        statement.raw_values = (*key, item.id, meta, item.payload)  # what the driver's repr() shows
        yield statement


def _log_key(rows: int) -> str:
    """The clustering id of a state log row: sorts as the number does."""
    return f"{rows:010d}"


def _encode_states(states: Iterable[StateRow]) -> bytes:
    return _ENCODER.encode([(state.item.id, state.gone, _metadata(state.item)) for state in states])


def _decode_states(data: bytes) -> list[StateRow]:
    return [StateRow(Item(item_id, *metadata), gone) for item_id, gone, metadata in _STATES.decode(data)]


# --- a partition --------------------------------------------------------------------------------------


class _Reader:
    """The blocking reads the index needs, for one partition."""

    def __init__(self, cql: _Cql, queue: str, number: int) -> None:
        self._cql = cql
        self._key = (queue, number)

    def items_after(self, segment: int, after: str, upto: str, limit: int, full: bool) -> list[Item]:
        cql = Statement.ITEMS_AFTER if full else Statement.ITEM_META_AFTER
        return [_item(r) for r in self._cql.rows(cql, (*self._key, segment, after, upto, limit))]

    def items_by_id(self, segment: int, ids: Sequence[str]) -> list[Item]:
        return [_item(r) for r in self._cql.rows(Statement.ITEMS_BY_ID, (*self._key, segment, list(ids)))]


class CassandraTx:
    """``PartitionTx`` over a partition's index (see ``_cassandra_index.py``); runs on a worker thread."""

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


@dataclass(frozen=True, slots=True)
class _Step:
    """One write of a run, in the order it is sent: ``seal`` (the old tail, see ``_roll``), ``drop`` (a
    drained segment), ``roll`` (the tail pointer), ``open`` (the new tail's epoch), ``carry`` (states the
    new tail starts with), ``sources`` (import's dedup index), ``items`` (the run's item rows),
    ``commit`` (the fenced batch that makes the run durable and visible)."""

    kind: Literal["seal", "sources", "drop", "roll", "open", "carry", "items", "commit"]
    statement: Any

    @property
    def fenced(self) -> bool:
        """Must be applied, or the owner is stale."""
        return self.kind in _FENCED


class CassandraPartition:
    """One partition of a queue: its index (loaded on first use) and its owner epoch."""

    def __init__(self, store: CassandraStore, queue: str, number: int) -> None:
        self._store = store
        self.queue = queue
        self.number = number
        self.epoch = store.epoch
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
        segment: its item rows, then one conditional batch, the commit (a new tail is opened first
        when the run must, see ``_must_roll``).

        Raises:
            StaleOwnerError: another owner claimed the partition with a newer epoch; nothing is applied
                and the partition refuses every run until ``claim`` is called again.
            CassandraStorageError: Cassandra failed; the index is dropped and reloaded from Cassandra by
                the next run. ``maybe_applied`` when a write was sent: it may have been applied.
            Exception: whatever ``fn`` raised; nothing of it was written.
        """
        async with self._lock:
            if self._stale is not None:
                raise self._stale
            loop = asyncio.get_running_loop()
            try:
                result, steps = await loop.run_in_executor(self._store._threads, self._execute, fn)
                for step in steps:
                    try:
                        rows = await self._send(loop, step)
                    except _DRIVER_ERRORS as e:
                        # Nothing before the commit is visible: item rows above the committed last_id
                        # are never read, a roll that did not finish is redone.
                        raise _storage_error(e, sent=step.kind == "commit") from e
                    if step.fenced and not (rows and rows[0].get("[applied]")):
                        self._refused(step, rows[0] if rows else {})
            except BaseException as e:
                # Applied or not, the run may have left orphan item rows in the tail: the next run opens
                # a new one (ADR 0004).
                self._index, self._own_tail = None, None
                if isinstance(e, StaleOwnerError):
                    self._stale = e
                if isinstance(e, _DRIVER_ERRORS):
                    raise _storage_error(e) from e
                raise
            assert self._index is not None
            self._index.end()
            return result

    async def _send(self, loop: asyncio.AbstractEventLoop, step: _Step) -> list[dict[str, Any]]:
        """Where every step of a run goes out (the fault tests break runs here)."""
        return await self._store._execute_async(loop, step.statement)

    def _refused(self, step: _Step, row: dict[str, Any]) -> None:
        """Raises what a fenced step refused by its condition means, ``row`` being what Cassandra found."""
        if row.get("epoch") not in (self.epoch, -self.epoch):
            raise self._stale_error(row)
        # This owner's own write, not a newer owner's. The driver sends a failed request again to the
        # next host, and a step whose first attempt was applied is refused the second time (a roll finds
        # its tail moved, an open its segment made, a seal its tail sealed); a seal is also refused by a
        # commit that landed on the old tail since the load. The next run reloads and goes on, where a
        # stale owner would refuse every run until it claims the partition again (on a single node: never).
        raise CassandraStorageError(
            f"cassandra storage error; the {step.kind} step found this owner's own write since the load",
            maybe_applied=step.kind == "commit",
        )

    def _stale_error(self, row: dict[str, Any]) -> StaleOwnerError:
        current = row.get("epoch")
        return StaleOwnerError(
            f"stale owner; partition {self.number} of '{self.queue}' is owned by epoch {current}, "
            f"not {self.epoch}"
        )

    def _execute(self, fn: Callable[[PartitionTx], T]) -> tuple[T, list[_Step]]:
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
        cql = self._store._cql
        assert cql is not None
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
        cql = self._store._cql
        assert cql is not None
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
        cql = self._store._cql
        if cql is None:
            raise CassandraStorageError("cassandra storage error; the store is not open")
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
                latest.update((state.item.id, state) for state in _decode_states(r["states"]))
            index.load_state(latest.values())
        return index

    # -- writing ---------------------------------------------------------------------------------------

    def _must_roll(self, index: Index) -> bool:
        """Whether the run opens a new tail first: the tail is full, its opening did not finish, or it
        is not this owner's own (it may hold orphans, ADR 0004). Full means ``SEGMENT_ROWS`` rows more
        than a new tail would start with: with more leased and scheduled items than that, a bare count
        would make every run open a tail."""
        full = index.meta.rows >= SEGMENT_ROWS + index.carried_count()
        return full or index.needs_roll or self._own_tail != index.tail

    def _plan(self, index: Index) -> list[_Step]:
        """The statements that make the run durable: the item rows, then the commit."""
        writes = index.writes
        if not writes:
            return []
        steps = [_Step("sources", s) for s in self._source_statements(writes)]
        steps.extend(self._commit(index, index.tail, writes.items, writes.states.values()))
        return steps

    def _source_statements(self, writes: Writes) -> list[Any]:
        cql = self._store._cql
        assert cql is not None
        now = self._store.clock_now()
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
    ) -> list[_Step]:
        """The item rows as a plain batch, then the fenced batch that commits them with the rest. Never
        together: in the Paxos round, Cassandra writes every byte of the batch twice (ADR 0004)."""
        cql = self._store._cql
        assert cql is not None
        key = (*self._key, segment)
        steps = []
        if items:
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for statement in _item_rows(cql.stmt(Statement.INSERT_ITEM), key, items):
                batch.add(statement)
            steps.append(_Step("items", batch))
        steps.append(_Step("commit", self._batch(index, segment, len(items), states)))
        return steps

    def _batch(self, index: Index, segment: int, items: int, states: Collection[StateRow]) -> Any:
        """The commit: the fence with the partition's counters, the state log row and the markers."""
        cql = self._store._cql
        assert cql is not None
        key = (*self._key, segment)
        meta = index.meta
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        markers = index.writes.markers
        rows = meta.rows + items + len(states) + len(markers)
        batch.add(
            cql.stmt(Statement.FENCED_META),
            (
                meta.cursor,
                meta.last_id,
                meta.queued,
                meta.queued_created,
                meta.min_expire,
                rows,
                meta.dedup_until,
                *key,
                self.epoch,
            ),
        )
        if states:
            batch.add(cql.stmt(Statement.PUT_STATES), (*key, _log_key(meta.rows), _encode_states(states)))
        # The counter now says what the batch stores (a failed run drops the index): the next log row's
        # key must be above this one, carried states of a roll included.
        meta.rows = rows
        put_marker = cql.stmt(Statement.PUT_MARKER)
        for dedup_id, expires_at in markers:
            batch.add(put_marker, (*key, dedup_id, expires_at))
        return batch

    def _roll(self, index: Index) -> list[_Step]:
        """Opens a new tail segment: drop drained segments, move the tail pointer (fenced), claim the new
        segment, carry the states of non-queued items over. The last chunk of them goes into the run's
        commit, which also marks the new tail opened; until then a loader ignores it."""
        cql = self._store._cql
        assert cql is not None
        old_tail = index.tail if index.abandoned is None else index.abandoned
        new = old_tail + 1
        after = index.committed_last_id
        live = index.live_segments(self._store.clock_now())
        steps = []
        if self._own_tail != old_tail and self._tail_rows != -1:
            # A run that failed before this owner's load may still commit there (a coordinator retries
            # a Paxos round it lost for up to cas_contention_timeout): its items would lie above the new
            # tail's bound, never read, and its dedup markers would answer "duplicate" for them. Sealed,
            # the old tail refuses it; a commit that landed since the load makes the seal fail instead,
            # and the next run loads it.
            seal = (-self.epoch, *self._key, old_tail, self.epoch, self._tail_rows)
            steps.append(_Step("seal", cql.stmt(Statement.SEAL).bind(seal)))
        steps.extend(
            _Step("drop", cql.stmt(Statement.DROP_SEGMENT).bind((*self._key, n)))
            for n in index.segment_numbers
            if n not in live
        )
        if index.abandoned is not None:
            steps.append(_Step("drop", cql.stmt(Statement.DROP_SEGMENT).bind((*self._key, index.abandoned))))
        index.drop_segments(live)
        index.add_segment(new, after)
        index.needs_roll, index.abandoned = False, None
        segments = dict(zip(index.segment_numbers, index.segment_after, strict=True))
        steps.append(
            _Step(
                "roll",
                cql.stmt(Statement.ROLL).bind(
                    (new, segments, index.expires, index.markers, *self._key, self.epoch, old_tail)
                ),
            )
        )
        steps.append(_Step("open", cql.stmt(Statement.OPEN_SEGMENT).bind((*self._key, new, self.epoch))))
        # Once opened by this owner, the new tail takes item rows (if the run fails, it is not its own).
        self._own_tail = new
        states = index.carried()
        while len(states) > CARRY_CHUNK:
            chunk, states = states[:CARRY_CHUNK], states[CARRY_CHUNK:]
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            batch.add(cql.stmt(Statement.FENCE), (self.epoch, *self._key, new, self.epoch))
            batch.add(
                cql.stmt(Statement.PUT_STATES),
                (*self._key, new, _log_key(index.meta.rows), _encode_states(chunk)),
            )
            steps.append(_Step("carry", batch))
            index.meta.rows += len(chunk)
        # The run's own states, recorded after these, win over the carried ones of the same items.
        index.writes.states.update((row.item.id, row) for row in states)
        index.writes.meta_changed = True
        return steps

    def dedup(self, index: Index, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        """Claims the dedup ids for this run (see ``_cassandra_dedup``); the run's batch writes the
        markers of the ones its items carry."""
        cql = self._store._cql
        assert cql is not None
        seen = Dedup(cql, self).claim(dedup_ids, index.tail, now, expires_at)
        index.claimed.update(dict.fromkeys(set(dedup_ids) - seen, expires_at))
        return seen

    def existing_source_ids(self, index: Index, source_ids: Collection[str]) -> set[str]:
        cql = self._store._cql
        assert cql is not None
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
            self.epoch = max(self.epoch, self._store.clock_now()) if epoch is None else epoch
            self._stale = None
            self._index = None
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._store._threads, self._claim, takeover)
            except StaleOwnerError as e:
                self._stale = e
                raise
            except _DRIVER_ERRORS as e:
                raise _storage_error(e) from e

    def forget(self) -> None:
        """Drops the index (the partition's rows were reset under it)."""
        self._index = None


# --- the store ----------------------------------------------------------------------------------------


class CassandraStore:
    """Queue records and partitions in a Cassandra keyspace.

    Args:
        settings: How to connect and which keyspace to use.
        epoch: The owner epoch this store claims partitions with on first use. A single node passes a
            value that grows across restarts (the start time in microseconds); the cluster passes the
            epoch it got for a partition from etcd through ``claim``.
        now: The clock's ``now`` (microseconds), for the TTL of dedup entries.
    """

    def __init__(self, settings: CassandraSettings, epoch: int, now: Callable[[], int]) -> None:
        self.settings = settings
        self.epoch = epoch
        self.clock_now = now
        self._cluster: Cluster | None = None
        self._cql: _Cql | None = None
        self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="querator-cassandra")
        self._partitions: dict[tuple[str, int], CassandraPartition] = {}

    async def open(self) -> None:
        """Connects, creates the keyspace and tables when missing, prepares every statement; idempotent.

        Raises:
            CassandraStorageError: Cassandra cannot be reached, or the schema is newer than ours.
        """
        if self._cql is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            self._cql = await loop.run_in_executor(self._threads, self._connect)
        except _DRIVER_ERRORS as e:
            raise _storage_error(e) from e

    def _connect(self) -> _Cql:
        cluster = Cluster(**self.settings._cluster_kwargs())
        try:
            session = cluster.connect()
            ks = self.settings.keyspace
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {self.settings.replication_cql()}"
            )
            for statement in SCHEMA:
                session.execute(statement.format(ks=ks))
            row = session.execute(f"SELECT version FROM {ks}.schema_version WHERE name = 'items'").one()
            version = row["version"] if row else 0
            if version > SCHEMA_VERSION:
                raise CassandraStorageError(
                    f"cassandra storage error; schema version {version} of keyspace {ks} is newer than "
                    f"the supported version {SCHEMA_VERSION}"
                )
            if 0 < version < SCHEMA_VERSION:
                # Version 1 (pre-release) kept one row per item state and a column per field; nothing was
                # released with it.
                raise CassandraStorageError(
                    f"cassandra storage error; keyspace {ks} has schema version {version}, which this "
                    f"version does not read; use a new keyspace"
                )
            if version < SCHEMA_VERSION:
                session.execute(
                    f"INSERT INTO {ks}.schema_version (name, version) VALUES ('items', {SCHEMA_VERSION})"
                )
            cql = _Cql(session, ks)
            cql.prepare_all()
        except BaseException:
            cluster.shutdown()
            raise
        self._cluster = cluster
        return cql

    async def close(self) -> None:
        """Waits for running transactions, then closes the connections."""
        for partition in self._partitions.values():
            async with partition._lock:
                pass
        cluster, self._cluster, self._cql = self._cluster, None, None
        if cluster is not None:
            await asyncio.get_running_loop().run_in_executor(self._threads, cluster.shutdown)

    async def _execute_async(self, loop: asyncio.AbstractEventLoop, statement: Any) -> list[dict[str, Any]]:
        if self._cql is None:
            raise CassandraStorageError("cassandra storage error; the store is not open")
        response = self._cql.session.execute_async(statement)
        settled = _bridge(loop, response)
        try:
            return await settled
        finally:
            if settled.done() and not settled.cancelled():  # the driver answered: the request is over
                _finished(response)

    async def _call(self, fn: Callable[[_Cql], T], writes: bool = False) -> T:
        """Runs ``fn`` on a worker thread; if it ``writes``, a failure may leave its writes applied."""
        cql = self._cql
        if cql is None:
            raise CassandraStorageError("cassandra storage error; the store is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, fn, cql)
        except _DRIVER_ERRORS as e:
            raise _storage_error(e, sent=writes) from e
        except CassandraStorageError as e:
            # ``_Cql`` classified the driver's error as a read's; a write's is decided here.
            if writes and isinstance(e.__cause__, _DRIVER_ERRORS):
                raise _storage_error(e.__cause__, sent=True) from e.__cause__
            raise

    def partition(self, queue: str, number: int) -> Partition:
        return self._partition(queue, number)

    def _partition(self, queue: str, number: int) -> CassandraPartition:
        key = (queue, number)
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = CassandraPartition(self, queue, number)
        return part

    async def claim(self, queue: str, number: int, epoch: int) -> None:
        """Makes ``epoch`` the owner of a partition (a lightweight transaction on its row and tail).

        From then on a store that wrote with an older epoch gets ``StaleOwnerError`` for its next write
        to the partition and stops serving it.

        Raises:
            StaleOwnerError: the partition is owned by a newer epoch already.
            CassandraStorageError: Cassandra failed.
        """
        await self._partition(queue, number).claim(epoch)

    async def delete_partitions(self, queue: str, count: int) -> None:
        """Resets the partitions to empty: their segments are dropped and numbering continues after them,
        so no segment number is written again after its deletion."""

        def reset(cql: _Cql) -> None:
            for number in range(count):
                rows = cql.rows(Statement.GET_PARTITION, (queue, number))
                if not rows:
                    continue
                segments = rows[0]["segments"] or {}
                for segment in segments:
                    cql.rows(Statement.DROP_SEGMENT, (queue, number, segment))
                fresh = max([rows[0]["tail"], *segments]) + 1
                cql.applied(Statement.RESET_PARTITION, (fresh, fresh, {fresh: ""}, queue, number))

        for number in range(count):
            part = self._partitions.get((queue, number))
            if part is not None:
                async with part._lock:
                    part.forget()
        await self._call(reset, writes=True)

    async def purge_dedup(self, now: int) -> int:
        """Nothing to do: dedup claims expire by their TTL."""
        return 0

    async def check(self) -> None:
        """Nothing beyond what reads and the partitions' own failures show: a Cassandra node out of disk
        fails writes, which mark their partitions failing."""

    async def get_queue(self, name: str) -> QueueRecord | None:
        rows = await self._call(lambda cql: cql.rows(Statement.GET_QUEUE, (name,)))
        return _queue(rows[0]) if rows else None

    async def add_queue(self, record: QueueRecord) -> bool:
        def add(cql: _Cql) -> bool:
            applied, _ = cql.applied(Statement.ADD_QUEUE, _queue_row(record))
            if applied:
                cql.rows(Statement.INDEX_QUEUE, (record.namespace, record.name))
            return applied

        return await self._call(add, writes=True)

    async def update_queue(self, record: QueueRecord) -> None:
        # Read in a call of its own: its failure sent no write, so the outcome is known.
        before = await self.get_queue(record.name)
        if before is None:
            return  # nothing to update, and no index entry for a queue that does not exist

        def update(cql: _Cql) -> None:
            row = _queue_row(record)
            cql.applied(Statement.UPDATE_QUEUE, (*row[1:], record.name))
            if before.namespace != record.namespace:
                cql.rows(Statement.UNINDEX_QUEUE, (before.namespace, record.name))
            cql.rows(Statement.INDEX_QUEUE, (record.namespace, record.name))

        await self._call(update, writes=True)

    async def delete_queue(self, name: str) -> None:
        before = await self.get_queue(name)
        if before is None:
            return

        def delete(cql: _Cql) -> None:
            cql.applied(Statement.DELETE_QUEUE, (name,))
            cql.rows(Statement.UNINDEX_QUEUE, (before.namespace, name))

        await self._call(delete, writes=True)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        def list_(cql: _Cql) -> list[QueueRecord]:
            names = [r["name"] for r in cql.rows(Statement.LIST_QUEUES, (namespace, pivot, limit))]
            records = []
            for name in names:
                rows = cql.rows(Statement.GET_QUEUE, (name,))
                if rows:
                    records.append(_queue(rows[0]))
            return records

        return await self._call(list_)


def _queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, r.extra, r.dedup_window,
    )  # fmt: skip


def _queue(row: dict[str, Any]) -> QueueRecord:
    return QueueRecord(
        name=row["name"],
        namespace=row["namespace"] or "",
        lease_timeout=row["lease_timeout"] or 0,
        expire_timeout=row["expire_timeout"] or 0,
        dead_queue=row["dead_queue"] or "",
        max_attempts=row["max_attempts"] or 0,
        reference=row["reference"] or "",
        requested_partitions=row["requested_partitions"] or 0,
        created_at=row["created_at"] or 0,
        updated_at=row["updated_at"] or 0,
        extra=dict(row["extra"] or {}),
        dedup_window=DEFAULT_DEDUP_WINDOW if row["dedup_window"] is None else row["dedup_window"],
    )
