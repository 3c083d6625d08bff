"""A node of several processes (``querator serve --processes N``, docs/processes.md), with real processes.

- Bad values of ``--processes`` are refused with one line before anything starts (a cluster node's
  processes: test_cluster_processes.py). A sqlite data dir started with another number of processes
  moves its partitions to their new owners: nothing lost, leased twice or forgotten (leases, schedules,
  dedup ids); tests/unit/processes/test_data_dir.py cuts such a move short at every step, and here a
  node is killed with SIGKILL mid-move: its next start, with the new number or the old, completes it.
  A second node on a data dir in use is refused (the running node holds its lock).
- The processes split a queue's partitions and forward to each other: every partition is served
  whichever process a connection lands on; API keys on, the forwards are signed with the supervisor's
  secret of the run.
- kill -9 of one process while producers and consumers run loses no acknowledged item (duplicates are
  allowed: a lease in flight at the kill expires and is delivered again), and after its restart every
  partition is served again.
- A restart of the whole node keeps its items (sqlite), each in its process's database; on Cassandra a
  process restarted after kill -9 claims its partitions again and finds their items.
- SIGTERM to the supervisor answers a waiting lease with 453 and stops every process; a supervisor
  killed with SIGKILL takes its processes with it (they see its pipe close), and the last of them
  removes the memory store's temporary directory.
- A schedule changed through the process that does not fire it reaches the one that does at once: the
  first tells the second (``schedules.refresh``). A rate limit's take asked of either process is kept
  by the owner of its key.
- A process that keeps failing soon after its start (the code it runs from broke under the node) stops
  the node with status 1, and no process is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
from collections import Counter
from functools import partial
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient, ConnectionFailed
from querator.cluster.local_members import process_owner
from querator.cluster.node import LOCAL_NODE
from querator.cluster.ring import Ring
from querator.errors import QueratorError, RetryRequest
from querator.processes import database
from tests.cassandra_node import CassandraNode

from .conftest import (
    START_DEADLINE,
    ServerProcess,
    Servers,
    eventually,
    free_port,
    kill9,
    server_env,
    sigterm_while_a_lease_waits,
    spread_queue,
    start_refused,
    terminate,
    wait_until,
)
from .test_cassandra import cassandra_args

pytestmark = pytest.mark.integration

PROCESSES = 2
PARTITIONS = 4
DEADLINE = 60.0
MEMBERS = [f"local-{i}" for i in range(PROCESSES)]
MOVED_PARTITIONS = 6
MOVED_ITEMS = {f"item-{n}" for n in range(40)} | {f"dedup-{n}" for n in range(4)}
MOVED_SCHEDULED = {f"later-{n}" for n in range(4)}


def split_queue(prefix: str) -> str:
    """A queue name whose partitions the ring gives to every process (some names land on one only)."""
    return spread_queue(MEMBERS, PARTITIONS, prefix)


def children(server: ServerProcess) -> list[int]:
    """The pids of the supervisor's processes, as the kernel lists them."""
    listed = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text()
    return [int(pid) for pid in listed.split()]


def sqlite_args(data: Path) -> tuple[str, ...]:
    return ("--processes", str(PROCESSES), "--storage", "sqlite", "--data-dir", str(data))


async def all_listening(server: ServerProcess) -> None:
    """Waits until every process logged that it listens: before then the kernel gives the port's
    connections to those that do, which is fine, but a test that kills one must know both are up."""
    await eventually(
        lambda: _true(server.stderr().count("querator listening on") >= PROCESSES),
        START_DEADLINE,
        "every process listens",
    )


async def _true(value: bool) -> bool:
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "querator: processes is invalid; '0' is not a whole number from 1 to 256\n"),
        ("257", "querator: processes is invalid; '257' is not a whole number from 1 to 256\n"),
        ("two", "querator: processes is invalid; 'two' is not a whole number\n"),
    ],
)
def test_bad_process_counts_are_refused(servers: Servers, value: str, message: str) -> None:
    server = start_refused(servers, "--processes", value, "--storage", "memory")
    assert server.stderr() == message


