"""Moving a sqlite data dir's partitions to another number of processes (querator/processes/_data_dir.py,
docs/processes.md): cut short at every step, as kill -9 would, the next start completes the move, to
the new number or back to the old one, with every item, lease, schedule, greatest id and dedup record
once, each in the database of the process that owns its partition.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from querator.cluster.local_members import process_owner
from querator.cluster.node import LOCAL_NODE
from querator.config import ConfigError
from querator.processes import _data_dir
from querator.processes._data_dir import MOVING, RECORD, database, held, settle
from querator.storage.base import Item, PartitionTx, QueueRecord
from querator.storage.sqlite import SqliteStore, _move

QUEUES = ("orders", "mails")
PARTITIONS = 4
NOW = 1_700_000_000_000_000
FROM = 2


class Crash(Exception):
    """Where a kill -9 would have stopped the move."""


def items_of(queue: str, number: int) -> list[Item]:
    """Queued, leased and scheduled items of one partition."""
    prefix = f"{queue}-{number}"
    return [
        Item(id=f"{prefix}-a", payload=b"queued", created_at=NOW),
        Item(id=f"{prefix}-b", payload=b"leased", is_leased=True, lease_deadline=NOW + 60, attempts=1),
        Item(id=f"{prefix}-c", payload=b"scheduled", enqueue_at=NOW + 3600),
        Item(id=f"{prefix}-d", payload=b"queued too", created_at=NOW, source_id="src"),
        Item(id=f"{prefix}-e", payload=b"x" * 1000, kind="big"),
    ]


def inserting(items: list[Item]) -> Callable[[PartitionTx], None]:
    return lambda tx: tx.insert(items)


@pytest.fixture
async def written(tmp_path: Path) -> Path:
    """A data dir as 2 processes wrote it: the queue records in process 0's database, each partition in
    its owner's, each queue's dedup records in the database of its partition 0's owner."""
    data = tmp_path / "template"
    data.mkdir()
    owner = process_owner(LOCAL_NODE, FROM)
    stores = [SqliteStore(database(data, i)) for i in range(FROM)]
    for store in stores:
        await store.open()
    for queue in QUEUES:
        assert await stores[0].add_queue(QueueRecord(name=queue, requested_partitions=PARTITIONS))
        for number in range(PARTITIONS):
            await (
                stores[owner(queue, number)].partition(queue, number).run(inserting(items_of(queue, number)))
            )
        seen = (
            await stores[owner(queue, 0)]
            .partition(queue, 0)
            .run(lambda tx: tx.dedup([f"d-{n}" for n in range(7)], NOW, NOW + 10_000))
        )
        assert seen == set()  # none seen before: all recorded
    for store in stores:
        await store.close()
    (data / RECORD).write_text(f"{FROM}\n")
    return data


def contents(
    data: Path,
) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]], dict[tuple[str, int], str]]:
    """Every item row (with its partition), every dedup record and every partition's greatest id, each
    with the index of the database holding it; checks that no item lost its partition row."""
    items: Counter[tuple[Any, ...]] = Counter()
    dedup: Counter[tuple[Any, ...]] = Counter()
    last_ids: dict[tuple[str, int], str] = {}
    for path in data.glob("querator*.db"):
        index = 0 if path.name == "querator.db" else int(path.stem.split("-")[1])
        conn = sqlite3.connect(path)
        try:
            rows = conn.execute(
                "SELECT p.queue, p.number, i.id, i.source_id, i.is_leased, i.lease_deadline, "
                "i.expire_deadline, i.enqueue_at, i.created_at, i.attempts, i.max_attempts, i.reference, "
                "i.encoding, i.kind, i.payload FROM items i JOIN partitions p ON p.key = i.part"
            ).fetchall()
            assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == len(rows)
            items.update((index, *row) for row in rows)
            dedup.update((index, *row) for row in conn.execute("SELECT queue, id, expires_at FROM dedup"))
            for queue, number, last_id in conn.execute("SELECT queue, number, last_id FROM partitions"):
                assert (queue, number) not in last_ids, f"{queue}/{number} in two databases"
                last_ids[queue, number] = last_id
        finally:
            conn.close()
    return items, dedup, last_ids


def placed_for(processes: int, data: Path) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """What ``contents`` must find after a move to ``processes``: each row once, at its owner."""
    owner = process_owner(LOCAL_NODE, processes)
    items, dedup, _ = contents(data)
    return (
        Counter({(owner(row[1], row[2]), *row[1:]): 1 for row in items}),
        Counter({(owner(row[1], 0), *row[1:]): 1 for row in dedup}),
    )


def check_moved(
    data: Path, processes: int, expected: tuple[Counter[Any], Counter[Any]], last_ids: Any
) -> None:
    items, dedup, found_last_ids = contents(data)
    assert items == expected[0]
    assert dedup == expected[1]
    assert found_last_ids == last_ids
    assert not (data / MOVING).exists()
    if processes == 1:
        assert not (data / RECORD).exists()
    else:
        assert (data / RECORD).read_text() == f"{processes}\n"
    owned = {database(data, i).name for i in range(processes)}
    assert database(data, 0).exists()
    files = {re.sub(r"(\.initialised|-wal|-shm)$", "", p.name) for p in data.glob("querator*.db*")}
    assert files <= owned  # nothing left of a process that no longer exists


