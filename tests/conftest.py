"""Fixtures for the in-process tests: a real HTTP server on loopback per test, a FakeClock, both backends.

``api`` speaks raw JSON so the tests pin the exact wire shapes an existing Querator client sees.

With ``QUERATOR_TEST_PROCESSES=N`` (N > 1) every server is a node of N members as ``serve --processes N``
builds it (docs/processes.md): each its own service, ``SplitStore`` and HTTP server, on the member set of
``LocalMembers``, forwarding to each other over loopback, signed; the tests talk to member 0. Only the
operating system's part (the supervisor, ``SO_REUSEPORT``) is left out, which the integration tests of
``tests/integration/test_processes.py`` cover with real processes; this keeps the whole suite, FakeClock
included, runnable against the split of the partitions.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from querator.auth import ApiKeys, ClusterAuth
from querator.clock import Clock, FakeClock, SystemClock
from querator.cluster.local_members import LocalMembers
from querator.cluster.node import LOCAL_NODE, ClusterNode
from querator.http import create_app, dispatch_directly
from querator.service import Service
from querator.storage.base import Store
from querator.storage.cassandra import CassandraSettings
from querator.storage.memory import MemoryStore
from querator.storage.postgres import PostgresSettings, PostgresStore
from querator.storage.split import LocalStore, SplitStore
from querator.storage.sqlite import SqliteStore
from tests.cassandra_node import CassandraNode
from tests.postgres_node import PostgresNode

JSON = {"Content-Type": "application/json"}
LEASE_TIMEOUT = "1m0s"
EXPIRE_TIMEOUT = "24h0m0s"


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.code = body.get("code")
        self.message: str = body.get("message", "")


class Api:
    """A JSON client of one test server, with shortcuts for the common calls."""

    def __init__(self, session: aiohttp.ClientSession, base: str, service: Service) -> None:
        self.session = session
        self.base = base
        self.service = service

    async def raw(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        async with self.session.post(self.base + path, data=body, headers=headers or JSON) as resp:
            await resp.read()
            return resp

    async def post(
        self, path: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """POSTs JSON; returns the reply body on 200, raises ApiError otherwise."""
        async with self.session.post(
            self.base + path, data=msgspec.json.encode(body or {}), headers={**JSON, **(headers or {})}
        ) as resp:
            reply = msgspec.json.decode(await resp.read())
            if resp.status != 200:
                raise ApiError(resp.status, reply)
            assert isinstance(reply, dict)
            return reply

    async def error(self, path: str, body: dict[str, Any] | None = None) -> ApiError:
        """POSTs a request that must fail; returns the error."""
        with pytest.raises(ApiError) as info:
            await self.post(path, body)
        assert info.value.code == info.value.status
        return info.value

    async def create(self, name: str, **fields: Any) -> None:
        body = {
            "queue_name": name,
            "lease_timeout": LEASE_TIMEOUT,
            "expire_timeout": EXPIRE_TIMEOUT,
            "requested_partitions": 1,
        }
        body.update(fields)
        assert await self.post("/v1/queues.create", body) == {"code": 200}

    async def produce(self, queue: str, items: list[dict[str, Any]], timeout: str = "1m") -> None:
        body = {"queue_name": queue, "request_timeout": timeout, "items": items}
        assert await self.post("/v1/queue.produce", body) == {"code": 200}

    async def produce_n(self, queue: str, n: int, prefix: str = "item") -> None:
        await self.produce(queue, [{"utf8": f"{prefix}-{i}"} for i in range(n)])

    async def lease(
        self, queue: str, batch_size: int = 1, client_id: str = "client", timeout: str = "5s"
    ) -> dict[str, Any]:
        return await self.post(
            "/v1/queue.lease",
            {
                "queue_name": queue,
                "batch_size": batch_size,
                "client_id": client_id,
                "request_timeout": timeout,
            },
        )

    async def complete(self, queue: str, partition: int, ids: list[str]) -> dict[str, Any]:
        return await self.post(
            "/v1/queue.complete",
            {"queue_name": queue, "partition": partition, "request_timeout": "5s", "ids": ids},
        )

    async def retry(self, queue: str, partition: int, items: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.post(
            "/v1/queue.retry", {"queue_name": queue, "partition": partition, "items": items}
        )

    async def items(self, queue: str, partition: int = 0, **kw: Any) -> list[dict[str, Any]]:
        reply = await self.post("/v1/storage/items.list", {"queue_name": queue, "partition": partition, **kw})
        return list(reply.get("items", []))

    async def scheduled(self, queue: str, partition: int = 0, **kw: Any) -> list[dict[str, Any]]:
        reply = await self.post(
            "/v1/storage/scheduled.list", {"queue_name": queue, "partition": partition, **kw}
        )
        return list(reply.get("items", []))

    async def stats(self, queue: str) -> dict[str, Any]:
        return await self.post("/v1/queue.stats", {"queue_name": queue})

    async def partition_stats(self, queue: str, partition: int = 0) -> dict[str, Any]:
        stats = await self.stats(queue)
        found = [p for p in stats["logicalQueues"][0]["partitions"] if p.get("partition", 0) == partition]
        assert len(found) == 1
        return dict(found[0])

    async def lease_waiting(self, queue: str) -> int:
        return int((await self.stats(queue))["logicalQueues"][0].get("lease_waiting", 0))


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """Polls ``check`` until it is true; fails at the deadline (no fixed sleeps in tests)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)


