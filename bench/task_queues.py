"""querator.worker beside the Python task queues teams run today, on one machine, alternating.

    pip install -e '.[compare]'          # Celery, RQ, Dramatiq, arq; and apt install redis-server
    python bench/task_queues.py --tasks 5000 --concurrency 16 --concurrency 64 --io-ms 0 --io-ms 10
    python bench/task_queues.py --kill   # kill -9 a worker mid-task, under each
    python bench/task_queues.py --broker rabbitmq --system querator --system dramatiq --system celery
    python bench/task_queues.py --system querator --system querator-cassandra --system querator-postgres

Systems (``--system``, repeatable; default all but the querator variants on other stores): ``querator``
(querator.worker on a sqlite node, its default store: every commit synced; ``TQ_PREFETCH=n`` in the
environment sets its ``prefetch``), ``querator-cassandra`` and ``querator-postgres`` (the same worker on a
node of the cluster stores: the tests' Cassandra node or PostgreSQL, started once for the run, a fresh
keyspace or schema per measurement; their CPU counts as the broker's),
``celery`` (threads pool, Redis broker, acks_late and reject_on_worker_lost: its documented
at-least-once setting), ``rq`` (``rq worker-pool`` of SimpleWorkers), ``dramatiq`` (Redis broker, one
process of threads) and ``arq`` (asyncio). Redis runs with
``appendonly yes``, ``appendfsync everysec`` (its usual durable setting; it syncs once a second, where the
sqlite node syncs each commit). ``--broker rabbitmq`` gives Celery and Dramatiq a RabbitMQ broker instead
(``apt install rabbitmq-server``; Dramatiq's ``RabbitmqBroker`` needs ``pika``, in the ``compare`` extra),
started here on free ports with its own epmd, durable queues and persistent messages as both send them
by default, and stopped at the end; RQ and arq have no RabbitMQ broker and stay on Redis. Each system's
workers run ``--concurrency`` tasks at once; tasks are ``bench/task_queue_apps.py``'s, which record when
they started and ended.

Per system, concurrency and task (``--io-ms``: 0 = no-op, else a sleep of that long), each round:

- **drain**: ``--tasks`` tasks enqueued before the workers start (enqueue rate reported), then tasks/s
  from the first start to the last end, and CPU per task of workers and broker/node over that span;
- **latency**: with the workers idle, ``--latency-rate`` tasks a second for ``--latency-s`` seconds:
  enqueue-to-start p50 and p99.

``--kill``: ``--kill-tasks`` tasks of 3 s each, workers of concurrency 8; once 8 have started the workers
are killed with SIGKILL and started again; reports how many tasks ended (each once?) within 90 s.
Systems whose redelivery has a timeout use 5 s where it can be set (``task_queue_apps.LEASE_S``).
Rounds alternate the systems. Results go in docs/benchmarks-log.md with the command, machine and date.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from bench import start_cassandra, start_postgres

if TYPE_CHECKING:
    from tests.cassandra_node import CassandraNode
    from tests.postgres_node import PostgresNode

ROOT = Path(__file__).resolve().parents[1]
QUERATOR_STORES = {"querator": "sqlite", "querator-cassandra": "cassandra", "querator-postgres": "postgres"}
"""The querator systems, and the store of the node each runs on."""
SYSTEMS = (*QUERATOR_STORES, "celery", "rq", "dramatiq", "arq")
DEFAULT_SYSTEMS = ("querator", "celery", "rq", "dramatiq", "arq")
START_DEADLINE_S = 60.0
KILL_WAIT_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    """``proc`` and every process under it (their CPU is what the system costs), or none once it ended."""
    try:
        parent = psutil.Process(proc.pid)
        return [parent.pid, *(c.pid for c in parent.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def wait_until(check: Callable[[], bool], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: not after {deadline_s} s")
        time.sleep(0.02)


@dataclass
class Records:
    path: Path

    def read(self) -> list[tuple[str, float, float, float]]:
        rows = []
        for file in self.path.glob("*.txt"):
            for line in file.read_text().splitlines():
                task_id, enqueued, started, ended = line.split()
                rows.append((task_id, float(enqueued), float(started), float(ended)))
        return rows

    def count(self) -> int:
        return sum(f.read_bytes().count(b"\n") for f in self.path.glob("*.txt"))

    def clear(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)


def library(system: str) -> str:
    """Whose worker and client ``system`` runs: ``querator`` for each querator variant."""
    return "querator" if system in QUERATOR_STORES else system


class Backend:
    """Brokers started once for the run: a Redis, a RabbitMQ with ``broker`` rabbitmq, the Cassandra or
    PostgreSQL a querator variant needs, and a querator node per measurement."""

    def __init__(self, tmp: Path, broker: str = "redis") -> None:
        self.tmp = tmp
        self.cassandra: CassandraNode | None = None
        self.postgres: PostgresNode | None = None
        self._stores = itertools.count()
        """Numbers the keyspaces and schemas of fresh nodes."""
        self.rabbitmq = RabbitMQ(tmp / "rabbitmq") if broker == "rabbitmq" else None
        self.redis_port = free_port()
        self.redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--dir",
                str(tmp),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
                str(tmp / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
        )
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.node: subprocess.Popen[bytes] | None = None
        self.node_url = ""
        wait_until(self._redis_up, START_DEADLINE_S, "redis up")

    def _redis_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def fresh_node(self, storage: str) -> str:
        """A new node on ``storage`` (an empty store per measurement, as FLUSHALL empties Redis)."""
        self.stop_node()
        port = free_port()
        data = Path(tempfile.mkdtemp(dir=self.tmp))
        self.node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "querator.cli",
                "serve",
                "--storage",
                storage,
                "--data-dir",
                str(data),
                *self._store_flags(storage),
                "--address",
                f"127.0.0.1:{port}",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.node_url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _open(port), START_DEADLINE_S, "node up")
        return self.node_url

    def _store_flags(self, storage: str) -> list[str]:
        """Where a node on ``storage`` finds an empty store, started on first use."""
        fresh = f"tq_{next(self._stores)}"
        if storage == "cassandra":
            if self.cassandra is None:
                self.cassandra = start_cassandra("group")
            return ["--cassandra-port", str(self.cassandra.cql_port), "--cassandra-keyspace", fresh]
        if storage == "postgres":
            if self.postgres is None:
                self.postgres = start_postgres()
            return ["--postgres-url", self.postgres.url, "--postgres-schema", fresh]
        return []

    def store_pids(self) -> list[int]:
        """The Cassandra and PostgreSQL processes this run started."""
        pids = []
        if self.cassandra is not None and self.cassandra.proc is not None:
            pids.append(self.cassandra.proc.pid)
        if self.postgres is not None:
            postmaster = psutil.Process(
                int((self.postgres.dir / "data" / "postmaster.pid").read_text().split()[0])
            )
            pids += [postmaster.pid, *(c.pid for c in postmaster.children())]  # its pool's backends live on
        return pids

    def stop_node(self) -> None:
        if self.node is not None:
            self.node.terminate()
            self.node.wait(30)
            self.node = None

    def flush_redis(self) -> None:
        with socket.create_connection(("127.0.0.1", self.redis_port)) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def broker_of(self, system: str) -> str:
        if system in QUERATOR_STORES:
            return "querator"
        return "rabbitmq" if self.rabbitmq is not None and system in RABBITMQ_SYSTEMS else "redis"

    def broker_pids(self, system: str) -> list[int]:
        broker = self.broker_of(system)
        if broker == "querator":
            assert self.node is not None
            return [self.node.pid, *self.store_pids()]
        if broker == "rabbitmq":
            assert self.rabbitmq is not None
            return self.rabbitmq.pids()
        return [self.redis.pid]

    def env(self) -> dict[str, str]:
        """Where the workers and the enqueueing find their brokers."""
        return {
            "QUERATOR_ENDPOINT": self.node_url,
            "TQ_REDIS_URL": self.redis_url,
            "TQ_AMQP_URL": "" if self.rabbitmq is None else self.rabbitmq.url,
        }

    def close(self) -> None:
        self.stop_node()
        self.redis.terminate()
        self.redis.wait(30)
        if self.cassandra is not None:
            self.cassandra.stop()
        if self.postgres is not None:
            self.postgres.close()
        if self.rabbitmq is not None:
            self.rabbitmq.close()


RABBITMQ_SYSTEMS = ("celery", "dramatiq")
"""The systems ``--broker rabbitmq`` moves to RabbitMQ."""
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
"""Debian's server script itself: /usr/sbin/rabbitmq-server would switch to the rabbitmq user."""


