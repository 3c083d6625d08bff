"""Operations over real HTTP (extensions.md): API keys, /ready, /metrics."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from querator.auth import ApiKeys, ClusterAuth, generate_key, key_hash, parse_hash, read_hashes, read_secret
from querator.client import AsyncClient
from querator.clock import FakeClock, SystemClock
from querator.engine.queues_manager import HandOff
from querator.errors import LeaseTimedOut, RetryRequest, StorageError, Unauthorized
from querator.http import create_app
from querator.http._handler import Route, route_handler
from querator.metrics import MEMBER_STATES
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.tenancy import AS_SERVER, NOBODY, SERVER, RequestContext
from querator.wire import messages as m
from tests.conftest import JSON, Api, eventually, serving

from .test_queue import ts

ROOT = Path(__file__).resolve().parents[2]
KEY = generate_key("test")
OTHER_KEY = generate_key("test")
ROUTES = sorted(
    route.canonical
    for route in create_app(Service(MemoryStore())).router.resources()
    if route.canonical.startswith("/v1/")
)
"""Every RPC the server registers, the workflow routes among them (a new route is checked unasked)."""


@pytest.fixture
async def secured() -> AsyncIterator[tuple[str, Service]]:
    """A server that requires KEY (configured by its hex hash)."""
    service = Service(MemoryStore())
    await service.start()
    server = await serving(create_app(service, api_keys=ApiKeys([parse_hash(key_hash(KEY))])))
    yield str(server.make_url("")), service
    await service.shutdown()
    await server.close()


async def call(
    url: str, headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url,
            data=msgspec.json.encode(body or {}),
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as resp,
    ):
        return resp.status, msgspec.json.decode(await resp.read())


async def test_every_route_needs_a_key(secured: tuple[str, Service]) -> None:
    base, _ = secured
    assert {"/v1/queue.produce", "/v1/workflows.start", "/v1/workflows.append"} <= set(ROUTES)
    for route in [*ROUTES, "/v1/no.such.route", "/health", "/anything"]:
        status, reply = await call(base + route)
        assert status == 401, route
        assert reply == {
            "code": 401,
            "code_text": "Unauthorized",
            "message": "api key is invalid; an 'Authorization: Bearer <api-key>' header is required",
        }, route


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (f"Basic {KEY}", "invalid authorization header format"),
        ("bearer " + KEY, "invalid authorization header format"),
        ("Bearer not-a-key", "api key is invalid"),
        (f"Bearer {KEY}x", "api key is invalid"),
        (f"Bearer {OTHER_KEY}", "api key does not exist"),
    ],
)
async def test_bad_keys(secured: tuple[str, Service], header: str, message: str) -> None:
    base, _ = secured
    status, reply = await call(base + "/v1/queues.list", {"Authorization": header})
    assert (status, reply["message"]) == (401, message)


async def test_no_answer_tells_whether_a_queue_exists(secured: tuple[str, Service]) -> None:
    base, service = secured
    async with AsyncClient(base, api_key=KEY) as client:
        await client.create_queue("secret")
    for queue in ("secret", "missing"):
        for headers in ({}, {"Authorization": f"Bearer {OTHER_KEY}"}):
            status, reply = await call(base + "/v1/queue.stats", headers, {"queue_name": queue})
            assert status == 401 and "secret" not in reply["message"] and "queue" not in reply["message"]
    assert await service.manager.record("secret") is not None


async def test_a_valid_key_is_served_and_probes_need_none(secured: tuple[str, Service]) -> None:
    base, _ = secured
    async with AsyncClient(base, api_key=KEY) as client:
        await client.create_queue("q")
        await client.produce("q", ["a"])
        assert (await client.lease("q", 1, "c", request_timeout="5s")).items[0].bytes == b"a"
    async with aiohttp.ClientSession() as session:
        for path in ("/health", "/ready"):
            async with session.get(base + path) as resp:
                assert resp.status == 200, path
        # /metrics names every queue: a key holder's (the admin address serves it without one).
        async with session.get(base + "/metrics") as resp:
            assert resp.status == 401
        async with session.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}) as resp:
            assert resp.status == 200


def test_key_format_and_hashes(tmp_path: Any) -> None:
    key = generate_key()
    assert key.startswith("qtr-live-") and len(key) == len("qtr-live-") + 43
    digest = hashlib.sha256(key.encode()).digest()
    b64 = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# team a\n{key_hash(key)}  # ci\n\n")
    assert read_hashes(str(keys_file), f"{b64}, ") == [digest, digest]
    ApiKeys([digest]).check(f"Bearer {key}")
    with pytest.raises(Unauthorized):
        ApiKeys([digest]).check(f"Bearer {generate_key()}")
    with pytest.raises(ValueError, match="key tag is invalid"):
        generate_key("Bad")


# -- readiness and metrics ----------------------------------------------------------------------------------


async def test_ready_follows_the_service(start_server: Callable[..., Awaitable[Api]]) -> None:
    api = await start_server()
    async with api.session.get(api.base + "/ready") as resp:
        assert (resp.status, await resp.json(content_type=None)) == (200, {"status": "pass"})
    await api.service.shutdown()
    async with api.session.get(api.base + "/ready") as resp:
        assert resp.status == 503
        assert (await resp.json(content_type=None)) == {"status": "fail", "output": "shutting down"}


async def metrics(api: Api) -> dict[tuple[str, str], float]:
    """Samples of the querator_ metrics, by (sample name, queue or route label)."""
    async with api.session.get(api.base + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("querator_"):
                label = sample.labels.get("queue") or sample.labels.get("route", "")
                if "le" not in sample.labels:
                    found[(sample.name, label)] = sample.value
    return found


@pytest.mark.one_process
async def test_metrics_match_a_scripted_workload(api: Api, clock: FakeClock) -> None:
    await api.create("dead")
    await api.create("q", lease_timeout="10s", max_attempts=2, dead_queue="dead", requested_partitions=2)
    await api.produce("q", [{"utf8": f"i{n}", "dedup_id": f"d{n}"} for n in range(10)])
    await api.produce("q", [{"utf8": "dup", "dedup_id": "d0"}])  # accepted, not stored
    await api.produce("q", [{"utf8": "later", "enqueue_at": ts(clock, 3600)}])
    lease = await api.lease("q", batch_size=4)
    part, ids = lease.get("partition", 0), [i["id"] for i in lease["items"]]
    await api.complete("q", part, ids[:2])
    await api.retry("q", part, [{"id": ids[2]}])
    await api.retry("q", part, [{"id": ids[3], "dead": True}])
    expiring = await api.lease("q", batch_size=1, client_id="slow")
    clock.advance(11)

    async def expired() -> bool:
        return (await metrics(api)).get(("querator_items_lease_expired_total", "q")) == 1

    await eventually(expired)
    clock.advance(1)
    found = await metrics(api)
    expected = {
        "querator_items_produced_total": 11,
        "querator_items_delivered_total": 5,
        "querator_items_completed_total": 2,
        "querator_items_retried_total": 2,
        "querator_items_lease_expired_total": 1,
        "querator_items_dead_lettered_total": 1,
        "querator_items_queued": 10 - 2 - 1,  # 7: 10 produced, 2 completed, 1 dead
        "querator_items_leased": 0,
        "querator_items_scheduled": 1,
        "querator_partitions_failing": 0,
    }
    assert {name: found[(name, "q")] for name in expected} == expected
    assert found[("querator_oldest_item_age_seconds", "q")] == 12
    assert found[("querator_items_queued", "dead")] == 1
    assert found[("querator_request_duration_seconds_count", "/v1/queue.produce")] == 3
    assert expiring["items"][0]["id"] not in {i["id"] for n in (0, 1) for i in await api.items("q", n)}


@pytest.mark.one_process
async def test_metrics_count_the_runs_of_batches_and_their_requests(api: Api) -> None:
    """One request at a time: each is a run of its own (what /metrics says of merging, issue 38); only a
    store that counts its statements (Cassandra) exports them."""
    await api.create("q")
    await api.produce("q", [{"utf8": "a"}])
    lease = await api.lease("q", batch_size=1)
    await api.complete("q", lease.get("partition", 0), [i["id"] for i in lease["items"]])
    found = await metrics(api)
    assert (found[("querator_batch_runs_total", "q")], found[("querator_batch_run_requests_total", "q")]) == (
        3,
        3,
    )
    assert not any(
        name.startswith(("querator_storage_statements", "querator_storage_fence")) for name, _ in found
    )


CLUSTER_FAMILIES = {
    "querator_ready": "gauge",
    "querator_cluster_members": "gauge",
    "querator_cluster_partitions_owned": "gauge",
    "querator_cluster_forwards": "counter",
    "querator_cluster_forward_duration_seconds": "histogram",
    "querator_cluster_hand_offs": "counter",
    "querator_cluster_fenced_writes": "counter",
}


@pytest.mark.one_process
async def test_metrics_parse_as_openmetrics_with_status_codes(api: Api) -> None:
    """Prometheus asks for OpenMetrics, whose strict parser refuses two families of one name (the
    gauge of leased items and the counter of deliveries once shared one); every request is counted
    under its reply's status code. Every family parses in both formats, the node's own included (a
    node alone: one serving member owning every partition of its running queues)."""
    await api.create("q", requested_partitions=3)
    await api.produce_n("q", 1)
    await api.error("/v1/queue.produce", {"queue_name": "q", "items": []})
    async with api.session.get(
        api.base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        text = await resp.text()
    families = list(openmetrics_families(text))
    counts = {
        sample.labels["code"]: sample.value
        for family in families
        for sample in family.samples
        if sample.name == "querator_request_duration_seconds_count"
        and sample.labels["route"] == "/v1/queue.produce"
    }
    assert counts == {"200": 1, "400": 1}
    async with api.session.get(api.base + "/metrics") as resp:
        plain = list(text_string_to_metric_families(await resp.text()))
    for parsed in (families, plain):
        assert CLUSTER_FAMILIES.items() <= {f.name: f.type for f in parsed}.items()
        values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parsed for s in f.samples}
        assert values[("querator_ready", ())] == 1
        assert values[("querator_cluster_partitions_owned", ())] == 3
        assert [values[("querator_cluster_members", (("state", state),))] for state in MEMBER_STATES] == [
            1,
            0,
            0,
        ]
        assert [values[("querator_cluster_hand_offs_total", (("reason", r.value),))] for r in HandOff] == [
            0,
            0,
            0,
        ]
        assert values[("querator_cluster_fenced_writes_total", ())] == 0


@pytest.mark.one_process
async def test_the_grafana_dashboard_uses_only_exported_metrics(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    async with api.session.get(api.base + "/metrics") as resp:
        exported = {s.name for f in text_string_to_metric_families(await resp.text()) for s in f.samples}
    dashboard = msgspec.json.decode((ROOT / "deploy" / "grafana" / "querator-dashboard.json").read_bytes())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\b((?:querator|process)_[a-z_]+)", e)}
    assert used and used <= exported, used - exported


async def test_every_exported_metric_is_documented(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    async with api.session.get(api.base + "/metrics") as resp:
        families = list(text_string_to_metric_families(await resp.text()))
    # The text format lists a family's creation time as a gauge of its own: part of the family.
    exported = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in families
        if f.name.startswith("querator_") and not f.name.endswith("_created")
    }
    documented = set(re.findall(r"`(querator_[a-z_]+)`", (ROOT / "docs" / "extensions.md").read_text()))
    assert exported <= documented, exported - documented


SECRET = "s" * 40


@pytest.mark.parametrize("secret", ["", SECRET])
async def test_a_forwarded_request_needs_a_signature(secret: str) -> None:
    service = Service(MemoryStore())
    await service.start()
    keys = ApiKeys([parse_hash(key_hash(KEY))], ClusterAuth(secret.encode(), "local") if secret else None)
    server = await serving(create_app(service, api_keys=keys))
    url = str(server.make_url("/v1/queues.list"))
    forwarded = {"X-Querator-Forwarded-By": "node-b"}
    try:
        # A client forging the header gains nothing: with no secret configured it still needs a key.
        status, reply = await call(url, forwarded)
        assert status == 401
        if not secret:
            assert reply["message"].startswith("api key is invalid")
            assert (await call(url, {**forwarded, "Authorization": f"Bearer {KEY}"}))[0] == 200
            return
        assert reply["message"] == "forwarded request is invalid; it has no signature"
        signature, _ = ClusterAuth(b"x" * 40, "node-b").sign("local", "POST", "/v1/queues.list", b"{}")
        wrong = {**forwarded, "X-Querator-Signature": signature, "Authorization": f"Bearer {KEY}"}
        assert (await call(url, wrong))[1][
            "message"
        ] == "forwarded request is invalid; its signature does not match"
        signature, _ = ClusterAuth(SECRET.encode(), "node-b").sign("local", "POST", "/v1/queues.list", b"{}")
        assert (await call(url, {**forwarded, "X-Querator-Signature": signature}))[0] == 200
        # A signature means nothing on a request that is not forwarded.
        assert (await call(url, {"X-Querator-Signature": signature}))[0] == 401
    finally:
        await service.shutdown()
        await server.close()


def test_a_short_cluster_secret_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("too short\n")
    with pytest.raises(ValueError, match="at least 32 characters"):
        read_secret(str(secret))
    secret.write_text(SECRET + "\n")
    assert read_secret(str(secret)) == SECRET.encode()


class BrokenStore(MemoryStore):
    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[Any]:
        raise OSError("database unreachable")


async def test_a_storage_outage_is_not_ready_but_alive() -> None:
    service = Service(BrokenStore())
    await service.start()
    server = await serving(create_app(service))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.make_url("/health")) as resp:
                body = await resp.json(content_type=None)
                assert resp.status == 200
                assert body["status"] == "warn"
                [check] = body["checks"]["queues:storage"]
                assert (check["status"], check["output"]) == ("fail", "storage check failed")
            async with session.get(server.make_url("/ready")) as resp:
                assert resp.status == 503
                assert await resp.json(content_type=None) == {
                    "status": "fail",
                    "output": "storage check failed",
                }
    finally:
        await service.shutdown()
        await server.close()


FULL = "sqlite storage error; SQLITE_FULL: database or disk is full"


class FailingStore(MemoryStore):
    """A store whose partition transactions fail while ``failing`` is set, as on a full disk."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def partition(self, queue: str, number: int) -> Any:
        inner, store = super().partition(queue, number), self

        class Failing:
            async def claim(self) -> None:
                await inner.claim()

            async def run(self, fn: Any) -> Any:
                if store.failing:
                    raise StorageError(FULL)
                return await inner.run(fn)

        return Failing()


