"""querator.client (AsyncClient, Client) against a real in-process server, and the CLI against a real
``querator serve`` subprocess.

Error typing and transport failures the real server cannot produce (401, unknown codes, HTML replies,
a server that never answers) are checked against a small fake aiohttp app.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from querator import wire
from querator.client import AsyncClient, Client, ConnectionFailed
from querator.errors import (
    ClientContentError,
    Forbidden,
    InvalidOption,
    NotImplementedRoute,
    QueratorError,
    RequestFailed,
    RetryRequest,
    Unauthorized,
)
from querator.http import create_app, dispatch_directly
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.wire import messages as m

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_app(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    dispatch_directly(runner)  # as querator.server does
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    """A real server (memory storage) on a free loopback port."""
    service = Service(MemoryStore())
    await service.start()
    runner, url = await start_app(create_app(service))
    yield url
    await service.shutdown()
    await runner.cleanup()


@pytest.fixture(params=[False, True], ids=["json", "protobuf"])
async def client(endpoint: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(endpoint, protobuf=bool(request.param)) as c:
        yield c


# -- the client against the real server ----------------------------------------------------------------------


async def test_queue_administration(client: AsyncClient) -> None:
    await client.create_queue("q1")
    info = await client.queue_info("q1")
    assert (info.queue_name, info.lease_timeout, info.expire_timeout) == ("q1", "1m0s", "1h0m0s")
    assert (info.requested_partitions, info.max_attempts, info.namespace) == (1, 0, "_system")
    assert info.created_at is not None and info.created_at.tzinfo is not None

    await client.create_queue("dlq", lease_timeout="30s", expire_timeout="24h")
    await client.create_queue(
        m.QueueInfo(
            queue_name="q2",
            lease_timeout="2m",
            expire_timeout="3h",
            max_attempts=5,
            dead_queue="dlq",
            reference="ref",
            requested_partitions=2,
        )
    )
    info = await client.queue_info("q2")
    assert (info.lease_timeout, info.expire_timeout, info.max_attempts) == ("2m0s", "3h0m0s", 5)
    assert (info.dead_queue, info.reference, info.requested_partitions) == ("dlq", "ref", 2)
    with pytest.raises(TypeError):
        await client.create_queue(info, max_attempts=1)
    with pytest.raises(InvalidOption, match="already exists"):
        await client.create_queue("q1")

    listed = await client.list_queues()
    assert [q.queue_name for q in listed.items] == ["dlq", "q1", "q2"]
    listed = await client.list_queues(pivot="q1", limit=1)
    assert [q.queue_name for q in listed.items] == ["q1"]
    assert (await client.list_queues(namespace="other")).items == []

    await client.update_queue(
        msgspec.structs.replace(info, max_attempts=0, dead_queue="", lease_timeout="5m")
    )
    info = await client.queue_info("q2")
    assert (info.lease_timeout, info.expire_timeout, info.max_attempts, info.dead_queue) == (
        "5m0s",
        "3h0m0s",
        0,
        "",
    )

    await client.delete_queue("q2")
    with pytest.raises(InvalidOption) as e:
        await client.queue_info("q2")
    assert e.value.code == 400
    assert e.value.message == "queue does not exist; no such queue named 'q2'"


async def test_produce_lease_complete(client: AsyncClient) -> None:
    await client.create_queue("q")
    await client.produce(
        "q",
        ["text", b"\x00\xffbinary", m.QueueProduceItem(utf8="full", kind="k", reference="r", encoding="e")],
    )
    before = datetime.now(UTC)
    lease = await client.lease("q", batch_size=10, client_id="c1", request_timeout="5s")
    assert lease.queue_name == "q" and lease.partition == 0
    assert [i.bytes for i in lease.items] == [b"text", b"\x00\xffbinary", b"full"]
    assert [i.attempts for i in lease.items] == [1, 1, 1]
    assert (lease.items[2].kind, lease.items[2].reference, lease.items[2].encoding) == ("k", "r", "e")
    deadline = lease.items[0].lease_deadline
    assert deadline is not None and before + timedelta(seconds=50) < deadline < before + timedelta(minutes=2)

    stored = await client.list_items("q", 0)
    assert [s.id for s in stored.items] == [i.id for i in lease.items]
    assert all(s.is_leased for s in stored.items)
    assert len((await client.list_items("q", 0, pivot=lease.items[1].id, limit=1)).items) == 1

    await client.complete("q", lease.partition, [i.id for i in lease.items])
    assert (await client.list_items("q", 0)).items == []
    with pytest.raises(InvalidOption, match="does not exist"):
        await client.complete("q", 0, [lease.items[0].id])


async def test_retry_schedule_clear_stats(client: AsyncClient) -> None:
    await client.create_queue("q")
    await client.produce("q", ["a", "b", "c"])
    lease = await client.lease("q", 3, "c1")
    a, b, c = (i.id for i in lease.items)
    later = datetime.now(UTC) + timedelta(hours=1)
    await client.retry("q", 0, [a, m.QueueRetryItem(id=b, retry_at=later), m.QueueRetryItem(id=c, dead=True)])

    again = await client.lease("q", 10, "c1")
    assert [(i.bytes, i.attempts) for i in again.items] == [(b"a", 2)]
    assert again.items[0].id != a  # an immediate retry gets a new id at the tail
    [scheduled] = (await client.list_scheduled("q", 0)).items
    assert (scheduled.id, scheduled.payload) == (b, b"b")
    assert scheduled.enqueue_at is not None and abs(scheduled.enqueue_at - later) < timedelta(seconds=1)

    stats = await client.stats("q")
    assert stats.queue_name == "q"
    [logical] = stats.logical_queues
    [part] = logical.partitions
    assert (part.partition, part.total, part.total_leased, part.scheduled) == (0, 1, 1, 1)
    assert part.average_age.endswith("s")

    with pytest.raises(InvalidOption, match="one of 'queue', 'scheduled' must be true"):
        await client.clear("q")
    await client.clear("q", scheduled=True)
    assert (await client.list_scheduled("q", 0)).items == []
    await client.clear("q", queue=True)  # the leased item survives a non-destructive clear
    assert len((await client.list_items("q", 0)).items) == 1
    await client.clear("q", queue=True, destructive=True)
    assert (await client.list_items("q", 0)).items == []


async def test_import_reload_delete_items(client: AsyncClient) -> None:
    await client.create_queue("q")
    expire = datetime.now(UTC) + timedelta(hours=1)
    imported = await client.import_items(
        "q",
        0,
        [m.StorageItem(payload=b"one", expire_deadline=expire), m.StorageItem(payload=b"two", kind="k")],
    )
    assert [i.payload for i in imported.items] == [b"one", b"two"]
    assert all(i.id for i in imported.items)
    await client.reload("q")
    [part] = (await client.stats("q")).logical_queues[0].partitions
    assert part.total == 2
    await client.delete_items("q", 0, [imported.items[0].id])
    assert [i.payload for i in (await client.list_items("q", 0)).items] == [b"two"]
    with pytest.raises(InvalidOption, match="invalid storage id"):
        await client.delete_items("q", 0, ["not-an-id"])


WORK = 1.5
"""Seconds a consumer below works on its items: three lease timeouts of its queue."""


async def test_leased_renews_while_working_then_completes(client: AsyncClient) -> None:
    await client.create_queue("slow", lease_timeout="500ms", expire_timeout="1m")
    await client.produce("slow", ["a", "b"])
    async with client.leased("slow", 2, "worker", request_timeout="5s") as lease:
        ids = [i.id for i in lease.items]
        await asyncio.sleep(WORK)  # the work itself, three lease timeouts long
        items = (await client.list_items("slow", 0)).items
        assert [(i.id, i.is_leased, i.attempts) for i in items] == [(ids[0], True, 1), (ids[1], True, 1)]
    assert (await client.list_items("slow", 0)).items == []


async def test_leased_retries_when_the_work_fails(client: AsyncClient) -> None:
    await client.create_queue("q", lease_timeout="1m", expire_timeout="1h")
    await client.produce("q", ["a"])
    with pytest.raises(ZeroDivisionError):
        async with client.leased("q", 1, "worker", lease_timeout="30s") as lease:
            first = lease.items[0].id
            _ = 1 / 0
    again = await client.lease("q", 1, "worker", request_timeout="5s")
    assert again.items[0].attempts == 2 and again.items[0].id != first


async def test_leased_raises_when_the_lease_was_lost(client: AsyncClient) -> None:
    await client.create_queue("q", lease_timeout="1m", expire_timeout="1h")
    await client.produce("q", ["a"])
    with pytest.raises(InvalidOption, match="does not exist"):
        async with client.leased("q", 1, "worker", lease_timeout="300ms") as lease:
            # Someone else completes it (an operator, or a duplicate worker after an expiry).
            await client.complete("q", lease.partition, [lease.items[0].id])
            await asyncio.sleep(WORK)  # work long enough for renewals to find the item gone
    assert (await client.list_items("q", 0)).items == []


async def test_leased_with_a_longer_lease_renews_before_the_queue_timeout(client: AsyncClient) -> None:
    await client.create_queue("short", lease_timeout="500ms", expire_timeout="1m")
    await client.produce("short", ["a"])
    async with client.leased("short", 1, "worker", lease_timeout="10s") as lease:
        await asyncio.sleep(WORK)  # three of the queue's lease timeouts
        [item] = (await client.list_items("short", 0)).items
        assert (item.id, item.is_leased) == (lease.items[0].id, True)
    assert (await client.list_items("short", 0)).items == []


async def test_leased_refuses_a_bad_lease_timeout_before_leasing(client: AsyncClient) -> None:
    await client.create_queue("q")
    await client.produce("q", ["a"])
    with pytest.raises(ValueError):
        async with client.leased("q", 1, "worker", lease_timeout="soon"):
            pass
    assert [i.is_leased for i in (await client.list_items("q", 0)).items] == [False]


async def test_renew_and_redrive(client: AsyncClient) -> None:
    await client.create_queue("dead")
    await client.create_queue("q", dead_queue="dead", expire_timeout="1h")
    await client.produce("q", ["a", "b"])
    lease = await client.lease("q", 2, "c", request_timeout="5s")
    reply = await client.renew("q", lease.partition, [i.id for i in lease.items], lease_timeout="10m")
    assert [i.id for i in reply.items] == [i.id for i in lease.items]
    assert all(i.lease_deadline is not None for i in reply.items)
    await client.retry("q", lease.partition, [m.QueueRetryItem(id=i.id, dead=True) for i in lease.items])
    assert await client.redrive("dead", "q", limit=1) == 1
    assert await client.redrive("dead", "q") == 1
    again = await client.lease("q", 2, "c", request_timeout="5s")
    assert [i.bytes for i in again.items] == [b"a", b"b"]


async def test_health(client: AsyncClient) -> None:
    health = await client.health()
    assert health["status"] == "pass"
    assert "version" in health


async def test_error_typing(client: AsyncClient) -> None:
    with pytest.raises(InvalidOption) as e:
        await client.produce("missing", ["x"])
    assert e.value.code == 400 and e.value.message.startswith("queue does not exist")
    assert type(e.value) is InvalidOption

    await client.create_queue("q")
    with pytest.raises(InvalidOption, match=r"^invalid batch size; must be greater than zero$"):
        await client.lease("q", 0, "c")
    with pytest.raises(InvalidOption, match=r"^request timeout is invalid; time: invalid duration"):
        await client.produce("q", ["x"], request_timeout="soon")

    started = time.monotonic()
    # The server's 454 "request timeout; no items are in the queue, try again" ends a long poll: no items.
    empty = await client.lease("q", 1, "c", request_timeout="200ms")
    assert (empty.queue_name, empty.items) == ("q", [])
    assert time.monotonic() - started < 0.2 + client.timeout_margin

    with pytest.raises(NotImplementedRoute) as nope:
        await client.call("/v1/queues.rebalance", m.QueuesInfoRequest(queue_name="q"), m.Reply)
    assert (nope.value.code, nope.value.message) == (501, "no such method; /v1/queues.rebalance")


async def test_long_poll_is_woken_by_produce_and_ended_by_delete(client: AsyncClient) -> None:
    await client.create_queue("q")

    async def lease_waiting() -> int:
        return (await client.stats("q")).logical_queues[0].lease_waiting

    async def wait_parked() -> None:
        deadline = time.monotonic() + 5
        while await lease_waiting() != 1:
            assert time.monotonic() < deadline, "the lease never parked"
            await asyncio.sleep(0.01)

    waiting = asyncio.create_task(client.lease("q", 5, "c", request_timeout="10s"))
    await wait_parked()
    await client.produce("q", ["wake up"])
    lease = await asyncio.wait_for(waiting, 5)
    assert [i.bytes for i in lease.items] == [b"wake up"]

    waiting = asyncio.create_task(client.lease("q", 5, "c2", request_timeout="10s"))
    await wait_parked()
    await client.delete_queue("q")
    with pytest.raises(RequestFailed) as e:
        await asyncio.wait_for(waiting, 5)
    assert (e.value.code, e.value.message) == (453, "queue is shutting down")


async def test_unknown_json_field_is_a_client_content_error(endpoint: str) -> None:
    async with AsyncClient(endpoint) as client:
        with pytest.raises(ClientContentError) as e:
            # a lease request's fields sent to stats: unknown JSON fields are refused (protobuf skips them)
            await client.call("/v1/queue.stats", m.QueueLeaseRequest(queue_name="q", batch_size=1), m.Reply)
    assert e.value.code == 455 and "batch_size" in e.value.message


async def test_protobuf_mode_speaks_binary(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[str] = []
    real_pb, real_json = wire.decode_protobuf, wire.decode_json

    def spy_pb(body: bytes, type_: type[m.Message]) -> Any:
        decoded.append("protobuf")
        return real_pb(body, type_)

    def spy_json(body: bytes, type_: type[m.Message]) -> Any:
        decoded.append("json")
        return real_json(body, type_)

    for module in (wire, wire._negotiation):  # the client's decoders, and the server's
        monkeypatch.setattr(module, "decode_protobuf", spy_pb)
        monkeypatch.setattr(module, "decode_json", spy_json)
    async with AsyncClient(endpoint, protobuf=True) as client:
        await client.create_queue("q")
        with pytest.raises(InvalidOption, match=r"^invalid queue; 'q' already exists$"):
            await client.create_queue("q")  # the error reply is protobuf too
        payload = bytes(range(256))
        await client.produce("q", [payload])
        lease = await client.lease("q", 1, "c")
        assert lease.items[0].bytes == payload
    # the server decoded 4 requests and the client 4 replies, none of them as JSON
    assert decoded == ["protobuf"] * 8


async def test_closed_client_refuses_calls(endpoint: str) -> None:
    client = AsyncClient(endpoint)
    await client.health()
    await client.close()
    await client.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await client.health()


async def test_sync_client(endpoint: str) -> None:
    # The sync client blocks its caller, so it runs in worker threads while this loop serves HTTP.
    def scenario() -> list[bytes]:
        with Client(endpoint, timeout_margin=0.5) as c:
            c.create_queue("q", lease_timeout="10s")
            assert c.queue_info("q").expire_timeout == "10m0s"
            c.produce("q", [f"item-{i}" for i in range(20)])
            leased: list[bytes] = []

            def consume(n: int) -> None:
                lease = c.lease("q", 5, f"client-{n}", request_timeout="2s")
                c.complete("q", lease.partition, [i.id for i in lease.items])
                leased.extend(i.bytes for i in lease.items)

            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(4) as pool:
                list(pool.map(consume, range(4)))
            assert c.stats("q").logical_queues[0].partitions[0].total == 0
            with pytest.raises(InvalidOption, match=r"^queue does not exist"):
                c.stats("nope")
            assert c.health()["status"] == "pass"
            assert c.list_queues().items[0].queue_name == "q"
        with pytest.raises(RuntimeError, match="closed"):
            c.health()
        c.close()
        return leased

    leased = await asyncio.to_thread(scenario)
    assert sorted(leased) == sorted(f"item-{i}".encode() for i in range(20))


async def test_sync_leased_renews_then_completes_or_retries(endpoint: str) -> None:
    def scenario() -> None:
        with Client(endpoint) as c:
            c.create_queue("slow", lease_timeout="500ms", expire_timeout="1m")
            c.produce("slow", ["a", "b"])
            with c.leased("slow", 1, "worker", request_timeout="5s") as lease:
                time.sleep(WORK)  # the work itself, three lease timeouts long
                [item, _] = c.list_items("slow", 0).items
                assert (item.id, item.is_leased) == (lease.items[0].id, True)
            with pytest.raises(KeyError), c.leased("slow", 1, "worker", request_timeout="5s"):
                raise KeyError("failed")
            assert [i.attempts for i in c.list_items("slow", 0).items] == [1]
            assert c.redrive("slow", "slow-2") is None

    with pytest.raises(InvalidOption, match="no such queue named 'slow-2'"):
        await asyncio.to_thread(scenario)


async def test_sync_leased_retries_on_an_interrupt_and_the_client_lives_on(endpoint: str) -> None:
    # The body's exception is handed to the async manager on the client's loop: a KeyboardInterrupt
    # there must retry the items, reach the caller, and leave the loop running.
    def scenario() -> None:
        with Client(endpoint) as c:
            c.create_queue("q")
            c.produce("q", ["a"])
            with pytest.raises(KeyboardInterrupt), c.leased("q", 1, "worker", request_timeout="5s"):
                raise KeyboardInterrupt
            [item] = c.list_items("q", 0).items
            assert (item.is_leased, item.attempts) == (False, 1)
            assert c.health()["status"] == "pass"

    await asyncio.to_thread(scenario)


# -- transport behaviour against a fake server ---------------------------------------------------------------


class Fake:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.headers.append(dict(request.headers))
        await request.read()
        route = request.path.rsplit("/", 1)[-1]
        if route == "slow":
            await self.release.wait()
            return web.Response(body=b'{"code":200}', content_type="application/json")
        if route == "html":
            return web.Response(status=502, body=b"<html>bad gateway</html>", content_type="text/html")
        if route == "ok-text":
            return web.Response(status=200, body=b"fine", content_type="text/plain")
        if route == "garbled":
            return web.Response(status=400, body=b"{not json", content_type="application/json")
        code = int(route)
        body = msgspec.json.encode({"code": code, "code_text": "x", "message": f"failed; {code}"})
        return web.Response(status=code if code >= 200 else 500, body=body, content_type="application/json")


@pytest.fixture
async def fake() -> AsyncIterator[tuple[Fake, str]]:
    f = Fake()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", f.handle)
    runner, url = await start_app(app)
    yield f, url
    f.release.set()
    await runner.cleanup()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (400, InvalidOption),
        (401, Unauthorized),
        (453, RequestFailed),
        (454, RetryRequest),
        (455, ClientContentError),
        (501, NotImplementedRoute),
        (403, Forbidden),
        (418, QueratorError),
        (500, QueratorError),
    ],
)
async def test_error_codes_map_to_types(
    fake: tuple[Fake, str], code: int, error: type[QueratorError]
) -> None:
    _, url = fake
    async with AsyncClient(url) as client:
        with pytest.raises(QueratorError) as e:
            await client.call(f"/v1/{code}", m.Reply(), m.Reply)
    assert type(e.value) is error
    assert (e.value.code, e.value.message) == (code, f"failed; {code}")


async def test_undecodable_replies_carry_the_http_status(fake: tuple[Fake, str]) -> None:
    _, url = fake
    async with AsyncClient(url) as client:
        for route, status in (("html", 502), ("ok-text", 200), ("garbled", 400)):
            with pytest.raises(QueratorError) as e:
                await client.call(f"/v1/{route}", m.Reply(), m.Reply)
            assert type(e.value) is QueratorError
            assert e.value.code == status
        with pytest.raises(QueratorError) as e:
            await client.call("/v1/html", m.Reply(), m.Reply)
        assert "bad gateway" in e.value.message


async def test_headers_and_api_key(fake: tuple[Fake, str]) -> None:
    f, url = fake
    async with AsyncClient(url, api_key="qtr-live-secret") as client:
        await client.call("/v1/200", m.Reply(), m.Reply)
    async with AsyncClient(url, protobuf=True) as client:
        await client.call("/v1/200", m.Reply(), m.Reply)
    first, second = f.headers
    assert first["Authorization"] == "Bearer qtr-live-secret"
    assert (first["Content-Type"], first["Accept"]) == ("application/json", "application/json")
    assert "Authorization" not in second
    assert (second["Content-Type"], second["Accept"]) == ("application/protobuf", "application/protobuf")


async def test_http_timeout_is_request_timeout_plus_margin(fake: tuple[Fake, str]) -> None:
    _, url = fake
    async with AsyncClient(url, timeout_margin=0.3) as client:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as e:
            msg = m.QueueLeaseRequest(queue_name="q", batch_size=1, client_id="c", request_timeout="200ms")
            await client.call("/v1/slow", msg, m.QueueLeaseResponse, seconds=0.2)
        elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 3
    assert e.value.code == 0 and e.value.message.startswith("request timed out")


async def test_connection_refused() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(ConnectionFailed) as e:
            await client.stats("q")
        assert e.value.code == 0 and e.value.message.startswith("connection failed")
        with pytest.raises(ConnectionFailed):
            await client.health()


# -- the CLI against a `querator serve` subprocess -----------------------------------------------------------


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("QUERATOR_")}


@contextlib.contextmanager
def serving(log_path: Path, *args: str) -> Iterator[str]:
    """A ``querator serve --storage memory`` process with ``args``, on a free port, until the block ends."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "querator.cli",
                "serve",
                "--storage",
                "memory",
                "--address",
                f"127.0.0.1:{port}",
                *args,
            ],
            cwd=ROOT,
            env=_clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"server exited with {proc.returncode}: {log_path.read_text()}")
                try:
                    with urllib.request.urlopen(url + "/health", timeout=1) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"server did not become healthy: {log_path.read_text()}")
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cli_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("server") / "server.log") as url:
        yield url


