"""Every validation error of the hot path with the reference's exact message (docs/semantics.md §2)."""

from __future__ import annotations

import asyncio
import io
from base64 import b64decode
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from yarl import URL

from querator.errors import InvalidOption
from querator.service import Service
from querator.storage.base import QueueRecord
from querator.storage.memory import MemoryStore
from querator.tenancy import AS_SERVER
from querator.wire import messages as m
from tests.conftest import IGNORABLE, JSON, Api, eventually

PRODUCE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({}, "queue name is invalid; queue name cannot be empty"),
    ({"queue_name": "   "}, "queue name is invalid; queue name cannot be empty"),
    ({"queue_name": "~q"}, "queue name is invalid; '~q' cannot contain '~' character"),
    ({"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
    (
        {"queue_name": "q", "items": [{}]},
        "request timeout is required; '5m' is recommended, 15m is the maximum",
    ),
    (
        {"queue_name": "q", "request_timeout": "16m", "items": [{}]},
        "request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested",
    ),
    (
        {"queue_name": "q", "request_timeout": "foo", "items": [{}]},
        'request timeout is invalid; time: invalid duration "foo" - expected format: 900ms, 5m or 15m',
    ),
    (
        {"queue_name": "q", "request_timeout": "1ms", "items": [{}]},
        "request timeout is invalid; minimum timeout is '10ms' but '1ms' was requested",
    ),
    ({"queue_name": "q", "request_timeout": "1m"}, "items cannot be empty; at least one item is required"),
    (
        {"queue_name": "q", "request_timeout": "1m", "items": [{}] * 1001},
        "items is invalid; max_produce_batch_size is 1000 but received more than 1000",
    ),
]

LEASE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({}, "queue name is invalid; queue name cannot be empty"),
    ({"queue_name": "q"}, "invalid client id; cannot be empty"),
    ({"queue_name": "q", "client_id": "  "}, "invalid client id; cannot be empty"),
    ({"queue_name": "q", "client_id": "c"}, "invalid batch size; must be greater than zero"),
    (
        {"queue_name": "q", "client_id": "c", "batch_size": 1001},
        "invalid batch size; max_lease_batch_size is 1000, but 1001 was requested",
    ),
    (
        {"queue_name": "q", "client_id": "c", "batch_size": 1},
        "request timeout is required; '5m' is recommended, 15m is the maximum",
    ),
    (
        {"queue_name": "q", "client_id": "c", "batch_size": 1, "request_timeout": "16m"},
        "request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested",
    ),
    (
        {"queue_name": "q", "client_id": "c", "batch_size": 1, "request_timeout": "1ms"},
        "request timeout is invalid; minimum timeout is '10ms' but '1ms' was requested",
    ),
    (
        {"queue_name": "q", "client_id": "c", "batch_size": 1, "request_timeout": "x"},
        'request timeout is invalid; time: invalid duration "x" - expected format: 900ms, 5m or 15m',
    ),
]

COMPLETE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({}, "queue name is invalid; queue name cannot be empty"),
    ({"queue_name": "q"}, "ids is invalid; list of ids cannot be empty"),
    (
        {"queue_name": "q", "ids": ["a"]},
        "request timeout is required; '5m' is recommended, 15m is the maximum",
    ),
    (
        {"queue_name": "q", "ids": ["a"], "request_timeout": "0ms"},
        "request timeout is required; '5m' is recommended, 15m is the maximum",
    ),
    (
        {"queue_name": "q", "partition": 65234, "ids": ["a"], "request_timeout": "1m"},
        "partition is invalid; '65234' is not a valid partition",
    ),
    (
        {"queue_name": "q", "ids": ["a"], "request_timeout": "16m"},
        "request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested",
    ),
    (
        {"queue_name": "q", "ids": ["a"] * 1001, "request_timeout": "1m"},
        "ids is invalid; max_complete_batch_size is 1000 but received more than 1000",
    ),
    (
        {"queue_name": "q", "ids": ["a"], "request_timeout": "1m"},
        "invalid storage id; 'a': Valid encoded KSUIDs are 27 characters",
    ),
]


@pytest.mark.parametrize(("body", "message"), PRODUCE_ERRORS)
async def test_produce_errors(api: Api, body: dict[str, Any], message: str) -> None:
    await api.create("q")
    e = await api.error("/v1/queue.produce", body)
    assert (e.status, e.message) == (400, message)


@pytest.mark.parametrize(("body", "message"), LEASE_ERRORS)
async def test_lease_errors(api: Api, body: dict[str, Any], message: str) -> None:
    await api.create("q")
    e = await api.error("/v1/queue.lease", body)
    assert (e.status, e.message) == (400, message)


