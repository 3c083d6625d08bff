"""queue.redrive over real HTTP (extensions.md: dead-letter redrive)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any, TypeVar

from querator.errors import StorageError
from querator.storage.base import PartitionTx
from tests.conftest import Api, eventually

T = TypeVar("T")


async def redrive(api: Api, queue: str, target: str, **kw: Any) -> int:
    body = {"queue_name": queue, "target_queue": target, "request_timeout": "1m", **kw}
    return int((await api.post("/v1/queue.redrive", body)).get("moved", 0))


async def dead_letter(api: Api, n: int) -> list[str]:
    """Creates ``work`` with dead queue ``dead`` and sends ``n`` items there; returns their payloads."""
    await api.create("dead")
    await api.create("work", dead_queue="dead", max_attempts=3)
    sent = [f"job-{i:03}" for i in range(n)]
    await api.produce("work", [{"utf8": p, "kind": "k", "reference": "r", "encoding": "e"} for p in sent])
    leased = (await api.lease("work", batch_size=n))["items"]
    await api.retry("work", 0, [{"id": i["id"], "dead": True} for i in leased])
    return sent


class RefusingDeletes:
    """A transaction whose deletes fail."""

    def __init__(self, tx: PartitionTx) -> None:
        self._tx = tx

    def __getattr__(self, name: str) -> Any:
        if name == "delete":
            raise StorageError("disk on fire")
        return getattr(self._tx, name)


def text(items: list[dict[str, Any]]) -> list[str]:
    """Payloads as text, of stored items (``payload``) or leased ones (``bytes``)."""
    return [base64.b64decode(i.get("payload") or i["bytes"]).decode() for i in items]


async def test_redrive_moves_everything_in_fifo_order(api: Api) -> None:
    sent = await dead_letter(api, 5)
    dead_ids = [i["id"] for i in await api.items("dead")]
    assert await redrive(api, "dead", "work") == 5
    assert await api.items("dead") == []
    back = await api.items("work")
    assert text(back) == sent
    for item in back:
        assert (item.get("attempts", 0), item.get("is_leased", False)) == (0, False)
        assert (item["kind"], item["reference"], item["encoding"]) == ("k", "r", "e")
        assert item["max_attempts"] == 3 and item["id"] not in dead_ids
    leased = (await api.lease("work", batch_size=5))["items"]
    assert [i["attempts"] for i in leased] == [1] * 5


async def test_redrive_with_a_limit_moves_the_oldest(api: Api) -> None:
    sent = await dead_letter(api, 5)
    assert await redrive(api, "dead", "work", limit=2) == 2
    assert text(await api.items("work")) == sent[:2]
    assert text(await api.items("dead")) == sent[2:]
    assert await redrive(api, "dead", "work", limit=0) == 3
    assert text(await api.items("work")) == sent


async def test_leased_dead_items_stay(api: Api) -> None:
    sent = await dead_letter(api, 3)
    held = (await api.lease("dead"))["items"][0]["id"]
    assert await redrive(api, "dead", "work") == 2
    [left] = await api.items("dead")
    assert left["id"] == held
    assert text(await api.items("work")) == sent[1:]


async def test_redrive_spreads_over_the_target_partitions(api: Api) -> None:
    await api.create("dead", requested_partitions=2)
    await api.create("target", requested_partitions=4)
    for _ in range(2):
        await api.produce("dead", [{"utf8": f"x{i}"} for i in range(50)])
    assert await redrive(api, "dead", "target") == 100
    counts = [len(await api.items("target", n)) for n in range(4)]
    assert sum(counts) == 100 and all(counts)


async def test_redrive_wakes_a_waiting_consumer(live_api: Api) -> None:
    await live_api.create("dead")
    await live_api.create("work")
    await live_api.produce("dead", [{"utf8": "again"}])
    waiting = asyncio.create_task(live_api.lease("work", timeout="10s"))

    async def parked() -> bool:
        return await live_api.lease_waiting("work") == 1

    await eventually(parked)
    assert await redrive(live_api, "dead", "work") == 1
    assert text((await waiting)["items"]) == ["again"]


async def test_an_interrupted_redrive_run_again_loses_and_duplicates_nothing(api: Api) -> None:
    sent = await dead_letter(api, 4)
    state = (await api.service.manager.get("dead")).logical.partitions[0]
    storage = state.storage

    class FailingDeletes:
        """The copies reach the target, then deleting the originals from the dead queue fails."""

        async def run(self, fn: Callable[[PartitionTx], T]) -> T:
            return await storage.run(lambda tx: fn(RefusingDeletes(tx)))

    state.storage = FailingDeletes()
    e = await api.error(
        "/v1/queue.redrive", {"queue_name": "dead", "target_queue": "work", "request_timeout": "1m"}
    )
    assert e.status == 454
    assert text(await api.items("work")) == sent
    state.storage = storage
    await api.post("/v1/queue.reload", {"queue_name": "dead"})
    assert await redrive(api, "dead", "work") == 4
    assert text(await api.items("work")) == sent
    assert await api.items("dead") == []


async def test_redrive_validation(api: Api) -> None:
    await api.create("dead")
    await api.create("work")
    base = {"queue_name": "dead", "target_queue": "work", "request_timeout": "1m"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"queue_name": "nope"}, "queue does not exist; no such queue named 'nope'"),
        ({"target_queue": ""}, "target queue is invalid; cannot be empty"),
        ({"target_queue": "dead"}, "target queue is invalid; 'dead' is the queue being redriven"),
        ({"target_queue": "gone"}, "queue does not exist; no such queue named 'gone'"),
        ({"limit": -1}, "limit is invalid; cannot be negative, but -1 was requested"),
        ({"request_timeout": ""}, "request timeout is required; "),
    ]
    for change, message in cases:
        e = await api.error("/v1/queue.redrive", {**base, **change})
        assert e.status == 400, change
        assert e.message.startswith(message), (change, e.message)