class MovingNode:
    """A sqlite data dir started with one number of processes after another, and what its queue's
    leases handed out."""

    def __init__(self, servers: Servers, data: Path) -> None:
        self.servers = servers
        self.data = data
        self.queue = spread_queue([f"local-{i}" for i in range(3)], MOVED_PARTITIONS, "moved")
        self.delivered: list[str] = []

    def args(self, processes: int) -> tuple[str, ...]:
        return ("--processes", str(processes), "--storage", "sqlite", "--data-dir", str(self.data))

    async def start(self, processes: int) -> ServerProcess:
        server = await self.servers.astart(*self.args(processes))
        await eventually(
            lambda: _true(server.stderr().count("querator listening on") >= processes),
            START_DEADLINE,
            "every process listens",
        )
        return server

    def spawn(self, processes: int) -> ServerProcess:
        """Starts the node without waiting for it to answer (it moves the partitions first)."""
        port = free_port()
        return self.servers.spawn(*self.args(processes), "--address", f"127.0.0.1:{port}", port=port)

    async def fill(self, client: AsyncClient) -> tuple[int, list[str]]:
        """Creates the queue and produces its items, the scheduled ones and those with dedup ids; leases
        a few, returning them (held past the moves, to complete later)."""
        queue = self.queue
        await client.create_queue(queue, lease_timeout="5m", expire_timeout="1h", partitions=MOVED_PARTITIONS)
        for payload in sorted(MOVED_ITEMS):
            async with AsyncClient(client.endpoint) as one:  # fresh connections: the kernel spreads them
                dedup = f"d-{payload.split('-')[1]}" if payload.startswith("dedup-") else None
                assert (await one.produce(queue, [payload], dedup_id=dedup))[0]
        await client.produce(queue, sorted(MOVED_SCHEDULED), delay="30s")
        held_partition, held = await self.lease(client, 5)
        assert held
        return held_partition, held

    async def lease(self, client: AsyncClient, count: int) -> tuple[int, list[str]]:
        reply = await client.lease(self.queue, batch_size=count, client_id="c", request_timeout="5s")
        self.delivered.extend(i.bytes.decode() for i in reply.items)
        return reply.partition, [i.id for i in reply.items]

    async def deduplicates(self, client: AsyncClient) -> bool:
        """Whether the dedup ids produced on 2 processes are still seen (nothing stored again)."""
        stored = [await client.produce(self.queue, [f"again-{n}"], dedup_id=f"d-{n}") for n in range(4)]
        return stored == [[""]] * 4

    async def scheduled(self, client: AsyncClient) -> set[str]:
        found: set[str] = set()
        for partition in range(MOVED_PARTITIONS):
            found.update(
                i.payload.decode() for i in (await client.list_scheduled(self.queue, partition)).items
            )
        return found

    async def drained(self, client: AsyncClient) -> bool:
        with contextlib.suppress(RetryRequest):  # a partition still loading
            partition, ids = await self.lease(client, 100)
            if ids:
                await client.complete(self.queue, partition, ids)
        return len(self.delivered) >= len(MOVED_ITEMS | MOVED_SCHEDULED)


