"""queues.create / list / update / delete / info over real HTTP (docs/semantics.md §6, the reference's
queues_test.go)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from querator.clock import FakeClock
from tests.conftest import Api, eventually


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_create_and_list(api: Api) -> None:
    await api.create("dead")
    await api.create(
        "q", lease_timeout="1m", expire_timeout="10m", dead_queue="dead", max_attempts=10, reference="ref"
    )
    listed = await api.post("/v1/queues.list", {"pivot": "q", "limit": 1})
    [info] = listed["items"]
    assert info["queue_name"] == "q"
    assert (info["lease_timeout"], info["expire_timeout"]) == ("1m0s", "10m0s")
    assert (info["dead_queue"], info["max_attempts"], info["reference"]) == ("dead", 10, "ref")
    assert info["namespace"] == "_system" and info["requested_partitions"] == 1
    assert when(info["updated_at"]) >= when(info["created_at"])
    assert await api.post("/v1/queues.info", {"queue_name": "q"}) == info


async def test_list_paging(api: Api) -> None:
    names = [f"queue-{i:05d}" for i in range(50)]
    for name in reversed(names):
        await api.create(name)
    assert [i["queue_name"] for i in (await api.post("/v1/queues.list", {}))["items"]] == names
    assert len((await api.post("/v1/queues.list", {"limit": 20000}))["items"]) == 50
    assert len((await api.post("/v1/queues.list", {"limit": 30}))["items"]) == 30
    page = (await api.post("/v1/queues.list", {"pivot": names[10], "limit": 10}))["items"]
    assert [i["queue_name"] for i in page] == names[10:20]
    page = (await api.post("/v1/queues.list", {"pivot": "queue-00010x", "limit": 1}))["items"]
    assert page[0]["queue_name"] == names[11]
    assert await api.post("/v1/queues.list", {"pivot": "zzz"}) == {}
    await api.post("/v1/queues.delete", {"queue_name": names[10]})
    page = (await api.post("/v1/queues.list", {"pivot": names[10], "limit": 1}))["items"]
    assert page[0]["queue_name"] == names[11]


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        (-1, "limit is invalid; limit cannot be negative"),
        (65537, "limit is invalid; cannot be greater than 65536"),
        (2147483647, "limit is invalid; cannot be greater than 65536"),
    ],
)
async def test_list_limit_errors_are_the_references(api: Api, limit: int, message: str) -> None:
    e = await api.error("/v1/queues.list", {"limit": limit})
    assert (e.status, e.message) == (400, message)


async def test_our_codes_carry_their_reason_phrase(api: Api) -> None:
    """HTTP/1.1 454 Retry Request, not `454 ` with nothing: proxies, logs and curl -i show it."""
    body = b'{"queue_name": "nope", "batch_size": 1, "client_id": "c", "request_timeout": "bad"}'
    resp = await api.raw("/v1/queue.lease", body, {"Content-Type": "application/json"})
    assert (resp.status, resp.reason) == (400, "Bad Request")
    resp = await api.raw("/v1/queue.produce", b"{", {"Content-Type": "application/json"})
    assert (resp.status, resp.reason) == (455, "Client Content Error")


async def test_namespaces_filter_lists(api: Api) -> None:
    await api.create("a", namespace="tenant")
    await api.create("b")
    assert [
        i["queue_name"] for i in (await api.post("/v1/queues.list", {"namespace": "tenant"}))["items"]
    ] == ["a"]
    assert [i["queue_name"] for i in (await api.post("/v1/queues.list", {}))["items"]] == ["b"]


async def test_update(api: Api, clock: FakeClock) -> None:
    await api.create("dead")
    await api.create("q", max_attempts=5, reference="r")
    before = await api.post("/v1/queues.info", {"queue_name": "q"})
    clock.advance(1)
    await api.post(
        "/v1/queues.update",
        {"queue_name": "q", "lease_timeout": "1m10s", "max_attempts": 7, "dead_queue": "dead"},
    )
    after = await api.post("/v1/queues.info", {"queue_name": "q"})
    assert after["lease_timeout"] == "1m10s" and after["expire_timeout"] == "24h0m0s"
    assert after["max_attempts"] == 7 and after["dead_queue"] == "dead"
    assert "reference" not in after  # "update replaces fields": an absent reference clears it
    assert when(after["updated_at"]) > when(before["updated_at"])
    assert after["created_at"] == before["created_at"]
    e = await api.error("/v1/queues.update", {"queue_name": "q", "lease_timeout": "48h"})
    assert e.message == "lease timeout is too long; 48h0m0s cannot be greater than the expire timeout 24h0m0s"
    e = await api.error("/v1/queues.update", {"queue_name": "nope", "lease_timeout": "1m"})
    assert e.message == "queue does not exist; no such queue named 'nope'"


async def test_update_applies_to_a_live_queue(api: Api, clock: FakeClock) -> None:
    await api.create("dead")
    await api.create("q", max_attempts=5)
    await api.produce_n("q", 1)
    await api.lease("q")
    # Lowering max_attempts affects an item already in flight; adding a dead queue routes it there.
    await api.post("/v1/queues.update", {"queue_name": "q", "max_attempts": 1, "dead_queue": "dead"})
    clock.advance(61)

    async def dead_lettered() -> bool:
        return len(await api.items("dead")) == 1

    await eventually(dead_lettered)
    # A new lease_timeout applies to new leases only.
    await api.produce_n("q", 1)
    await api.post("/v1/queues.update", {"queue_name": "q", "lease_timeout": "2m", "dead_queue": "dead"})
    item = (await api.lease("q"))["items"][0]
    assert when(item["lease_deadline"]).timestamp() == pytest.approx(clock.now() / 1e6 + 120, abs=1)


async def test_update_adds_partitions(api: Api) -> None:
    await api.create("q", requested_partitions=2)
    await api.produce_n("q", 4)
    await api.post("/v1/queues.update", {"queue_name": "q", "requested_partitions": 4})
    stats = await api.stats("q")
    assert [p.get("partition", 0) for p in stats["logicalQueues"][0]["partitions"]] == [0, 1, 2, 3]
    assert sum(p.get("total", 0) for p in stats["logicalQueues"][0]["partitions"]) == 4
    e = await api.error("/v1/queues.update", {"queue_name": "q", "requested_partitions": 1})
    assert e.message.startswith("partitions is invalid;")


async def test_delete_removes_items_and_answers_waiting_leases(live_api: Api) -> None:
    import asyncio

    await live_api.create("q")
    waiting = asyncio.ensure_future(
        live_api.error(
            "/v1/queue.lease",
            {"queue_name": "q", "batch_size": 1, "client_id": "c", "request_timeout": "10s"},
        )
    )

    async def parked() -> bool:
        return await live_api.lease_waiting("q") == 1

    await eventually(parked)
    await live_api.post("/v1/queues.delete", {"queue_name": "q"})
    e = await waiting
    assert (e.status, e.message) == (453, "queue is shutting down")
    await live_api.create("q")
    assert await live_api.items("q") == []


CREATE_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"queue_name": ""}, "queue name is invalid; queue name cannot be empty"),
    ({"queue_name": "x" * 513}, "queue name is invalid; cannot be greater than '512' characters"),
    ({"queue_name": "a b"}, "queue name is invalid; 'a b' cannot contain whitespace"),
    ({"queue_name": "a~b"}, "queue name is invalid; 'a~b' cannot contain '~' character"),
    (
        {"queue_name": "q", "lease_timeout": "1234567890123456"},
        "lease timeout is invalid; cannot be greater than '15' characters",
    ),
    (
        {"queue_name": "q", "expire_timeout": "1234567890123456"},
        "expire timeout is invalid; cannot be greater than '15' characters",
    ),
    (
        {"queue_name": "q", "lease_timeout": "1m", "expire_timeout": "bad"},
        'expire timeout is invalid; time: invalid duration "bad" - expected format: 60m, 2h or 24h',
    ),
    (
        {"queue_name": "q", "lease_timeout": "bad", "expire_timeout": "1h"},
        'lease timeout is invalid; time: invalid duration "bad" - expected format: 8m, 15m or 1h',
    ),
    (
        {"queue_name": "q", "namespace": "a b", "lease_timeout": "1m", "expire_timeout": "1h"},
        "namespace name is invalid; 'a b' cannot contain whitespace",
    ),
    (
        {"queue_name": "exists", "lease_timeout": "1m", "expire_timeout": "1h"},
        "invalid queue; 'exists' already exists",
    ),
    (
        {"queue_name": "q", "dead_queue": "d~", "lease_timeout": "1m", "expire_timeout": "1h"},
        "dead queue is invalid; 'd~' cannot contain '~' character",
    ),
    (
        {"queue_name": "q", "dead_queue": "q", "lease_timeout": "1m", "expire_timeout": "1h"},
        "dead_queue cannot reference itself",
    ),
    (
        {"queue_name": "q", "dead_queue": "nope", "lease_timeout": "1m", "expire_timeout": "1h"},
        "dead_queue does not exist; 'nope' was not found, create it first",
    ),
    (
        {"queue_name": "q", "dead_queue": "exists", "lease_timeout": "1m", "expire_timeout": "1h"},
        "dead_queue is invalid; 'exists' already has its own dead_queue configured",
    ),
    (
        {"queue_name": "q", "reference": "r" * 2001, "lease_timeout": "1m", "expire_timeout": "1h"},
        "reference field is invalid; cannot be greater than '2000' characters",
    ),
    (
        {"queue_name": "q", "max_attempts": 65537, "lease_timeout": "1m", "expire_timeout": "1h"},
        "max attempts is invalid; cannot be greater than 65536",
    ),
    (
        {"queue_name": "q", "max_attempts": -1, "lease_timeout": "1m", "expire_timeout": "1h"},
        "max attempts is invalid; cannot be negative number",
    ),
    (
        {"queue_name": "q", "lease_timeout": "1m", "expire_timeout": "1h"},
        "partitions is invalid; cannot be less than 1",
    ),
    (
        {"queue_name": "q", "expire_timeout": "1h", "requested_partitions": 1},
        "lease timeout is invalid; cannot be empty",
    ),
    (
        {"queue_name": "q", "lease_timeout": "1m", "requested_partitions": 1},
        "expire timeout is invalid; cannot be empty",
    ),
    (
        {"queue_name": "q", "lease_timeout": "1h", "expire_timeout": "30m", "requested_partitions": 1},
        "lease timeout is too long; 1h0m0s cannot be greater than the expire timeout 30m0s",
    ),
]


@pytest.mark.parametrize(("body", "message"), CREATE_ERRORS)
async def test_create_errors(api: Api, body: dict[str, Any], message: str) -> None:
    await api.create("dead")
    await api.create("exists", dead_queue="dead")
    e = await api.error("/v1/queues.create", body)
    assert (e.status, e.message) == (400, message)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/queues.info", {}, "queue name is invalid; queue name cannot be empty"),
        ("/v1/queues.info", {"queue_name": "  "}, "queue name is invalid; queue name cannot be empty"),
        ("/v1/queues.info", {"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
        ("/v1/queues.delete", {"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
        (
            "/v1/queues.delete",
            {"queue_name": "a b"},
            "queue name is invalid; 'a b' cannot contain whitespace",
        ),
        ("/v1/queues.list", {"pivot": "~"}, "pivot is invalid; '~' cannot contain '~' character"),
    ],
)
async def test_admin_errors(api: Api, path: str, body: dict[str, Any], message: str) -> None:
    e = await api.error(path, body)
    assert (e.status, e.message) == (400, message)
