"""Durable workflows of 3 no-op steps: querator.durable on memory and sqlite beside DBOS on PostgreSQL.

    python bench/durable_bench.py --rounds 3 --duration 5 --clients 1 --clients 16

Each system runs the same workflow, ``three_noops``: three steps in a row, each returning the time it
started (``time.perf_counter``, one clock for every process of the machine), for ``--clients`` closed
loops that each start a workflow and wait for its result, again and again.

- ``memory``, ``sqlite``: a ``querator serve`` node (bench.py's node; sqlite with ``--sqlite-synchronous``,
  FULL by default) and ``--workers`` worker processes (``Durable.run``, ``--concurrency`` each, the app's
  queue of ``--partitions``, ``Durable``'s default unless given); this
  process starts the workflows (``Durable.start``) and waits for their results (``WorkflowHandle.result``).
- ``cassandra`` (only when named with ``--system``): the same on Cassandra, the tests' single node started
  for the run (bench.py's ``start_cassandra``), or a running one on ``--cassandra-port``; its CPU counts as
  the store's when the harness started it. Its statements per workflow are counted too, by table, from the
  node's own counters (``system_views``), with its Paxos rounds (``CassandraCounts``).
- ``postgres`` (only when named with ``--system``): the same on PostgreSQL, the tests' server started for
  the run (bench.py's ``start_postgres``: Debian's, its defaults); its postmaster and backends count as
  the store's CPU with the node's.
- ``dbos``: DBOS Transact (the ``bench`` extra) on the same PostgreSQL server as ``postgres`` (one server
  for the run, its own database; the server's durability settings, fsync and synchronous_commit, are
  printed with the header). DBOS is a library: a workflow runs in the process that starts it, so
  ``--workers`` DBOS processes each run their share of the client loops (``DBOS.start_workflow_async``,
  ``get_result``).

What is measured, for the workflows started and finished inside the ``--duration`` window (after
``--warmup`` seconds of the same load):

- workflows/s;
- per-step latency: the time from one step's start to the next step's start in the same run (two per
  workflow). With no-op steps it is what one step costs the workflow: recording its result durably and
  going on to the next one. The same definition for both systems;
- workflow latency: from the start call to its result in the caller's hands; of it, the way in (``in``:
  from the start call to the first step's start) and the way out (``out``: from the last step's start to
  the result in the caller's hands), at p50;
- the node's requests per workflow by route and their mean time in it (its own request histogram),
  and all of them (the worker's and the caller's round trips, whatever the load);
- CPU per workflow of the store (the node; PostgreSQL: its postmaster and backends) and of the
  application processes (querator: this process's clients and the workers; DBOS: its processes), since
  the machine may be shared (docs/benchmarks-log.md).

Rounds alternate the systems, each started once for the run. Needs the ``bench`` extra for ``dbos``.

``--steps N`` runs, instead, one workflow of ``N`` no-op steps per system and round (a long journal on
the real path: the worker's appends and the claim's replay), and prints its time and step latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from journal_appends import run_journal
from worker_bench import cpu_s

from bench import Server, start_cassandra, start_postgres
from querator.client import AsyncClient
from querator.durable import Context, Durable, WorkflowDef
from querator.durable._app import QUEUE_PARTITIONS

if TYPE_CHECKING:
    from tests.postgres_node import PostgresNode

QUEUE = "bench-durable"
SYSTEMS = ("memory", "sqlite", "dbos", "cassandra", "postgres")
DEFAULT_SYSTEMS = ("memory", "sqlite", "dbos")
"""Without ``--system``: not Cassandra, whose node alone takes a minute and a GiB to start, nor PostgreSQL."""
STATEMENT_SAMPLE = re.compile(r'^querator_storage_statements_total\{kind="([^"]+)"\} (\S+)$', re.MULTILINE)
"""The node's own count of the statements its store sent, by kind (``paxos`` or ``plain``)."""
ROUTE_SAMPLE = re.compile(
    r'^querator_request_duration_seconds_(count|sum)\{code="2\d\d",route="([^"]+)"\} (\S+)$', re.MULTILINE
)