async def test_a_data_dir_moves_to_another_number_of_processes(servers: Servers, tmp_path: Path) -> None:
    """Items produced on 2 processes (queued, leased, scheduled, with dedup ids) are moved to the owner
    of their partition when the data dir is started with 3, then 1, then 2 processes again: every item
    is leased once, a held lease is still completed, dedup ids still deduplicate, and the scheduled
    items arrive."""
    data = tmp_path / "data"
    moving = MovingNode(servers, data)
    queue = moving.queue
    assert {Ring(MEMBERS, 1).owner(queue, n) for n in range(MOVED_PARTITIONS)} == set(MEMBERS)
    node = await moving.start(2)
    async with AsyncClient(node.url) as client:
        held_partition, held = await moving.fill(client)  # held past the moves, completed below
    assert terminate(node) == 0, node.describe()
    assert (data / "processes").read_text() == "2\n"

    node = await moving.start(3)
    assert f"{data} was written by 2 process(es): moving its partitions to 3" in node.stderr()
    assert sorted(p.name for p in data.glob("querator*.db")) == [
        "querator-1.db",
        "querator-2.db",
        "querator.db",
    ]
    assert (data / "processes").read_text() == "3\n"
    async with AsyncClient(node.url) as client:
        partition, ids = await moving.lease(client, 10)
        await client.complete(queue, partition, ids)
        assert await moving.deduplicates(client)
        assert await moving.scheduled(client) == MOVED_SCHEDULED
    assert terminate(node) == 0, node.describe()

    node = await moving.start(1)
    assert f"{data} was written by 3 process(es): moving its partitions to 1" in node.stderr()
    assert not list(
        data.glob("querator-*")
    )  # the databases of processes 1 and 2 are gone, with their markers
    assert not (data / "processes").exists()
    async with AsyncClient(node.url) as client:
        await client.complete(queue, held_partition, held)  # still leased, wherever its partition went
        assert await moving.deduplicates(client)
        assert await moving.scheduled(client) == MOVED_SCHEDULED
    assert terminate(node) == 0, node.describe()

    node = await moving.start(2)
    assert f"{data} was written by 1 process(es): moving its partitions to 2" in node.stderr()
    async with AsyncClient(node.url) as client:
        assert await moving.deduplicates(client)
        await eventually(
            lambda: moving.drained(client), DEADLINE, "every item leased, the scheduled once due"
        )
    assert sorted(moving.delivered) == sorted(MOVED_ITEMS | MOVED_SCHEDULED), node.describe()
    assert terminate(node) == 0, node.describe()


KILLED_AT = 3
"""The number of processes a move is cut short on its way to: 2 -> 3 creates the database of process 2."""
BULK_PER_PARTITION = 1500
"""Items at least in every partition of a bulk queue: enough that a move takes a while to catch."""
BULK_PAD = b" " + b"x" * 2048
BULK_BATCH = 300
"""Items a produce carries: a body under the 1 MiB aiohttp warns about."""


class BulkQueue:
    """A queue of many items in every partition, one batch of them held leased, and what leases gave."""

    def __init__(self, prefix: str) -> None:
        # Some of its partitions go to process 2 from process 0, some from process 1.
        self.name = next(
            name
            for name in (f"{prefix}{n}" for n in range(1000))
            if {
                process_owner(LOCAL_NODE, PROCESSES)(name, p)
                for p in range(MOVED_PARTITIONS)
                if process_owner(LOCAL_NODE, KILLED_AT)(name, p) == KILLED_AT - 1
            }
            == set(range(PROCESSES))
        )
        self.produced: set[str] = set()
        self.delivered: Counter[str] = Counter()

    async def fill(self, client: AsyncClient) -> tuple[int, list[str]]:
        """Produces until every partition holds ``BULK_PER_PARTITION`` items; leases a batch and
        returns it (held past the move, to complete later)."""
        await client.create_queue(
            self.name, lease_timeout="5m", expire_timeout="1h", partitions=MOVED_PARTITIONS
        )

        async def full() -> bool:
            labels = [f"{self.name}/{len(self.produced) + n}" for n in range(BULK_BATCH)]
            async with AsyncClient(client.endpoint) as one:  # fresh connections: the kernel spreads them
                await one.produce(self.name, [label.encode() + BULK_PAD for label in labels])
            self.produced.update(labels)
            totals = await self.totals(client)
            return len(totals) == MOVED_PARTITIONS and min(totals.values()) >= BULK_PER_PARTITION

        await eventually(full, DEADLINE, f"{BULK_PER_PARTITION} items in every partition of {self.name}")
        partition, held = await self.lease(client)
        assert held
        return partition, held

    async def totals(self, client: AsyncClient) -> dict[int, int]:
        stats = await client.stats(self.name)
        parts = [p for lq in stats.logical_queues for p in lq.partitions]
        assert not any(p.failures for p in parts), stats
        return {p.partition: p.total for p in parts}

    async def lease(self, client: AsyncClient) -> tuple[int, list[str]]:
        reply = await client.lease(self.name, batch_size=1000, client_id="c", request_timeout="1s")
        self.delivered.update(i.bytes.split(b" ", 1)[0].decode() for i in reply.items)
        return reply.partition, [i.id for i in reply.items]

    async def drained(self, client: AsyncClient) -> bool:
        with contextlib.suppress(RetryRequest):  # a partition still loading
            partition, ids = await self.lease(client)
            if ids:
                await client.complete(self.name, partition, ids)
        return self.delivered.total() >= len(self.produced)


