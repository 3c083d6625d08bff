"""The storage contract bound to the Cassandra backend (a real node, an emptied keyspace per test), plus
what only this backend has to do: fencing, reloading its index, segments."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import io
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cassandra import OperationTimedOut, Unavailable, WriteTimeout, WriteType
from cassandra.cluster import NoHostAvailable, ResponseFuture
from cassandra.connection import ConnectionShutdown
from cassandra.protocol import ErrorMessage, OverloadedErrorMessage, ServerError
from msgspec.structs import replace

from querator.clock import SystemClock
from querator.errors import StaleOwnerError, StorageError
from querator.ksuid import KsuidGenerator
from querator.storage.base import PartitionTx, QueueRecord, Store
from querator.storage.cassandra import (
    CassandraSettings,
    CassandraStorageError,
    CassandraStore,
    Segments,
    _codec,
    _errors,
)
from querator.storage.cassandra._dedup import (
    CLAIM_TIMEOUT,
    LAST_EXPIRY,
    MAX_TTL,
    Claimant,
    DedupInFlight,
    claim,
    max_ttl,
)
from querator.storage.cassandra._schema import SCHEMA_VERSION
from querator.storage.cassandra._session import Cql
from querator.storage.cassandra._statements import Statement
from querator.storage.cassandra._store import THREADS
from querator.storage.cassandra._workflows import _bucket
from querator.storage.operations import RetryEntry
from querator.storage.workflows import Workflow
from tests.cassandra_node import CassandraNode
from tests.conftest import eventually
from tests.storage.contract import NOW, SECOND, Part, RecordsContract, StoreContract, ids, item, payloads

EPOCH = 1


def new_store(settings: CassandraSettings, epoch: int = EPOCH, **hooks: Any) -> CassandraStore:
    """A store on the real clock; ``hooks`` are ``CassandraStore``'s test parameters."""
    return CassandraStore(settings, epoch, SystemClock().now, **hooks)


@contextlib.asynccontextmanager
async def opened_store(
    settings: CassandraSettings, epoch: int = EPOCH, **hooks: Any
) -> AsyncIterator[CassandraStore]:
    """A store (as another node's) open for the block."""
    store = new_store(settings, epoch, **hooks)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


class TestCassandraStore(StoreContract, RecordsContract):
    @pytest.fixture
    async def store(self, cassandra_settings: CassandraSettings) -> AsyncIterator[Store]:
        # The store's own clock (TTLs of source-id rows, live segments) runs in the contract's time,
        # which starts at NOW: on the real clock, items expiring at NOW + 1h got rows that lived 1 s,
        # and a slow run found them gone.
        started = SystemClock().now()
        store = CassandraStore(cassandra_settings, EPOCH, lambda: NOW + SystemClock().now() - started)
        await store.open()
        yield store
        await store.close()


async def segments(store: CassandraStore, queue: str = "queue", number: int = 0) -> list[int]:
    """The segment numbers the partition row lists."""
    rows = await store._connection.call(lambda cql: cql.rows(Statement.GET_PARTITION, (queue, number)))
    return sorted(rows[0]["segments"])