@pytest.mark.parametrize(("body", "message"), COMPLETE_ERRORS)
async def test_complete_errors(api: Api, body: dict[str, Any], message: str) -> None:
    await api.create("q")
    e = await api.error("/v1/queue.complete", body)
    assert (e.status, e.message) == (400, message)


@pytest.mark.parametrize("timeout", ["10ms", "15m"])
async def test_request_timeout_bounds_are_inclusive(api: Api, timeout: str) -> None:
    await api.create("q")
    await api.produce("q", [{"utf8": "x"}], timeout=timeout)
    assert len((await api.lease("q", timeout=timeout))["items"]) == 1


async def test_duplicate_waiting_client_id(live_api: Api) -> None:
    await live_api.create("q")
    first = asyncio.ensure_future(
        live_api.error(
            "/v1/queue.lease",
            {"queue_name": "q", "batch_size": 1, "client_id": "same", "request_timeout": "500ms"},
        )
    )

    async def parked() -> bool:
        return await live_api.lease_waiting("q") == 1

    await eventually(parked)
    e = await live_api.error(
        "/v1/queue.lease", {"queue_name": "q", "batch_size": 1, "client_id": "same", "request_timeout": "1s"}
    )
    assert e.message == "duplicate client id; a client cannot make multiple leased requests to the same queue"
    assert (await first).status == 454


async def test_transport_rules(api: Api) -> None:
    await api.create("q")
    async with api.session.get(api.base + "/v1/queue.produce") as resp:
        assert resp.status == 400
        assert (await resp.json())["message"] == "http method 'GET' not allowed; only POST"
    resp = await api.raw("/v1/nope", b"{}")
    assert resp.status == 501
    resp = await api.raw("/v1/queue.stats", b'{"queue_name":"q"}', {"Content-Type": "text/plain"})
    assert resp.status == 455
    resp = await api.raw("/v1/queue.stats", b'{"queue_name":"q","bogus":1}')
    assert resp.status == 455
    resp = await api.raw("/v1/queue.stats", b'{"queue_name":"q"}', {"Accept": "text/html"})
    assert resp.status == 455
    resp = await api.raw("/v1/queue.stats", b"not json")
    assert resp.status == 455
    resp = await api.raw(
        "/v1/queue.stats", b'{"queueName":"q"}', {"Content-Type": "application/json; charset=utf-8"}
    )
    assert resp.status == 200


async def test_a_route_is_served_alike_however_its_path_is_written(api: Api) -> None:
    # The v1 routes are dispatched by their exact raw path (querator.http.dispatch_directly); the other
    # spellings aiohttp's router accepts, and a request waiting for "100 Continue", reach the same route
    # through the application.
    await api.create("q")
    writings = {"/v1/queue.produce": {}, "/v1/queue.produce?x=1": {}, "/v1/queue%2Eproduce": {}}
    writings["/v1/queue.produce#expect"] = {"Expect": "100-continue"}
    for path, headers in writings.items():
        body = msgspec.json.encode({"queue_name": "q", "request_timeout": "1m", "items": [{"utf8": path}]})
        url = URL(api.base + path.removesuffix("#expect"), encoded=True)
        async with api.session.post(url, data=body, headers={**JSON, **headers}) as resp:
            assert resp.status == 200, await resp.text()
    assert [b64decode(item["payload"]).decode() for item in await api.items("q")] == list(writings)
    resp = await api.raw("/v1/queue.produce/", b"{}")  # not a route however written
    assert resp.status == 501


async def test_oversized_bodies_are_refused(api: Api) -> None:
    await api.create("q")
    e = await api.error("/v1/queue.lease", {"queue_name": "q" * 13_000})
    assert e.message == "request body exceeds 12.8KB limit"
    big = b'{"queue_name":"q","request_timeout":"1m","items":[{"utf8":"' + b"x" * 5_000_000 + b'"}]}'

    async def chunked() -> AsyncIterator[bytes]:
        # No Content-Length: the server must count while reading and stop at the limit.
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    for body in (io.BytesIO(big), chunked()):
        async with api.session.post(api.base + "/v1/queue.produce", data=body, headers=JSON) as resp:
            assert resp.status == 400
            assert (await resp.json())["message"] == "request body exceeds 5.0MB limit"
    assert await api.items("q") == []