def moving_under_way(data: Path) -> bool:
    """The move to ``KILLED_AT`` processes began, and a batch it copied from process 0 to process 2 is
    committed there: process 0's WAL, gone when its last node stopped, grows only with the deletes that
    follow those commits (the move otherwise only reads its database)."""
    try:
        return (data / "processes.moving").exists() and (data / "querator.db-wal").stat().st_size > 0
    except FileNotFoundError:
        return False


def placement(data: Path) -> Counter[str]:
    """The items of a data dir (read once no process runs) by where a move from 2 to ``KILLED_AT``
    processes left them: ``moved`` (with their new owner), ``left`` (with a process that does not own
    them under ``KILLED_AT``), ``stayed`` (with their owner under both)."""
    before, after = process_owner(LOCAL_NODE, PROCESSES), process_owner(LOCAL_NODE, KILLED_AT)
    found: Counter[str] = Counter()
    for index in range(KILLED_AT):
        conn = sqlite3.connect(f"file:{database(data, index)}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT p.queue, p.number, count(*) FROM items i JOIN partitions p ON p.key = i.part "
                "GROUP BY p.queue, p.number"
            ).fetchall()
        finally:
            conn.close()
        for queue, number, count in rows:
            owner = after(queue, number)
            moved = "stayed" if owner == before(queue, number) else "moved"
            found["left" if owner != index else moved] += count
    return found


def kill_node(server: ServerProcess) -> None:
    """SIGKILLs the supervisor and every process it started; stopped first, it starts no other."""
    os.kill(server.pid, signal.SIGSTOP)
    pids = children(server)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    kill9(server)
    wait_until(lambda: all(_gone(pid) for pid in pids), START_DEADLINE, "the processes stopped")


# Restarting with the old number of processes is the slow pass (each is over 30 s): CI runs the other.
@pytest.mark.parametrize("restart", [KILLED_AT, pytest.param(PROCESSES, marks=pytest.mark.slow)])
async def test_a_move_cut_short_by_kill9_completes_at_the_next_start(
    servers: Servers, tmp_path: Path, restart: int
) -> None:
    """A node killed with SIGKILL while it moves its partitions from 2 to 3 processes, with items
    moved and items left: the next start, with 3 processes or again with 2, completes the move. Every
    item is leased once, leases held from before are completed, dedup ids still deduplicate, the
    scheduled items arrive, and every partition is served (ADR 0025)."""
    data = tmp_path / "data"
    moving = MovingNode(servers, data)
    bulks = [BulkQueue("bulk-a"), BulkQueue("bulk-b")]
    node = await moving.start(PROCESSES)
    async with AsyncClient(node.url) as client:
        held = [await bulk.fill(client) for bulk in bulks]
        held_partition, held_ids = await moving.fill(client)
    assert terminate(node) == 0, node.describe()
    assert not (data / "querator.db-wal").exists()  # what moving_under_way watches starts afresh

    killed = moving.spawn(KILLED_AT)

    async def under_way() -> bool:
        assert killed.running(), killed.describe()
        assert "is now one of" not in killed.stderr(), (
            f"the move ended before it was seen\n{killed.describe()}"
        )
        return moving_under_way(data)

    await eventually(under_way, DEADLINE, "the move under way")
    kill_node(killed)
    assert f"{data} was written by 2 process(es): moving its partitions to 3" in killed.stderr()
    assert (data / "processes.moving").exists()
    assert (data / "processes").read_text() == "2\n"
    cut = placement(data)
    assert cut["moved"] and cut["left"], cut  # the kill landed mid-move

    node = await moving.start(restart)
    log = node.stderr()
    assert f"a move of the partitions of {data} was cut short: moving them to {restart} process(es)" in log
    assert sum(map(int, re.findall(r"moved \d+ partition\(s\) with (\d+) item", log))) > 0, log
    assert f"the data dir {data} is now one of {restart} process(es)" in log
    assert not (data / "processes.moving").exists()
    assert (data / "processes").read_text() == f"{restart}\n"
    assert sorted(p.name for p in data.glob("querator*.db")) == sorted(
        database(data, i).name for i in range(restart)
    )
    async with AsyncClient(node.url) as client:
        for bulk, (partition, ids) in zip(bulks, held, strict=True):
            assert sum((await bulk.totals(client)).values()) == len(bulk.produced)  # every partition
            await client.complete(bulk.name, partition, ids)
        await client.complete(moving.queue, held_partition, held_ids)
        assert await moving.deduplicates(client)
        assert await moving.scheduled(client) == MOVED_SCHEDULED
        for bulk in bulks:
            await eventually(partial(bulk.drained, client), DEADLINE, f"every item of {bulk.name} leased")
            assert bulk.delivered == Counter(bulk.produced), node.describe()
        await eventually(
            lambda: moving.drained(client), DEADLINE, "every item leased, the scheduled once due"
        )
    assert sorted(moving.delivered) == sorted(MOVED_ITEMS | MOVED_SCHEDULED), node.describe()
    assert terminate(node) == 0, node.describe()