@dataclass
class Sample:
    """What one round's closed loops saw in their measurement window."""

    workflows: int = 0
    seconds: float = 0.0
    steps_s: list[float] = field(default_factory=list)
    workflows_s: list[float] = field(default_factory=list)
    firsts_s: list[float] = field(default_factory=list)
    """From the start call to the first step's start: the way in (start, activation, lease, claim)."""
    lasts_s: list[float] = field(default_factory=list)
    """From the last step's start to the result in the caller's hands: the way out."""

    def add(self, other: Sample) -> None:
        self.workflows += other.workflows
        self.seconds = max(self.seconds, other.seconds)
        self.steps_s += other.steps_s
        self.workflows_s += other.workflows_s
        self.firsts_s += other.firsts_s
        self.lasts_s += other.lasts_s


async def closed_loops(
    one: Callable[[], Awaitable[list[float]]], clients: int, warmup_s: float, duration_s: float
) -> Sample:
    """Runs ``clients`` loops of ``one()`` (a workflow's run, returning its steps' start times) for
    ``warmup_s + duration_s``; records the runs that started and finished inside the last ``duration_s``."""
    sample = Sample(seconds=duration_s)
    begin = time.perf_counter() + warmup_s
    end = begin + duration_s

    async def loop() -> None:
        while (started := time.perf_counter()) < end:
            stamps = await one()
            finished = time.perf_counter()
            if started >= begin and finished <= end:
                sample.workflows += 1
                sample.workflows_s.append(finished - started)
                sample.steps_s += [b - a for a, b in itertools.pairwise(stamps)]
                sample.firsts_s.append(stamps[0] - started)
                sample.lasts_s.append(finished - stamps[-1])

    await asyncio.gather(*(loop() for _ in range(clients)))
    return sample


