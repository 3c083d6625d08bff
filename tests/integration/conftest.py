"""Real ``querator serve`` processes for the integration tests.

``servers`` is a factory fixture: ``servers.start(*args, env=..., cwd=...)`` runs
``sys.executable -m querator.cli serve ...`` on a free loopback port, waits (with a deadline) until
``GET /health`` answers 200 and returns a ``ServerProcess``; ``servers.spawn`` starts one without waiting
(for settings that must make it exit). Every process still running at teardown is killed with SIGKILL.
``kill9`` kills one now, without a graceful shutdown; ``terminate`` stops one gracefully (SIGTERM).

Nothing here sleeps to synchronise: ``wait_until`` and ``eventually`` poll a condition until a deadline.

``QUERATOR_TEST_STORAGE=postgres`` gives every server started with ``--storage sqlite`` or none (and no
``--data-dir`` or config file, which are about sqlite's files) the PostgreSQL store instead, in a schema
of the test's own on the session's server: how the durable suite, for one, runs on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, Self

import pytest

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient
from querator.cluster.ring import Ring
from querator.errors import QueratorError, RequestFailed
from tests.conftest import POSTGRES

from .etcd_server import etcd  # noqa: F401 - the session's etcd fixture, for every integration test

ROOT = Path(__file__).resolve().parents[2]
START_DEADLINE = 30.0
"""Seconds a server may take to answer its first health check."""
STOP_DEADLINE = 20.0
"""Seconds a server may take to exit after SIGTERM or SIGKILL."""
POLL_INTERVAL = 0.02


def spread_queue(members: Sequence[str], partitions: int, prefix: str) -> str:
    """A queue name whose ``partitions`` the ring gives to every one of ``members`` (some names land on
    fewer)."""
    ring = Ring(list(members), 1)
    for n in range(1000):
        name = f"{prefix}{n}"
        if {ring.owner(name, p) for p in range(partitions)} == set(members):
            return name
    raise AssertionError(f"no queue name spreads over {members}")


def keyed_cluster(tmp_path: Path) -> tuple[str, tuple[str, ...]]:
    """An API key, and the flags of a cluster node that accepts it and signs its forwards with a new
    secret."""
    key = generate_key()
    secret = tmp_path / "cluster-secret"
    secret.write_text(secrets.token_hex(32))
    return key, ("--api-keys", key_hash(key), "--cluster-secret-file", str(secret))


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any ``QUERATOR_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUERATOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls ``check`` until it is true; fails naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout}s")
        time.sleep(POLL_INTERVAL)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    """``wait_until`` for asyncio code: the check is awaited, the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout}s")
        await asyncio.sleep(POLL_INTERVAL)


class Held(NamedTuple):
    """What a queue holds by its stats. A failing partition answers zeros for counts it cannot read,
    so a queue with one is never ``Held()``: a drain that took those zeros for empty would end early
    and count the partition's items as lost."""

    items: int = 0
    leased: int = 0
    scheduled: int = 0
    failing: tuple[int, ...] = ()


async def held(client: AsyncClient, queue: str) -> Held:
    """Totals over every partition of ``queue``, and the partitions failing right now."""
    stats = await client.stats(queue)
    parts = [p for lq in stats.logical_queues for p in lq.partitions]
    return Held(
        sum(p.total for p in parts),
        sum(p.total_leased for p in parts),
        sum(p.scheduled for p in parts),
        tuple(p.partition for p in parts if p.failures),
    )


async def keep_producing(
    client: AsyncClient,
    queue: str,
    producer: int,
    size: int,
    acked: set[str],
    replies: Counter[int],
    stop: asyncio.Event,
    errors: list[str] | None = None,
) -> None:
    """Produces batches of ``size`` unique payloads until ``stop``: acknowledged payloads go into
    ``acked``, every reply's status into ``replies`` (200, or the error's code), error messages into
    ``errors``. An error is followed by a short pause, as a client backing off would."""
    seq = 0
    while not stop.is_set():
        batch = [f"p{producer}-{seq + i:06d}" for i in range(size)]
        seq += size
        try:
            await client.produce(queue, batch, request_timeout="5s")
        except QueratorError as e:
            replies[e.code] += 1
            if errors is not None:
                errors.append(f"produce: {e.code} {e.message}")
            await asyncio.sleep(0.05)
        else:
            replies[200] += 1
            acked.update(batch)


