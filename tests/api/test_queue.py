"""queue.produce / lease / complete / stats / clear / reload over real HTTP (docs/semantics.md §4, the
reference's queue_test.go)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from querator.clock import FakeClock, to_datetime
from tests.conftest import Api, eventually


def ts(clock: FakeClock, seconds: float = 0) -> str:
    return (to_datetime(clock.now()) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_produce_lease_complete_round_trip(api: Api, clock: FakeClock) -> None:
    await api.create("q1")
    await api.produce("q1", [{"utf8": "hello", "kind": "k", "reference": "r", "encoding": "e"}])
    reply = await api.lease("q1", batch_size=10)
    assert reply["queue_name"] == "q1"
    assert "partition" not in reply  # protojson omits the zero partition
    [item] = reply["items"]
    assert item["bytes"] == "aGVsbG8="
    assert (item["kind"], item["reference"], item["encoding"], item["attempts"]) == ("k", "r", "e", 1)
    assert parse_ts(item["lease_deadline"]) == to_datetime(clock.now()) + timedelta(minutes=1)
    [stored] = await api.items("q1")
    assert stored["id"] == item["id"] and stored["is_leased"] is True
    assert await api.complete("q1", 0, [item["id"]]) == {"code": 200}
    assert await api.items("q1") == []
    await api.post("/v1/queues.delete", {"queue_name": "q1"})
    listed = await api.post("/v1/queues.list", {})
    assert listed == {}


async def test_produced_items_inherit_queue_settings(api: Api, clock: FakeClock) -> None:
    await api.create("q", max_attempts=3)
    start = to_datetime(clock.now())
    await api.produce("q", [{"utf8": f"u{i}"} for i in range(10)] + [{"bytes": "AAE="}])
    stored = await api.items("q")
    assert [s.get("payload") for s in stored][:2] == ["dTA=", "dTE="]
    assert stored[-1]["payload"] == "AAE="
    for s in stored:
        assert s["lease_deadline"] == "0001-01-01T00:00:00Z"
        assert start < parse_ts(s["expire_deadline"]) <= start + timedelta(hours=24)
        assert parse_ts(s["created_at"]) >= start
        assert "is_leased" not in s and "attempts" not in s
        assert s["max_attempts"] == 3
    ids = [s["id"] for s in stored]
    assert ids == sorted(ids) and len(set(ids)) == 11


async def test_items_without_payload_are_accepted(api: Api) -> None:
    await api.create("q")
    await api.produce("q", [{}, {"kind": "only-kind"}])
    assert len(await api.items("q")) == 2


async def test_scheduled_produce_moves_to_queue_when_due(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce("q", [{"utf8": f"s{i}", "enqueue_at": ts(clock, 60)} for i in range(100)])
    assert len(await api.scheduled("q")) == 100
    assert await api.items("q") == []
    stats = await api.partition_stats("q")
    assert stats.get("scheduled") == 100 and stats.get("total", 0) == 0
    clock.advance(120)

    async def moved() -> bool:
        return len(await api.items("q")) == 100

    await eventually(moved)
    assert await api.scheduled("q") == []
    leased = await api.lease("q", batch_size=100)
    assert [i["bytes"] for i in leased["items"]][:2] == ["czA=", "czE="]  # production order kept
    assert len(leased["items"]) == 100
    await api.complete("q", 0, [i["id"] for i in leased["items"]])
    assert await api.items("q") == []


async def test_enqueue_at_near_now_or_past_is_immediate(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce(
        "q", [{"utf8": "soon", "enqueue_at": ts(clock, 0.05)}, {"utf8": "past", "enqueue_at": ts(clock, -60)}]
    )
    assert await api.scheduled("q") == []
    assert len((await api.lease("q", batch_size=2))["items"]) == 2


async def test_scheduled_items_survive_later_batches(api: Api, clock: FakeClock) -> None:
    # Reference bug: the timer was not re-armed for a second, later batch of scheduled items.
    await api.create("q")
    await api.produce("q", [{"utf8": "a", "enqueue_at": ts(clock, 10)}])
    await api.produce("q", [{"utf8": "b", "enqueue_at": ts(clock, 30)}])
    clock.advance(11)

    async def count_is(n: int) -> bool:
        return len(await api.items("q")) == n

    await eventually(lambda: count_is(1))
    clock.advance(20)
    await eventually(lambda: count_is(2))


async def test_scheduled_list_pagination(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce("q", [{"utf8": f"s{i}", "enqueue_at": ts(clock, 60)} for i in range(20)])
    first = await api.scheduled("q", limit=5)
    assert len(first) == 5
    rest = await api.scheduled("q", pivot=first[-1]["id"], limit=100)
    assert rest[0]["id"] == first[-1]["id"]
    assert len({i["id"] for i in first} | {i["id"] for i in rest}) == 20
    assert all("enqueue_at" in i for i in rest)


async def test_lease_takes_head_in_fifo_order(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.post(
        "/v1/storage/items.import",
        {
            "queue_name": "q",
            "partition": 0,
            "items": [{"payload": "eA==", "reference": f"r{i}"} for i in range(1000)],
        },
    )
    stored = await api.items("q", limit=20)
    first = await api.lease("q", batch_size=10)
    assert [i["id"] for i in first["items"]] == [s["id"] for s in stored[:10]]
    second = await api.lease("q", batch_size=10)
    assert [i["id"] for i in second["items"]] == [s["id"] for s in stored[10:20]]
    assert all(s["is_leased"] for s in (await api.items("q", limit=20)))


@pytest.mark.one_process
async def test_round_robin_fairness_in_one_batch(start_server: object, clock: FakeClock) -> None:
    api: Api = await start_server(clock)  # type: ignore[operator]
    await api.create("q")
    await api.produce_n("q", 23)
    queue = await api.service.manager.get("q")
    # Hold the loop so three concurrent leases land in one batch, as the reference's PauseQueue does.
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(queue.logical.call(hold.wait))
    leases = [asyncio.ensure_future(api.lease("q", batch_size=n, client_id=f"c{n}")) for n in (20, 6, 1)]

    async def all_waiting() -> bool:
        return len(queue.logical._waiting.pending) == 3

    await eventually(all_waiting)
    hold.set()
    await blocker
    got = [len((await lease)["items"]) for lease in leases]
    assert got == [16, 6, 1]


async def test_concurrent_leases_each_get_what_they_asked(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 100)
    results = await asyncio.gather(*(api.lease("q", batch_size=n, client_id=f"c{n}") for n in (5, 10, 20)))
    assert sorted(len(r["items"]) for r in results) == [5, 10, 20]
    stats = await api.partition_stats("q")
    assert stats["total_leased"] == 35


async def test_parked_leases_time_out_with_454(live_api: Api) -> None:
    await live_api.create("q")
    errors = await asyncio.gather(
        *(
            live_api.error(
                "/v1/queue.lease",
                {"queue_name": "q", "batch_size": 1, "client_id": f"c{i}", "request_timeout": t},
            )
            for i, t in enumerate(["200ms", "200ms", "300ms"])
        )
    )
    for e in errors:
        assert e.status == 454
        assert e.message == "request timeout; no items are in the queue, try again"


async def test_produce_wakes_a_waiting_lease(live_api: Api) -> None:
    await live_api.create("q")
    waiting = asyncio.ensure_future(live_api.lease("q", timeout="10s"))

    async def parked() -> bool:
        return await live_api.lease_waiting("q") == 1

    await eventually(parked)
    await live_api.produce_n("q", 1)
    assert len((await waiting)["items"]) == 1


async def test_complete_errors(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 2)
    ids = [i["id"] for i in await api.items("q")]
    e = await api.error(
        "/v1/queue.complete", {"queue_name": "q", "partition": 0, "request_timeout": "5s", "ids": ids}
    )
    assert e.status == 400
    assert e.message.startswith("item(s) cannot be completed;") and e.message.endswith(
        " is not marked as leased"
    )
    e = await api.error(
        "/v1/queue.complete",
        {"queue_name": "q", "partition": 0, "request_timeout": "5s", "ids": ["another-invalid-id"]},
    )
    assert e.message.startswith("invalid storage id; 'another-invalid-id'")
    leased = await api.lease("q", batch_size=1)
    e = await api.error(
        "/v1/queue.complete",
        {
            "queue_name": "q",
            "partition": 0,
            "request_timeout": "5s",
            "ids": [leased["items"][0]["id"], ids[1]],
        },
    )
    assert "is not marked as leased" in e.message
    # The first id was completed before the second failed: no rollback (docs/semantics.md §4.3).
    assert [i["id"] for i in await api.items("q")] == [ids[1]]


async def test_stats(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 500)
    await api.lease("q", batch_size=15)
    stats = await api.stats("q")
    assert stats["queue_name"] == "q"
    [logical] = stats["logicalQueues"]
    [p] = logical["partitions"]
    assert p["total"] == 500 and p["total_leased"] == 15
    assert "failures" not in p
    assert p["average_age"] and p["average_leased_age"]


async def test_stats_scheduled(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce("q", [{"utf8": "x", "enqueue_at": ts(clock, 60)} for _ in range(50)])
    p = await api.partition_stats("q")
    assert (p.get("scheduled"), p.get("total", 0)) == (50, 0)
    clock.advance(61)

    async def due() -> bool:
        p = await api.partition_stats("q")
        return (p.get("scheduled", 0), p.get("total", 0)) == (0, 50)

    await eventually(due)


async def test_clear(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    deadline = ts(clock, 60)
    await api.post(
        "/v1/storage/items.import",
        {
            "queue_name": "q",
            "partition": 0,
            "items": [{"is_leased": True, "lease_deadline": deadline, "payload": "eA=="} for _ in range(2)],
        },
    )
    await api.produce_n("q", 500)
    await api.produce("q", [{"utf8": "later", "enqueue_at": ts(clock, 600)}])
    e = await api.error("/v1/queue.clear", {"queue_name": "q"})
    assert e.message == "invalid clear request; one of 'queue', 'scheduled' must be true"
    await api.post("/v1/queue.clear", {"queue_name": "q", "queue": True})
    assert len(await api.items("q")) == 2
    assert len(await api.scheduled("q")) == 1
    await api.post("/v1/queue.clear", {"queue_name": "q", "queue": True, "destructive": True})
    assert await api.items("q") == []
    await api.post("/v1/queue.clear", {"queue_name": "q", "scheduled": True})
    assert await api.scheduled("q") == []


async def test_reload(api: Api) -> None:
    await api.create("q")
    await api.post("/v1/queue.reload", {"queue_name": "q"})
    await api.produce_n("q", 100)
    await api.post(
        "/v1/storage/items.import",
        {"queue_name": "q", "partition": 0, "items": [{"payload": "eA=="} for _ in range(50)]},
    )
    assert (await api.partition_stats("q"))["total"] == 150
    await api.post("/v1/queue.reload", {"queue_name": "q"})
    leased = await api.lease("q", batch_size=150)
    assert len(leased["items"]) == 150
    await api.complete("q", 0, [i["id"] for i in leased["items"][:10]])
    await api.post("/v1/queue.reload", {"queue_name": "q"})
    assert (await api.partition_stats("q"))["total"] == 140
    e = await api.error("/v1/queue.reload", {"queue_name": "~q"})
    assert e.status == 400
    e = await api.error("/v1/queue.reload", {"queue_name": "nope"})
    assert e.message == "queue does not exist; no such queue named 'nope'"


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)