def percentile_ms(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")


# -- querator ----------------------------------------------------------------------------------------------


def querator_app(
    endpoint: str, concurrency: int, partitions: int
) -> tuple[Durable, WorkflowDef, WorkflowDef]:
    """The app, its workflow of three no-op steps, and its workflow of ``n`` (``--steps``)."""
    app = Durable(endpoint, queue=QUEUE, concurrency=concurrency, partitions=partitions)

    @app.step(name="bench.noop")
    async def noop() -> float:
        return time.perf_counter()

    @app.workflow(name="bench.three_noops")
    async def three_noops(ctx: Context) -> list[float]:
        return [await ctx.run(noop), await ctx.run(noop), await ctx.run(noop)]

    @app.workflow(name="bench.many_noops")
    async def many_noops(ctx: Context, n: int) -> list[float]:
        return [await ctx.run(noop) for _ in range(n)]

    return app, three_noops, many_noops


class CassandraCounts:
    """The requests a Cassandra node served, by table, from its virtual tables (``system_views``): what a
    workflow costs the store in statements, whatever the machine's load."""

    VIEWS = {
        "coordinator_write_latency": "writes",
        "coordinator_read_latency": "reads",
        "local_write_latency": "local writes",
    }
    PAXOS_WRITES = 3
    """Rows an uncontended lightweight transaction writes to ``system.paxos`` (the promise, the proposal,
    the commit; the tests' node runs ``paxos_variant: v2``)."""

    def __init__(self, port: int, keyspace: str) -> None:
        from cassandra.cluster import Cluster

        self.keyspace = keyspace
        self.cluster = Cluster(["127.0.0.1"], port=port, protocol_version=5)
        self.session = self.cluster.connect()

    def snapshot(self) -> dict[str, int]:
        """Counts so far, keyed ``<kind> <table>``: the keyspace's tables, and ``system.paxos``."""
        counts: dict[str, int] = {}
        for view, kind in self.VIEWS.items():
            for r in self.session.execute(
                f"SELECT keyspace_name, table_name, count FROM system_views.{view}"
            ):
                if r.keyspace_name == self.keyspace or (r.keyspace_name, r.table_name) == ("system", "paxos"):
                    counts[f"{kind} {r.keyspace_name}.{r.table_name}"] = r.count
        return counts

    def rows(self, name: str, before: dict[str, int], workflows: int) -> list[str]:
        """Rows of the statements per workflow since ``before``; local writes only for ``system.paxos``
        (a plain statement's coordinator write is its local write on one node)."""
        after = self.snapshot()
        out = []
        for key in sorted(after):
            per_workflow = (after[key] - before.get(key, 0)) / max(workflows, 1)
            kind = key.rsplit(" ", 1)[0]
            if per_workflow >= 0.01 and (kind != "local writes" or key.endswith("system.paxos")):
                out.append(f"| {name} | {key} | {per_workflow:.2f} |")
                if key.endswith("system.paxos"):
                    rounds = per_workflow / self.PAXOS_WRITES
                    out.append(
                        f"| {name} | Paxos rounds (paxos writes / {self.PAXOS_WRITES}) | {rounds:.2f} |"
                    )
        return out

    def close(self) -> None:
        self.cluster.shutdown()


class Querator:
    """A node of ``storage`` and its worker processes; this process is the client."""

    def __init__(
        self,
        storage: str,
        synchronous: str,
        workers: int,
        concurrency: int,
        partitions: int,
        extra: list[str] | None = None,
        store_cpu_s: Callable[[], float] | None = None,
        counts: CassandraCounts | None = None,
    ) -> None:
        """``extra``: more ``querator serve`` options; ``store_cpu_s``: the CPU seconds so far of a
        store's own processes, which count as the store's (Cassandra's node, PostgreSQL's server);
        ``counts``: the store's statements, counted from after the first workflow."""
        self.name = storage
        self.server = Server(storage, synchronous, extra or [])
        self.store_cpu_s = store_cpu_s
        self.app, self.workflow, self.long = querator_app(self.server.endpoint, concurrency, partitions)
        self.command = [sys.executable, __file__, "--role", "worker", "--endpoint", self.server.endpoint]
        self.command += ["--concurrency", str(concurrency), "--partitions", str(partitions)]
        self.count = workers
        self.runs = 0
        """Workflows this process started on the node, warm-ups included."""
        self.workers: list[subprocess.Popen[bytes]] = []
        self.counts = counts
        self.counted_from: tuple[dict[str, int], int] = ({}, 0)
        """The store's counts and ``runs`` once the set-up (schema, the first workflow) was done."""

    async def ready(self) -> None:
        async with AsyncClient(self.server.endpoint) as client:
            await self.server.wait_ready(client)
        self.start_workers()
        await (await self.app.start(self.workflow)).result(timeout=30)  # the workers are up
        self.runs += 1
        if self.counts is not None:
            self.counted_from = (self.counts.snapshot(), self.runs)

    async def statements(self) -> list[str]:
        """Rows of the store's statements per workflow: as the node counted them (the whole run), and
        as Cassandra did, by table, since the set-up (Cassandra only)."""
        if self.counts is None:
            return []
        sent = [
            f"| {self.name} | sent by the node: {kind} | {float(value) / self.runs:.2f} |"
            for kind, value in STATEMENT_SAMPLE.findall(await self.metrics())
        ]
        before, runs = self.counted_from
        return sent + self.counts.rows(self.name, before, self.runs - runs)

    def start_workers(self) -> None:
        self.workers = [subprocess.Popen(self.command) for _ in range(self.count)]

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the store and of the application (this process and the workers)."""
        app = time.process_time() + sum(cpu_s(w.pid) for w in self.workers)
        store = cpu_s(self.server.proc.pid) + (self.store_cpu_s() if self.store_cpu_s else 0.0)
        return store, app

    async def round(self, clients: int, warmup_s: float, duration_s: float) -> Sample:
        async def one() -> list[float]:
            self.runs += 1
            handle = await self.app.start(self.workflow)
            stamps: list[float] = await handle.result(timeout=60)
            return stamps

        return await closed_loops(one, clients, warmup_s, duration_s)

    async def long_run(self, steps: int) -> tuple[float, list[float]]:
        """One workflow of ``steps`` no-op steps: seconds from its start to its result, and its steps'
        start times."""
        began = time.perf_counter()
        self.runs += 1
        stamps: list[float] = await (await self.app.start(self.long, steps)).result(timeout=3600)
        return time.perf_counter() - began, stamps

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(f"{self.server.endpoint}/metrics") as r:
            return await r.text()

    async def routes(self) -> list[str]:
        """Rows of the node's requests per workflow, by route, and their mean time in the node (from its
        ``querator_request_duration_seconds``): where a workflow's time goes, whatever the machine's load."""
        text = await self.metrics()
        counts: dict[str, float] = {}
        sums: dict[str, float] = {}
        for match in ROUTE_SAMPLE.finditer(text):
            kind, route, value = match.groups()
            into = counts if kind == "count" else sums
            into[route] = into.get(route, 0.0) + float(value)
        routes = [r for r in counts if counts[r] >= self.runs / 100]  # not the set-up's calls
        rows = [
            f"| {self.name} | {route} | {counts[route] / self.runs:.2f} "
            f"| {sums[route] / counts[route] * 1000:.2f} |"
            for route in sorted(routes, key=counts.__getitem__, reverse=True)
        ]
        # The count the worker's path is judged by (docs/adr/0070): it holds whatever the machine's load.
        total = sum(counts[r] for r in routes)
        mean_ms = sum(sums[r] for r in routes) / max(total, 1) * 1000
        return [*rows, f"| {self.name} | all | {total / self.runs:.2f} | {mean_ms:.2f} |"]

    async def stop(self) -> None:
        await self.app.close()
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            worker.wait(30)
        self.server.stop()


async def run_worker(endpoint: str, concurrency: int, partitions: int) -> None:
    app, _, _ = querator_app(endpoint, concurrency, partitions)
    await app.run()


# -- DBOS --------------------------------------------------------------------------------------------------


class Dbos:
    """``workers`` DBOS processes on a PostgreSQL server, driven over their stdin and stdout."""

    def __init__(self, workers: int, postgres: PostgresNode) -> None:
        self.name = "dbos"
        self.postmaster = postmaster_of(postgres)
        url = postgres.url.rsplit("/", 1)[0]
        self.command = [sys.executable, __file__, "--role", "dbos", "--postgres", f"{url}/dbos_bench"]
        self.count = workers
        self.workers: list[subprocess.Popen[str]] = []

    async def ready(self) -> None:
        # One after the other: the first one's launch creates DBOS's tables, which the others then find.
        for _ in range(self.count):
            worker = self.spawn()
            assert worker.stdout is not None
            line = await asyncio.to_thread(worker.stdout.readline)
            if line.strip() != "ready":
                raise SystemExit(f"a DBOS process did not start: {line!r}")

    def spawn(self) -> subprocess.Popen[str]:
        worker = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.workers.append(worker)
        return worker

    def cpu(self) -> tuple[float, float]:
        return postgres_cpu_s(self.postmaster), sum(cpu_s(w.pid) for w in self.workers)

    async def round(self, clients: int, warmup_s: float, duration_s: float) -> Sample:
        shares = [
            clients // len(self.workers) + (n < clients % len(self.workers)) for n in range(len(self.workers))
        ]
        for worker, share in zip(self.workers, shares, strict=True):
            assert worker.stdin is not None
            worker.stdin.write(json.dumps([share, warmup_s, duration_s]) + "\n")
            worker.stdin.flush()
        sample = Sample()
        for worker in self.workers:
            assert worker.stdout is not None
            sample.add(Sample(**json.loads(await asyncio.to_thread(worker.stdout.readline))))
        return sample

    async def stop(self) -> None:
        await asyncio.to_thread(self.shutdown)

    def shutdown(self) -> None:
        for worker in self.workers:
            assert worker.stdin is not None
            worker.stdin.close()  # the end of its rounds
        for worker in self.workers:
            worker.wait(30)


def postmaster_of(postgres: PostgresNode) -> int:
    return int((postgres.dir / "data" / "postmaster.pid").read_text().split()[0])


def durability(postgres: PostgresNode) -> str:
    """The server's settings that decide when a commit is durable, for the header."""
    import psycopg

    names = ("fsync", "synchronous_commit", "wal_sync_method", "full_page_writes")
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        return ", ".join(f"{n} {conn.execute(f'SHOW {n}').fetchall()[0][0]}" for n in names)


