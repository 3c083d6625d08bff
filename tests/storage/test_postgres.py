"""The storage contract bound to the PostgreSQL backend (a real server, a schema per test), plus what only
this backend has to do: its schema version, fencing, surviving a restart of the server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from msgspec.structs import replace
from psycopg import pq
from psycopg.sql import SQL, Identifier

from querator.clock import SystemClock
from querator.errors import StaleOwnerError
from querator.ksuid import KsuidGenerator
from querator.storage.base import Item, PartitionTx, QueueRecord, Store
from querator.storage.operations import RetryEntry
from querator.storage.postgres import (
    SCHEMA_VERSION,
    PostgresPartition,
    PostgresSettings,
    PostgresStorageError,
    PostgresStore,
)
from querator.storage.workflows import JournalRow
from tests.conftest import eventually
from tests.postgres_node import PostgresNode
from tests.storage.contract import NOW, SECOND, Part, RecordsContract, StoreContract, ids, item, payloads
from tests.storage.workflow_contract import new, step

EPOCH = 1_000

pytestmark = pytest.mark.postgres


class TestPostgresStore(StoreContract, RecordsContract):
    @pytest.fixture
    async def store(self, postgres_settings: PostgresSettings) -> AsyncIterator[Store]:
        store = PostgresStore(postgres_settings, epoch=SystemClock().now())
        await store.open()
        yield store
        await store.close()


@pytest.fixture
async def store(postgres_settings: PostgresSettings) -> AsyncIterator[PostgresStore]:
    async with opened_store(postgres_settings, EPOCH) as store:
        yield store


@contextlib.asynccontextmanager
async def opened_store(settings: PostgresSettings, epoch: int) -> AsyncIterator[PostgresStore]:
    """A store (as another node's) open for the block."""
    store = PostgresStore(settings, epoch)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_stale_owner_is_fenced_and_stops_serving(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """Two stores on one partition: once a newer owner takes it over, the older one's runs are refused,
    reads included, and nothing of a refused run is applied (docs/adr/0045)."""
    old = Part(store.partition("queue", 0))
    (kept,) = await old.produce(item("before"))
    async with opened_store(postgres_settings, EPOCH + 1) as newer:
        await newer.partition("queue", 0).claim()
        new = Part(newer.partition("queue", 0))
        new.new_id = KsuidGenerator(NOW // SECOND, after=kept.id).next
        stale = rf"^stale owner; partition 0 of 'queue' is owned by epoch {EPOCH + 1}, not {EPOCH}$"
        with pytest.raises(StaleOwnerError, match=stale):
            await old.produce(item("lost"))
        with pytest.raises(StaleOwnerError, match=stale):  # refused from then on, without asking again
            await old.list()
        assert payloads(await new.list()) == ["before"]
        await new.produce(item("after"))
        [[leased]] = await new.lease(1)
        assert leased.id == kept.id
        assert payloads(await new.list()) == ["before", "after"]
        # Another partition of the same queue is untouched by the claim.
        assert await Part(store.partition("queue", 1)).produce(item("elsewhere"))


async def test_a_refused_produce_keeps_none_of_its_dedup_records(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """A produce's de-duplication records commit with its items or not at all: the statement that
    records them shares the run's transaction with the fence (docs/adr/0073), so a deposed owner's
    refused produce leaves the dedup id free for the new owner's."""
    old = Part(store.partition("queue", 0))
    await old.produce(item("before"))
    async with opened_store(postgres_settings, EPOCH + 1) as newer:
        await newer.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError):
            await old.produce(item("lost", dedup_id="d"), dedup_window=60 * SECOND)
        new = Part(newer.partition("queue", 0))
        await new.produce(item("kept", dedup_id="d"), dedup_window=60 * SECOND)
        assert sorted(payloads(await new.list())) == ["before", "kept"]


async def test_leases_and_completes_leave_the_partition_row_unwritten(
    store: PostgresStore, postgres_settings: PostgresSettings, postgres_node: PostgresNode
) -> None:
    """The fence of a run that inserted nothing share-locks the partition's row instead of rewriting it:
    no dead row version per lease or complete (docs/adr/0054). It still fences: a deposed owner's lease
    is refused and nothing of it is applied."""

    def row_version() -> str:
        with psycopg.connect(postgres_node.url, autocommit=True) as conn:
            query = SQL("SELECT ctid::text FROM {}.partitions WHERE number = 0")
            found = conn.execute(query.format(Identifier(postgres_settings.schema))).fetchone()
        assert found is not None
        return str(found[0])

    part = Part(store.partition("queue", 0))
    await part.produce(item("a"), item("b"))
    produced = row_version()
    [[leased]] = await part.lease(1)
    assert await part.complete(leased.id) is None
    assert row_version() == produced
    async with opened_store(postgres_settings, EPOCH + 1) as newer:
        await newer.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError, match=rf"is owned by epoch {EPOCH + 1}, not {EPOCH}$"):
            await part.lease(1)
        assert [i.is_leased for i in await Part(newer.partition("queue", 0)).list()] == [False]


async def test_a_run_locks_its_items_before_its_partition_row(
    store: PostgresStore, postgres_settings: PostgresSettings, postgres_node: PostgresNode
) -> None:
    """The statement that sends a run's last write with the fence writes first (docs/adr/0073): a run
    takes its items' row locks before its partition row's, in the order of every run with more writes
    and of a queue's delete (items, then partitions), so that none of them can deadlock another. Here a
    complete waits on its item's row, held by another transaction: the partition's row is not locked
    meanwhile."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("a"))
    [[leased]] = await part.lease(1)
    schema = Identifier(postgres_settings.schema)
    with (
        psycopg.connect(postgres_node.url) as holder,
        psycopg.connect(postgres_node.url, autocommit=True) as probe,
    ):
        holder.execute(
            SQL("SELECT 1 FROM {}.items WHERE id = %b FOR UPDATE").format(schema), (leased.id.encode(),)
        )
        completing = asyncio.ensure_future(part.complete(leased.id))

        async def waits_on_the_item() -> bool:
            query = "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            found = await asyncio.to_thread(lambda: probe.execute(query).fetchone())
            return found is not None and found[0] > 0

        await eventually(waits_on_the_item)
        # Before: the fence had share-locked the row first, and this failed at once.
        probe.execute(SQL("SELECT 1 FROM {}.partitions WHERE number = 0 FOR UPDATE NOWAIT").format(schema))
        holder.rollback()
    assert await completing is None
    assert await part.list() == []


async def test_a_read_of_a_deposed_owner_is_refused(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """A run that only reads is fenced too: a deposed owner answers nothing from the partition."""
    old = Part(store.partition("queue", 0))
    await old.produce(item("before"))
    async with opened_store(postgres_settings, EPOCH + 1) as newer:
        await newer.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError):
            await old.list()


async def test_a_takeover_claims_with_an_epoch_above_the_owner(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """A node the ring makes the owner takes the partition over whatever its clock says: its epoch is
    made newer than the current owner's, and the old owner is fenced out (docs/adr/0011)."""
    async with opened_store(postgres_settings, 10**18) as old:  # an epoch far ahead of any clock
        first = Part(old.partition("queue", 0))
        (kept,) = await first.produce(item("before"))
        await store.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError, match=rf"is owned by epoch {10**18 + 1}, not {10**18}"):
            await first.produce(item("lost"))
        taken = Part(store.partition("queue", 0))
        taken.new_id = KsuidGenerator(NOW // SECOND, after=kept.id).next
        await taken.produce(item("after"))
        assert payloads(await taken.list()) == ["before", "after"]
        # The fenced owner takes it back the same way, and the other is fenced in turn.
        await old.partition("queue", 0).claim()
        with pytest.raises(StaleOwnerError):
            await taken.produce(item("lost too"))
        assert payloads(await Part(old.partition("queue", 0)).list()) == ["before", "after"]


async def test_two_takeovers_at_once_never_share_an_epoch(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """Takeovers racing on one partition each get an epoch of their own: the row lock orders them."""
    await Part(store.partition("queue", 0)).produce(item("x"))
    async with opened_store(postgres_settings, EPOCH) as a, opened_store(postgres_settings, EPOCH) as b:
        pa, pb = a.partition("queue", 0), b.partition("queue", 0)
        await asyncio.gather(pa.claim(), pb.claim())
        assert isinstance(pa, PostgresPartition) and isinstance(pb, PostgresPartition)
        assert {pa.epoch, pb.epoch} == {EPOCH + 1, EPOCH + 2}
        loser, winner = (pa, pb) if pa.epoch < pb.epoch else (pb, pa)
        with pytest.raises(StaleOwnerError):
            await Part(loser).produce(item("lost"))
        assert payloads(await Part(winner).list()) == ["x"]


async def test_a_node_alone_with_an_older_epoch_refuses_to_serve(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    """A node whose clock went back between restarts finds a newer epoch than its own, and refuses the
    partition rather than write under an old epoch (docs/adr/0011)."""
    await Part(store.partition("queue", 0)).produce(item("x"))
    async with opened_store(postgres_settings, EPOCH - 1) as behind:
        with pytest.raises(StaleOwnerError, match=rf"is owned by epoch {EPOCH}, not {EPOCH - 1}$"):
            await Part(behind.partition("queue", 0)).list()


async def test_a_new_store_finds_everything(
    store: PostgresStore, postgres_settings: PostgresSettings
) -> None:
    record = QueueRecord(name="orders", namespace="shop", lease_timeout=60 * SECOND, extra={"k": "v"})
    assert await store.add_queue(record)
    part = Part(store.partition("orders", 0))
    await part.produce(
        item("leased"), item("retried"), item("queued"), item("scheduled", enqueue_at=NOW + 60 * SECOND)
    )
    [[_, retried]] = await part.lease(2, deadline=NOW + 30 * SECOND)
    await part.retry(RetryEntry(retried.id, retry_at=NOW + 90 * SECOND))
    before, scheduled = await part.list(), await part.list(scheduled=True)
    last = await part.last_id()
    await part.complete(before[0].id)
    await part.run(lambda tx: tx.delete([last]))  # the greatest id is gone, last_id must not go back
    async with opened_store(postgres_settings, EPOCH + 1) as again:
        found = Part(again.partition("orders", 0))
        assert await again.get_queue("orders") == record
        assert await found.list() == before[1:]
        assert await found.list(scheduled=True) == [i for i in scheduled if i.id != last]
        assert await found.last_id() == last


async def test_nodes_opening_a_new_schema_at_once_all_open(postgres_settings: PostgresSettings) -> None:
    """Pods started together on a schema nobody created yet: each creates it if it is missing, and none
    fails on another's creation (CREATE SCHEMA IF NOT EXISTS alone races to a unique violation)."""
    stores = [PostgresStore(postgres_settings, EPOCH + n) for n in range(8)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_a_newer_schema_is_refused(store: PostgresStore, postgres_settings: PostgresSettings) -> None:
    await store.pool.run(lambda conn: conn.execute("UPDATE querator_schema SET version = version + 1"))
    newer = PostgresStore(postgres_settings, EPOCH)
    with pytest.raises(PostgresStorageError, match=rf"schema version {SCHEMA_VERSION + 1} .* is newer"):
        await newer.open()
    await newer.close()


async def test_ids_sort_in_byte_order_whatever_the_database_collation(store: PostgresStore) -> None:
    """KSUIDs mix upper and lower case: a linguistic collation would put "a" before "B"."""
    part = Part(store.partition("queue", 0))
    ids = iter(["0ujsszgFvbiEr7CDgE3z8MAUPFt", "0ujsszwN8NRY24YaXiTIE2VWDTS", "0ujsszzZLvU3ivjgLdbGe7oKUVK"])
    part.new_id = lambda: next(ids)
    await part.produce(item("a"), item("b"), item("c"))
    assert payloads(await part.head()) == ["a", "b", "c"]


async def test_runs_fail_while_postgres_is_down_and_go_on_after(
    postgres_settings: PostgresSettings, postgres_node: PostgresNode, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL restarting: runs meanwhile fail with a storage error (the engine's 454), never hang,
    and the log says a connection broke; afterwards the same store goes on with every committed item, on
    new connections. (One connection, so that the run in the outage is the one to find it broken.)"""
    async with opened_store(dataclasses.replace(postgres_settings, connections=1), EPOCH) as store:
        part = Part(store.partition("queue", 0))
        await part.produce(item("kept"))
        postgres_node.stop()
        try:
            with pytest.raises(PostgresStorageError, match=r"^postgres storage error; "):
                await part.produce(item("refused"))
        finally:
            postgres_node.start()
        await part.produce(item("after"))
        assert payloads(await part.list()) == ["kept", "after"]
    assert "postgres: a connection to 127.0.0.1:" in caplog.text


ODD_TEXT = "a\x00\u202e\ud800é"
"""NUL (which PostgreSQL's TEXT cannot hold), a control character, a lone surrogate and a non-ASCII one."""


async def test_strings_with_nul_and_lone_surrogates_round_trip(store: PostgresStore) -> None:
    """Whatever string a client sends comes back as it was: names, references, ids and keys are stored
    as their bytes, not as TEXT."""
    odd = ODD_TEXT
    record = QueueRecord(name=odd, namespace=odd, dead_queue=odd, reference=odd, extra={"k": "a\x00b"})
    assert await store.add_queue(record)
    assert await store.get_queue(odd) == record
    assert await store.list_queues("", 10, odd) == [record]
    part = Part(store.partition(odd, 0))
    (produced,) = await part.produce(item("x", reference=odd, encoding=odd, kind=odd, source_id=odd))
    (stored,) = await part.list()
    assert (stored.reference, stored.encoding, stored.kind, stored.source_id) == (odd, odd, odd, odd)
    assert stored.id == produced.id
    assert await part.run(lambda tx: tx.existing_source_ids({odd, "other"})) == {odd}
    assert await part.run(lambda tx: tx.dedup({odd}, NOW, NOW + SECOND)) == set()
    assert await part.run(lambda tx: tx.dedup({odd}, NOW, NOW + SECOND)) == {odd}
    assert await store.add_record(odd, odd, b"v")
    assert await store.get_record(odd, odd) == b"v"
    assert await store.list_records(odd, "", "", 10) == [(odd, b"v")]
    assert await store.get_record(odd, "a") is None


async def test_head_scans_from_the_first_item_that_may_still_be_queued(store: PostgresStore) -> None:
    """The head bound (``_tx.py``): after a lease the next ``head`` starts at the first item still
    queued, past the rows leased before it, and new items at the tail are still found."""
    partition = store.partition("queue", 0)
    assert isinstance(partition, PostgresPartition)
    part = Part(partition)
    produced = await part.produce(*(item(f"i{n}") for n in range(5)))
    [leased] = await part.lease(3)
    assert ids(leased) == ids(produced[:3])
    assert partition._head_from == produced[2].id + "\x00"  # above the last leased, below any later id

    def lease_first(tx: PartitionTx) -> list[Item]:
        found = tx.head(5)
        tx.update([replace(found[0], is_leased=True, lease_deadline=NOW + SECOND)])
        return found

    assert ids(await part.run(lease_first)) == ids(produced[3:])
    assert partition._head_from == produced[4].id  # the first item the run left queued
    (late,) = await part.produce(item("late"))
    assert ids(await part.head()) == [produced[4].id, late.id]
    # A run that fails leaves the bound where it was.
    with pytest.raises(ZeroDivisionError):
        await part.run(lambda tx: (tx.head(1), tx.update([]), 1 // 0))
    assert partition._head_from == produced[4].id


async def test_a_restart_of_postgres_costs_one_failed_run_not_one_per_connection(
    store: PostgresStore, postgres_node: PostgresNode
) -> None:
    """The pool's other connections broke with the one that failed: they are replaced before their next
    run, so the first run after the restart succeeds."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("kept"))
    postgres_node.stop()
    try:
        with pytest.raises(PostgresStorageError, match=r"^postgres storage error; "):
            await part.produce(item("refused"))
    finally:
        postgres_node.start()
    await part.produce(item("after"))
    assert payloads(await part.list()) == ["kept", "after"]


async def test_a_head_with_journal_rows_is_one_round_trip(
    postgres_settings: PostgresSettings, tmp_path: Path
) -> None:
    """A head and its journal rows go in one statement, not a transaction of BEGIN, the head, the rows
    and COMMIT (docs/adr/0066): one round trip per write, counted in libpq's trace. A refused
    compare-and-set writes no row, a new head takes rows too, and a seq given twice keeps its last."""
    settings = dataclasses.replace(postgres_settings, connections=1)  # every call on the traced one
    async with opened_store(settings, EPOCH) as store:
        flows = store.workflows
        first = replace(new("wf", version=1, length=1), version=1)
        trace = tmp_path / "libpq.trace"
        with trace.open("w") as sink:

            def traced(conn: psycopg.Connection[tuple[object, ...]]) -> None:
                conn.pgconn.trace(sink.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

            await flows.pool.run(traced)
            assert await flows.put_workflow(first, 0, [step(1)])
            again = replace(step(2), value=b'"again"')
            assert await flows.put_workflow(replace(first, version=2, length=3), 1, [step(2), again, step(3)])
            assert not await flows.put_workflow(replace(first, version=3, length=4), 1, [step(4)])
            await flows.pool.run(lambda conn: conn.pgconn.untrace())
        # Each waits for the server: a Sync ends an extended-protocol statement, a Query is a simple one
        # (psycopg's BEGIN, COMMIT and ROLLBACK).
        waits = re.findall(r"^F\t\d+\t(Sync|Query)\b", trace.read_text(), re.MULTILINE)
        assert waits == ["Sync"] * 3
        found = await flows.get_entries("wf", 1, 4)
        assert found == [JournalRow(1, step(1)), JournalRow(2, again), JournalRow(2, step(3))]
        assert (await flows.get_workflow("wf")) == replace(first, version=2, length=3)


async def test_a_run_sends_its_last_write_with_the_fence_and_no_begin_or_commit(
    postgres_settings: PostgresSettings, tmp_path: Path
) -> None:
    """A run's last write goes with the fence as one statement, which commits it: a produce sends its
    insert with the fence, a lease and a complete their read, then their write with the fence, none of
    them a ``BEGIN`` or a ``COMMIT`` (docs/adr/0065), and, their read needing no transaction with the
    write, each statement alone (its own Sync). A run that writes, then reads, then writes sends them in
    the pipeline, in its implicit transaction, which its one Sync commits (docs/adr/0073). Counted in
    libpq's trace of the protocol (one Execute message per statement) on a pool of one connection."""
    settings = dataclasses.replace(postgres_settings, connections=1)
    async with opened_store(settings, EPOCH) as store:
        part = Part(store.partition("queue", 0))
        await part.produce(item("claimed"))  # the first run claims the partition first

        def traced(conn: psycopg.Connection[tuple[object, ...]], fileno: int) -> None:
            conn.pgconn.trace(fileno)
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

        async def sent(operation: Awaitable[object]) -> tuple[int, int, int]:
            """The Execute, Sync and Query (BEGIN, COMMIT) messages ``operation`` sent."""
            trace = tmp_path / "trace"
            with trace.open("w") as out:
                await store.pool.run(lambda conn: traced(conn, out.fileno()))
                try:
                    await operation
                finally:
                    await store.pool.run(lambda conn: conn.pgconn.untrace())
            sent = re.findall(r"^F\t\d+\t(Execute|Sync|Query)\b", trace.read_text(), re.MULTILINE)
            return sent.count("Execute"), sent.count("Sync"), sent.count("Query")

        assert await sent(part.produce(item("a"))) == (1, 1, 0)
        leased: list[list[Item]] = []

        async def lease() -> None:
            leased.extend(await part.lease(2))

        assert await sent(lease()) == (2, 2, 0)
        assert await sent(part.complete(*ids(leased[0]))) == (2, 2, 0)

        def insert_head_delete(tx: PartitionTx) -> None:
            (inserted,) = [replace(item("b"), id=part.new_id())]
            tx.insert([inserted])
            assert [i.id for i in tx.head(1)] == [inserted.id]  # the run reads its own insert
            tx.delete([inserted.id])

        assert await sent(part.run(insert_head_delete)) == (3, 1, 0)
        assert payloads(await part.list()) == []


async def test_a_run_that_fails_after_writing_applies_nothing(store: PostgresStore) -> None:
    """Without a ``BEGIN``, the sync that ends a run would commit what it sent before it failed: a run
    that raises, or whose value the driver refuses to send, is rolled back first (docs/adr/0065)."""
    part = Part(store.partition("queue", 0))
    (kept,) = await part.produce(item("kept"))

    def insert_then(fail: Callable[[PartitionTx], object]) -> Callable[[PartitionTx], None]:
        def fn(tx: PartitionTx) -> None:
            tx.insert([replace(item("lost"), id=part.new_id())])
            tx.head(1)  # the insert has run: its answer came before the head's
            fail(tx)

        return fn

    with pytest.raises(ZeroDivisionError):
        await part.run(insert_then(lambda tx: 1 // 0))
    # An attempt count beyond BIGINT: the driver cannot send it, and PostgreSQL never hears why.
    too_big = replace(kept, attempts=2**64)
    with pytest.raises(OverflowError):
        await part.run(insert_then(lambda tx: tx.update([too_big])))
    assert payloads(await part.list()) == ["kept"]


async def test_a_job_whose_caller_gave_up_before_it_started_never_runs(
    postgres_settings: PostgresSettings,
) -> None:
    """The pool's worker threads skip a job whose caller was cancelled while it waited for a
    connection, as an executor does: a run nobody awaits any more must not commit."""
    async with opened_store(dataclasses.replace(postgres_settings, connections=1), EPOCH) as store:
        release = threading.Event()
        ran: list[str] = []

        def blocking(conn: object) -> None:
            release.wait(timeout=30)
            ran.append("first")

        first = asyncio.create_task(store.pool.run(blocking))
        second = asyncio.create_task(store.pool.run(lambda conn: ran.append("second")))
        await asyncio.sleep(0)  # both jobs are queued; the only thread holds the first
        second.cancel()
        release.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await second
        assert await store.pool.run(lambda conn: ran.append("third")) is None
        assert ran == ["first", "third"]