async def test_a_stale_owner_is_fenced_and_stops_serving(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """Two stores on one partition: once the newer epoch claims it, the older one's writes are not
    acknowledged. A plain commit that lands before the new owner loads is its (docs/adr/0038): its
    client was told the outcome is unknown."""
    old = Part(store.partition("queue", 0))
    (kept,) = await old.produce(item("before"))
    newer = new_store(cassandra_settings, epoch=EPOCH + 1)
    await newer.open()
    try:
        await newer.claim("queue", 0, EPOCH + 1)
        new = Part(newer.partition("queue", 0))
        stale = r"^stale owner; partition 0 of 'queue' is owned by epoch 2"
        with pytest.raises(StaleOwnerError, match=stale) as refused:
            await old.produce(item("unknown"))
        assert refused.value.maybe_applied
        with pytest.raises(StaleOwnerError):  # not even reads: the partition is no longer served here
            await old.list()
        with pytest.raises(StaleOwnerError):
            await store.claim("queue", 0, EPOCH)
        assert payloads(await new.list()) == ["before", "unknown"]
        new.new_id = KsuidGenerator(NOW // SECOND, after=await new.last_id()).next
        await new.produce(item("after"))
        [[leased]] = await new.lease(1)
        assert leased.id == kept.id
        assert payloads(await new.list()) == ["before", "unknown", "after"]
        # Another partition of the same queue is untouched by the claim.
        assert await Part(store.partition("queue", 1)).produce(item("elsewhere"))
    finally:
        await newer.close()


async def test_a_new_store_finds_everything(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    part = Part(store.partition("orders", 0))
    await part.produce(
        item("leased"), item("retried"), item("queued"), item("scheduled", enqueue_at=NOW + 60 * SECOND)
    )
    [[lease, retried]] = await part.lease(2, deadline=NOW + 30 * SECOND)
    await part.retry(RetryEntry(retried.id, retry_at=NOW + 90 * SECOND))
    before, scheduled = await part.list(), await part.list(scheduled=True)
    last = await part.last_id()

    again = new_store(cassandra_settings, epoch=EPOCH + 1)
    await again.open()
    try:
        part = Part(again.partition("orders", 0))
        assert await part.list() == before
        assert await part.list(scheduled=True) == scheduled
        assert (await part.get(lease.id))[lease.id] == lease
        assert await part.last_id() == last
        deadlines = await part.run(lambda tx: tx.deadlines())
        assert (deadlines.lease_deadline, deadlines.enqueue_at) == (NOW + 30 * SECOND, NOW + 60 * SECOND)
        stats = await part.run(lambda tx: tx.stats(NOW))
        assert (stats.total, stats.leased, stats.scheduled) == (2, 1, 2)
        part.new_id = KsuidGenerator(NOW // SECOND, after=last).next
        assert await part.complete(lease.id) is None
        result = await part.lifecycle(NOW + 120 * SECOND)
        assert result.enqueued == 2
        assert payloads(await part.head()) == ["queued", "retried", "scheduled"]
    finally:
        await again.close()


async def test_segments_roll_carry_state_and_drop_when_drained(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments
) -> None:
    sizes.rows, sizes.carry_chunk = 50, 7
    part = Part(store.partition("queue", 0))
    await part.produce(item("long-lease"), item("later", enqueue_at=NOW + 3600 * SECOND))
    [[long_lease]] = await part.lease(1, deadline=NOW + 3600 * SECOND)
    produced = 0
    for _ in range(12):
        await part.produce(*(item(f"n{produced + k}") for k in range(20)))
        produced += 20
        [got] = await part.lease(15)
        assert await part.complete(*ids(got)) is None
    kept = await segments(store)
    assert kept[0] == 0  # the long lease's segment stays
    assert kept[-1] >= 10  # a dozen segments were opened,
    assert kept[1] > 1  # the drained ones after the long lease's were dropped,
    assert kept[1:] == list(range(kept[1], kept[-1] + 1))  # the ones with queued items were not
    left = payloads(await part.list(limit=1000))
    assert left[0] == "long-lease"
    assert left[1:] == [f"n{n}" for n in range(12 * 15, produced)]

    again = new_store(cassandra_settings, epoch=EPOCH + 1, segments=sizes)
    await again.open()
    try:
        reloaded = Part(again.partition("queue", 0))
        reloaded.new_id = KsuidGenerator(NOW // SECOND, after=await reloaded.last_id()).next
        assert payloads(await reloaded.list(limit=1000)) == left
        assert payloads(await reloaded.list(scheduled=True)) == ["later"]
        assert (await reloaded.get(long_lease.id))[long_lease.id].payload == b"long-lease"
        [rest] = await reloaded.lease(100)
        assert payloads(rest) == left[1:]
    finally:
        await again.close()


async def test_counters_hold_deep_partitions(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """The sum of created_at over queued items passes 2**63 microseconds after about 5,400 items."""
    part = Part(store.partition("deep", 0))
    await part.produce(*(item("x") for _ in range(6000)))
    later = NOW + 10 * SECOND
    assert (await part.run(lambda tx: tx.stats(later))).average_age == 10 * SECOND
    again = new_store(cassandra_settings, epoch=EPOCH + 1)
    await again.open()
    try:
        stats = await Part(again.partition("deep", 0)).run(lambda tx: tx.stats(later))
        assert (stats.total, stats.average_age) == (6000, 10 * SECOND)
    finally:
        await again.close()


# --- de-duplication across stores (nodes) -------------------------------------------------------------

WINDOW = 300 * SECOND


async def test_two_nodes_racing_one_dedup_id_store_it_once(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """Two stores (as two nodes) produce the same dedup ids into different partitions at once: each id
    is stored by exactly one of them; the other answers a duplicate or a retry, never a second item."""
    other = new_store(cassandra_settings, epoch=EPOCH)
    await other.open()
    try:
        first, second = Part(store.partition("queue", 0)), Part(other.partition("queue", 1))
        ids_ = [f"d{n}" for n in range(40)]

        async def produce(part: Part, who: str) -> None:
            for start in range(0, len(ids_), 10):
                batch = [item(f"{who}-{d}", dedup_id=d) for d in ids_[start : start + 10]]
                # A claim still in flight on the other node answers "try again": retry like a client.
                while True:
                    try:
                        await part.produce(*batch, dedup_window=WINDOW)
                        break
                    except StorageError:
                        continue

        await asyncio.gather(produce(first, "a"), produce(second, "b"))
        stored = payloads(await first.list(limit=100)) + payloads(await second.list(limit=100))
        assert sorted(p.split("-", 1)[1] for p in stored) == sorted(ids_)
    finally:
        await other.close()


@pytest.fixture
async def other(cassandra_settings: CassandraSettings) -> AsyncIterator[CassandraStore]:
    """Another node's store on the same keyspace, with another epoch."""
    async with opened_store(cassandra_settings, EPOCH + 7) as store:
        yield store


async def claim_and_fail(store: CassandraStore, dedup_id: str) -> None:
    """Partition 1 of ``store`` claims ``dedup_id``, then fails before its batch is written."""

    def claim_then_fail(tx: PartitionTx) -> None:
        tx.dedup({dedup_id}, NOW, NOW + WINDOW)
        raise RuntimeError("crashed before the batch")

    with pytest.raises(RuntimeError):
        await store.partition("queue", 1).run(claim_then_fail)


async def test_a_fresh_claim_of_another_node_without_items_asks_to_retry(
    store: CassandraStore, other: CassandraStore
) -> None:
    await claim_and_fail(other, "x")
    part = Part(store.partition("queue", 0))
    with pytest.raises(DedupInFlight, match=r"dedup id 'x' is being produced by partition 1"):
        await part.produce(item("a", dedup_id="x"), now=NOW + SECOND, dedup_window=WINDOW)
    assert await part.list() == []
    # Once the claim is older than any produce can take, it is stale: taken over, stored once.
    later = NOW + CLAIM_TIMEOUT + 2 * SECOND
    await part.produce(item("a", dedup_id="x"), now=later, dedup_window=WINDOW)
    await part.produce(item("again", dedup_id="x"), now=later + SECOND, dedup_window=WINDOW)
    assert payloads(await part.list()) == ["a"]
    # And the node whose claim was taken over now sees the duplicate.
    again = Part(other.partition("queue", 1))
    await again.produce(item("b", dedup_id="x"), now=later + SECOND, dedup_window=WINDOW)
    assert await again.list() == []


async def test_the_new_owner_of_a_partition_takes_over_its_old_owners_claim_at_once(
    store: CassandraStore, other: CassandraStore
) -> None:
    """A producer whose batch failed on partition 1 retries with the same dedup id after another node
    took the partition over (failover): the old owner's claim is stale as soon as the new owner's claim
    fenced it out, not only after CLAIM_TIMEOUT; the id is stored once."""
    await claim_and_fail(store, "x")  # the old owner (EPOCH) of partition 1
    new_owner = Part(other.partition("queue", 1))  # EPOCH + 7: claims partition 1 on its first run
    await new_owner.produce(item("a", dedup_id="x"), now=NOW + SECOND, dedup_window=WINDOW)
    await new_owner.produce(item("again", dedup_id="x"), now=NOW + 2 * SECOND, dedup_window=WINDOW)
    assert payloads(await new_owner.list()) == ["a"]
    with pytest.raises(StaleOwnerError):
        await Part(store.partition("queue", 1)).produce(item("b"), now=NOW + 3 * SECOND)


async def test_a_run_that_meets_a_claim_in_flight_gives_back_its_own_claims(
    store: CassandraStore, other: CassandraStore
) -> None:
    """Node A's batch [x, y] meets B's claim on y in flight: A's run fails and releases its claim on x,
    so B's batch with x is not refused in turn (both would answer 454 until the claims went stale)."""
    await claim_and_fail(other, "y")
    a, b = Part(store.partition("queue", 0)), Part(other.partition("queue", 1))
    with pytest.raises(DedupInFlight, match=r"dedup id 'y' is being produced by partition 1"):
        await a.produce(item("a-x", dedup_id="x"), item("a-y", dedup_id="y"), now=NOW, dedup_window=WINDOW)
    await b.produce(item("b-x", dedup_id="x"), now=NOW + SECOND, dedup_window=WINDOW)
    assert payloads(await b.list()) == ["b-x"]
    assert await a.list() == []


async def test_markers_keep_their_segment_until_the_window_ends(
    store: CassandraStore, sizes: Segments
) -> None:
    """A drained segment holding the marker of an open window is not dropped: the claim needs it."""
    sizes.rows = 20
    part = Part(store.partition("queue", 0))
    far = 10 * 365 * 86400 * SECOND  # segments are kept by the store's (real) clock: outlast it
    await part.produce(item("a", dedup_id="x"), dedup_window=far)
    for n in range(6):
        await part.produce(*(item(f"n{n}-{k}") for k in range(10)))
        [got] = await part.lease(100)
        assert await part.complete(*ids(got)) is None
    kept = await segments(store)
    assert kept[0] == 0 and kept[-1] >= 3  # rolled past segment 0, which stays for its marker
    await Part(store.partition("queue", 1)).produce(item("dup", dedup_id="x"), dedup_window=far)
    assert await Part(store.partition("queue", 1)).list() == []


async def test_a_takeover_claims_with_an_epoch_above_the_owner(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """A node the ring makes the owner takes the partition over whatever its clock says: its epoch is
    made newer than the current owner's, and the old owner is fenced out."""
    old = new_store(cassandra_settings, epoch=10**18)  # an owner whose epoch is far ahead of any clock
    await old.open()
    try:
        first = Part(old.partition("queue", 0))
        (kept,) = await first.produce(item("before"))
        await store.partition("queue", 0).claim()
        # Not acknowledged; written before the new owner loads, so its (docs/adr/0038).
        with pytest.raises(StaleOwnerError, match=rf"is owned by epoch {10**18 + 1}, not {10**18}"):
            await first.produce(item("unknown"))
        taken = Part(store.partition("queue", 0))
        taken.new_id = KsuidGenerator(NOW // SECOND, after=await taken.last_id()).next
        await taken.produce(item("after"))
        assert payloads(await taken.list()) == ["before", "unknown", "after"]
        assert (await taken.lease(1))[0][0].id == kept.id
        # The fenced owner takes it back the same way, and the other is fenced in turn.
        await old.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError):
            await taken.produce(item("unknown too"))
        expected = ["before", "unknown", "after", "unknown too"]
        assert payloads(await Part(old.partition("queue", 0)).list()) == expected
    finally:
        await old.close()


async def test_two_takeovers_racing_do_not_share_an_epoch(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """Two nodes take over a partition whose owner's epoch is ahead of both clocks (skew): each chooses
    the owner's epoch + 1. B read the owner before A wrote; were B to accept the epoch it finds as its
    own, both would pass the fence."""
    a = store._partition("queue", 0)
    raced: list[bool] = []

    def a_writes_first(statement: Statement) -> None:
        if statement is Statement.CLAIM_PARTITION and not raced:
            raced.append(True)
            a._claim(takeover=True)  # between B's read of the owner and B's write

    async with (
        opened_store(cassandra_settings, 10**18) as ahead,
        opened_store(cassandra_settings, EPOCH + 7, before_request=a_writes_first) as other,
    ):
        (kept,) = await Part(ahead.partition("queue", 0)).produce(item("before"))
        b = other._partition("queue", 0)
        await b.claim()
        assert raced and a.epoch == 10**18 + 1 and b.epoch == 10**18 + 2
        with pytest.raises(StaleOwnerError):
            await Part(a).produce(item("from a"))
        owner = Part(b)
        owner.new_id = KsuidGenerator(NOW // SECOND, after=kept.id).next  # as the engine seeds its ids
        await owner.produce(item("from b"))
        assert payloads(await owner.list()) == ["before", "from b"]


async def test_two_takeovers_reading_the_same_clock_do_not_share_an_epoch(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """Two nodes take over a partition in the same microsecond of their clocks: both would choose that
    reading as their epoch, and the second would find it written and take it for its own."""
    at = SystemClock().now()
    (kept,) = await Part(store.partition("queue", 0)).produce(item("before"))
    a, b = (
        CassandraStore(cassandra_settings, EPOCH, lambda: at),
        CassandraStore(cassandra_settings, EPOCH, lambda: at),
    )
    await a.open()
    await b.open()
    try:
        await a.partition("queue", 0).claim()
        await b.partition("queue", 0).claim()
        assert (a._partition("queue", 0).epoch, b._partition("queue", 0).epoch) == (at, at + 1)
        with pytest.raises(StaleOwnerError):
            await Part(a.partition("queue", 0)).produce(item("from a"))
        owner = Part(b.partition("queue", 0))
        owner.new_id = KsuidGenerator(NOW // SECOND, after=kept.id).next
        await owner.produce(item("from b"))
        assert payloads(await owner.list()) == ["before", "from b"]
    finally:
        await a.close()
        await b.close()


def test_ttls_end_before_2038() -> None:
    """Cassandra refuses a TTL ending after 2038-01-19 in its default storage mode: a source entry
    of an item without expire deadline (20 years) got InvalidRequest from 2018 on."""
    in_2026, in_2000 = 1_795_000_000 * SECOND, 946_684_800 * SECOND
    assert max_ttl(in_2026) == LAST_EXPIRY - in_2026 // SECOND < MAX_TTL
    assert max_ttl(in_2000) == MAX_TTL
    assert max_ttl(LAST_EXPIRY * SECOND) == 1


def test_a_claim_is_planned_without_io() -> None:
    """``claim`` only plans requests: every id's claim goes out at once, and the answers alone decide
    (here: "x" taken, "y" held by another partition's fresh claim whose marker is missing, so the run
    gives "x" back and asks the client to retry)."""
    me = Claimant("queue", 0, EPOCH)
    exchange = claim(me, ["x", "y"], 3, NOW, NOW + WINDOW)
    sent = next(exchange)
    assert [(r.statement, r.params[1]) for r in sent] == [
        (Statement.CLAIM_DEDUP, "x"),
        (Statement.CLAIM_DEDUP, "y"),
    ]
    theirs = {"[applied]": False, "partition": 1, "epoch": EPOCH, "segment": 0, "claimed_at": NOW}
    [segments_read] = exchange.send([[{"[applied]": True}], [{**theirs, "expires_at": NOW + WINDOW}]])
    assert segments_read.statement is Statement.PARTITION_SEGMENTS
    [marker] = exchange.send([[{"base": 0, "segments": {0: ""}}]])
    assert (marker.statement, marker.serial) == (Statement.FIND_MARKER, True)
    [stale] = exchange.send([[]])  # no marker: is the claim stale?
    assert stale.statement is Statement.PARTITION_SEGMENTS
    [release] = exchange.send([[{"base": 0, "segments": {0: ""}}]])  # not stale: in flight
    assert (release.statement, release.params[:2]) == (Statement.RELEASE_DEDUP, ("queue", "x"))
    with pytest.raises(DedupInFlight, match="dedup id 'y' is being produced by partition 1"):
        exchange.send([[{"[applied]": True}]])


async def test_a_finished_request_is_freed_without_the_cyclic_collector(store: CassandraStore) -> None:
    """The driver leaves each request in a reference cycle: unbroken, every batch with its payloads
    waited for the cyclic collector, which ran scores of times a second under load."""

    def requests() -> int:
        return sum(isinstance(o, ResponseFuture) for o in gc.get_objects())

    part = Part(store.partition("queue", 0))
    await part.produce(item("loads the partition"))
    gc.collect()
    gc.disable()
    try:
        before = requests()
        for n in range(25):
            await part.produce(item(f"{n}"))  # two requests: the item rows, the commit
            assert await store.get_queue("none") is None  # a blocking read on a worker thread
        assert requests() - before < 10  # 75 without the cycle broken
    finally:
        gc.enable()


async def test_a_request_from_the_loop_makes_no_timer_of_the_driver(
    store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's statements are bounded by a timer of the event loop: one of the driver's per statement
    woke the driver's thread once more and stayed in its queue for the whole request timeout."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("loads the partition"))  # blocking reads, with the driver's timers
    connection_class = store._connection.opened().session.cluster.connection_class
    create_timer = connection_class.create_timer
    made: list[float] = []

    def counted(timeout: float, callback: Any) -> Any:
        made.append(timeout)
        return create_timer(timeout, callback)

    monkeypatch.setattr(connection_class, "create_timer", staticmethod(counted))
    for n in range(10):
        await part.produce(item(f"{n}"))  # the commit and the read of the owner epoch, from the loop
    assert made == []  # 20 before


async def test_the_store_speaks_protocol_v4(store: CassandraStore) -> None:
    """Not v5, whose framing checksums every frame in Python: a fifth of the driver's CPU per statement
    (ADR 0074)."""
    assert store._connection.opened().session.cluster.protocol_version == 4


class Relay:
    """A TCP relay to Cassandra that can hold Cassandra's answers back (``passing`` cleared): a
    coordinator that takes requests and never answers."""

    def __init__(self, port: int) -> None:
        self._target = port
        self.passing = asyncio.Event()
        self.passing.set()
        self._server: asyncio.Server | None = None
        self._streams: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        """Listens on loopback; returns the port."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._target)
        self._streams += [writer, upstream_writer]
        with contextlib.suppress(OSError):
            await asyncio.gather(
                self._pump(reader, upstream_writer), self._pump(upstream_reader, writer, answers=True)
            )

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, answers: bool = False
    ) -> None:
        while data := await source.read(65536):
            if answers:
                await self.passing.wait()
            sink.write(data)
            await sink.drain()
        sink.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for stream in self._streams:
            stream.close()
        await self._server.wait_closed()


async def test_a_request_cassandra_does_not_answer_fails_at_the_request_timeout(
    cassandra_settings: CassandraSettings,
) -> None:
    """The loop's timer bounds a run's commit as the driver's did: it fails after ``request_timeout``
    as the driver's own timeout (its stream freed, so the connection serves the next runs), maybe
    applied."""
    relay = Relay(cassandra_settings.port)
    settings = dataclasses.replace(cassandra_settings, port=await relay.start(), request_timeout=1.0)
    try:
        async with opened_store(settings) as store:
            part = Part(store.partition("queue", 0))
            await part.produce(item("loads the partition"))
            relay.passing.clear()
            with pytest.raises(CassandraStorageError) as failed:
                await part.produce(item("unanswered"))
            assert isinstance(failed.value.__cause__, OperationTimedOut)
            assert failed.value.maybe_applied
            relay.passing.set()
            await part.produce(item("answered"))
            assert "answered" in payloads(await part.list(limit=10))
    finally:
        await relay.close()


def answered(code: int) -> Exception:
    """An error as the driver decodes it from Cassandra's answer (the protocol's error body)."""
    message = b"from the coordinator"
    info = bytes([0, 6]) + (1).to_bytes(4, "big") + (2).to_bytes(4, "big")  # a CAS_WRITE_UNKNOWN's
    body = code.to_bytes(4, "big") + len(message).to_bytes(2, "big") + message + info
    error = ErrorMessage.recv_body(io.BytesIO(body), 5)
    assert isinstance(error, Exception)
    return error


@pytest.mark.parametrize(
    ("error", "sent", "maybe_applied"),
    [
        (WriteTimeout("no answer in time", write_type=WriteType.CAS), True, True),
        (OperationTimedOut("client-side timeout"), True, True),
        (ConnectionShutdown("connection closed"), True, True),
        # Paxos v1 answers it after a quorum accepted, when the commit's replicas are missing; and it
        # may be the driver's retry on another host failing after the first attempt was applied.
        (Unavailable("too few replicas alive"), True, True),
        (NoHostAvailable("no host", {}), True, True),  # also what a write cut off with its connection gets
        # Raised as Cassandra answered them, not as the driver's exceptions: they escaped as bugs (500).
        (answered(OverloadedErrorMessage.error_code), True, True),
        (answered(ServerError.error_code), True, True),
        (answered(0x1700), True, True),  # CAS_WRITE_UNKNOWN, which the driver has no class for
        # Not sent: a read or the plan failed before the write.
        (WriteTimeout("no answer in time", write_type=WriteType.CAS), False, False),
        (Unavailable("too few replicas alive"), False, False),
    ],
)
def test_a_failed_write_that_was_sent_may_have_been_applied(
    error: Exception, sent: bool, maybe_applied: bool
) -> None:
    assert isinstance(error, _errors.DRIVER_ERRORS)
    assert _errors.storage_error(error, sent=sent).maybe_applied is maybe_applied


async def test_connections_send_without_nagle_delay(store: CassandraStore) -> None:
    """Nagle's algorithm on a driver connection holds the end of a large batch back until its start is
    acknowledged (up to 40 ms on Linux): every connection to Cassandra must have it off."""
    assert store._connection.cql is not None
    pools = store._connection.cql.session.get_pools()
    assert pools
    for pool in pools:
        sock = pool._connection._socket
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


async def test_item_rows_serialize_as_the_driver_binds_them(store: CassandraStore) -> None:
    """Item rows skip the driver's ``bind``: their values and routing key must be the bytes it makes."""
    assert store._connection.cql is not None
    insert = store._connection.cql.stmt(Statement.INSERT_ITEM)
    items = [item("p\u00e4yload", id="0001", reference="r\u00e9f", attempts=3), item("", id="0002")]
    key = ("qu\u00eaue", 70_000, -2)
    ours = list(_codec.item_rows(insert, key, items))
    for statement, it in zip(ours, items, strict=True):
        driver = insert.bind((*key, it.id, _codec.ENCODER.encode(_codec.metadata(it)), it.payload))
        assert statement.values == driver.values
        assert statement.routing_key == driver.routing_key
        assert repr(statement) == repr(driver)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (1, r"has schema version 1, which this version does not read; use a new keyspace"),
        (SCHEMA_VERSION + 1, rf"schema version {SCHEMA_VERSION + 1} .* is newer than"),
    ],
)
async def test_a_keyspace_of_another_schema_version_is_refused(
    store: CassandraStore, cassandra_settings: CassandraSettings, version: int, message: str
) -> None:
    ks = cassandra_settings.keyspace
    await store._connection.call(
        lambda cql: cql.session.execute(
            f"INSERT INTO {ks}.schema_version (name, version) VALUES ('items', {version})"
        )
    )
    with pytest.raises(CassandraStorageError, match=message):
        await new_store(cassandra_settings).open()


@pytest.mark.parametrize("writes", [False, True])
async def test_a_failed_queue_write_may_have_been_applied(store: CassandraStore, writes: bool) -> None:
    """Queue records are written outside partitions: a failed write there is an unknown outcome too,
    whether the driver's error comes straight from ``fn`` or through the statement helpers."""

    def times_out(cql: object) -> None:
        raise WriteTimeout("no answer in time", write_type=WriteType.CAS)

    def refused(cql: Cql) -> None:
        cql.rows_statement("UPDATE no_such_table SET x = 1 WHERE k = 1")

    for fn in (times_out, refused):
        with pytest.raises(StorageError) as failed:
            await store._connection.call(fn, writes=writes)
        assert failed.value.maybe_applied is writes


@pytest.mark.parametrize("fails", ["read", "write"])
async def test_a_queue_change_is_an_unknown_outcome_only_once_it_wrote(
    cassandra_settings: CassandraSettings, fails: str
) -> None:
    """Updating or deleting a queue reads its record first: a failure there sent no write."""
    failing = Statement.GET_QUEUE if fails == "read" else Statement.UNINDEX_QUEUE

    def flaky(statement: Statement) -> None:
        if statement is failing:  # as ``Cql.result`` raises the driver's error
            error = WriteTimeout("no answer in time", write_type=WriteType.SIMPLE)
            raise _errors.storage_error(error) from error

    async with opened_store(cassandra_settings, before_request=flaky) as store:
        await store.add_queue(QueueRecord(name="q", max_attempts=1))
        changes = [
            lambda: store.update_queue(QueueRecord(name="q", namespace="other")),
            lambda: store.delete_queue("q"),
        ]
        for change in changes:
            with pytest.raises(StorageError) as failed:
                await change()
            assert failed.value.maybe_applied is (fails == "write")


async def test_the_row_counter_matches_what_the_tail_stores(store: CassandraStore, sizes: Segments) -> None:
    """The tail's row counter keys the next state log row: after every run, rolls with carried states
    included, the owner's counter is the one Cassandra stored (a counter behind it would write a later
    state log row over an earlier one and forget the states it held)."""
    sizes.rows, sizes.carry_chunk = 30, 4
    part = Part(store.partition("queue", 0))
    partition = store._partition("queue", 0)

    async def counters() -> tuple[int, int]:
        index = partition._index
        assert index is not None
        key = ("queue", 0, index.tail)
        [stored] = await store._connection.call(lambda cql: cql.rows(Statement.SEGMENT_META, key))
        return index.meta.rows, stored["rows"]

    await part.produce(*(item(f"held{k}") for k in range(10)))
    await part.lease(10, deadline=NOW + 3600 * SECOND)  # ten states every new tail carries
    for round_ in range(8):
        await part.produce(*(item(f"r{round_}-{k}") for k in range(6)))
        owner, stored = await counters()
        assert owner == stored
        [got] = await part.lease(6)
        owner, stored = await counters()
        assert owner == stored
        await part.complete(*ids(got))
        owner, stored = await counters()
        assert owner == stored
    assert (await segments(store))[-1] >= 3  # rolls happened, each carrying the ten leased items


async def test_a_finished_workflow_leaves_no_row_past_its_ttl(store: CassandraStore) -> None:
    """Every column of a finished record carries its TTL and no write sets a row marker, so nothing of the
    row stays: the first write was an INSERT, whose key outlived the TTL and kept the id taken."""
    started = Workflow(id="old", name="n", queue="q", version=1)
    assert await store.workflows.put_workflow(started, 0)
    ended = replace(started, status="completed", version=2, expires_at=store.clock_now() + SECOND)
    assert await store.workflows.put_workflow(ended, 1)

    async def gone() -> bool:
        return await store._connection.call(lambda cql: cql.rows(Statement.GET_WORKFLOW, ("old",))) == []

    await eventually(gone, timeout=30)
    assert await store.workflows.get_workflow("old") is None
    assert await store.workflows.list_workflows("", "", 10) == []


async def test_a_key_only_row_reads_as_gone_and_its_id_starts_again(store: CassandraStore) -> None:
    """What a record first written by an INSERT (before the first write became an UPDATE) leaves after its
    TTL: its key alone. Reading it decoded a missing record and failed; starting its id again was refused."""
    await store._connection.call(
        lambda cql: cql.rows_statement(f"INSERT INTO {cql.keyspace}.workflows (id) VALUES ('old')")
    )
    assert await store.workflows.get_workflow("old") is None
    started = Workflow(id="old", name="n", queue="q", version=1)
    assert await store.workflows.put_workflow(started, 0)
    assert await store.workflows.get_workflow("old") == started
    assert await store.workflows.list_workflows("", "", 10) == [started]


async def test_a_stale_index_row_does_not_list_a_workflow_twice(store: CassandraStore) -> None:
    """An index row written with the record's TTL can outlive it by up to a second (expiry counts whole
    seconds from each write); an id started again in that second has a row under each status."""
    started = Workflow(id="again", name="n", queue="q", version=1)
    assert await store.workflows.put_workflow(started, 0)
    stale = ("completed", _bucket("again"), "again", 0)
    await store._connection.call(lambda cql: cql.rows(Statement.INDEX_WORKFLOW, stale))
    assert await store.workflows.list_workflows("", "", 10) == [started]
    assert await store.workflows.list_workflows("completed", "", 10) == []


def test_item_metadata_of_before_jobs_and_failures_still_decodes() -> None:
    """Rows written before items carried a job and failures (docs/adr/0034) hold 11 values."""
    old = ("src", True, 1, 2, 3, 4, 5, 6, "ref", "enc", "kind")
    meta = _codec.ENCODER.encode(old)
    item = _codec.item_from_row({"id": "an-id", "meta": meta, "payload": b"p"})
    assert (item.source_id, item.reference, item.kind, item.payload) == ("src", "ref", "kind", b"p")
    assert (item.job_id, item.failures) == ("", b"")
    states = _codec.ENCODER.encode([("an-id", False, old)])
    [row] = _codec.decode_states(states)
    assert (row.item.id, row.item.attempts, row.item.job_id) == ("an-id", 5, "")
    new = _codec.metadata(_codec.item_from_row({"id": "x", "meta": meta}))
    assert _codec.item_from_row({"id": "x", "meta": _codec.ENCODER.encode(new)}).kind == "kind"


async def test_runs_count_their_paxos_rounds_and_plain_statements(store: CassandraStore) -> None:
    """A run sends its commit as one plain batch, then reads the owner epoch (docs/adr/0038): no Paxos
    round; a produce with dedup ids claims them (a round each) and keeps the fenced commit (what
    /metrics exports of the store's runs)."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("first"))  # the first run claims and loads the partition
    counters = store.run_counters
    before = (counters.runs, counters.paxos, counters.plain)
    await part.produce(item("a"), item("b"))
    assert (counters.runs, counters.paxos, counters.plain) == (before[0] + 1, before[1], before[2] + 2)
    [got] = await part.lease(3)
    await part.complete(*ids(got))
    assert (counters.runs, counters.paxos, counters.plain) == (before[0] + 3, before[1], before[2] + 6)
    await part.produce(item("c", dedup_id="c"), dedup_window=SECOND * 60)
    assert (counters.runs, counters.paxos, counters.plain) == (before[0] + 4, before[1] + 2, before[2] + 7)
    assert {"lock", "thread", "write", "verify", "items", "commit"} <= counters.seconds.keys()


async def test_a_workflow_record_is_read_and_written_without_a_worker_thread(store: CassandraStore) -> None:
    """A workflow's step reads its record and writes it with a lightweight transaction: both are sent
    from the event loop, so they go through while every worker thread of the store is busy (queues' runs
    waiting out Cassandra, say) instead of queueing behind them."""
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = [loop.run_in_executor(store._threads, release.wait) for _ in range(THREADS)]
    try:
        started = Workflow(id="w", name="n", queue="q", version=1)
        assert await asyncio.wait_for(store.workflows.put_workflow(started, 0), 10)
        ended = replace(started, status="completed", version=2)
        assert await asyncio.wait_for(store.workflows.put_workflow(ended, 1), 10)
        assert not await asyncio.wait_for(store.workflows.put_workflow(ended, 1), 10)  # compare-and-set
        assert await asyncio.wait_for(store.workflows.get_workflow("w"), 10) == ended
    finally:
        release.set()
        await asyncio.gather(*busy)
    assert await store.workflows.list_workflows("completed", "", 10) == [ended]


async def test_an_emptied_keyspace_keeps_its_tables_and_none_of_its_rows(
    store: CassandraStore, cassandra_node: CassandraNode, cassandra_settings: CassandraSettings
) -> None:
    """What the tests' reused keyspaces rely on (``cassandra_settings``, tests/conftest.py): emptying one
    truncates each table that holds a row, and the next store finds its tables and nothing of before."""
    later = SystemClock().now() + 3600 * SECOND  # the store runs on the real clock
    queue = QueueRecord(name="queue")
    assert await store.add_queue(queue)
    await Part(store.partition("queue", 0)).produce(item("x", expire_deadline=later))
    assert await store.add_record("kind", "key", b"value")
    await store.raise_stamps("kind", {"key": later})
    ks = cassandra_settings.keyspace
    truncated = await asyncio.to_thread(cassandra_node.empty_keyspace, ks)
    written = {"schema_version", "queues", "queues_by_namespace", "partitions", "items", "records", "stamps"}
    assert written <= set(truncated)
    assert await asyncio.to_thread(cassandra_node.empty_keyspace, ks) == []
    async with opened_store(cassandra_settings, EPOCH + 1) as again:
        assert await again.get_queue("queue") is None
        assert await again.list_queues("", 10, queue.namespace) == []
        assert await Part(again.partition("queue", 0)).list() == []
        assert await again.get_record("kind", "key") is None
        assert await again.get_stamps("kind", ["key"]) == {}