def postgres_cpu_s(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server: the postmaster with its reaped children, and its live ones."""
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(f) for f in fields[11:15]) / 100  # utime, stime, cutime, cstime (USER_HZ = 100)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited meanwhile
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / 100
    return total


async def run_dbos(url: str) -> None:
    """A DBOS process: runs the rounds its parent writes on stdin (``[clients, warmup_s, duration_s]``)
    and answers each with its ``Sample`` as a JSON line."""
    try:
        from dbos import DBOS
    except ImportError:
        print("no dbos: install the bench extra (pip install -e '.[bench]')", flush=True)
        raise SystemExit(1) from None

    @DBOS.step()
    async def noop() -> float:
        return time.perf_counter()

    @DBOS.workflow()
    async def three_noops() -> list[float]:
        return [await noop(), await noop(), await noop()]

    DBOS(config={"name": "durable-bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()

    async def one() -> list[float]:
        handle = await DBOS.start_workflow_async(three_noops)
        return await handle.get_result()

    print("ready", flush=True)
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            clients, warmup_s, duration_s = json.loads(line)
            sample = await closed_loops(one, clients, warmup_s, duration_s) if clients else Sample()
            print(json.dumps(sample.__dict__), flush=True)
    finally:
        DBOS.destroy()


# -- the run -----------------------------------------------------------------------------------------------


def row(name: str, clients: int, sample: Sample, store_s: float, app_s: float) -> str:
    n = max(sample.workflows, 1)
    return (
        f"| {name} | {clients} | {sample.workflows / sample.seconds:,.0f} "
        f"| {percentile_ms(sample.steps_s, 0.5):.2f} | {percentile_ms(sample.steps_s, 0.99):.2f} "
        f"| {percentile_ms(sample.workflows_s, 0.5):.2f} | {percentile_ms(sample.workflows_s, 0.99):.2f} "
        f"| {percentile_ms(sample.firsts_s, 0.5):.2f} | {percentile_ms(sample.lasts_s, 0.5):.2f} "
        f"| {store_s / n * 1000:.2f} | {app_s / n * 1000:.2f} |"
    )


class Stores:
    """The stores the run starts, each once: one PostgreSQL server for ``postgres`` and ``dbos``."""

    def __init__(self) -> None:
        self.closers: list[Callable[[], None]] = []
        self._postgres: PostgresNode | None = None

    def postgres(self) -> PostgresNode:
        if self._postgres is None:
            self._postgres = start_postgres()
            self.closers.append(self._postgres.close)
            print(f"# PostgreSQL for postgres and dbos: {durability(self._postgres)}", flush=True)
        return self._postgres

    @property
    def started_postgres(self) -> PostgresNode | None:
        return self._postgres

    def close(self) -> None:
        for close in self.closers:
            close()


def make_system(name: str, args: argparse.Namespace, stores: Stores) -> Querator | Dbos:
    """The system ``name``, on the stores of the run."""
    if name == "dbos":
        return Dbos(args.workers, stores.postgres())
    extra: list[str] = []
    store_cpu_s: Callable[[], float] | None = None
    counts: CassandraCounts | None = None
    if name == "postgres":
        postgres = stores.postgres()
        postmaster = postmaster_of(postgres)
        extra = ["--postgres-url", postgres.url, "--postgres-schema", f"durable_{os.getpid()}"]
        store_cpu_s = lambda: postgres_cpu_s(postmaster)  # noqa: E731
    elif name == "cassandra":
        port = args.cassandra_port
        if port is None:
            node = start_cassandra("group")
            stores.closers.extend([node.stop, lambda: shutil.rmtree(node.base, ignore_errors=True)])
            port, pid = node.cql_port, node.proc.pid if node.proc else None
            if pid is not None:
                store_cpu_s = lambda: cpu_s(pid)  # noqa: E731
        keyspace = f"durable_{os.getpid()}"
        extra = ["--cassandra-port", str(port), "--cassandra-keyspace", keyspace]
        counts = CassandraCounts(port, keyspace)
        stores.closers.append(counts.close)
    return Querator(
        name,
        args.sqlite_synchronous,
        args.workers,
        args.concurrency,
        args.partitions,
        extra,
        store_cpu_s,
        counts,
    )


async def print_summaries(
    systems: list[Querator | Dbos], results: dict[tuple[str, int], list[tuple[Sample, float, float]]]
) -> None:
    """The median round of each system, then where a workflow's requests and statements go."""
    print("\nMedian of the rounds (by workflows/s):")
    for (name, n), runs in results.items():
        sample, store_s, app_s = sorted(runs, key=lambda r: r[0].workflows)[len(runs) // 2]
        print(row(name, n, sample, store_s, app_s))
    print("\nRequests per workflow in the node, by route, and their mean time there (whole run):")
    print("| system | route | requests/wf | mean ms |\n|---|---|---|---|")
    for system in systems:
        if isinstance(system, Querator):
            print("\n".join(await system.routes()))
    statements = [r for system in systems if isinstance(system, Querator) for r in await system.statements()]
    if statements:
        print("\nThe store's statements per workflow, by table (whole run after the set-up):")
        print("| system | statements | per workflow |\n|---|---|---|")
        print("\n".join(statements))


async def run_bench(args: argparse.Namespace) -> None:
    """Starts the systems, runs the rounds, prints their rows and the summaries."""
    clients = args.clients or [1, 16]
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, {args.workers} worker process(es), concurrency {args.concurrency}, "
        f"{args.duration:.0f} s per round after {args.warmup:.0f} s of warm-up, sqlite synchronous "
        f"{args.sqlite_synchronous}",
        flush=True,
    )
    systems: list[Querator | Dbos] = []
    results: dict[tuple[str, int], list[tuple[Sample, float, float]]] = {}
    stores = Stores()
    try:
        for name in args.system or DEFAULT_SYSTEMS:
            system = make_system(name, args, stores)
            systems.append(system)
            await system.ready()
        print(
            "| system | clients | workflows/s | step p50 ms | step p99 ms | workflow p50 ms "
            "| workflow p99 ms | in p50 ms | out p50 ms | store CPU ms/wf | app CPU ms/wf |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|",
            flush=True,
        )
        for _ in range(args.rounds):
            for system in systems:
                for n in clients:
                    store, app = system.cpu()
                    sample = await system.round(n, args.warmup, args.duration)
                    store_after, app_after = system.cpu()
                    # The warm-up's CPU is counted too: scale it to the measured window.
                    share = args.duration / (args.warmup + args.duration)
                    cost = ((store_after - store) * share, (app_after - app) * share)
                    results.setdefault((system.name, n), []).append((sample, *cost))
                    print(row(system.name, n, sample, *cost), flush=True)
        await print_summaries(systems, results)
    finally:
        for system in systems:
            await system.stop()
        if stores.started_postgres is not None:
            print(transactions(stores.started_postgres, [s.name for s in systems]), flush=True)
        stores.close()


def transactions(postgres: PostgresNode, names: list[str]) -> str:
    """Rows of PostgreSQL's committed transactions per workflow for ``postgres`` and ``dbos``, whole run
    (warm-ups included; read once their processes stopped, which flushes their statistics)."""
    import psycopg

    base = postgres.url.rsplit("/", 1)[0]
    wanted = {
        "postgres": ("postgres", f"SELECT count(*) FROM durable_{os.getpid()}.workflows"),
        "dbos": ("dbos_bench", "SELECT count(*) FROM dbos.workflow_status"),
    }
    lines = ["\nPostgreSQL transactions per workflow (whole run):", "| system | workflows | commits/wf |"]
    lines.append("|---|---|---|")
    for name in names:
        if name not in wanted:
            continue
        database, count = wanted[name]
        with psycopg.connect(f"{base}/{database}", autocommit=True) as conn:
            workflows = int(conn.execute(count).fetchall()[0][0])
            commits = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchall()[0][0]
        lines.append(f"| {name} | {workflows:,} | {int(commits) / max(workflows, 1):.1f} |")
    return "\n".join(lines)


async def run_long(args: argparse.Namespace) -> None:
    """``--steps``: one workflow of that many no-op steps per querator system and round."""
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, one workflow of {args.steps:,} no-op steps per system and round, "
        f"sqlite synchronous {args.sqlite_synchronous}",
        flush=True,
    )
    systems: list[Querator] = []
    stores = Stores()
    try:
        for name in args.system or ("sqlite", "postgres"):
            system = make_system(name, args, stores)
            if not isinstance(system, Querator):
                raise SystemExit("--steps runs querator's systems only")
            systems.append(system)
            await system.ready()
        print(
            "| round | system | steps | seconds | steps/s | step p50 ms | step p99 ms |\n"
            "|---|---|---|---|---|---|---|",
            flush=True,
        )
        for n in range(args.rounds):
            for system in systems:
                spent_s, stamps = await system.long_run(args.steps)
                steps_s = [b - a for a, b in itertools.pairwise(stamps)]
                print(
                    f"| {n + 1} | {system.name} | {len(stamps):,} | {spent_s:.1f} "
                    f"| {len(stamps) / spent_s:,.0f} | {percentile_ms(steps_s, 0.5):.2f} "
                    f"| {percentile_ms(steps_s, 0.99):.2f} |",
                    flush=True,
                )
    finally:
        for system in systems:
            await system.stop()
        stores.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--system", action="append", choices=SYSTEMS, help="repeatable; default all")
    parser.add_argument("--clients", type=int, action="append", help="repeatable; default 1 and 16")
    parser.add_argument("--sqlite-synchronous", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument(
        "--cassandra-port",
        type=int,
        help="with --system cassandra: a running node (otherwise one is started)",
    )
    parser.add_argument("--workers", type=int, default=1, help="worker (or DBOS) processes per system")
    parser.add_argument("--concurrency", type=int, default=16, help="a querator worker's concurrency")
    parser.add_argument("--partitions", type=int, default=QUEUE_PARTITIONS, help="the querator app's queue's")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per round")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--journal-length",
        type=int,
        action="append",
        help="repeatable: time one-step appends at these journal lengths instead (bench/journal_appends.py)",
    )
    parser.add_argument(
        "--steps", type=int, help="run one workflow of this many no-op steps per system and round instead"
    )
    parser.add_argument(
        "--role", default="bench", choices=["bench", "worker", "dbos"], help=argparse.SUPPRESS
    )
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--postgres", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "worker":
        return await run_worker(args.endpoint, args.concurrency, args.partitions)
    if args.role == "dbos":
        return await run_dbos(args.postgres)
    if args.journal_length:
        return await run_journal(args)
    if args.steps:
        return await run_long(args)
    await run_bench(args)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
