"""Produce de-duplication over real HTTP (extensions.md: dedup_id and the queue's dedup_window)."""

from __future__ import annotations

import asyncio
from typing import Any

from querator import wire
from querator.clock import FakeClock
from querator.wire import messages as m
from tests.conftest import Api

EXTENSIONS = {"X-Querator-Extensions": "1"}
LEVEL_2 = {"X-Querator-Extensions": "2"}


async def info(api: Api, queue: str) -> dict[str, Any]:
    """queues.info as a client that knows the extensions sees it."""
    return await api.post("/v1/queues.info", {"queue_name": queue}, EXTENSIONS)


async def total(api: Api, queue: str) -> int:
    partitions = (await api.stats(queue))["logicalQueues"][0]["partitions"]
    return sum(int(p.get("total", 0)) for p in partitions)


async def payloads(api: Api, queue: str, partitions: int = 1) -> list[str]:
    found = []
    for n in range(partitions):
        found.extend(i["payload"] for i in await api.items(queue, n))
    return found


async def test_a_repeated_dedup_id_is_accepted_but_stored_once(api: Api) -> None:
    await api.create("q")
    await api.produce("q", [{"utf8": "a", "dedup_id": "order-1"}, {"utf8": "b"}])
    await api.produce(
        "q", [{"utf8": "a-retried", "dedup_id": "order-1"}, {"utf8": "c", "dedup_id": "order-2"}]
    )
    await api.produce("q", [{"utf8": "d", "dedup_id": "order-3"}, {"utf8": "d-twice", "dedup_id": "order-3"}])
    leased = (await api.lease("q", batch_size=10))["items"]
    assert [i["bytes"] for i in leased] == ["YQ==", "Yg==", "Yw==", "ZA=="]  # a, b, c, d


async def test_the_window_holds_after_completion_and_ends(api: Api, clock: FakeClock) -> None:
    await api.create("q", dedup_window="2m")
    assert (await info(api, "q"))["dedup_window"] == "2m0s"
    await api.produce("q", [{"utf8": "first", "dedup_id": "x"}])
    item = (await api.lease("q"))["items"][0]
    await api.complete("q", 0, [item["id"]])
    clock.advance(119)
    await api.produce("q", [{"utf8": "too soon", "dedup_id": "x"}])
    assert await total(api, "q") == 0
    clock.advance(1)
    await api.produce("q", [{"utf8": "next window", "dedup_id": "x"}])
    assert await total(api, "q") == 1


async def test_dedup_holds_across_partitions(api: Api) -> None:
    await api.create("q", requested_partitions=4)
    # Concurrent produces spread over the partitions (each goes to the emptiest one).
    await asyncio.gather(*(api.produce("q", [{"utf8": f"copy-{n}", "dedup_id": "same"}]) for n in range(8)))
    await asyncio.gather(*(api.produce("q", [{"utf8": f"other-{n}"}]) for n in range(3)))
    assert await total(api, "q") == 4
    stored = await payloads(api, "q", 4)
    assert sum(1 for p in stored if p.startswith("Y29weS")) == 1  # base64 of "copy-"


async def test_dedup_is_per_queue(api: Api) -> None:
    await api.create("a")
    await api.create("b")
    await api.produce("a", [{"utf8": "x", "dedup_id": "same"}])
    await api.produce("b", [{"utf8": "x", "dedup_id": "same"}])
    assert (await total(api, "a"), await total(api, "b")) == (1, 1)


async def test_a_zero_window_disables_dedup(api: Api) -> None:
    await api.create("q", dedup_window="0s")
    assert (await info(api, "q"))["dedup_window"] == "0s"
    await api.produce("q", [{"utf8": "a", "dedup_id": "x"}, {"utf8": "b", "dedup_id": "x"}])
    assert await total(api, "q") == 2


async def test_the_default_window_is_five_minutes(api: Api, clock: FakeClock) -> None:
    await api.create("q")
    assert (await info(api, "q"))["dedup_window"] == "5m0s"
    await api.produce("q", [{"utf8": "a", "dedup_id": "x"}])
    clock.advance(299)
    await api.produce("q", [{"utf8": "a", "dedup_id": "x"}])
    assert await total(api, "q") == 1
    clock.advance(1)
    await api.produce("q", [{"utf8": "a", "dedup_id": "x"}])
    assert await total(api, "q") == 2