async def test_a_failing_partition_is_not_ready_with_its_reason() -> None:
    store = FailingStore()
    service = Service(store)
    await service.start()
    server = await serving(create_app(service))
    try:
        async with AsyncClient(str(server.make_url(""))) as client:
            await client.create_queue("q", lease_timeout="1m", expire_timeout="1h")
            await client.produce("q", ["stored"])
            assert await service.ready() == ""
            store.failing = True
            with pytest.raises(RetryRequest):
                await client.produce("q", ["refused"])
            assert await service.ready() == f"partition 0 of queue q is failing: {FULL}"
            store.failing = False

            async def is_ready() -> bool:
                return await service.ready() == ""

            await eventually(is_ready)  # the lifecycle's retry finds the partition working again
    finally:
        await service.shutdown()
        await server.close()


class GatedStore(MemoryStore):
    """A store whose partitions answer only once ``opened`` is set (a slow claim and load)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = asyncio.Event()

    def partition(self, queue: str, number: int) -> Any:
        inner, opened = super().partition(queue, number), self.opened

        class Gated:
            async def claim(self) -> None:
                await opened.wait()

            async def run(self, fn: Any) -> Any:
                await opened.wait()
                return await inner.run(fn)

        return Gated()


async def test_not_ready_while_partitions_load() -> None:
    store = GatedStore()
    service = Service(store)
    await service.start()
    # With API keys: a probe without one learns only that the node is not ready, not which queue it loads.
    server = await serving(create_app(service, api_keys=ApiKeys([parse_hash(key_hash(KEY))])))
    try:
        info = m.QueueInfo(queue_name="q", lease_timeout="1m", expire_timeout="1h", requested_partitions=1)
        await service.create_queue(AS_SERVER, info)
        items = [m.QueueProduceItem(utf8="x")]
        produce = asyncio.create_task(
            service.produce(
                AS_SERVER, m.QueueProduceRequest(queue_name="q", request_timeout="1m", items=items)
            )
        )
        async with aiohttp.ClientSession() as session:

            async def ready(key: str = "") -> tuple[int, Any]:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                async with session.get(server.make_url("/ready"), headers=headers) as resp:
                    return resp.status, await resp.json(content_type=None)

            await eventually(lambda: _first_is(ready(), 503))
            assert (await ready())[1] == {"status": "fail"}
            assert (await ready(OTHER_KEY))[1] == {"status": "fail"}
            assert (await ready(KEY))[1] == {"status": "fail", "output": "loading the partitions of queue q"}
            store.opened.set()
            await produce
            assert (await ready())[0] == 200
    finally:
        store.opened.set()
        await service.shutdown()
        await server.close()


async def _first_is(call: Awaitable[tuple[int, Any]], status: int) -> bool:
    return (await call)[0] == status


async def test_a_reply_that_fails_to_encode_is_timed_as_the_500_aiohttp_answers() -> None:
    """A route's latency is counted under the status the client got: here a reply the codec cannot
    encode escapes the handler's mapping, and aiohttp answers 500 (not a client gone: 499)."""
    counted: list[int] = []

    async def unencodable(ctx: RequestContext, message: m.QueueStatsRequest) -> Any:
        return object()

    route = Route(unencodable, m.QueueStatsRequest, 1000)
    app = web.Application()
    clock = SystemClock()
    handler = route_handler(
        route, clock.monotonic, lambda status, _: counted.append(status), clock.now, False
    )
    app.router.add_post("/v1/queue.stats", handler)
    server = await serving(app)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(server.make_url("/v1/queue.stats"), data=b"{}", headers=JSON) as reply,
        ):
            assert reply.status == 500
        assert counted == [500]
    finally:
        await server.close()