ServerFactory = Callable[..., Awaitable[Api]]

TEST_PROCESSES = int(os.environ.get("QUERATOR_TEST_PROCESSES", "1"))
"""Members of each test server's node (module docstring)."""
SECRET = b"a-test-secret-of-at-least-32-characters"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skips the tests of what only a node of one process does when the servers have several."""
    if TEST_PROCESSES > 1 and item.get_closest_marker("one_process") is not None:
        pytest.skip("pins what a node of one process does (QUERATOR_TEST_PROCESSES is set)")


class Node:
    """The services of a node's members, standing in for member 0's: what a test asks of its server's
    service goes to member 0, but ``shutdown`` stops them all (a restart in a test restarts the node)."""

    def __init__(self, members: list[Service], runners: list[web.AppRunner]) -> None:
        self.members = members
        self._runners = runners

    def __getattr__(self, name: str) -> Any:
        return getattr(self.members[0], name)

    async def shutdown(self) -> None:
        for service in self.members:
            if not service._closing:
                await service.shutdown()

    async def close(self) -> None:
        await self.shutdown()
        for runner in self._runners:
            await runner.cleanup()


async def start_node(
    backend: str,
    path: Path,
    clock: Clock,
    count: int,
    postgres: Callable[[], Store] | None = None,
    **service_kw: Any,
) -> tuple[Node, str]:
    """A node of ``count`` members over ``backend`` (sqlite files named after ``path``, or a store each
    from ``postgres``, which the postgres backend needs) and its URL."""
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    members: list[Service] = []
    runners: list[web.AppRunner] = []
    for index, sock in enumerate(sockets):
        if backend == "memory":
            shared: Store = SqliteStore(path.with_suffix(".shared.sqlite"), synchronous="OFF")
            local: LocalStore = MemoryStore()
        elif backend == "postgres":
            assert postgres is not None, "a node on postgres needs its stores' factory (start_server's)"
            shared = local = postgres()
        else:
            shared = local = SqliteStore(path.with_suffix(".sqlite"))
            if index:
                local = SqliteStore(path.with_suffix(f".{index}.sqlite"))
        local_members = LocalMembers(LOCAL_NODE, index, addresses)
        auth = ClusterAuth(SECRET, local_members.node_id)
        service = Service(
            SplitStore(shared, local),
            clock,
            cluster=ClusterNode(None, clock, "", local_members),
            cluster_auth=auth,
            **service_kw,
        )
        await service.start()
        runner = web.AppRunner(create_app(service, api_keys=ApiKeys([], auth)), handler_cancellation=True)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        members.append(service)
        runners.append(runner)
    return Node(members, runners), f"http://{addresses[0]}"


POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)
"""The postgres backend as a parameter, marked: ``-m "not postgres"`` leaves out every test on it."""
POSTGRES_API_FILES = frozenset(
    {
        "test_queue.py",
        "test_lifecycle.py",
        "test_clock_jumps.py",
        "test_retry.py",
        "test_renew.py",
        "test_dedup.py",
        "test_durability.py",
        "test_partitions.py",
        "test_queues.py",
        "test_storage_api.py",
        "test_schedules.py",
        "test_schedules_client.py",
        "test_workflows.py",
        "test_workflows_continue.py",
        "test_tenancy.py",
        "test_tenancy_boundaries.py",
        "test_tenancy_client.py",
        "test_workflows_tenancy.py",
    }
)
"""The files of tests/api that run on postgres too: the routes' core, a few minutes of CI in all. With
``QUERATOR_TEST_POSTGRES=all`` every file of tests/api does."""


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _postgres_elsewhere(item: pytest.Item) -> bool:
    """A postgres case of a file of tests/api outside ``POSTGRES_API_FILES``."""
    return (
        isinstance(item, pytest.Function)
        and getattr(item, "callspec", None) is not None
        and item.callspec.params.get("backend") == "postgres"
        and item.path.parent.name == "api"
        and item.path.name not in POSTGRES_API_FILES
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves the tests of tests/api outside ``POSTGRES_API_FILES`` to memory and sqlite (unless
    ``QUERATOR_TEST_POSTGRES=all``), and the tests marked ``slow`` out (unless ``QUERATOR_TEST_SLOW=1``
    or a ``-m`` expression chooses them): the whole suite stays within CI's budget, and a flag runs
    all of it (CONTRIBUTING.md)."""
    every_backend = os.environ.get("QUERATOR_TEST_POSTGRES") == "all"
    every_speed = os.environ.get("QUERATOR_TEST_SLOW") == "1" or "slow" in config.option.markexpr
    dropped = [
        item
        for item in items
        if (not every_backend and _postgres_elsewhere(item))
        or (not every_speed and item.get_closest_marker("slow") is not None)
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def start_server(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[ServerFactory]:
    """Starts servers on a backend; the same ``data`` name re-opens the same sqlite file, or the same
    PostgreSQL schema (restart)."""
    running: list[tuple[Service, TestServer, aiohttp.ClientSession]] = []
    nodes: list[tuple[Node, aiohttp.ClientSession]] = []
    schemas: set[str] = set()

    def postgres(data: str) -> Callable[[], Store]:
        node: PostgresNode = request.getfixturevalue("postgres_node")
        name = "t_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:20] + "_" + data
        if name not in schemas:
            node.drop_schema(name)  # left by an interrupted run
            schemas.add(name)
        return lambda: PostgresStore(PostgresSettings(url=node.url, schema=name), epoch=SystemClock().now())

    async def start(clock: Clock | None = None, data: str = "db", **service_kw: Any) -> Api:
        new_postgres = postgres(data) if backend == "postgres" else MemoryStore
        if TEST_PROCESSES > 1:
            node, url = await start_node(
                backend, tmp_path / data, clock or SystemClock(), TEST_PROCESSES, new_postgres, **service_kw
            )
            nodes.append((node, aiohttp.ClientSession()))
            return Api(nodes[-1][1], url, cast(Service, node))
        store: Store = SqliteStore(tmp_path / f"{data}.sqlite") if backend == "sqlite" else new_postgres()
        service = Service(store, clock or SystemClock(), **service_kw)
        await service.start()
        server = await serving(create_app(service))
        session = aiohttp.ClientSession()
        running.append((service, server, session))
        return Api(session, str(server.make_url("")), service)

    yield start
    for service, server, session in reversed(running):
        await stop(service, server, session)
    for node, session in reversed(nodes):
        await node.close()
        await session.close()
    for name in schemas:
        request.getfixturevalue("postgres_node").drop_schema(name)


async def serving(app: web.Application) -> TestServer:
    """A started TestServer of ``app``, dispatching the v1 routes as ``querator serve`` does."""
    server = TestServer(app)
    await server.start_server()
    assert server.runner is not None
    dispatch_directly(server.runner)
    return server


async def stop(service: Service, server: TestServer, session: aiohttp.ClientSession) -> None:
    if not service._closing:
        await service.shutdown()
    await server.close()
    await session.close()


@pytest.fixture
async def api(start_server: ServerFactory, clock: FakeClock) -> Api:
    """A server on the FakeClock."""
    return await start_server(clock)


@pytest.fixture
async def live_api(start_server: ServerFactory) -> Api:
    """A server on the real clock (for long-poll timeouts)."""
    return await start_server(SystemClock())


# --- Cassandra: one node per test session, an emptied keyspace per test ---------------------------------


@pytest.fixture(scope="session")
def cassandra_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CassandraNode]:
    """A real Cassandra node for the whole session (started on first use, killed at the end)."""
    node = CassandraNode(tmp_path_factory.mktemp("cassandra"))
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def cassandra_keyspaces() -> list[str]:
    """Keyspaces that tests are done with, emptied, for the next tests (``cassandra_settings``)."""
    return []


@pytest.fixture
def cassandra_settings(
    cassandra_node: CassandraNode, cassandra_keyspaces: list[str]
) -> Iterator[CassandraSettings]:
    """Settings of a keyspace of this test's own while it runs: an earlier test's, emptied, or a new one
    (created by the store that opens it), emptied after. Creating a keyspace's tables and dropping them
    again are schema changes, Cassandra's slowest statements: seconds a test, most of the storage tests'
    time. Emptied after the test rather than beside the next one, whose timing it would disturb; and one
    keyspace's tables on the node's 1 GiB heap, not a few hundred tests' (which filled it)."""
    name = cassandra_keyspaces.pop() if cassandra_keyspaces else f"t_{uuid.uuid4().hex}"
    yield CassandraSettings(hosts=("127.0.0.1",), port=cassandra_node.cql_port, keyspace=name)
    cassandra_node.empty_keyspace(name)
    cassandra_keyspaces.append(name)


# --- PostgreSQL: one server per test session, a schema per test ------------------------------------------


@pytest.fixture(scope="session")
def postgres_node() -> Iterator[PostgresNode]:
    """A real PostgreSQL server for the whole session (started on first use, stopped at the end)."""
    node = PostgresNode()
    try:
        node.start()
        yield node
    finally:
        node.close()


@pytest.fixture
def postgres_settings(
    postgres_node: PostgresNode, request: pytest.FixtureRequest
) -> Iterator[PostgresSettings]:
    """Settings of a schema of this test's own (created by the store that opens it, dropped after)."""
    name = "t_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:20]
    postgres_node.drop_schema(name)
    yield PostgresSettings(url=postgres_node.url, schema=name)
    postgres_node.drop_schema(name)


ODD = [
    "\x00",
    "\x07",
    "\x1b",
    "\x7f",
    "\x9b",
    "\u00ad",
    "\u200b",
    "\u200d",
    "\u202e",
    "\u2066",
    "\u2060",
    "\ufeff",
]
"""Control and invisible format characters (Unicode Cc, Cf): what a name must not contain, as the hostile
request tests send them."""

IGNORABLE = [
    "\u034f",
    "\u115f",
    "\u1160",
    "\u17b4",
    "\u180b",
    "\u2065",
    "\u3164",
    "\ufe00",
    "\ufe0f",
    "\uffa0",
    "\ufff0",
    "\U000e0100",
    "\U000e0fff",
]
"""Default_Ignorable code points outside Cc and Cf (combining marks, Hangul fillers, variation selectors,
unassigned): what a new name must not contain either (querator/names.py)."""
