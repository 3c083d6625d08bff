"""storage/items.list, items.import, items.delete, scheduled.list (docs/semantics.md §7, the reference's
storage_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from querator.clock import FakeClock
from querator.ksuid import ksuid_prev
from tests.conftest import Api

from .test_queue import ts


async def test_import_preserves_fields(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    lease_deadline = ts(clock, 30)
    expire_deadline = ts(clock, 3600)
    sent = {
        "is_leased": True,
        "lease_deadline": lease_deadline,
        "expire_deadline": expire_deadline,
        "attempts": 3,
        "max_attempts": 5,
        "reference": "r",
        "encoding": "e",
        "kind": "k",
        "payload": "cGF5",
        "id": "ignored",
        "enqueue_at": ts(clock, 99),
    }
    reply = await api.post("/v1/storage/items.import", {"queue_name": "q", "partition": 0, "items": [sent]})
    [back] = reply["items"]
    assert back["id"] != "ignored" and back["created_at"]
    [stored] = await api.items("q")
    assert stored["id"] == back["id"]
    for key in ("is_leased", "attempts", "max_attempts", "reference", "encoding", "kind", "payload"):
        assert stored[key] == sent[key]
    assert stored["lease_deadline"] == lease_deadline and stored["expire_deadline"] == expire_deadline
    assert await api.scheduled("q") == []


async def test_import_keeps_the_job_and_its_failures_within_bounds(api: Api, clock: FakeClock) -> None:
    """Dead-lettering carries an item's job and failures through the import (docs/extensions.md)."""
    await api.create("q")
    job_id = "2fLaS1wDqwbU9iSjvZGm1Rdp5hq"
    failure = {"at": ts(clock, -5), "attempt": 1, "error": "boom"}
    body = {"queue_name": "q", "items": [{"payload": "cGF5", "job_id": job_id, "failures": [failure]}]}
    await api.post("/v1/storage/items.import", body)
    [stored] = (
        await api.post(
            "/v1/storage/items.list", {"queue_name": "q", "partition": 0}, {"X-Querator-Extensions": "3"}
        )
    )["items"]
    assert (stored["job_id"], stored["failures"]) == (job_id, [failure])
    for bad, message in (
        ({"job_id": "x"}, "job id is invalid; must be an item id (a KSUID)"),
        ({"failures": [failure] * 11}, "failures is invalid; an item keeps at most 10"),
        (
            {"failures": [{"error": "x" * 4097}]},
            "failures is invalid; an error is longer than 4096 characters",
        ),
    ):
        e = await api.error("/v1/storage/items.import", {"queue_name": "q", "items": [bad]})
        assert (e.status, e.message) == (400, message)


async def test_attempts_stay_int32(api: Api) -> None:
    # An item imported with attempts at the int32 maximum was leased with attempts 2147483648, which
    # no int32 decoder (Go's protojson, protobuf) reads back: a lease counts up to the maximum only.
    await api.create("q")
    top = 2**31 - 1
    await api.post("/v1/storage/items.import", {"queue_name": "q", "items": [{"attempts": top}]})
    [item] = (await api.lease("q", batch_size=1))["items"]
    assert item["attempts"] == top
    await api.retry("q", 0, [{"id": item["id"]}])
    [again] = (await api.lease("q", batch_size=1))["items"]
    assert again["attempts"] == top


async def test_list_pivots_and_limits(api: Api) -> None:
    await api.create("q")
    for _ in range(10):  # an import holds at most 1000 items
        await api.post(
            "/v1/storage/items.import",
            {"queue_name": "q", "partition": 0, "items": [{"payload": "eA=="} for _ in range(1000)]},
        )
    assert len(await api.items("q", limit=10_000)) == 10_000
    assert len(await api.items("q", limit=20_000)) == 10_000
    default = await api.items("q")
    assert len(default) == 1000
    assert [i["id"] for i in await api.items("q", pivot=default[10]["id"], limit=1)] == [default[10]["id"]]
    assert (await api.items("q", limit=1))[0]["id"] == default[0]["id"]
    missing = ksuid_prev(default[0]["id"])
    assert (await api.items("q", pivot=missing, limit=1))[0]["id"] == default[0]["id"]
    page = await api.items("q", pivot=default[999]["id"], limit=5)
    assert page[0]["id"] == default[999]["id"] and len(page) == 5


async def test_delete(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1000)
    ids = [i["id"] for i in await api.items("q")]
    body = {"queue_name": "q", "partition": 0, "ids": ids}
    assert await api.post("/v1/storage/items.delete", body) == {"code": 200}
    assert await api.items("q") == []
    assert await api.post("/v1/storage/items.delete", body) == {"code": 200}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/v1/storage/items.list",
            {"queue_name": "~q"},
            "queue name is invalid; '~q' cannot contain '~' character",
        ),
        ("/v1/storage/items.list", {}, "queue name is invalid; queue name cannot be empty"),
        (
            "/v1/storage/items.list",
            {"queue_name": "q", "partition": 1},
            "partition is invalid; '1' is not a valid partition",
        ),
        (
            "/v1/storage/items.list",
            {"queue_name": "q", "partition": 500},
            "partition is invalid; '500' is not a valid partition",
        ),
        (
            "/v1/storage/items.list",
            {"queue_name": "q", "pivot": "bad"},
            "invalid storage id; 'bad': Valid encoded KSUIDs are 27 characters",
        ),
        ("/v1/storage/items.import", {"queue_name": "q"}, "items is invalid; cannot be empty"),
        (
            "/v1/storage/items.import",
            {"queue_name": "q", "partition": 1, "items": [{}]},
            "partition is invalid; '1' is not a valid partition",
        ),
        (
            "/v1/storage/items.import",
            {"queue_name": "q", "items": [{}, {"attempts": -1}]},
            "attempts is invalid; cannot be negative, but -1 was given",
        ),
        ("/v1/storage/items.delete", {"queue_name": "q"}, "ids is invalid; cannot be empty"),
        (
            "/v1/storage/items.delete",
            {"queue_name": "q", "ids": ["bad"]},
            "invalid storage id; 'bad': Valid encoded KSUIDs are 27 characters",
        ),
        (
            "/v1/storage/scheduled.list",
            {"queue_name": "q", "partition": 1},
            "partition is invalid; '1' is not a valid partition",
        ),
    ],
)
async def test_storage_errors(api: Api, path: str, body: dict[str, Any], message: str) -> None:
    await api.create("q")
    e = await api.error(path, body)
    assert (e.status, e.message) == (400, message)