async def test_a_route_calls_the_service_with_one_context_of_the_request() -> None:
    """The handler builds the request's context once and passes it: who (nobody, without keys), which
    node forwarded it, and its deadline, ``request_timeout`` from its arrival; none for a route without
    one (docs/adr/0056). Before, the caller travelled in a context variable and there was no deadline."""
    seen: list[RequestContext] = []

    async def recorded(ctx: RequestContext, message: m.Message) -> None:
        seen.append(ctx)

    clock = FakeClock()
    app = web.Application()
    for path, type_ in (("/v1/queue.lease", m.QueueLeaseRequest), ("/v1/queue.stats", m.QueueStatsRequest)):
        handler = route_handler(
            Route(recorded, type_, 1000), clock.monotonic, lambda *_: None, clock.now, False
        )
        app.router.add_post(path, handler)
    server = await serving(app)
    lease = {"queue_name": "q", "batch_size": 1, "client_id": "c", "request_timeout": "5s"}
    forwarded = {**JSON, "X-Querator-Forwarded-By": "node-b"}
    try:
        async with aiohttp.ClientSession() as session:
            for path, body, headers in (
                ("/v1/queue.lease", lease, forwarded),
                ("/v1/queue.stats", {"queue_name": "q"}, JSON),
            ):
                async with session.post(server.make_url(path), json=body, headers=headers) as reply:
                    assert reply.status == 200, await reply.text()
    finally:
        await server.close()
    assert seen == [
        RequestContext(NOBODY, "node-b", clock.now() + 5_000_000),
        RequestContext(NOBODY, "", 0),
    ]


async def test_a_wait_ends_at_the_deadline_of_its_context() -> None:
    """A lease waits no longer than its context's deadline, even with a longer ``request_timeout``: an
    embedding program's deadline (or the time a request already spent) bounds what the call waits."""
    service = Service(MemoryStore())
    await service.start()
    try:
        info = m.QueueInfo(queue_name="q", lease_timeout="1m", expire_timeout="1h", requested_partitions=1)
        await service.create_queue(AS_SERVER, info)
        soon = RequestContext(SERVER, deadline_us=service.clock.now() + 20_000)
        request = m.QueueLeaseRequest(queue_name="q", batch_size=1, client_id="c", request_timeout="15m")
        with pytest.raises(LeaseTimedOut):
            # (bounded, so that a regression fails instead of waiting 15 minutes)
            await asyncio.wait_for(service.lease(soon, request), 60)
    finally:
        await service.shutdown()