async def test_update_changes_or_keeps_the_window(api: Api) -> None:
    await api.create("q", dedup_window="1m")
    body: dict[str, Any] = {"queue_name": "q", "lease_timeout": "1m", "expire_timeout": "24h"}
    await api.post("/v1/queues.update", body)
    assert (await info(api, "q"))["dedup_window"] == "1m0s"
    await api.post("/v1/queues.update", {**body, "dedup_window": "10m"})
    assert (await info(api, "q"))["dedup_window"] == "10m0s"


async def test_reference_clients_never_see_the_extension_field(api: Api) -> None:
    await api.create("q", dedup_window="10m")
    await api.create("r", dedup_window="0s")
    assert "dedup_window" not in await api.post("/v1/queues.info", {"queue_name": "q"})
    listed = (await api.post("/v1/queues.list", {}))["items"]
    assert [sorted(i) for i in listed] == [sorted(i) for i in listed if "dedup_window" not in i]
    assert [i["dedup_window"] for i in (await api.post("/v1/queues.list", {}, EXTENSIONS))["items"]] == [
        "10m0s",
        "0s",
    ]


async def test_validation(api: Api) -> None:
    await api.create("q")
    e = await api.error(
        "/v1/queue.produce",
        {"queue_name": "q", "request_timeout": "1m", "items": [{"utf8": "a", "dedup_id": "x" * 129}]},
    )
    assert (e.status, e.message) == (400, "dedup id is invalid; cannot be greater than '128' characters")
    await api.produce("q", [{"utf8": "a", "dedup_id": "x" * 128}])
    base = {"queue_name": "r", "lease_timeout": "1m", "expire_timeout": "1h", "requested_partitions": 1}
    for window, message in [
        ("-1s", "dedup window is invalid; cannot be negative but '-1s' was given"),
        ("soon", "dedup window is invalid; "),
        ("169h", "dedup window is invalid; maximum is '168h0m0s' but '169h0m0s' was given"),
    ]:
        e = await api.error("/v1/queues.create", {**base, "dedup_window": window})
        assert e.status == 400 and e.message.startswith(message), e.message


async def test_produce_replies_name_each_items_id_to_extension_clients(api: Api) -> None:
    """docs/extensions.md, "Produced ids": "" for a duplicate; clients below extensions level 2 (and the
    reference's) see {"code":200}."""
    await api.create("q")
    body = {
        "queue_name": "q",
        "request_timeout": "1m",
        "items": [{"utf8": "a", "dedup_id": "x"}, {"utf8": "b"}, {"utf8": "a again", "dedup_id": "x"}],
    }
    reply = await api.post("/v1/queue.produce", body, LEVEL_2)
    assert reply["code"] == 200 and len(reply["ids"]) == 3 and reply["ids"][2] == ""
    leased = (await api.lease("q", batch_size=10))["items"]
    assert [i["id"] for i in leased] == reply["ids"][:2]
    # Without the header: the reference's exact reply (its Go client rejects unknown JSON fields); and
    # clients of level 1 decoded a produce's reply as a Reply, which rejects them too.
    one = {**body, "items": [{"utf8": "c"}]}
    assert await api.post("/v1/queue.produce", one) == {"code": 200}
    assert await api.post("/v1/queue.produce", one, EXTENSIONS) == {"code": 200}
    # Protobuf decoders skip unknown fields: the ids are always there.
    protobuf = {"Content-Type": wire.PROTOBUF, "Accept": wire.PROTOBUF}
    items = [m.QueueProduceItem(utf8="d")]
    request = m.QueueProduceRequest(queue_name="q", request_timeout="1m", items=items)
    url = api.base + "/v1/queue.produce"
    async with api.session.post(url, data=wire.encode_protobuf(request), headers=protobuf) as resp:
        assert resp.status == 200
        produced = wire.decode_protobuf(await resp.read(), m.QueueProduceResponse)
    assert produced.code == 200 and len(produced.ids) == 1 and produced.ids[0]
