"""Lease expiry, max_attempts, expire_timeout and dead-lettering on a frozen clock (docs/semantics.md §5)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

from querator.clock import FakeClock
from tests.conftest import Api, eventually


async def wait_for_items(api: Api, queue: str, check: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def ok() -> bool:
        found[:] = await api.items(queue)
        return bool(check(found))

    await eventually(ok)
    return found


async def test_lease_expiry_requeues_with_new_id(api: Api, clock: FakeClock) -> None:
    await api.create("q", max_attempts=2)
    await api.produce_n("q", 1)
    first = (await api.lease("q"))["items"][0]
    clock.advance(120)
    [item] = await wait_for_items(api, "q", lambda items: items and items[0]["id"] != first["id"])
    assert "is_leased" not in item and item["attempts"] == 1
    e = await api.error(
        "/v1/queue.complete",
        {"queue_name": "q", "partition": 0, "request_timeout": "5s", "ids": [first["id"]]},
    )
    assert e.message == f"invalid storage id; '{first['id']}' does not exist"
    e = await api.error(
        "/v1/queue.complete",
        {"queue_name": "q", "partition": 0, "request_timeout": "5s", "ids": [item["id"]]},
    )
    assert e.message == f"item(s) cannot be completed; '{item['id']}' is not marked as leased"
    second = (await api.lease("q"))["items"][0]
    assert second["id"] == item["id"] and second["attempts"] == 2
    await api.complete("q", 0, [second["id"]])


async def test_max_attempts_with_dead_queue(api: Api, clock: FakeClock) -> None:
    await api.create("dead")
    await api.create("q", max_attempts=2, dead_queue="dead")
    await api.produce("q", [{"utf8": "doomed", "kind": "k", "reference": "r"}])
    await api.lease("q")
    clock.advance(61)
    await wait_for_items(api, "q", lambda items: items and not items[0].get("is_leased"))
    second = (await api.lease("q"))["items"][0]
    assert second["attempts"] == 2
    clock.advance(61)
    [dead] = await wait_for_items(api, "dead", lambda items: len(items) == 1)
    assert dead["source_id"] == second["id"]
    assert (dead["kind"], dead["reference"], dead["payload"]) == ("k", "r", "ZG9vbWVk")
    assert "is_leased" not in dead and "attempts" not in dead
    assert await api.items("q") == []


async def test_max_attempts_zero_is_unlimited(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    for attempt in range(1, 6):
        item = (await api.lease("q"))["items"][0]
        assert item["attempts"] == attempt
        clock.advance(61)
        await wait_for_items(api, "q", lambda items: items and not items[0].get("is_leased"))


async def test_max_attempts_without_dead_queue_deletes(api: Api, clock: FakeClock) -> None:
    await api.create("q", max_attempts=2)
    await api.produce_n("q", 1)
    for _ in range(2):
        await api.lease("q")
        clock.advance(61)
        await wait_for_items(api, "q", lambda items: not items or not items[0].get("is_leased"))
    assert await api.items("q") == []


async def test_final_attempt_is_not_dead_lettered_early(api: Api, clock: FakeClock) -> None:
    # Reference bug: an item on its last, still-valid lease was dead-lettered whenever the lifecycle ran.
    await api.create("q", max_attempts=1)
    await api.produce_n("q", 2)
    await api.lease("q")
    clock.advance(30)
    second = (await api.lease("q", client_id="other"))["items"][0]
    clock.advance(31)  # the first lease expires and the lifecycle runs; the second lease is still valid
    await wait_for_items(api, "q", lambda items: len(items) == 1)
    await api.complete("q", 0, [second["id"]])


async def test_expire_timeout_deletes_unleased_items(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="5s", expire_timeout="10s")
    await api.produce_n("q", 1)
    clock.advance(15)
    await wait_for_items(api, "q", lambda items: items == [])


async def test_expired_item_with_dead_queue_leaves_the_source(api: Api, clock: FakeClock) -> None:
    # Reference bug: an expired, never-leased item was copied to the dead queue but stayed in the source.
    await api.create("dead")
    await api.create("q", lease_timeout="5s", expire_timeout="10s", dead_queue="dead")
    await api.produce_n("q", 3)
    clock.advance(15)
    await wait_for_items(api, "dead", lambda items: len(items) == 3)
    assert await api.items("q") == []


async def test_item_can_expire_while_leased(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="10s", expire_timeout="10s")
    await api.produce_n("q", 1)
    await api.lease("q")
    clock.advance(11)
    await wait_for_items(api, "q", lambda items: items == [])


async def test_scheduled_then_dead_lettered(api: Api, clock: FakeClock) -> None:
    from .test_queue import ts

    await api.create("dead")
    await api.create("q", max_attempts=1, dead_queue="dead")
    await api.produce("q", [{"utf8": "x", "enqueue_at": ts(clock, 30)}])
    clock.advance(31)
    await wait_for_items(api, "q", lambda items: len(items) == 1)
    await api.lease("q")
    clock.advance(61)
    [dead] = await wait_for_items(api, "dead", lambda items: len(items) == 1)
    assert dead["source_id"]


async def test_dead_queue_import_is_idempotent_by_source_id(api: Api) -> None:
    await api.create("q")
    body = {"queue_name": "q", "partition": 0, "items": [{"source_id": "s1", "payload": "eA=="}]}
    first = await api.post("/v1/storage/items.import", body)
    again = await api.post("/v1/storage/items.import", body)
    assert first["items"][0]["id"] and "id" not in again["items"][0]
    [stored] = await api.items("q")
    assert stored["source_id"] == "s1"
    # Completing the item frees its source_id for a new import (bug_validation_test.go).
    leased = await api.lease("q")
    await api.complete("q", 0, [leased["items"][0]["id"]])
    assert (await api.post("/v1/storage/items.import", body))["items"][0]["id"]


async def test_lease_waits_for_lifecycle_requeue(api: Api, clock: FakeClock) -> None:
    # Reference gap: items re-queued by the lifecycle did not wake parked leases.
    import asyncio

    await api.create("q", lease_timeout="10s")
    await api.produce_n("q", 1)
    await api.lease("q")
    waiting = asyncio.ensure_future(api.lease("q", client_id="waiter", timeout="1m"))

    async def parked() -> bool:
        return await api.lease_waiting("q") == 1

    await eventually(parked)
    clock.advance(11)
    got = await asyncio.wait_for(waiting, 5)
    assert got["items"][0]["attempts"] == 2


async def test_a_schedule_longer_than_the_expire_timeout_is_leased_when_due(
    api: Api, clock: FakeClock
) -> None:
    """An item's expire_timeout counts from when it becomes leasable (docs/semantics.md §5.3, ADR 0033;
    the reference counts from the produce, docs/compatibility.md): a produce scheduled twice the timeout
    ahead is not dropped when it comes due, but waits the whole timeout for a consumer."""
    from .test_queue import parse_ts, ts

    await api.create("dead")
    await api.create("q", lease_timeout="5s", expire_timeout="10s", dead_queue="dead")
    enqueue_at = ts(clock, 20)
    await api.produce("q", [{"utf8": "later", "enqueue_at": enqueue_at}])
    [scheduled] = await api.scheduled("q")
    assert parse_ts(scheduled["expire_deadline"]) == parse_ts(enqueue_at) + timedelta(seconds=10)
    clock.advance(25)  # due 5 s ago: past its produce's timeout, within the timeout since it came due
    await wait_for_items(api, "q", lambda items: len(items) == 1)
    [item] = (await api.lease("q"))["items"]
    assert item["bytes"] == base64.b64encode(b"later").decode()
    await api.complete("q", 0, [item["id"]])
    assert await api.items("dead") == []


async def test_a_retry_later_than_the_expire_deadline_is_leased_when_due(api: Api, clock: FakeClock) -> None:
    """A retry's back-off beyond the item's expire deadline extends it to retry_at + expire_timeout
    (docs/semantics.md §4.4, ADR 0033; the reference never changes it on retry)."""
    from .test_queue import parse_ts, ts

    await api.create("dead")
    await api.create("q", lease_timeout="5s", expire_timeout="10s", dead_queue="dead")
    await api.produce_n("q", 1)
    first = (await api.lease("q"))["items"][0]
    retry_at = ts(clock, 30)
    await api.retry("q", 0, [{"id": first["id"], "retry_at": retry_at}])
    [scheduled] = await api.scheduled("q")
    assert parse_ts(scheduled["expire_deadline"]) == parse_ts(retry_at) + timedelta(seconds=10)
    clock.advance(35)
    await wait_for_items(api, "q", lambda items: len(items) == 1)
    [again] = (await api.lease("q"))["items"]
    assert again["attempts"] == 2
    await api.complete("q", 0, [again["id"]])
    assert await api.items("dead") == []