class ServerProcess:
    """One ``querator serve`` child process; its stdout and stderr go to files under the test's tmp dir."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        port: int | None,
        stdout: Path,
        stderr: Path,
        cwd: Path,
        host: str = "127.0.0.1",
    ) -> None:
        self.proc = proc
        self.port = port
        self.host = host
        self.stdout_path = stdout
        self.stderr_path = stderr
        self.cwd = cwd

    @property
    def url(self) -> str:
        assert self.port is not None, "this server was not given a port"
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        """Exit status and output, for assertion messages."""
        return f"pid {self.pid}, exit {self.proc.poll()}\n--- stderr ---\n{self.stderr()}"

    def healthy(self) -> bool:
        """True when ``GET /health`` answers 200."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                return int(resp.status) == 200
        except (OSError, http.client.HTTPException):  # refused, reset, 503 (HTTPError), ...
            return False

    def wait(self, timeout: float = STOP_DEADLINE) -> int:
        """Waits for the process to exit; returns its exit status."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server did not exit within {timeout}s: {self.describe()}") from None


def kill9(server: ServerProcess) -> None:
    """Kills the server with SIGKILL (no graceful shutdown) and waits until it is gone."""
    os.kill(server.pid, signal.SIGKILL)
    status = server.wait()
    assert status == -signal.SIGKILL, server.describe()


async def sigterm_while_a_lease_waits(server: ServerProcess, client: AsyncClient, queue: str) -> None:
    """Parks a lease on the empty ``queue``, stops the server with SIGTERM, and checks that the lease,
    which would wait a minute for items, is answered 453 long before (docs/architecture.md, "Shutdown")."""
    waiting = asyncio.create_task(
        client.lease(queue, batch_size=1, client_id="patient", request_timeout="1m")
    )

    async def parked() -> bool:
        assert not waiting.done(), "the lease returned before the shutdown"
        stats = await client.stats(queue)
        return sum(lq.lease_waiting for lq in stats.logical_queues) == 1

    await eventually(parked, 60.0, "the lease is waiting")
    server.proc.send_signal(signal.SIGTERM)
    with pytest.raises(RequestFailed) as failed:
        await asyncio.wait_for(waiting, 30)
    assert failed.value.code == 453
    assert failed.value.message in ("queue is shutting down", "service is shutting down")


def terminate(server: ServerProcess) -> int:
    """Stops the server gracefully with SIGTERM; returns its exit status."""
    server.proc.send_signal(signal.SIGTERM)
    return server.wait()


def start_refused(
    servers: Servers, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> ServerProcess:
    """Starts a server that must refuse to start: exit 2 and one line on stderr, no traceback."""
    server = servers.spawn(*args, env=env, cwd=cwd)
    # A bad value must stop the server before it listens; a server that listens anyway fails at once.
    wait_until(
        lambda: not server.running() or "querator listening" in server.stderr(),
        START_DEADLINE,
        "the server exits or listens",
    )
    assert server.proc.poll() == 2, server.describe()
    assert server.stderr().count("\n") == 1, server.stderr()  # one line, no traceback
    return server


def refuses_connections(port: int) -> bool:
    """True when nothing accepts TCP connections on ``127.0.0.1:port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


