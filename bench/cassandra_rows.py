"""What a conditional batch costs Cassandra, by the shape of its rows: the measurements behind the
Cassandra backend's row layout (docs/benchmarks-log.md).

    python bench/cassandra_rows.py                       # starts the tests' Cassandra node
    python bench/cassandra_rows.py --cassandra-port 9042 # or uses a running one on localhost

Part 1, latency: one 100-row batch at a time, with Nagle's algorithm on the connection and without;
then one plain row and the fence alone, one at a time (p50 and p99 of 300).
Part 2, cost: ``--chains`` partitions written concurrently for ``--duration`` seconds each, every write a
conditional batch (``IF epoch = ?``) as the backend sends them, reporting rows/s and the Cassandra
process's CPU milliseconds per item (from /proc, so only for a node on this machine):
- ``columns``: 100 item rows with a column per metadata field (schema version 1);
- ``one cell``: 100 item rows with the metadata in one blob (version 2);
- ``rows outside``: the same rows as a plain batch, then a conditional batch of the fence alone;
- ``state rows``: 100 state rows of 13 columns (version 1's lease or complete of 100 items);
- ``state log``: one row holding the 100 states (version 2);
- ``chunk``: the 100 items in ONE row, their metadata in one cell and their payloads in another.
Part 3, what a single statement costs: the fence alone (a conditional update of a static column), one
plain row of 100 bytes, a read of the static row at the driver's default consistency and at SERIAL.
Shapes run in that order whatever order ``--shape`` gives, each after the one before: the compactions
and flushes of a heavy shape still run during the next, so compare shapes run on their own too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import time
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import Cluster, Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement
from cassandra_threads import cassandra_pid

from bench import start_cassandra

NAMES = (
    "source_id, is_leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, max_attempts, "
    "reference, encoding, kind"
)
TYPES = ["text", "boolean", "bigint", "bigint", "bigint", "bigint", "int", "int", "text", "text", "text"]
FIELDS = ", ".join(f"{name} {kind}" for name, kind in zip(NAMES.split(", "), TYPES, strict=True))
METADATA = ("", False, 0, 1_700_000_000_000_000, 0, 1_700_000_000_000_000, 0, 0, "", "", "")
SINGLE = ("fence alone", "one plain row", "read", "serial read")
SHAPES = ("columns", "one cell", "rows outside", "state rows", "state log", "chunk", *SINGLE)
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def java_cpu() -> float:
    """CPU seconds the Cassandra process has used."""
    with open(f"/proc/{cassandra_pid()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def schema(session: Session) -> dict[str, PreparedStatement]:
    session.execute(
        "CREATE KEYSPACE IF NOT EXISTS rows_bench "
        "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(
        "CREATE TABLE IF NOT EXISTS rows_bench.items (p text, record tinyint, id text, epoch bigint static, "
        f"cursor text static, {FIELDS}, meta blob, payload blob, PRIMARY KEY ((p), record, id)) "
        "WITH compaction = {'class': 'LeveledCompactionStrategy'}"
    )
    insert = "INSERT INTO rows_bench.items"
    cql = {
        "columns": f"{insert} (p, record, id, {NAMES}, payload) VALUES (?, 0, ?{', ?' * 12})",
        "one cell": f"{insert} (p, record, id, meta, payload) VALUES (?, 0, ?, ?, ?)",
        "state rows": f"{insert} (p, record, id, {NAMES}) VALUES (?, 1, ?{', ?' * 11})",
        "state log": f"{insert} (p, record, id, payload) VALUES (?, 1, ?, ?)",
        "chunk": f"{insert} (p, record, id, meta, payload) VALUES (?, 0, ?, ?, ?)",
        "fence": "UPDATE rows_bench.items SET cursor = ? WHERE p = ? IF epoch = ?",
        "claim": "UPDATE rows_bench.items SET epoch = 1 WHERE p = ?",
    }
    return {name: session.prepare(text) for name, text in cql.items()}


def rows(stmts: dict[str, PreparedStatement], shape: str, p: str, n: int) -> list[tuple[Any, Any]]:
    """The (statement, values) of one write of 100 items of ``shape``."""
    ids = [f"{n:012d}{i:04d}" for i in range(100)]
    payload, meta = os.urandom(1024), os.urandom(40)
    if shape == "columns":
        return [(stmts[shape], (p, i, *METADATA, payload)) for i in ids]
    if shape in ("one cell", "rows outside"):
        return [(stmts["one cell"], (p, i, meta, payload)) for i in ids]
    if shape == "state rows":
        return [(stmts[shape], (p, i, *METADATA)) for i in ids]
    if shape == "chunk":
        return [(stmts[shape], (p, ids[-1], os.urandom(100 * 40), payload * 100))]
    return [(stmts[shape], (p, f"{n:012d}", os.urandom(100 * 40)))]


def batch(statements: list[tuple[Any, Any]]) -> BatchStatement:
    b = BatchStatement(batch_type=BatchType.UNLOGGED)
    for statement, values in statements:
        b.add(statement, values)
    return b


def latency(port: int) -> None:
    for nodelay in (False, True):
        cluster = Cluster(["127.0.0.1"], port=port, protocol_version=5, sockopts=NODELAY if nodelay else None)
        session = cluster.connect()
        stmts = schema(session)
        session.execute(stmts["claim"], ("latency",))
        for conditional in (False, True):
            times = []
            for n in range(60):
                b = batch(rows(stmts, "one cell", "latency", n))
                if conditional:
                    b.add(stmts["fence"], ("c", "latency", 1))
                start = time.perf_counter()
                session.execute(b)
                times.append((time.perf_counter() - start) * 1000)
            kind = "conditional" if conditional else "plain"
            print(f"| {'off' if nodelay else 'on'} | {kind} | {statistics.median(times):.1f} |", flush=True)
        if nodelay:
            single(session, stmts)
        cluster.shutdown()


def single(session: Session, stmts: dict[str, PreparedStatement]) -> None:
    """One statement at a time on an otherwise idle node: the floor under every write's latency."""
    plain = session.prepare("INSERT INTO rows_bench.items (p, record, id, payload) VALUES (?, 1, ?, ?)")
    print("\n| one statement at a time | p50 ms | p99 ms |\n|---|---|---|")
    for name, statement, values in (
        ("one plain row of 100 bytes", plain, lambda n: ("latency", f"{n:012d}", b"x" * 100)),
        ("the fence alone (Paxos)", stmts["fence"], lambda n: ("c", "latency", 1)),
    ):
        times = []
        for n in range(300):
            start = time.perf_counter()
            session.execute(statement, values(n))
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        print(f"| {name} | {times[150]:.2f} | {times[297]:.2f} |", flush=True)
    print()


