"""queue.renew over real HTTP (extensions.md: lease renewal)."""

from __future__ import annotations

from typing import Any

from querator.clock import FakeClock
from tests.conftest import Api, eventually

from .test_queue import parse_ts, ts

MINUTE = 60


async def renew(api: Api, queue: str, partition: int, ids: list[str], **kw: Any) -> list[dict[str, Any]]:
    body = {"queue_name": queue, "partition": partition, "ids": ids, "request_timeout": "5s", **kw}
    return list((await api.post("/v1/queue.renew", body)).get("items", []))


async def test_renew_keeps_an_item_leased_across_several_lease_timeouts(api: Api, clock: FakeClock) -> None:
    await api.create("q")  # lease_timeout 1m
    await api.produce_n("q", 2)
    kept = (await api.lease("q", client_id="kept"))["items"][0]
    dropped = (await api.lease("q", client_id="dropped"))["items"][0]
    for _ in range(3):
        clock.advance(MINUTE * 0.75)
        [renewed] = await renew(api, "q", 0, [kept["id"]])
        assert renewed["id"] == kept["id"]
        assert parse_ts(renewed["lease_deadline"]) == parse_ts(ts(clock, MINUTE))

    # The un-renewed lease expired long ago: once the lifecycle has returned it, the renewed one must
    # still be leased under its id.
    async def dropped_returned() -> bool:
        return dropped["id"] not in {i["id"] for i in await api.items("q")}

    await eventually(dropped_returned)
    by_id = {i["id"]: i for i in await api.items("q")}
    assert by_id[kept["id"]]["is_leased"] is True
    assert by_id[kept["id"]]["attempts"] == 1
    assert await api.complete("q", 0, [kept["id"]]) == {"code": 200}
    assert kept["id"] not in {i["id"] for i in await api.items("q")}


async def test_renew_with_lease_timeout_answers_in_request_order(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce_n("q", 3)
    ids = [i["id"] for i in (await api.lease("q", batch_size=3))["items"]]
    renewed = await renew(api, "q", 0, list(reversed(ids)), lease_timeout="10m")
    assert [r["id"] for r in renewed] == list(reversed(ids))
    assert {parse_ts(r["lease_deadline"]) for r in renewed} == {parse_ts(ts(clock, 10 * MINUTE))}
    stored = {i["id"]: parse_ts(i["lease_deadline"]) for i in await api.items("q")}
    assert set(stored.values()) == {parse_ts(ts(clock, 10 * MINUTE))}


async def test_renew_of_an_item_not_leased_is_400(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 2)
    leased = (await api.lease("q"))["items"][0]["id"]
    queued = next(i["id"] for i in await api.items("q") if not i.get("is_leased"))
    e = await api.error(
        "/v1/queue.renew",
        {"queue_name": "q", "partition": 0, "ids": [leased, queued], "request_timeout": "5s"},
    )
    assert e.status == 400
    assert e.message == f"item(s) cannot be renewed; '{queued}' is not marked as leased"


async def test_renewed_items_before_a_bad_id_stay_renewed(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    leased = (await api.lease("q"))["items"][0]["id"]
    e = await api.error(
        "/v1/queue.renew",
        {
            "queue_name": "q",
            "partition": 0,
            "ids": [leased, "bogus"],
            "request_timeout": "5s",
            "lease_timeout": "5m",
        },
    )
    assert e.status == 400 and e.message.startswith("invalid storage id; 'bogus'")
    [item] = await api.items("q")
    assert parse_ts(item["lease_deadline"]) == parse_ts(ts(clock, 5 * MINUTE))


async def test_renew_then_complete_in_one_batch(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 1)
    item_id = (await api.lease("q"))["items"][0]["id"]
    await renew(api, "q", 0, [item_id])
    await api.complete("q", 0, [item_id])
    e = await api.error(
        "/v1/queue.renew", {"queue_name": "q", "partition": 0, "ids": [item_id], "request_timeout": "5s"}
    )
    assert e.message == f"invalid storage id; '{item_id}' does not exist"


async def test_renew_validation(api: Api) -> None:
    await api.create("q", expire_timeout="1h")
    base = {"queue_name": "q", "partition": 0, "ids": ["x"], "request_timeout": "5s"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
        ({"partition": 3}, "partition is invalid; '3' is not a valid partition"),
        ({"ids": []}, "ids is invalid; list of ids cannot be empty"),
        (
            {"ids": ["x"] * 1001},
            "ids is invalid; max_complete_batch_size is 1000 but received more than 1000",
        ),
        (
            {"lease_timeout": "2h"},
            "lease timeout is too long; 2h0m0s cannot be greater than the expire timeout 1h0m0s",
        ),
        ({"lease_timeout": "soon"}, "lease timeout is invalid; "),
        ({"request_timeout": ""}, "request timeout is required; "),
    ]
    for change, message in cases:
        e = await api.error("/v1/queue.renew", {**base, **change})
        assert e.status == 400, change
        assert e.message.startswith(message), (change, e.message)


async def test_a_shorter_renewal_expires_on_time(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="10m")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    await renew(api, "q", 0, [item["id"]], lease_timeout="1s")
    clock.advance(2)

    async def returned() -> bool:
        return item["id"] not in {i["id"] for i in await api.items("q")}

    await eventually(returned)


async def test_an_expired_lease_cannot_be_renewed(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="1m")
    await api.produce_n("q", 1)
    item = (await api.lease("q"))["items"][0]
    # Past the deadline; whether or not the lifecycle has run yet, renewing is too late.
    clock.advance(61)
    e = await api.error(
        "/v1/queue.renew", {"queue_name": "q", "partition": 0, "ids": [item["id"]], "request_timeout": "5s"}
    )
    assert e.status == 400
    assert e.message in (
        f"item(s) cannot be renewed; '{item['id']}' is not marked as leased",
        f"invalid storage id; '{item['id']}' does not exist",
    )