async def test_a_second_node_on_a_data_dir_in_use_is_refused(servers: Servers, tmp_path: Path) -> None:
    """The running node's lock (its supervisor's, shared by its processes) keeps a start with another
    number of processes from moving the partitions it serves: refused after waiting 15 s for it."""
    data = tmp_path / "data"
    node = await servers.astart(*sqlite_args(data))
    await all_listening(node)
    refused = await asyncio.to_thread(
        start_refused, servers, "--processes", "3", "--storage", "sqlite", "--data-dir", str(data)
    )
    assert refused.stderr() == (
        f"querator: data-dir is invalid; another querator node uses {data} "
        f"(it holds '{data / 'querator.lock'}')\n"
    )
    assert (data / "processes").read_text() == "2\n"
    assert not (data / "querator-2.db").exists()
    assert terminate(node) == 0, node.describe()


def test_a_file_every_process_needs_is_checked_once(servers: Servers, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pem")
    server = start_refused(
        servers,
        "--processes",
        "2",
        "--storage",
        "memory",
        "--tls-cert-file",
        missing,
        "--tls-key-file",
        missing,
    )
    assert server.stderr().startswith("querator: tls-cert-file is invalid; ")


def test_a_damaged_shared_database_is_refused_before_any_process_starts(
    servers: Servers, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "processes").write_text("2\n")
    (data / "querator.db").write_text("not a database, but long enough to be taken for one" * 100)
    server = start_refused(servers, *sqlite_args(data))
    assert server.stderr().startswith("querator: data-dir is invalid; sqlite storage error; ")


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
async def test_every_partition_is_served_through_either_process(
    servers: Servers, tmp_path: Path, storage: str
) -> None:
    key = generate_key("t")
    server = await servers.astart(
        "--processes",
        str(PROCESSES),
        "--storage",
        storage,
        "--data-dir",
        str(tmp_path / "data"),
        "--api-keys",
        key_hash(key),
    )
    await all_listening(server)
    queue = split_queue("spread")
    async with AsyncClient(server.url, api_key=key) as client:
        await client.create_queue(queue, lease_timeout="1m", expire_timeout="1h", partitions=PARTITIONS)
        info = await client.cluster_info(queue)
        assert sorted(m.node_id for m in info.members) == MEMBERS
        assert {p.owner for p in info.partitions} == set(MEMBERS)
        # Many connections: the kernel spreads them over both processes, which forward what is not theirs.
        for n in range(40):
            async with AsyncClient(server.url, api_key=key) as one:
                await one.produce(queue, [f"item-{n}"])
        seen: set[int] = set()
        for partition in range(PARTITIONS):
            listed = await client.list_items(queue, partition)
            seen.update(int(i.payload.decode().split("-")[1]) for i in listed.items)
        assert seen == set(range(40))
        # A dedup id produced twice through different connections is stored once.
        for _ in range(4):
            async with AsyncClient(server.url, api_key=key) as one:
                await one.produce(queue, ["once"], dedup_id="d-1")
        stats = await client.stats(queue)
        assert sum(p.total for lq in stats.logical_queues for p in lq.partitions) == 41
    assert terminate(server) == 0, server.describe()
    assert server.stderr().count("querator.processes._supervisor: stopped") == 1


class Load:
    """Producers and consumers of one queue until ``stop``: what was acknowledged, what was leased."""

    def __init__(self, client: AsyncClient, queue: str) -> None:
        self.client = client
        self.queue = queue
        self.acked: set[str] = set()
        self.delivered: set[str] = set()
        """Payloads a lease handed out (a complete whose reply was lost may have removed them)."""
        self.stop = asyncio.Event()

    async def produce(self, producer: int) -> None:
        seq = 0
        while not self.stop.is_set():
            batch = [f"p{producer}-{seq + i:06d}" for i in range(3)]
            seq += len(batch)
            try:
                await self.client.produce(self.queue, batch, request_timeout="5s")
            except (QueratorError, ConnectionFailed):
                continue  # not acknowledged: it may or may not be stored
            self.acked.update(batch)

    async def consume(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(QueratorError, ConnectionFailed):
                await self.lease_once(10, "1s")

    async def lease_once(self, batch_size: int, timeout: str) -> int | None:
        """Leases and completes up to ``batch_size`` items; their partition (None when none came)."""
        reply = await self.client.lease(
            self.queue, batch_size=batch_size, client_id="c", request_timeout=timeout
        )
        if not reply.items:
            return None
        self.delivered.update(i.bytes.decode() for i in reply.items)
        await self.client.complete(self.queue, reply.partition, [i.id for i in reply.items])
        return reply.partition

    async def drained(self) -> bool:
        with contextlib.suppress(RetryRequest):  # a partition of the restarted process loading
            await self.lease_once(100, "500ms")
        return self.acked <= self.delivered


async def test_kill9_of_one_process_loses_no_acknowledged_item(servers: Servers, tmp_path: Path) -> None:
    server = await servers.astart(*sqlite_args(tmp_path / "data"))
    await all_listening(server)
    queue = split_queue("kill")
    async with AsyncClient(server.url) as client:
        await client.create_queue(queue, lease_timeout="2s", expire_timeout="1h", partitions=PARTITIONS)
        load = Load(client, queue)
        workers = [asyncio.create_task(load.produce(i)) for i in range(4)]
        workers += [asyncio.create_task(load.consume()) for _ in range(2)]
        await eventually(lambda: _true(len(load.acked) >= 200), DEADLINE, "200 items acknowledged")
        victim = children(server)[1]
        os.kill(victim, signal.SIGKILL)
        # The supervisor restarts it; the load goes on meanwhile.
        await eventually(
            lambda: _true(server.stderr().count("querator listening on") > PROCESSES), DEADLINE, "restarted"
        )
        assert victim not in children(server) and len(children(server)) == PROCESSES
        more = len(load.acked) + 100
        await eventually(lambda: _true(len(load.acked) >= more), DEADLINE, "producing after the restart")
        load.stop.set()
        await asyncio.gather(*workers)
        try:
            await eventually(load.drained, DEADLINE, "every acknowledged item leased")
        except AssertionError as e:
            missing = sorted(load.acked - load.delivered)
            raise AssertionError(
                f"{e}: {len(missing)} never leased, {missing[:5]}\n{server.describe()}"
            ) from e

        # Every partition is served after the restart: each answers its listing, takes items (produced
        # through fresh connections, which the kernel spreads over the processes) and gives them out.
        async def every_partition_holds() -> bool:
            async with AsyncClient(server.url) as one:
                await one.produce(queue, ["more"])
            stats = await client.stats(queue)
            totals = {p.partition: p.total for lq in stats.logical_queues for p in lq.partitions}
            return sorted(totals) == list(range(PARTITIONS)) and all(totals.values())

        await eventually(every_partition_holds, DEADLINE, "items in every partition")
        for partition in range(PARTITIONS):
            assert (await client.list_items(queue, partition)).items
        leased_from: set[int | None] = set()

        async def every_partition_leased() -> bool:
            leased_from.add(await load.lease_once(1, "1s"))
            return set(range(PARTITIONS)) <= leased_from

        await eventually(every_partition_leased, DEADLINE, "a lease from every partition")
    assert terminate(server) == 0, server.describe()


async def test_a_restarted_node_keeps_its_items(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    await all_listening(server)
    queue = split_queue("keep")
    async with AsyncClient(server.url) as client:
        await client.create_queue(queue, lease_timeout="1m", expire_timeout="1h", partitions=PARTITIONS)
        for n in range(30):
            await client.produce(queue, [f"kept-{n}"])
    assert terminate(server) == 0, server.describe()
    assert sorted(p.name for p in data.glob("querator*.db")) == ["querator-1.db", "querator.db"]

    again = await servers.astart(*sqlite_args(data))
    await all_listening(again)
    async with AsyncClient(again.url) as client:
        found: list[str] = []
        for partition in range(PARTITIONS):
            found += [i.payload.decode() for i in (await client.list_items(queue, partition)).items]
        assert sorted(found) == sorted(f"kept-{n}" for n in range(30))


async def test_sigterm_answers_a_waiting_lease_and_stops_every_process(servers: Servers) -> None:
    server = await servers.astart("--processes", str(PROCESSES), "--storage", "memory")
    await all_listening(server)
    queue = split_queue("idle")
    pids = children(server)
    async with AsyncClient(server.url) as client:
        await client.create_queue(queue, lease_timeout="1m", expire_timeout="1h", partitions=PARTITIONS)
        await sigterm_while_a_lease_waits(server, client, queue)
    assert await asyncio.to_thread(server.wait) == 0, server.describe()
    assert server.stderr().count("querator.server: stopped") == PROCESSES
    assert all(_gone(pid) for pid in pids)  # the supervisor waited for them before it exited


def _gone(pid: int) -> bool:
    """Ended: no such process, or one that is only waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return status.rpartition(")")[2].split()[0] == "Z"


def test_the_processes_stop_with_a_killed_supervisor(servers: Servers, tmp_path: Path) -> None:
    """And the last of them removes the directory of the sqlite file they shared (the supervisor's to
    remove, had it exited)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    server = servers.start("--processes", str(PROCESSES), "--storage", "memory", env={"TMPDIR": str(temp)})
    wait_until(lambda: len(children(server)) == PROCESSES, START_DEADLINE, "both processes started")
    pids = children(server)
    assert len(list(temp.iterdir())) == 1
    kill9(server)

    wait_until(lambda: all(_gone(pid) for pid in pids), START_DEADLINE, "the processes stopped")
    wait_until(lambda: not any(temp.iterdir()), START_DEADLINE, "the shared directory removed")


async def test_a_process_that_keeps_failing_stops_the_node(servers: Servers, tmp_path: Path) -> None:
    """The node started, then what its processes import broke under it (an upgrade in place that left a
    dependency unimportable, here a module shadowing msgspec): each restart of a process that crashed
    dies at once. After 5 failures in a row the supervisor gives up: status 1, one clear line, the other
    process stopped, and the memory store's temporary directory removed."""
    broken, temp = tmp_path / "broken", tmp_path / "temp"
    broken.mkdir()
    temp.mkdir()
    path = os.pathsep.join([str(broken), server_env()["PYTHONPATH"]])
    server = await servers.astart(
        "--processes", str(PROCESSES), "--storage", "memory", env={"PYTHONPATH": path, "TMPDIR": str(temp)}
    )
    await all_listening(server)
    pids = children(server)
    assert len(list(temp.iterdir())) == 1  # the directory of the sqlite file the processes share
    (broken / "msgspec.py").write_text('raise ImportError("msgspec is half-installed")\n')
    os.kill(pids[1], signal.SIGKILL)  # a crash: the restarts then fail at their import

    assert await asyncio.to_thread(server.wait, DEADLINE) == 1, server.describe()
    log = server.stderr()
    gave_up = r"ERROR .*: process \d failed 5 times in a row soon after starting: stopping\n"
    assert re.search(gave_up, log), log
    assert log.count("ImportError: msgspec is half-installed") >= 4  # the restarts, each failing
    assert "querator.server: stopped" in log  # the other process, stopped by SIGTERM
    assert all(_gone(pid) for pid in pids)
    assert list(temp.iterdir()) == []


def private_addresses(server: ServerProcess) -> list[str]:
    """Each process's private ``host:port`` (where the others forward to it), as the supervisor logs them."""
    found = re.search(r"\(private addresses ([^)]*)\)", server.stderr())
    assert found is not None, server.describe()
    return found.group(1).split(", ")


async def refreshes_answered(address: str) -> float:
    """The ``schedules.refresh`` requests the process at ``address`` answered 200, by its own metrics."""
    async with aiohttp.ClientSession() as session, session.get(f"http://{address}/metrics") as resp:
        text = await resp.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "querator_request_duration_seconds_count"
        and sample.labels == {"route": "/v1/schedules.refresh", "code": "200"}
    )


async def test_a_schedule_change_reaches_the_process_that_fires_it(servers: Servers) -> None:
    """A schedule created and deleted through the process that does not fire it: before answering, that
    process tells the owner (``schedules.refresh``, which the owner's own metrics count), whose scheduler
    then reads the schedules again rather than at its next reading; the schedule fires."""
    server = await servers.astart("--processes", str(PROCESSES), "--storage", "memory")
    await all_listening(server)
    addresses = private_addresses(server)
    name = "every-second"
    owner = MEMBERS.index(Ring(MEMBERS, 1).schedule_owner(name))
    other, at_owner = addresses[1 - owner], addresses[owner]
    async with AsyncClient(f"http://{other}") as client:
        await client.create_queue("ticks", lease_timeout="1m", expire_timeout="1h")
        created = await client.create_schedule(name, "* * * * * *", "ticks")
        assert created.owner == MEMBERS[owner]
        assert await refreshes_answered(at_owner) == 1
        assert await refreshes_answered(other) == 0

        async def fired() -> bool:
            return bool((await client.list_items("ticks", 0)).items)

        await eventually(fired, DEADLINE, "a tick's item")
        await client.delete_schedule(name)
        assert await refreshes_answered(at_owner) == 2
    assert "could not be told" not in server.stderr()
    assert terminate(server) == 0, server.describe()


async def test_a_rate_limit_is_kept_by_its_owner_whichever_process_is_asked(servers: Servers) -> None:
    """docs/extensions.md, "Rate limits": ``rate_limits.take`` asked of the process that does not own the
    key is forwarded to the one that does, so a limit of one start an hour admits one start among both
    processes, asked directly each in turn."""
    server = await servers.astart("--processes", str(PROCESSES), "--storage", "memory")
    await all_listening(server)
    addresses = private_addresses(server)
    owner = MEMBERS.index(Ring(MEMBERS, 1).rate_limit_owner("limited", "k"))
    other, at_owner = addresses[1 - owner], addresses[owner]
    async with AsyncClient(f"http://{other}") as far, AsyncClient(f"http://{at_owner}") as near:
        await far.create_queue("limited", lease_timeout="1m", expire_timeout="1h")
        replies = [await c.take_rate("limited", "k", limit=1, period="1h") for c in (far, near, far, near)]
    assert [r.granted for r in replies] == [True, False, False, False]
    assert terminate(server) == 0, server.describe()


async def test_a_cassandra_node_of_two_processes_keeps_every_partition_through_a_kill9(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    """Each process uses the keyspace as one process does, fencing its own partitions: the restarted
    one claims its partitions again and finds their items."""
    server = await servers.astart("--processes", str(PROCESSES), *cassandra_args(cassandra_node, keyspace))
    await all_listening(server)
    queue = split_queue("shared")

    async def produce_spread(prefix: str, count: int) -> None:
        for n in range(count):  # fresh connections, which the kernel spreads over the processes
            async with AsyncClient(server.url) as one:
                await one.produce(queue, [f"{prefix}-{n}"])

    async def listed(client: AsyncClient) -> list[str]:
        found: list[str] = []
        for partition in range(PARTITIONS):
            found += [i.payload.decode() for i in (await client.list_items(queue, partition)).items]
        return sorted(found)

    async with AsyncClient(server.url) as client:
        await client.create_queue(queue, lease_timeout="1m", expire_timeout="1h", partitions=PARTITIONS)
        await produce_spread("before", 20)
        os.kill(children(server)[1], signal.SIGKILL)
        await eventually(
            lambda: _true(server.stderr().count("querator listening on") > PROCESSES), DEADLINE, "restarted"
        )
        await produce_spread("after", 20)
        expected = sorted([f"before-{n}" for n in range(20)] + [f"after-{n}" for n in range(20)])
        assert await listed(client) == expected, server.describe()
    assert terminate(server) == 0, server.describe()