async def cost(port: int, chains: int, duration: float, shapes: list[str]) -> None:
    cluster = Cluster(["127.0.0.1"], port=port, protocol_version=5, sockopts=NODELAY)
    session = cluster.connect()
    stmts = schema(session)
    plain = session.prepare("INSERT INTO rows_bench.items (p, record, id, payload) VALUES (?, 1, ?, ?)")
    read = session.prepare("SELECT epoch FROM rows_bench.items WHERE p = ? LIMIT 1")
    serial = session.prepare("SELECT epoch FROM rows_bench.items WHERE p = ? LIMIT 1")
    serial.consistency_level = ConsistencyLevel.SERIAL
    loop = asyncio.get_running_loop()

    async def execute(statement: Any, values: Any = None) -> None:
        future = loop.create_future()
        response = session.execute_async(statement, values)
        response.add_callbacks(
            lambda r: loop.call_soon_threadsafe(future.set_result, r),
            lambda e: loop.call_soon_threadsafe(future.set_exception, e),
        )
        await future

    async def write(shape: str, p: str, n: int) -> int:
        """One write of ``shape``; returns the items (or statements) it counts for."""
        fence = (stmts["fence"], ("c", p, 1))
        if shape in SINGLE:
            await {
                "fence alone": lambda: execute(*fence),
                "one plain row": lambda: execute(plain, (p, f"{n:012d}", b"x" * 100)),
                "read": lambda: execute(read, (p,)),
                "serial read": lambda: execute(serial, (p,)),
            }[shape]()
            return 1
        statements = rows(stmts, shape, p, n)
        if shape == "rows outside":
            await execute(batch(statements))
            await execute(batch([fence]))
        else:
            await execute(batch([fence, *statements]))
        return 100

    async def chain(shape: str, p: str, deadline: float) -> int:
        session.execute(stmts["claim"], (p,))
        n = counted = 0
        while time.monotonic() < deadline:
            counted += await write(shape, p, n)
            n += 1
        return counted

    # Each table's header goes before its first shape.
    writes = "write of 100 items | items/s | Cassandra CPU ms per item"
    singles = "one statement on a partition | statements/s | Cassandra CPU ms each"
    headers = {
        next((s for s in shapes if s not in SINGLE), ""): writes,
        next((s for s in shapes if s in SINGLE), ""): singles,
    }
    for shape in shapes:
        if shape in headers:
            print(f"\n| {headers[shape]} |\n|---|---|---|")
        cpu, start = java_cpu(), time.monotonic()
        deadline = start + duration
        counts = await asyncio.gather(*(chain(shape, f"{shape}-{c}", deadline) for c in range(chains)))
        elapsed, used = time.monotonic() - start, java_cpu() - cpu
        print(f"| {shape} | {sum(counts) / elapsed:,.0f} | {used * 1000 / sum(counts):.3f} |", flush=True)
    cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cassandra-port", type=int, help="a running Cassandra on localhost")
    parser.add_argument("--chains", type=int, default=8, help="partitions written concurrently")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per shape")
    parser.add_argument("--shape", action="append", choices=SHAPES, help="repeatable; default all")
    args = parser.parse_args()
    node = None
    port = args.cassandra_port
    if port is None:
        node = start_cassandra()
        port = node.cql_port
    try:
        print("| Nagle | batch of 100 one-cell rows of 1 KiB | median ms |\n|---|---|---|")
        latency(port)
        shapes = args.shape or list(SHAPES)
        asyncio.run(cost(port, args.chains, args.duration, sorted(shapes, key=SHAPES.index)))
    finally:
        if node is not None:
            node.stop()


if __name__ == "__main__":
    main()