async def test_health(api: Api) -> None:
    async with api.session.get(api.base + "/health") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/health+json"
        body = await resp.json(content_type=None)
    assert body["status"] == "pass"
    [check] = body["checks"]["queues:storage"]
    assert check["componentType"] == "datastore" and check["status"] == "pass"


class SlowQueueReads(MemoryStore):
    """Reads a queue's settings as slowly as a first read of a new queue can be on Cassandra."""

    async def get_queue(self, name: str) -> QueueRecord | None:
        await asyncio.sleep(0.05)
        return await super().get_queue(name)


@pytest.mark.parametrize("route", ["produce", "lease"])
async def test_a_request_is_checked_whole_before_it_waits_for_the_queues_engine(route: str) -> None:
    # A request_timeout too short to wait for the engine to start is still a bad request (400), not a
    # 454 "not served on this node yet", whatever the backend and however long the engine takes.
    service = Service(SlowQueueReads())
    await service.start()
    try:
        info = m.QueueInfo(queue_name="q", lease_timeout="1m", expire_timeout="1h", requested_partitions=1)
        await service.create_queue(AS_SERVER, info)
        with pytest.raises(InvalidOption, match=r"^request timeout is invalid; minimum timeout is '10ms'"):
            if route == "produce":
                items = [m.QueueProduceItem(utf8="x")]
                request = m.QueueProduceRequest(queue_name="q", request_timeout="1ms", items=items)
                await service.produce(AS_SERVER, request)
            else:
                await service.lease(
                    AS_SERVER,
                    m.QueueLeaseRequest(queue_name="q", batch_size=1, client_id="c", request_timeout="1ms"),
                )
    finally:
        await service.shutdown()


def _hidden(what: str, char: str) -> str:
    return f"{what} is invalid; cannot contain control or invisible characters, found U+{ord(char):04X}"


@pytest.mark.parametrize("char", IGNORABLE, ids=[f"U+{ord(c):04X}" for c in IGNORABLE])
async def test_new_names_with_default_ignorable_characters_are_refused(api: Api, char: str) -> None:
    """Characters a renderer shows as nothing, outside Unicode Cc and Cf, in a new queue, namespace,
    dead queue or schedule name (docs/semantics.md §2.2)."""
    await api.create("q")
    odd = f"a{char}b"
    queue = {"lease_timeout": "1m", "expire_timeout": "1h", "requested_partitions": 1}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/queues.create", {**queue, "queue_name": odd}, "queue name"),
        ("/v1/queues.create", {**queue, "queue_name": "q2", "namespace": odd}, "namespace name"),
        ("/v1/queues.create", {**queue, "queue_name": "q2", "dead_queue": odd}, "dead queue"),
        ("/v1/queues.update", {**queue, "queue_name": "q", "dead_queue": odd}, "dead queue"),
        ("/v1/schedules.create", {"name": odd, "cron": "* * * * *", "queue_name": "q"}, "schedule name"),
    ]
    for path, body, what in cases:
        error = await api.error(path, body)
        assert (error.status, error.message) == (400, _hidden(what, char)), path
    assert [q["queue_name"] for q in (await api.post("/v1/queues.list", {}))["items"]] == ["q"]
    assert (await api.post("/v1/queues.info", {"queue_name": "q"})).get("dead_queue") is None
    assert await api.post("/v1/schedules.list", {}) == {}


async def test_a_queue_named_before_the_rule_of_new_names_stays_usable(api: Api) -> None:
    """Only new names are checked: a queue stored with a Hangul filler (U+3164) is produced to, leased
    from, kept as another's dead queue by an update, and deleted."""
    old = "old\u3164queue"
    now = api.service.clock.now()
    for name, dead_queue in ((old, ""), ("q", old)):
        record = QueueRecord(
            name=name,
            namespace="_system",
            lease_timeout=60_000_000,
            expire_timeout=3_600_000_000,
            dead_queue=dead_queue,
            requested_partitions=1,
            created_at=now,
            updated_at=now,
        )
        assert await api.service.store.add_queue(record)
    await api.produce(old, [{"utf8": "kept"}])
    assert len((await api.lease(old))["items"]) == 1
    update = {"queue_name": "q", "dead_queue": old, "max_attempts": 3, "reference": "r"}
    assert await api.post("/v1/queues.update", update) == {"code": 200}
    assert (await api.post("/v1/queues.info", {"queue_name": "q"}))["dead_queue"] == old
    await api.post("/v1/queues.update", {"queue_name": "q"})
    await api.post("/v1/queues.delete", {"queue_name": old})
    assert [q["queue_name"] for q in (await api.post("/v1/queues.list", {}))["items"]] == ["q"]