class Servers:
    """Starts ``querator serve`` processes for one test and kills whatever is left at teardown.

    ``storage``: the arguments that replace ``--storage sqlite`` or its absence (``QUERATOR_TEST_STORAGE``,
    module docstring)."""

    def __init__(self, base: Path, storage: Sequence[str] = ()) -> None:
        self.base = base
        self.started: list[ServerProcess] = []
        self.storage = tuple(storage)

    def spawn(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> ServerProcess:
        """Starts ``querator serve *args`` without waiting for it; ``host:port`` is where it will answer.
        ``prefix`` runs it through another command (``ip netns exec <name>``), which must exec it."""
        if self.storage:
            args = self._replace_sqlite(args)
        n = len(self.started)
        cwd = cwd or self.base / f"cwd-{n}"
        cwd.mkdir(parents=True, exist_ok=True)
        stdout, stderr = self.base / f"server-{n}.out", self.base / f"server-{n}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "querator.cli", "serve", *args],
                cwd=cwd,
                env=server_env(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        server = ServerProcess(proc, port, stdout, stderr, cwd, host)
        self.started.append(server)
        return server

    def _replace_sqlite(self, args: tuple[str, ...]) -> tuple[str, ...]:
        if {"--config", "--data-dir"} & set(args):
            return args
        pairs = [i for i in range(len(args) - 1) if args[i : i + 2] == ("--storage", "sqlite")]
        kept = tuple(a for i, a in enumerate(args) if not any(i in (p, p + 1) for p in pairs))
        return kept if "--storage" in kept else (*self.storage, *kept)

    def start(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        port: int | None = None,
        address_flag: bool = True,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> ServerProcess:
        """Starts a server and waits until it is healthy.

        With ``address_flag`` (the default) ``--address 127.0.0.1:<port>`` is added to ``args``, on a free
        port unless ``port`` is given. Without it the address must come from ``args``, ``env`` or a
        config file, and ``port`` must say where the server will listen.
        """
        attempts = 3 if address_flag and port is None else 1
        for attempt in range(attempts):
            chosen = port if port is not None else free_port()
            extra = ("--address", f"127.0.0.1:{chosen}") if address_flag else ()
            server = self.spawn(*args, *extra, env=env, cwd=cwd, port=chosen, host=host, prefix=prefix)
            deadline = time.monotonic() + START_DEADLINE
            while server.running() and not server.healthy():
                if time.monotonic() > deadline:
                    raise AssertionError(f"server not healthy after {START_DEADLINE}s: {server.describe()}")
                time.sleep(POLL_INTERVAL)
            if server.running():
                return server
            # Another process may have taken the free port between the probe and the bind: try another.
            if "address already in use" not in server.stderr().lower() or attempt == attempts - 1:
                raise AssertionError(f"server exited before it became healthy: {server.describe()}")
        raise AssertionError("unreachable")

    async def astart(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        port: int | None = None,
        address_flag: bool = True,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> ServerProcess:
        """``start`` for asyncio tests: waits in a thread, so the event loop keeps running."""
        return await asyncio.to_thread(
            partial(
                self.start, env=env, cwd=cwd, port=port, address_flag=address_flag, host=host, prefix=prefix
            ),
            *args,
        )

    def close(self) -> None:
        for server in self.started:
            if server.running():
                server.proc.kill()
            try:
                server.proc.wait(STOP_DEADLINE)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass


@pytest.fixture
def servers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Servers]:
    """A factory of ``querator serve`` processes; all of them are killed at teardown."""
    storage: tuple[str, ...] = ()
    schema = ""
    if os.environ.get("QUERATOR_TEST_STORAGE") == "postgres":
        node = request.getfixturevalue("postgres_node")
        schema = "i_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:20]
        node.drop_schema(schema)
        storage = ("--storage", "postgres", "--postgres-url", node.url, "--postgres-schema", schema)
    factory = Servers(tmp_path / "servers", storage)
    factory.base.mkdir()
    try:
        yield factory
    finally:
        factory.close()
        if schema:
            request.getfixturevalue("postgres_node").drop_schema(schema)


@pytest.fixture
def keyspace(request: pytest.FixtureRequest) -> str:
    """A Cassandra keyspace of this test's own (created by the first store that opens it)."""
    return "i_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:20]


SHARED_STORES = ["cassandra", POSTGRES]
"""The stores every node of a cluster can share, as ``shared_storage``'s parameters."""


@pytest.fixture(params=SHARED_STORES)
def shared_storage(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The ``--storage`` arguments of a store every server of this test shares: a Cassandra keyspace or
    a PostgreSQL schema of the test's own (the test runs once on each)."""
    from .test_cassandra import cassandra_args
    from .test_postgres import postgres_args

    if request.param == "postgres":
        return postgres_args(request.getfixturevalue("postgres_settings"))
    return cassandra_args(request.getfixturevalue("cassandra_node"), request.getfixturevalue("keyspace"))


class WorkerProcesses:
    """``querator worker <app>`` processes of one test, each logging to ``<records>/../worker-<n>.log``
    and recording its runs under ``records`` (made here); killed when closed, or when the ``with``
    block ends, if still running."""

    def __init__(self, server: ServerProcess, records: Path, app: str, records_env: str) -> None:
        records.mkdir(parents=True, exist_ok=True)
        self.server = server
        self.records = records
        self.app = app
        self.records_env = records_env
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, *args: str, env: Mapping[str, str] | None = None, main: Sequence[str] = ("-m", "querator.cli")
    ) -> subprocess.Popen[bytes]:
        """A worker running ``args`` (``--queues ...``), once it has started leasing; ``main`` is how
        Python starts the CLI."""
        n = len(self.started)
        log = self.records.parent / f"worker-{n}.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, *main, "worker", self.app, *args],
                env=server_env(
                    {"QUERATOR_ENDPOINT": self.server.url, self.records_env: str(self.records), **(env or {})}
                ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.started.append(proc)
        wait_until(
            lambda: "worker started" in log.read_text() or proc.poll() is not None,
            START_DEADLINE,
            "worker up",
        )
        assert proc.poll() is None, log.read_text()
        return proc

    def log(self, worker: int | subprocess.Popen[bytes]) -> str:
        """What a worker (by start order, or its process) logged."""
        n = worker if isinstance(worker, int) else self.started.index(worker)
        return (self.records.parent / f"worker-{n}.log").read_text()

    def records_of(self) -> list[dict[str, Any]]:
        """Every JSON line every process recorded, by process."""
        return [
            r
            for path in sorted(self.records.glob("*.jsonl"))
            for r in map(json.loads, path.read_text().splitlines())
        ]

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(STOP_DEADLINE)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
