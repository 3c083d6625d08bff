"""The storage contract bound to SplitStore (docs/processes.md): a process's partitions in its own
sqlite file, everything else in the file the processes share, plus what only the split has to do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from querator.storage.base import QueueRecord, Store
from querator.storage.memory import MemoryStore
from querator.storage.split import SplitStore
from querator.storage.sqlite import SqliteStore
from tests.storage.contract import NOW, RecordsContract, StoreContract, item, new_ids, payloads


class TestSplitStore(StoreContract, RecordsContract):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = SplitStore(SqliteStore(tmp_path / "shared.sqlite"), SqliteStore(tmp_path / "local.sqlite"))
        await store.open()
        yield store
        await store.close()


NEXT_ID = new_ids()


async def put(store: Store, queue: str, payload: str, partition: int = 0) -> None:
    new = item(payload, id=NEXT_ID())
    await store.partition(queue, partition).run(lambda tx: tx.insert([new]))


async def held(store: Store, queue: str) -> list[str]:
    return payloads(await store.partition(queue, 0).run(lambda tx: tx.head(10)))


async def test_partitions_are_the_process_own_and_settings_are_shared(tmp_path: Path) -> None:
    shared = tmp_path / "shared.sqlite"
    first = SplitStore(SqliteStore(shared), SqliteStore(tmp_path / "first.sqlite"))
    second = SplitStore(SqliteStore(shared), SqliteStore(tmp_path / "second.sqlite"))
    await first.open()
    await second.open()
    try:
        assert await first.add_queue(QueueRecord("q", created_at=NOW))
        assert (await second.get_queue("q")) is not None  # one process creates, the other sees it
        assert not await second.add_queue(QueueRecord("q", created_at=NOW))
        await put(first, "q", "mine")
        assert await held(first, "q") == ["mine"]
        assert await held(second, "q") == []  # the same partition name, another process's store
    finally:
        await first.close()
        await second.close()


async def test_open_drops_the_partitions_of_queues_deleted_meanwhile(tmp_path: Path) -> None:
    shared_path, local_path = tmp_path / "shared.sqlite", tmp_path / "local.sqlite"
    store = SplitStore(SqliteStore(shared_path), SqliteStore(local_path))
    await store.open()
    for name in ("kept", "deleted"):
        await store.add_queue(QueueRecord(name, created_at=NOW))
        await put(store, name, "x")
    await store.close()
    other = SqliteStore(shared_path)  # another process deletes a queue while this one is down
    await other.open()
    await other.delete_queue("deleted")
    await other.close()

    again = SplitStore(SqliteStore(shared_path), SqliteStore(local_path))
    await again.open()
    try:
        assert await again.local.partition_queues() == ["kept"]
        assert await held(again, "kept") == ["x"]
    finally:
        await again.close()


async def test_forget_partitions_drops_every_partition_of_a_queue() -> None:
    local = MemoryStore()
    store = SplitStore(MemoryStore(), local)
    await store.open()
    for number in (0, 7, 4095):
        await put(store, "q", "x", number)
    assert await local.partition_queues() == ["q"]
    await store.forget_partitions("q")
    assert await local.partition_queues() == []