def crash_after(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, steps: int) -> list[int]:
    """Makes ``target.name`` raise Crash instead of running once it ran ``steps`` times; counts runs."""
    real = getattr(target, name)
    ran = [0]

    def step(*args: Any) -> Any:
        if ran[0] >= steps:
            raise Crash
        ran[0] += 1
        return real(*args)

    monkeypatch.setattr(target, name, step)
    return ran


def crash_at_every_step(
    written: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: tuple[Any, str],
    numbers: tuple[int, int],
    after_crash: Callable[[Path, int, list[int]], None] = lambda data, steps, ran: None,
) -> int:
    """Moves copies of ``written`` from ``numbers[0]`` to ``numbers[1]`` processes, each cut short one
    step later (``target``, a module and its function, raising Crash after 0, 1, 2... calls) until one
    runs through; after each cut, ``after_crash`` checks the data dir and the next start, alternately
    with the new and the old number, must complete the move. Returns how many steps were cut."""
    old, new = numbers
    _, _, last_ids = contents(written)
    expected = {n: placed_for(n, written) for n in numbers}
    steps = 0
    while True:
        data = tmp_path / f"crash-{steps}"
        shutil.copytree(written, data)
        with monkeypatch.context() as patch:
            ran = crash_after(patch, *target, steps)
            try:
                settle(data, new)
            except Crash:
                pass
            else:
                check_moved(data, new, expected[new], last_ids)
                return steps
        after_crash(data, steps, ran)
        again = new if steps % 2 else old
        settle(data, again)
        check_moved(data, again, expected[again], last_ids)
        steps += 1


def test_a_move_completes_whatever_the_next_start_after_a_crash_in_any_commit(
    written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 -> 3 processes cut short before each of its commits, then started with 3 (or again with 2):
    the next start completes the move, and the data dir holds what it held, each row once at its owner."""
    monkeypatch.setattr(_move, "BATCH_ITEMS", 2)  # several batches per partition, each a step
    _, _, last_ids = contents(written)
    assert len(last_ids) == len(QUEUES) * PARTITIONS

    def cut_short(data: Path, steps: int, ran: list[int]) -> None:
        assert ran[0] == steps
        assert (data / MOVING).exists() and (data / RECORD).read_text() == "2\n"

    steps = crash_at_every_step(written, tmp_path, monkeypatch, (_move, "_commit"), (2, 3), cut_short)
    assert steps > 20  # every partition moved in batches, each a commit: each a point of the crash


def test_a_move_to_fewer_processes_completes_after_a_crash_in_any_file_removal(
    written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 -> 1 removes querator-1.db and the record: cut short before each removal, the next start (with
    1, or again with 2) completes; a marker never outlives its database."""
    steps = crash_at_every_step(written, tmp_path, monkeypatch, (os, "unlink"), (2, 1))
    assert steps >= 3  # the marker, the database, the record, the move's own file


def test_a_new_data_dir_records_its_number_and_a_second_node_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setattr(_data_dir, "LOCK_WAIT_S", 0.0)
    with held(data, 2):
        assert (data / RECORD).read_text() == "2\n"
        with pytest.raises(ConfigError) as refused, held(data, 2):
            pass
    assert str(refused.value) == (
        f"data-dir is invalid; another querator node uses {data} (it holds '{data / 'querator.lock'}')"
    )
    with held(data, 1):  # let go; then started with one process: no record, as one process writes
        assert not (data / RECORD).exists()


async def test_the_partitions_of_a_deleted_queue_are_dropped_not_moved(written: Path) -> None:
    """A queue deleted while process 1 was down left its partitions and dedup records there (process 1
    would drop them when it opens): moved to process 0, which drops nothing, a queue created again
    under the name would find them. The move drops them instead."""
    store = SqliteStore(database(written, 1))
    await store.open()
    for number in range(PARTITIONS):
        await store.partition("deleted", number).run(inserting(items_of("deleted", number)))
    await store.partition("deleted", 0).run(lambda tx: tx.dedup(["d-0"], NOW, NOW + 10_000))
    await store.close()
    expected = placed_for(1, written)
    _, _, last_ids = contents(written)

    settle(written, 1)
    items, dedup, _ = contents(written)
    assert not [row for row in items if row[1] == "deleted"]
    assert not [row for row in dedup if row[1] == "deleted"]
    check_moved(
        written,
        1,
        (
            Counter({row: 1 for row in expected[0] if row[1] != "deleted"}),
            Counter({row: 1 for row in expected[1] if row[1] != "deleted"}),
        ),
        {name: last_id for name, last_id in last_ids.items() if name[0] != "deleted"},
    )
