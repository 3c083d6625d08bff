"""queue.retry over real HTTP (docs/semantics.md §4.4, the reference's retry_test.go)."""

from __future__ import annotations

from querator.clock import FakeClock
from tests.conftest import Api, eventually

from .test_queue import ts


async def test_immediate_retry_is_leasable_again(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    await api.retry("q", 0, [{"id": item["id"]}])
    again = (await api.lease("q"))["items"][0]
    assert again["attempts"] == 2 and again["id"] != item["id"]


async def test_dead_retry_without_dead_queue_deletes(live_api: Api) -> None:
    await live_api.create("q")
    await live_api.produce_n("q", 1)
    item = (await live_api.lease("q"))["items"][0]
    await live_api.retry("q", 0, [{"id": item["id"], "dead": True}])
    e = await live_api.error(
        "/v1/queue.lease", {"queue_name": "q", "batch_size": 1, "client_id": "c", "request_timeout": "100ms"}
    )
    assert e.status == 454
    assert await live_api.items("q") == []


async def test_dead_retry_goes_to_the_dead_queue(api: Api) -> None:
    await api.create("dead")
    await api.create("q", dead_queue="dead")
    await api.produce("q", [{"utf8": "bad", "kind": "k"}])
    item = (await api.lease("q"))["items"][0]
    await api.retry("q", 0, [{"id": item["id"], "dead": True}])
    [dead] = await api.items("dead")
    assert dead["source_id"] == item["id"] and dead["kind"] == "k"
    assert await api.items("q") == []


async def test_max_attempts_bounds_explicit_retries(api: Api, clock: FakeClock) -> None:
    """A consumer retrying a failing item (now, or later) gets it max_attempts times, then it is
    dead-lettered, as an expired lease would be (docs/compatibility.md)."""
    await api.create("dead")
    await api.create("q", dead_queue="dead", max_attempts=2)
    await api.produce("q", [{"utf8": "now"}, {"utf8": "later"}])
    for attempt, left in ((1, 2), (2, 0)):
        items = (await api.lease("q", batch_size=2))["items"]
        assert [i["attempts"] for i in items] == [attempt, attempt]
        await api.retry("q", 0, [{"id": items[0]["id"]}, {"id": items[1]["id"], "retry_at": ts(clock, 0.5)}])
        clock.advance(1)
        await eventually(lambda left=left: _holds(api, "q", left))
    assert len(await api.items("dead")) == 2


async def _holds(api: Api, queue: str, n: int) -> bool:
    return len(await api.items(queue)) == n


async def test_future_retry_schedules(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    await api.retry("q", 0, [{"id": item["id"], "retry_at": ts(clock, 60)}])
    assert [i["id"] for i in await api.scheduled("q")] == [item["id"]]
    assert await api.items("q") == []
    clock.advance(61)

    async def back() -> bool:
        return len(await api.items("q")) == 1

    await eventually(back)
    assert (await api.lease("q"))["items"][0]["attempts"] == 2


async def test_past_retry_at_is_immediate(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    await api.retry("q", 0, [{"id": item["id"], "retry_at": ts(clock, -60)}])
    assert await api.scheduled("q") == []
    assert (await api.lease("q"))["items"][0]["attempts"] == 2


async def test_retry_moves_to_tail(api: Api) -> None:
    await api.create("q")
    await api.produce(("q"), [{"utf8": x} for x in "ABC"])
    a = (await api.lease("q"))["items"][0]
    await api.retry("q", 0, [{"id": a["id"]}])
    got = (await api.lease("q", batch_size=3, client_id="c2"))["items"]
    assert [i["bytes"] for i in got] == ["Qg==", "Qw==", "QQ=="]
    assert got[2]["id"] != a["id"] and got[2]["attempts"] == 2


async def test_lease_expiry_moves_to_tail(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="300ms")
    await api.produce(("q"), [{"utf8": x} for x in "ABC"])
    a = (await api.lease("q"))["items"][0]
    clock.advance(2)

    async def requeued() -> bool:
        items = await api.items("q")
        return len(items) == 3 and not any(i.get("is_leased") for i in items)

    await eventually(requeued)
    got = (await api.lease("q", batch_size=3, client_id="c2"))["items"]
    assert [i["bytes"] for i in got] == ["Qg==", "Qw==", "QQ=="]
    assert got[2]["id"] != a["id"]


async def test_retry_errors(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    [stored] = await api.items("q")
    e = await api.error("/v1/queue.retry", {})
    assert e.message == "queue name is invalid; queue name cannot be empty"
    e = await api.error("/v1/queue.retry", {"queue_name": "q", "partition": 0})
    assert e.message == "items is invalid; list of items cannot be empty"
    e = await api.error(
        "/v1/queue.retry", {"queue_name": "q", "partition": 1, "items": [{"id": stored["id"]}]}
    )
    assert e.message == "partition is invalid; '1' is not a valid partition"
    e = await api.error("/v1/queue.retry", {"queue_name": "q", "partition": 0, "items": [{"id": "bad-id"}]})
    assert e.message.startswith("invalid storage id; 'bad-id': ")
    e = await api.error(
        "/v1/queue.retry",
        {"queue_name": "q", "partition": 0, "items": [{"id": "1zzzzzzzzzzzzzzzzzzzzzzzzzz"}]},
    )
    assert e.message.startswith("invalid storage id;")
    e = await api.error(
        "/v1/queue.retry", {"queue_name": "q", "partition": 0, "items": [{"id": stored["id"]}]}
    )
    assert e.message == f"item(s) cannot be retried; '{stored['id']}' is not marked as leased"
    e = await api.error(
        "/v1/queue.retry", {"queue_name": "q", "partition": 0, "items": [{"id": stored["id"]}] * 1001}
    )
    assert e.message == "items is invalid; max_complete_batch_size is 1000 but received more than 1000"


EXTENSIONS = {"X-Querator-Extensions": "3"}


async def test_a_dead_letter_says_why_and_keeps_its_job_id(api: Api, clock: FakeClock) -> None:
    """Each failed attempt is recorded with its time and error, and every new id of the item carries the
    first one as its job id, into the dead-letter queue (docs/extensions.md, "Jobs and failures").
    A client that did not ask for extensions of level 3 sees neither field (issue 45)."""
    await api.create("dead")
    await api.create("q", dead_queue="dead", max_attempts=2)
    produced = await api.post(
        "/v1/queue.produce",
        {"queue_name": "q", "request_timeout": "5s", "items": [{"utf8": "job"}]},
        headers=EXTENSIONS,
    )
    [job_id] = produced["ids"]
    lease = {"queue_name": "q", "batch_size": 1, "client_id": "c", "request_timeout": "5s"}
    first = (await api.post("/v1/queue.lease", lease, headers=EXTENSIONS))["items"][0]
    assert first["id"] == job_id and "job_id" not in first
    await api.retry("q", 0, [{"id": first["id"], "error": "ValueError: bad input\nTraceback ..."}])
    second = (await api.post("/v1/queue.lease", lease, headers=EXTENSIONS))["items"][0]
    assert second["id"] != job_id and second["job_id"] == job_id
    clock.advance(61)  # its lease expires: the second attempt was the last
    await eventually(lambda: _holds(api, "dead", 1))
    body = {"queue_name": "dead", "partition": 0}
    [dead] = (await api.post("/v1/storage/items.list", body, headers=EXTENSIONS))["items"]
    assert dead["job_id"] == job_id and dead["source_id"] == second["id"]
    assert [(f["attempt"], f["error"]) for f in dead["failures"]] == [
        (1, "ValueError: bad input\nTraceback ..."),
        (2, "lease expired"),
    ]
    assert all(f["at"].endswith("Z") for f in dead["failures"])
    # The reference's clients reject fields they do not know: without the header, none of these.
    [plain] = await api.items("dead")
    assert "job_id" not in plain and "failures" not in plain
    await api.create("plain")
    await api.produce("plain", [{"utf8": "again"}])
    await api.retry("plain", 0, [{"id": (await api.lease("plain"))["items"][0]["id"]}])
    item = (await api.lease("plain"))["items"][0]
    assert "job_id" not in item
    await api.retry("plain", 0, [{"id": item["id"]}])
    # Level 2 (this project's clients before): its own fields, but not these.
    level_2 = {"X-Querator-Extensions": "2"}
    older = await api.post("/v1/queue.lease", {**lease, "queue_name": "plain"}, level_2)
    assert "job_id" not in older["items"][0]


async def test_a_retry_error_is_bounded(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    e = await api.error(
        "/v1/queue.retry",
        {"queue_name": "q", "partition": 0, "items": [{"id": item["id"], "error": "x" * 4097}]},
    )
    assert (e.status, e.message) == (400, "error is invalid; items[0].error is longer than 4096 characters")
    await api.retry("q", 0, [{"id": item["id"], "error": "x" * 4096}])