class RabbitMQ:
    """A RabbitMQ node of this run only: its own node name, ports, epmd, data and Erlang cookie (its HOME)
    under ``path``. Queues start empty and every drain empties them, so it is not flushed between
    measurements."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "enabled_plugins").write_text("[].\n")  # no management plugin: the broker alone
        (path / "rabbitmq.conf").write_text("")
        self.port = free_port()
        self.epmd_port = free_port()
        self.env = {
            **os.environ,
            "HOME": str(path),
            "RABBITMQ_NODENAME": f"tq{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(path / "mnesia"),
            "RABBITMQ_LOG_BASE": str(path / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(path / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(path / "rabbitmq"),
            "RABBITMQ_PID_FILE": str(path / "pid"),
        }
        with (path / "server.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [RABBITMQ_SERVER], env=self.env, stdout=log, stderr=log, start_new_session=True
            )
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        wait_until(lambda: _open(self.port), START_DEADLINE_S, "rabbitmq up")

    def pids(self) -> list[int]:
        return tree_pids(self.proc)

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        # The node started an epmd daemon on its own port: stop that one, no other.
        subprocess.run(["epmd", "-kill"], env=self.env, check=False, capture_output=True)


def _open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def worker_command(system: str, concurrency: int) -> list[str]:
    py = sys.executable
    return {
        # Logs at WARNING, as Celery's: a log record per successful run is INFO in both.
        "querator": [
            py,
            "-m",
            "querator.cli",
            "worker",
            "task_queue_apps:querator",
            "-c",
            str(concurrency),
            "--log-level",
            "warning",
        ],
        "celery": [
            py,
            "-m",
            "celery",
            "-A",
            "task_queue_apps:celery",
            "worker",
            "--pool",
            "threads",
            "-c",
            str(concurrency),
            "-Q",
            "celery",
            "--loglevel",
            "WARNING",
            "--without-gossip",
        ],
        "rq": [
            str(Path(py).parent / "rq"),
            "worker-pool",
            "-n",
            str(concurrency),
            "-w",
            "rq.worker.SimpleWorker",
            "--url",
            "{redis}",
            "-q",
            "tq",
        ],
        "dramatiq": [
            py,
            "-m",
            "dramatiq",
            "task_queue_apps",
            "--processes",
            "1",
            "--threads",
            str(concurrency),
        ],
        "arq": [str(Path(py).parent / "arq"), "task_queue_apps.ArqSettings"],
    }[library(system)]


class Workers:
    def __init__(self, system: str, concurrency: int, backend: Backend, records: Records) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)]),
            **backend.env(),
            "TQ_RECORDS": str(records.path),
            "TQ_SYSTEM": library(system),
            "TQ_CONCURRENCY": str(concurrency),
        }
        cmd = [part.replace("{redis}", backend.redis_url) for part in worker_command(system, concurrency)]
        self.log = backend.tmp / f"{system}-worker.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)

    def pids(self) -> list[int]:
        return tree_pids(self.proc)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


# -- enqueueing, in this process, with each library's own API ------------------------------------------------


def enqueue(system: str, backend: Backend, calls: list[tuple[str, float, int]]) -> None:
    """Enqueues ``(task_id, enqueued_at, io_ms)`` calls (``enqueued_at`` 0: now, per task)."""
    os.environ.update(backend.env())
    sys.path.insert(0, str(ROOT / "bench"))
    import task_queue_apps as apps

    def at(enqueued_at: float) -> float:
        return enqueued_at or time.time()

    if library(system) == "querator":
        asyncio.run(_querator_enqueue(apps, calls))
    elif system == "celery":
        app = _cached("celery", apps.celery_app)
        for task_id, enqueued_at, io_ms in calls:
            app.send_task("work", args=(task_id, at(enqueued_at), io_ms))
    elif system == "rq":
        from redis import Redis
        from rq import Queue

        queue = Queue("tq", connection=Redis.from_url(backend.redis_url))
        for start in range(0, len(calls), 1000):
            queue.enqueue_many(
                [
                    Queue.prepare_data(apps.rq_work, (task_id, at(t), io_ms), result_ttl=0)
                    for task_id, t, io_ms in calls[start : start + 1000]
                ]
            )
    elif system == "dramatiq":
        work = _cached("dramatiq", apps.dramatiq_broker)
        for task_id, enqueued_at, io_ms in calls:
            work.send(task_id, at(enqueued_at), io_ms)
    elif system == "arq":
        asyncio.run(_arq_enqueue(backend.redis_url, calls))


_objects: dict[str, object] = {}


def _cached(name: str, make: Callable[[], object]) -> object:
    if name not in _objects:
        _objects[name] = make()
    return _objects[name]


async def _querator_enqueue(apps: object, calls: list[tuple[str, float, int]]) -> None:
    worker = apps.querator_worker()  # type: ignore[attr-defined]
    [work] = worker.tasks.values()
    for start in range(0, len(calls), 1000):
        batch = calls[start : start + 1000]
        await work.enqueue_many([((task_id, t or time.time(), io_ms), {}) for task_id, t, io_ms in batch])
    await worker.close()


async def _arq_enqueue(redis_url: str, calls: list[tuple[str, float, int]]) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    pool = await create_pool(RedisSettings.from_dsn(redis_url), default_queue_name="tq")
    for task_id, enqueued_at, io_ms in calls:
        await pool.enqueue_job("arq_work", task_id, enqueued_at or time.time(), io_ms, _job_id=task_id)
    await pool.aclose()


# -- the measurements ----------------------------------------------------------------------------------------


def fresh(system: str, backend: Backend) -> None:
    broker = backend.broker_of(system)
    if broker == "querator":
        backend.fresh_node(QUERATOR_STORES[system])
    elif broker == "redis":
        backend.flush_redis()


def drain(system: str, backend: Backend, records: Records, tasks: int, concurrency: int, io_ms: int) -> dict:
    fresh(system, backend)
    records.clear()
    calls = [(uuid.uuid4().hex, 0.0, io_ms) for _ in range(tasks)]
    started = time.perf_counter()
    enqueue(system, backend, calls)
    enqueue_rate = tasks / (time.perf_counter() - started)
    workers = Workers(system, concurrency, backend, records)
    try:
        wait_until(lambda: records.count() > 0, START_DEADLINE_S, f"{system}: first task")
        pids = workers.pids() + backend.broker_pids(system)
        cpu0 = cpu_s(pids)
        wait_until(lambda: records.count() >= tasks, 600, f"{system}: all tasks")
        cpu = cpu_s(pids) - cpu0
        rows = records.read()
        span = max(r[3] for r in rows) - min(r[2] for r in rows)
        latency = latency_run(system, backend, records, 100.0, 3.0)
    finally:
        workers.stop()
    return {
        "enqueue/s": enqueue_rate,
        "tasks/s": tasks / span,
        "cpu_us/task": cpu / tasks * 1e6,
        **latency,
    }


def latency_run(system: str, backend: Backend, records: Records, rate: float, seconds: float) -> dict:
    """Enqueue-to-start of tasks sent one by one at ``rate`` a second to idle workers."""
    before = {r[0] for r in records.read()}
    sent: list[str] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        task_id = uuid.uuid4().hex
        enqueue(system, backend, [(task_id, 0.0, 0)])
        sent.append(task_id)
        time.sleep(max(0.0, start + len(sent) / rate - time.perf_counter()))
    wait_until(lambda: records.count() >= len(before) + len(sent), 60, f"{system}: latency tasks")
    waits = sorted((r[2] - r[1]) * 1000 for r in records.read() if r[0] not in before)
    return {"p50_ms": statistics.median(waits), "p99_ms": waits[int(len(waits) * 0.99) - 1]}


def kill_run(system: str, backend: Backend, records: Records, tasks: int) -> dict:
    fresh(system, backend)
    records.clear()
    ids = [uuid.uuid4().hex for _ in range(tasks)]
    enqueue(system, backend, [(i, 0.0, 3000) for i in ids])
    workers = Workers(system, 8, backend, records)
    # The tasks record when they end, so "started" is read from the workers' own progress: wait 1.5 s
    # past the first possible start, when the first 8 are mid-sleep.
    wait_until(lambda: bool(workers.pids()), START_DEADLINE_S, f"{system}: workers up")
    time.sleep(5.0)
    done_before = records.count()
    workers.kill()
    workers = Workers(system, 8, backend, records)
    end = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < end and len({r[0] for r in records.read()}) < tasks:
        time.sleep(0.2)
    workers.stop()
    rows = records.read()
    ended = {r[0] for r in rows}
    return {
        "ended_before_kill": done_before,
        "ended": len(ended & set(ids)),
        "of": tasks,
        "twice": len(rows) - len(ended),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--system", action="append", choices=SYSTEMS)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, action="append")
    parser.add_argument("--io-ms", type=int, action="append")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--kill-tasks", type=int, default=32)
    parser.add_argument("--broker", choices=["redis", "rabbitmq"], default="redis")
    args = parser.parse_args()
    systems = args.system or list(DEFAULT_SYSTEMS)
    tmp = Path(tempfile.mkdtemp(prefix="tq-"))
    backend = Backend(tmp, args.broker)
    records = Records(tmp / "records")
    try:
        if args.kill:
            print(
                "| system | broker | ended before the kill | ended in 90 s | of | ended twice |\n"
                "|---|---|---|---|---|---|"
            )
            for system in systems:
                r = kill_run(system, backend, records, args.kill_tasks)
                print(
                    f"| {system} | {backend.broker_of(system)} | {r['ended_before_kill']} | {r['ended']} | "
                    f"{r['of']} | {r['twice']} |",
                    flush=True,
                )
            return
        print(
            "| round | system | broker | concurrency | io ms | enqueue/s | tasks/s | CPU us/task | p50 ms "
            "| p99 ms |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for round_ in range(1, args.rounds + 1):
            for concurrency in args.concurrency or [16]:
                for io_ms in args.io_ms or [0]:
                    for system in systems if round_ % 2 else systems[::-1]:
                        r = drain(system, backend, records, args.tasks, concurrency, io_ms)
                        print(
                            f"| {round_} | {system} | {backend.broker_of(system)} | {concurrency} | "
                            f"{io_ms} | {r['enqueue/s']:,.0f} | "
                            f"{r['tasks/s']:,.0f} | {r['cpu_us/task']:,.0f} | {r['p50_ms']:.1f} | "
                            f"{r['p99_ms']:.1f} |",
                            flush=True,
                        )
    finally:
        backend.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