def cli(
    endpoint: str | None, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = ["--endpoint", endpoint] if endpoint else []
    return subprocess.run(
        [sys.executable, "-m", "querator.cli", *prefix, *args],
        cwd=ROOT,
        env={**_clean_env(), **(env or {})},
        input=(stdin or b"").decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return msgspec.json.decode(result.stdout)


def test_cli_queue_administration(cli_endpoint: str) -> None:
    e = cli_endpoint
    assert ok(cli(e, "create", "adm-a")) == {"code": 200}
    info = ok(cli(e, "info", "adm-a"))
    assert (info["lease_timeout"], info["expire_timeout"], info["requested_partitions"]) == (
        "1m0s",
        "1h0m0s",
        1,
    )

    ok(cli(e, "create", "adm-dlq", "--lease-timeout", "10s"))
    assert ok(cli(e, "info", "adm-dlq"))["expire_timeout"] == "10m0s"
    ok(
        cli(
            e,
            "create",
            "adm-b",
            "--lease-timeout",
            "2m",
            "--expire-timeout",
            "5h",
            "--max-attempts",
            "3",
            "--dead-queue",
            "adm-dlq",
            "--reference",
            "ref",
            "--partitions",
            "2",
        )
    )
    info = ok(cli(e, "info", "adm-b"))
    assert (info["lease_timeout"], info["expire_timeout"], info["max_attempts"]) == ("2m0s", "5h0m0s", 3)
    assert (info["dead_queue"], info["reference"], info["requested_partitions"]) == ("adm-dlq", "ref", 2)

    # update keeps every setting it is not given, and can set zero / empty values explicitly
    ok(cli(e, "update", "adm-b", "--max-attempts", "0", "--dead-queue", ""))
    info = ok(cli(e, "info", "adm-b"))
    assert "max_attempts" not in info and "dead_queue" not in info  # protojson omits zero values
    assert (info["lease_timeout"], info["expire_timeout"], info["reference"]) == ("2m0s", "5h0m0s", "ref")
    assert info["requested_partitions"] == 2
    ok(cli(e, "update", "adm-b", "--lease-timeout", "3m", "--reference", ""))
    info = ok(cli(e, "info", "adm-b"))
    assert (info["lease_timeout"], info["expire_timeout"], "reference" in info) == ("3m0s", "5h0m0s", False)

    nothing = cli(e, "update", "adm-b")
    assert nothing.returncode == 2 and nothing.stderr.startswith("querator: nothing to update")

    names = [q["queue_name"] for q in ok(cli(e, "list"))["items"]]
    assert [n for n in names if n.startswith("adm-")] == ["adm-a", "adm-b", "adm-dlq"]
    page = ok(cli(e, "list", "--pivot", "adm-b", "--limit", "1"))
    assert [q["queue_name"] for q in page["items"]] == ["adm-b"]
    assert ok(cli(e, "list", "--namespace", "elsewhere")) == {}

    assert ok(cli(e, "delete", "adm-a")) == {"code": 200}
    gone = cli(e, "info", "adm-a")
    assert gone.returncode == 1
    assert gone.stdout == ""
    assert gone.stderr == "querator: 400 queue does not exist; no such queue named 'adm-a'\n"


def test_cli_produce_lease_complete(cli_endpoint: str, tmp_path: Path) -> None:
    e = cli_endpoint
    ok(cli(e, "create", "work"))
    produced = ok(cli(e, "produce", "work", "-p", "hello", "--kind", "greeting", "--reference", "r1"))
    assert produced["code"] == 200 and len(produced["ids"]) == 1
    ok(cli(e, "produce", "work", stdin=b"from\nstdin\n"))
    batch = tmp_path / "batch.txt"
    batch.write_bytes(b"line-1\n\nline-2\r\nline-3\n")
    assert len(ok(cli(e, "produce", "work", "--file", str(batch)))["ids"]) == 3
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ok(cli(e, "produce", "work", "-p", "later", "--enqueue-at", later))

    lease = ok(cli(e, "lease", "work", "-b", "10", "-c", "worker-1", "--timeout", "5s"))
    # Printed even when 0 (JSON omits zero values): complete and retry need it.
    assert (lease["queue_name"], lease["partition"]) == ("work", 0)
    items = lease["items"]
    assert items[0]["id"] == produced["ids"][0]  # the printed id is the item's
    payloads = [base64.b64decode(i["bytes"]) for i in items]
    assert payloads == [b"hello", b"from\nstdin\n", b"line-1", b"line-2", b"line-3"]
    assert (items[0]["kind"], items[0]["reference"], items[0]["attempts"]) == ("greeting", "r1", 1)
    assert items[0]["lease_deadline"].endswith("Z")

    stats = ok(cli(e, "stats", "work"))
    [part] = stats["logicalQueues"][0]["partitions"]
    assert (part["total"], part["total_leased"], part["scheduled"]) == (5, 5, 1)

    ids = [i["id"] for i in items]
    id_file = tmp_path / "ids.txt"
    id_file.write_text("\n".join(ids[2:]) + "\n")
    partition = str(lease.get("partition", 0))
    assert ok(
        cli(e, "complete", "work", "--partition", partition, ids[0], ids[1], "--file", str(id_file))
    ) == {"code": 200}
    again = cli(e, "complete", "work", "-p", partition, ids[0])
    assert again.returncode == 1 and again.stderr.startswith("querator: 400 ")

    ok(cli(e, "clear", "work", "--scheduled"))
    part = ok(cli(e, "stats", "work"))["logicalQueues"][0]["partitions"][0]
    assert "total" not in part and "scheduled" not in part


def test_cli_retry(cli_endpoint: str) -> None:
    e = cli_endpoint
    ok(cli(e, "create", "retries"))
    ok(cli(e, "produce", "retries", "-p", "again"))
    ok(cli(e, "produce", "retries", "-p", "dead"))
    first = ok(cli(e, "lease", "retries", "-b", "2"))
    again_id, dead_id = (i["id"] for i in first["items"])
    assert ok(cli(e, "retry", "retries", "--partition", "0", again_id)) == {"code": 200}
    ok(cli(e, "retry", "retries", "--partition", "0", dead_id, "--dead"))
    second = ok(cli(e, "lease", "retries", "-b", "10"))
    [item] = second["items"]
    assert base64.b64decode(item["bytes"]) == b"again" and item["attempts"] == 2
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ok(cli(e, "retry", "retries", "-p", "0", item["id"], "--retry-at", later))
    part = ok(cli(e, "stats", "retries"))["logicalQueues"][0]["partitions"][0]
    assert part["scheduled"] == 1 and "total" not in part


def test_cli_items_show_a_dead_letters_failures(cli_endpoint: str) -> None:
    """A dead letter's reason, from the command line (issue 45): retry --error records it, items shows
    it with the job id, which stays that of the produced item."""
    e = cli_endpoint
    ok(cli(e, "create", "cli-dead"))
    ok(cli(e, "create", "cli-work", "--dead-queue", "cli-dead"))
    [job_id] = ok(cli(e, "produce", "cli-work", "-p", "x"))["ids"]
    item = ok(cli(e, "lease", "cli-work"))["items"][0]
    ok(cli(e, "retry", "cli-work", "-p", "0", item["id"], "--error", "ValueError: no such user"))
    again = ok(cli(e, "lease", "cli-work"))["items"][0]
    assert again["job_id"] == job_id
    ok(cli(e, "retry", "cli-work", "-p", "0", again["id"], "--dead", "--error", "Permanent: give up"))
    [dead] = ok(cli(e, "items", "cli-dead"))["items"]
    assert dead["job_id"] == job_id
    assert [(f["attempt"], f["error"]) for f in dead["failures"]] == [
        (1, "ValueError: no such user"),
        (2, "Permanent: give up"),
    ]
    assert ok(cli(e, "items", "cli-work")) == {}
    assert ok(cli(e, "items", "cli-work", "--scheduled")) == {}


def test_cli_lease_tokens(cli_endpoint: str, tmp_path: Path) -> None:
    """On a queue that requires lease tokens (docs/extensions.md), each id goes with the token its lease
    printed: by ``--lease-token``, or after the id on a ``--file`` line. A token may start with "-" (one in
    64 does), which argparse reads as an option unless it is attached: ``--lease-token=TOKEN``."""
    e = cli_endpoint
    with Client(e) as c:
        info = m.QueueInfo(
            queue_name="proofs", lease_timeout="1m", expire_timeout="1h", requested_partitions=1
        )
        c.call("/v1/queues.create", msgspec.structs.replace(info, lease_token="required"), m.Reply)
    ok(cli(e, "produce", "proofs", "--file", "-", stdin=b"a\nb\nc\nd\n"))
    items = ok(cli(e, "lease", "proofs", "-b", "4"))["items"]
    (a, b, c_, d), tokens = [i["id"] for i in items], [i["lease_token"] for i in items]
    assert all(tokens)

    bare = cli(e, "complete", "proofs", "-p", "0", a)
    assert (bare.returncode, bare.stderr) == (
        1,
        f"querator: 400 item(s) cannot be completed; '{a}' needs its lease token\n",
    )
    dashed = cli(e, "complete", "proofs", "-p", "0", a, "--lease-token=-not-its-token")
    assert (dashed.returncode, dashed.stderr) == (1, bare.stderr)  # reached the node, which refused it
    assert ok(cli(e, "complete", "proofs", "-p", "0", a, f"--lease-token={tokens[0]}")) == {"code": 200}
    ok(cli(e, "retry", "proofs", "-p", "0", f"--lease-token={tokens[1]}", b, "--dead"))
    renewed = ok(cli(e, "renew", "proofs", "-p", "0", c_, f"-t{tokens[2]}", "--lease-timeout", "5m"))
    assert [i["id"] for i in renewed["items"]] == [c_]
    mismatch = cli(e, "complete", "proofs", "-p", "0", c_, d, f"--lease-token={tokens[2]}")
    assert (mismatch.returncode, mismatch.stderr) == (
        2,
        "querator: lease tokens is invalid; 1 given for 2 ids\n",
    )
    lines = tmp_path / "leased.txt"
    lines.write_text(f"{c_} {tokens[2]}\n{d} {tokens[3]}\n")
    ok(cli(e, "complete", "proofs", "-p", "0", "--file", str(lines)))
    part = ok(cli(e, "stats", "proofs"))["logicalQueues"][0]["partitions"][0]
    assert "total" not in part  # all four settled: three completed, one dropped (no dead queue)


def test_cli_failures_and_exit_codes(cli_endpoint: str) -> None:
    e = cli_endpoint
    ok(cli(e, "create", "empty"))
    timeout = cli(e, "lease", "empty", "--timeout", "100ms")
    assert timeout.returncode == 1
    assert timeout.stderr == "querator: 454 request timeout; no items are in the queue, try again\n"

    refused = cli(f"http://127.0.0.1:{free_port()}", "stats", "empty")
    assert refused.returncode == 3 and refused.stderr.startswith("querator: 0 connection failed")

    assert cli(e, "produce", "empty", "-p", "x", "--timeout", "soon").returncode == 2
    assert cli(e, "produce", "empty", "-p", "x", "--enqueue-at", "2024-01-01 12:00").returncode == 2
    assert cli(e, "complete", "empty", "someid").returncode == 2  # --partition is required
    no_ids = cli(e, "complete", "empty", "-p", "0")
    assert no_ids.returncode == 2 and no_ids.stderr.startswith("querator: no ids")
    assert cli(e, "frobnicate").returncode == 2

    # the endpoint from the environment, and global flags after the command
    assert ok(cli(None, "info", "empty", env={"QUERATOR_ENDPOINT": e}))["queue_name"] == "empty"
    assert ok(cli(None, "info", "empty", "--endpoint", e, "--api-key", "k"))["queue_name"] == "empty"


def test_cli_workflows(cli_endpoint: str, tmp_path: Path) -> None:
    """``querator workflows``: a caller's view of durable workflows; the test plays the worker with the
    client (claim, append)."""
    e = cli_endpoint
    ok(cli(e, "create", "flows"))
    with Client(e) as c:
        for workflow_id in ("flow-a", "flow-b"):
            c.start_workflow(workflow_id, "checkout", "flows", b"[1]", encoding="application/json")
    listed = ok(cli(e, "workflows", "list"))
    assert [(w["workflow_id"], w["status"]) for w in listed["workflows"]] == [
        ("flow-a", "running"),
        ("flow-b", "running"),
    ]
    assert "entries" not in listed["workflows"][0]
    page = ok(cli(e, "workflows", "list", "--pivot", "flow-b", "--limit", "1"))
    assert [w["workflow_id"] for w in page["workflows"]] == ["flow-b"]
    assert ok(cli(e, "workflows", "list", "--status", "completed")) == {}

    approval = tmp_path / "approval.json"
    approval.write_text('{"approved": true}\n')
    sent = [("--payload", '"now"'), ("-p", f"@{approval}"), ("-p", "@-")]
    for n, payload in enumerate(sent):
        signal = cli(
            e, "workflows", "signal", "flow-a", "go", *payload, "--signal-id", f"s{n}", stdin=b"[1, 2]"
        )
        assert ok(signal) == {"code": 200}
    again = cli(e, "workflows", "signal", "flow-a", "go", "-p", '"now"', "--signal-id", "s0")
    assert ok(again) == {"code": 200}  # the same signal id again: kept once
    shown = ok(cli(e, "workflows", "show", "flow-a"))
    assert (shown["name"], shown["queue_name"], base64.b64decode(shown["input"])) == (
        "checkout",
        "flows",
        b"[1]",
    )
    assert [(s["id"], base64.b64decode(s["payload"])) for s in shown["signals"]] == [
        ("s0", b'"now"'),
        ("s1", b'{"approved": true}\n'),
        ("s2", b"[1, 2]"),
    ]

    waited = cli(e, "workflows", "result", "flow-a", "--timeout", "100ms")
    assert waited.returncode == 4  # not finished within its timeout: no outcome, so not a success
    still = msgspec.json.decode(waited.stdout)
    assert still["status"] == "running" and "signals" not in still
    with Client(e) as c:
        fence = c.claim_workflow("flow-a").workflow.fence
        c.append_workflow(
            m.WorkflowsAppendRequest(workflow_id="flow-a", fence=fence, then="complete", result=b"42")
        )
    done = ok(cli(e, "workflows", "result", "flow-a"))
    assert (done["status"], base64.b64decode(done["result"])) == ("completed", b"42")
    forked = ok(cli(e, "workflows", "fork", "flow-a", "--from-step", "1", "--new-id", "flow-c"))
    assert (forked["created"], forked["workflow"]["forked_from"]) == (True, "flow-a")
    beyond = cli(e, "workflows", "fork", "flow-a", "--from-step", "2")
    assert (beyond.returncode, beyond.stderr) == (
        1,
        "querator: 400 from step is invalid; the journal's steps are 1 to 1, not 2\n",
    )
    assert ok(cli(e, "workflows", "cancel", "flow-b")) == {"code": 200}
    assert ok(cli(e, "workflows", "show", "flow-b"))["cancel_requested"] is True
    assert ok(cli(e, "workflows", "terminate", "flow-b", "--reason", "no worker has it")) == {"code": 200}
    ended = ok(cli(e, "workflows", "show", "flow-b"))
    assert (ended["status"], ended["error"]) == ("failed", "Terminated: no worker has it")

    finished = cli(e, "workflows", "signal", "flow-a", "go")
    assert (finished.returncode, finished.stderr) == (
        1,
        "querator: 400 workflow is finished; 'flow-a' is completed\n",
    )
    unknown = cli(e, "workflows", "show", "nope")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == "querator: 400 workflow does not exist; no workflow 'nope'\n"
    for usage, says in [
        (("signal", "flow-b", "go", "-p", "{not json"), "'{not json' is not JSON"),
        (("signal", "flow-b", "go", "-p", f"@{tmp_path / 'missing'}"), "cannot read"),
        (("list", "--status", "done"), "invalid choice: 'done'"),
        (("result", "flow-b", "--timeout", "soon"), "argument --timeout"),
        (("show",), "the following arguments are required: ID"),
        (("fork", "flow-a"), "the following arguments are required: --from-step"),
        ((), "the following arguments are required: ACTION"),
    ]:
        refused = cli(e, "workflows", *usage)
        assert refused.returncode == 2 and says in refused.stderr, (usage, refused.stderr)
    assert ok(cli(None, "workflows", "show", "flow-b", "--endpoint", e))["workflow_id"] == "flow-b"


def test_cli_workflows_show_pages_the_journal(cli_endpoint: str) -> None:
    """``workflows show --after N --limit M`` shows one page of the journal, ``--all`` every page."""
    e = cli_endpoint
    ok(cli(e, "create", "paged"))
    done = [m.WorkflowEntry(seq=seq, kind="step", name="s", state="done") for seq in range(1, 26)]
    with Client(e) as c:
        c.start_workflow("paged", "checkout", "paged", b"[]", encoding="application/json")
        fence = c.claim_workflow("paged").workflow.fence
        c.append_workflow(m.WorkflowsAppendRequest(workflow_id="paged", fence=fence, entries=done))
    page = ok(cli(e, "workflows", "show", "paged", "--after", "10", "--limit", "5"))
    assert [x["seq"] for x in page["entries"]] == [11, 12, 13, 14, 15]
    whole = ok(cli(e, "workflows", "show", "paged", "--all", "--limit", "10"))  # three pages and an empty one
    assert [x["seq"] for x in whole["entries"]] == list(range(1, 26))
    refused = cli(e, "workflows", "show", "paged", "--limit", "10001")
    assert (refused.returncode, refused.stderr) == (
        1,
        "querator: 400 limit is invalid; cannot be greater than 10000\n",
    )


def test_cli_tables_on_request_and_json_for_scripts(cli_endpoint: str) -> None:
    e = cli_endpoint
    assert ok(cli(e, "create", "tbl-a", "--partitions", "2", "--dead-queue", "")) == {"code": 200}
    assert ok(cli(e, "produce", "tbl-a", "-p", "one"))["ids"]
    # Not a terminal: JSON, as before, unless asked.
    assert ok(cli(e, "stats", "tbl-a"))["queue_name"] == "tbl-a"
    table = cli(e, "stats", "tbl-a", "-o", "table")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "queue_name: tbl-a"
    assert lines[2] == "partitions (2)"
    assert lines[3].split() == [
        "LOGICAL_QUEUE",
        "PARTITION",
        "TOTAL",
        "TOTAL_LEASED",
        "FAILURES",
        "AVERAGE_AGE",
        "AVERAGE_LEASED_AGE",
        "SCHEDULED",
    ]
    assert sorted(int(line.split()[2]) for line in lines[4:]) == [0, 1]
    # The environment picks it too; a call without a reply prints "ok".
    assert cli(e, "delete", "tbl-a", env={"QUERATOR_OUTPUT": "table"}).stdout == "ok\n"
    assert "invalid choice: 'yaml'" in cli(e, "stats", "q", "-o", "yaml").stderr


def test_cli_status_summarises_the_node_and_its_queues(cli_endpoint: str) -> None:
    e = cli_endpoint
    ok(cli(e, "create", "st-a"))
    ok(cli(e, "produce", "st-a", "-p", "x"))
    ok(cli(e, "produce", "st-a", "-p", "y", "--enqueue-at", "2999-01-01T00:00:00Z"))
    status = ok(cli(e, "status"))
    assert (status["endpoint"], status["health"], status["more_queues"]) == (e, "pass", False)
    [queue] = [q for q in status["queues"] if q["queue"] == "st-a"]
    assert queue == {
        "queue": "st-a",
        "partitions": 1,
        "queued": 1,
        "leased": 0,
        "scheduled": 1,
        "dead_queue": "",
    }
    table = cli(e, "status", "-o", "table").stdout.splitlines()
    assert "health: pass" in table
    assert any(line.split()[:5] == ["st-a", "1", "1", "0", "1"] for line in table)


def test_cli_completion_scripts_complete_commands_actions_and_flags(tmp_path: Path) -> None:
    script = cli(None, "completion", "bash")
    assert script.returncode == 0, script.stderr
    (tmp_path / "complete.sh").write_text(script.stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(["querator", *words])
        probe = (
            f"source {tmp_path / 'complete.sh'}; COMP_WORDS=(querator {' '.join(words)}); "
            f'COMP_CWORD={len(words)}; _querator; echo "${{COMPREPLY[@]}}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True)
        assert done.stderr == "", line
        return done.stdout.split()

    assert {"serve", "schedules", "status", "workflows", "completion"} <= set(complete(""))
    assert complete("sch") == ["schedules"]
    assert "pause" in complete("schedules", "")
    assert complete("schedules", "create", "--time-z") == ["--time-zone"]
    assert complete("--endpoint", "http://x", "produce", "--enq") == ["--enqueue-at"]
    assert cli(None, "completion", "zsh").stdout.count("bashcompinit") == 2
