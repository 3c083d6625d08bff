"""The storage contract bound to the sqlite backend, plus what only a durable backend has to do."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from querator.errors import StorageError
from querator.ksuid import KsuidGenerator
from querator.storage.base import DEFAULT_DEDUP_WINDOW, Item, PartitionTx, QueueRecord, Store
from querator.storage.operations import NEAR_NOW, RetryEntry
from querator.storage.schedules import schedule_slot
from querator.storage.sqlite import (
    INITIALISED_SUFFIX,
    SCHEMA,
    SCHEMA_VERSION,
    SqliteStorageError,
    SqliteStore,
)
from tests.storage.contract import NOW, SECOND, Part, RecordsContract, StoreContract, ids, item, payloads
from tests.storage.schedule_contract import schedule


class TestSqliteStore(StoreContract, RecordsContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = SqliteStore(tmp_path / "querator.sqlite")
        await store.open()
        yield store
        await store.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "querator.sqlite")
    await store.open()
    yield store
    await store.close()


async def block_writer(
    store: SqliteStore, then: Callable[[PartitionTx], object] = lambda tx: None
) -> Blocked:
    """Occupies the writer thread until ``gate`` is set, so that the next jobs queue up behind it."""
    loop = asyncio.get_running_loop()
    entered, gate = asyncio.Event(), threading.Event()

    def block(tx: PartitionTx) -> None:
        then(tx)
        loop.call_soon_threadsafe(entered.set)
        gate.wait(10)

    task = asyncio.ensure_future(store.partition("blocker", 0).run(block))
    await entered.wait()
    return Blocked(gate, task)


@dataclass
class Blocked:
    gate: threading.Event
    task: asyncio.Future[None]

    async def release(self) -> None:
        await asyncio.sleep(0)  # every job submitted so far is queued now
        self.gate.set()
        await self.task


async def test_reopen_finds_everything(tmp_path: Path) -> None:
    path = tmp_path / "restart.sqlite"
    record = QueueRecord(name="orders", namespace="shop", lease_timeout=60 * SECOND, extra={"k": "v"})
    store = SqliteStore(path)
    await store.open()
    assert await store.add_queue(record)
    part = Part(store.partition("orders", 0))
    await part.produce(
        item("leased"), item("retried"), item("queued"), item("scheduled", enqueue_at=NOW + 60 * SECOND)
    )
    [[lease, retried]] = await part.lease(2, deadline=NOW + 30 * SECOND)
    await part.retry(RetryEntry(retried.id, retry_at=NOW + 90 * SECOND))
    before = await part.list()
    scheduled_before = await part.list(scheduled=True)
    last = await part.last_id()
    await store.close()

    store = SqliteStore(path)
    await store.open()
    try:
        assert await store.get_queue("orders") == record
        part = Part(store.partition("orders", 0))
        assert await part.list() == before
        assert await part.list(scheduled=True) == scheduled_before
        assert payloads(before) == ["leased", "queued"]
        assert payloads(scheduled_before) == ["retried", "scheduled"]
        assert (await part.get(lease.id))[lease.id].lease_deadline == NOW + 30 * SECOND
        assert await part.last_id() == last
        deadlines = await part.run(lambda tx: tx.deadlines())
        assert (deadlines.lease_deadline, deadlines.enqueue_at) == (NOW + 30 * SECOND, NOW + 60 * SECOND)

        part.new_id = KsuidGenerator(NOW // SECOND, after=last).next
        new = await part.produce(item("after-restart"))
        assert new[0].id > last
        result = await part.lifecycle(NOW + 120 * SECOND)
        assert (result.requeued, result.enqueued) == (1, 2)
        stored = await part.list()
        assert payloads(stored) == ["queued", "after-restart", "leased", "retried", "scheduled"]
        assert ids(stored) == sorted(ids(stored))
    finally:
        await store.close()


async def test_failed_run_applies_nothing(store: SqliteStore) -> None:
    part = Part(store.partition("queue", 0))
    (kept,) = await part.produce(item("kept"))

    def insert_then_fail(tx: PartitionTx) -> None:
        tx.insert([Item(id=part.new_id(), payload=b"lost")])
        tx.delete([kept.id])
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await part.run(insert_then_fail)

    def duplicate(tx: PartitionTx) -> None:
        tx.insert([Item(id=part.new_id(), payload=b"lost")])
        tx.insert([Item(id=kept.id, payload=b"duplicate")])

    with pytest.raises(SqliteStorageError, match=r"^sqlite storage error; ") as caught:
        await part.run(duplicate)
    assert isinstance(caught.value, StorageError)
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    assert payloads(await part.list()) == ["kept"]
    assert await part.last_id() == kept.id


async def test_group_commit_isolates_failing_jobs(store: SqliteStore) -> None:
    """Jobs waiting together share one transaction; a failing one rolls back only itself."""
    statements: list[str] = []
    blocked = await block_writer(
        store,
        lambda tx: tx._conn.set_trace_callback(statements.append),  # type: ignore[attr-defined]
    )

    parts = [Part(store.partition("queue", n)) for n in range(6)]

    def fail(tx: PartitionTx) -> None:
        tx.insert([Item(id=parts[2].new_id(), payload=b"lost")])
        raise ValueError("job failed")

    def conflict(tx: PartitionTx) -> None:
        tx.insert([Item(id="0" * 27, payload=b"x"), Item(id="0" * 27, payload=b"y")])

    runs = [
        asyncio.ensure_future(parts[0].produce(item("p0"))),
        asyncio.ensure_future(parts[1].produce(item("p1"))),
        asyncio.ensure_future(parts[2].run(fail)),
        asyncio.ensure_future(parts[3].run(conflict)),
        asyncio.ensure_future(parts[4].produce(item("p4"))),
        asyncio.ensure_future(store.add_queue(QueueRecord(name="q"))),
    ]
    await blocked.release()
    results = await asyncio.gather(*runs, return_exceptions=True)
    assert isinstance(results[2], ValueError)
    assert isinstance(results[3], SqliteStorageError)
    assert results[5] is True
    for n in (0, 1, 4):
        assert isinstance(results[n], list)
    commits = [s for s in statements if s == "COMMIT"]
    assert len(commits) == 2, statements  # the blocker's, then one for the whole group
    for n, expected in [(0, ["p0"]), (1, ["p1"]), (2, []), (3, []), (4, ["p4"])]:
        assert payloads(await parts[n].list()) == expected
    assert await store.get_queue("q") == QueueRecord(name="q")
    assert await parts[2].last_id() == ""


async def test_close_finishes_submitted_jobs_then_refuses(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "close.sqlite")
    await store.open()
    await store.open()  # idempotent
    part = Part(store.partition("queue", 0))
    runs = [asyncio.ensure_future(part.produce(item(str(n)))) for n in range(20)]
    await asyncio.sleep(0)  # every run has submitted its job
    await store.close()
    assert all(r.done() and not r.cancelled() and r.exception() is None for r in runs)
    with pytest.raises(SqliteStorageError, match="not open"):
        await part.list()
    await store.close()  # idempotent

    again = SqliteStore(tmp_path / "close.sqlite")
    await again.open()
    try:
        assert payloads(await Part(again.partition("queue", 0)).list()) == [str(n) for n in range(20)]
    finally:
        await again.close()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    store = SqliteStore(path)
    with pytest.raises(SqliteStorageError, match="schema version 99"):
        await store.open()
    await store.close()
    with pytest.raises(SqliteStorageError):
        await store.get_queue("x")


async def test_unopenable_file_fails_open(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "missing-dir" / "db.sqlite")
    with pytest.raises(SqliteStorageError):
        await store.open()
    await store.close()


async def test_the_marker_tells_an_emptied_database_from_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "querator.db"
    marker = Path(f"{path}{INITIALISED_SUFFIX}")
    path.write_bytes(b"")  # without the marker: a new store (what a crash before the first commit leaves)
    store = SqliteStore(path)
    await store.open()
    await store.close()
    assert await asyncio.to_thread(marker.exists)
    path.write_bytes(b"")
    store = SqliteStore(path)
    with pytest.raises(SqliteStorageError, match=r"is empty, but .* says it held a store"):
        await store.open()
    await store.close()
    # A database written before the marker existed is checked like any other, and gets one.
    await asyncio.to_thread(marker.unlink)
    await asyncio.to_thread(path.unlink)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    store = SqliteStore(path)
    await store.open()
    await store.close()
    assert await asyncio.to_thread(marker.exists)


def test_synchronous_is_checked() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStore("x.sqlite", synchronous="FULL; DROP TABLE items")


async def test_schema_is_created_once(tmp_path: Path) -> None:
    path = tmp_path / "schema.sqlite"
    for _ in range(2):
        store = SqliteStore(path, synchronous="normal")
        await store.open()
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


async def test_a_version_1_database_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO queues VALUES ('old', '_system', 1, 2, '', 0, '', 1, 3, 4, '{}')")
    conn.execute("INSERT INTO partitions (queue, number) VALUES ('old', 0)")
    item_id = "2fLaS1wDqwbU9iSjvZGm1Rdp5hq"
    conn.execute(
        "INSERT INTO items VALUES (1, ?, '', 0, 0, 0, 0, 1, 0, 0, '', '', '', x'6f6c64')", (item_id,)
    )  # an item of version 2's layout: no job, no failures
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    await store.open()
    try:
        record = await store.get_queue("old")
        assert record is not None and record.dedup_window == DEFAULT_DEDUP_WINDOW
        part = store.partition("old", 0)
        assert await part.run(lambda tx: tx.dedup({"a"}, NOW, NOW + 10)) == set()
        assert await part.run(lambda tx: tx.dedup({"a", "b"}, NOW, NOW + 10)) == {"a"}
        [old] = await part.run(lambda tx: tx.head(10))
        assert (old.id, old.payload, old.job_id, old.failures) == (item_id, b"old", "", b"")
    finally:
        await store.close()


async def test_scheduling_threshold_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "sched.sqlite"
    store = SqliteStore(path)
    await store.open()
    part = Part(store.partition("queue", 0))
    await part.produce(item("s", enqueue_at=NOW + NEAR_NOW))
    await store.close()
    store = SqliteStore(path)
    await store.open()
    try:
        part = Part(store.partition("queue", 0))
        result = await part.lifecycle(NOW + NEAR_NOW + 1)
        assert result.enqueued == 1
        assert payloads(await part.head()) == ["s"]
    finally:
        await store.close()


async def test_a_job_that_loses_the_transaction_fails_its_group(store: SqliteStore) -> None:
    """When sqlite rolls back the whole transaction, the jobs before in the group fail too; later ones run."""
    blocked = await block_writer(store)
    before, breaker, after = (Part(store.partition("queue", n)) for n in range(3))

    def lose_transaction(tx: PartitionTx) -> None:
        tx._conn.execute("ROLLBACK")  # type: ignore[attr-defined]  # what SQLITE_FULL or IOERR may do
        raise sqlite3.OperationalError("database or disk is full")

    runs = [
        asyncio.ensure_future(before.produce(item("before"))),
        asyncio.ensure_future(breaker.run(lose_transaction)),
        asyncio.ensure_future(after.produce(item("after"))),
    ]
    await blocked.release()
    first, second, third = await asyncio.gather(*runs, return_exceptions=True)
    assert isinstance(first, SqliteStorageError)
    assert "rolled back" in first.message
    assert isinstance(second, SqliteStorageError)
    assert "disk is full" in second.message
    assert isinstance(third, list)
    assert await before.list() == []
    assert payloads(await after.list()) == ["after"]
    assert await before.last_id() == ""
    await before.produce(item("again"))
    assert payloads(await before.list()) == ["again"]


async def test_cancelled_callers_do_not_break_the_writer(store: SqliteStore) -> None:
    blocked = await block_writer(store)
    part = Part(store.partition("queue", 0))
    cancelled = asyncio.ensure_future(part.produce(item("cancelled")))
    kept = asyncio.ensure_future(part.produce(item("kept")))
    await asyncio.sleep(0)
    cancelled.cancel()
    await blocked.release()
    await kept
    assert cancelled.cancelled()
    assert payloads(await part.list()) == ["kept"]


async def test_schedules_of_a_database_without_slots_are_filed_under_their_slots(tmp_path: Path) -> None:
    """A database written before slots (docs/adr/0041) holds schedules and no slot tables; so may one an
    older version wrote to after a newer one: every open files them under their slots."""
    path = tmp_path / "slots.sqlite"
    store = SqliteStore(path)
    await store.open()
    await store.add_schedule(schedule("old"))
    await store.add_schedule(schedule("gone"))
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE schedule_slot_names")
    conn.execute("DROP TABLE schedule_slots")
    conn.execute("CREATE TABLE schedule_slot_names (slot INTEGER, name TEXT, PRIMARY KEY (slot, name))")
    conn.execute("INSERT INTO schedule_slot_names VALUES (?, 'gone')", (schedule_slot("gone"),))
    conn.execute("DELETE FROM schedules WHERE name = 'gone'")  # deleted by a version without slots
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    await store.open()
    try:
        assert await store.list_slot_schedules(schedule_slot("old"), "", 10) == [schedule("old")]
        assert await store.list_slot_schedules(schedule_slot("gone"), "", 10) == []
        filled = await store.slot_versions([schedule_slot("old")])  # a slot without one reads as empty
        assert list(filled) == [schedule_slot("old")]
        assert await store.update_schedule(schedule("old", cron="0 3 * * *"))
        assert await store.slot_versions([schedule_slot("old")]) != filled
    finally:
        await store.close()
