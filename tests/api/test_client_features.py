"""The client's conveniences against a real in-process server: empty leases, produce keywords and ids,
Python durations, per-item outcomes of ``leased``, and retries (against a fake server that fails on cue).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from aiohttp import web

from querator.client import AsyncClient, Client, ConnectionFailed, Retries
from querator.errors import LEASE_TIMED_OUT, TRY_AGAIN, RetryRequest
from querator.http import create_app
from querator.service import Service
from querator.storage.memory import MemoryStore
from tests.api.test_client_cli import free_port, start_app

FAST = Retries(attempts=3, first_s=0.01, max_s=0.01)


@pytest.fixture
async def url() -> AsyncIterator[str]:
    service = Service(MemoryStore())
    await service.start()
    runner, base = await start_app(create_app(service))
    yield base
    await service.shutdown()
    await runner.cleanup()


@pytest.fixture(params=[False, True], ids=["json", "protobuf"])
async def client(url: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(url, protobuf=bool(request.param)) as c:
        yield c


async def test_an_empty_lease_is_an_empty_reply(client: AsyncClient) -> None:
    await client.create_queue("q")
    reply = await client.lease("q", request_timeout=timedelta(milliseconds=50))
    assert (reply.queue_name, reply.items) == ("q", [])


async def test_leases_without_a_client_id_do_not_collide(client: AsyncClient) -> None:
    await client.create_queue("q")
    waiting = [asyncio.create_task(client.lease("q", request_timeout=5)) for _ in range(2)]
    await client.produce("q", ["a", "b"])
    replies = await asyncio.gather(*waiting)
    assert sorted(i.bytes for r in replies for i in r.items) == [b"a", b"b"]


async def test_produce_keywords_and_the_ids_it_returns(client: AsyncClient) -> None:
    await client.create_queue("q", lease_timeout=timedelta(seconds=30), expire_timeout=3600)
    ids = await client.produce(
        "q", ["a", b"b"], kind="email", reference="r-1", encoding="text/plain", dedup_id=["a-1", "b-1"]
    )
    assert len(ids) == 2 and all(ids)
    assert await client.produce("q", ["a again"], dedup_id="a-1") == [""]  # seen: not stored again
    later = await client.produce("q", ["later"], delay=timedelta(hours=1))
    at = datetime(2100, 1, 1, tzinfo=UTC)
    await client.produce("q", ["much later"], enqueue_at=at)
    reply = await client.lease("q", 10, request_timeout="1s")
    assert [(i.id, i.kind, i.reference, i.encoding) for i in reply.items] == [
        (ids[0], "email", "r-1", "text/plain"),
        (ids[1], "email", "r-1", "text/plain"),
    ]
    scheduled = (await client.list_scheduled("q", 0)).items
    assert [s.payload for s in scheduled] == [b"later", b"much later"]
    assert scheduled[0].id == later[0]  # its id while scheduled: it gets a new one when it comes due
    assert scheduled[1].enqueue_at == at
    info = await client.queue_info("q")
    assert (info.lease_timeout, info.expire_timeout) == ("30s", "1h0m0s")


async def test_leased_gives_each_item_its_outcome(client: AsyncClient) -> None:
    await client.create_queue("dead")
    await client.create_queue("q", dead_queue="dead")
    await client.produce("q", ["done", "later", "bad", "left"])
    async with client.leased("q", 4, request_timeout="1s") as lease:
        done, later, bad, _ = lease.items
        lease.complete(done)
        lease.retry(later, at=timedelta(hours=1))
        lease.dead(bad.id)
    assert [i.payload for i in (await client.list_scheduled("q", 0)).items] == [b"later"]
    assert [i.payload for i in (await client.list_items("dead", 0)).items] == [b"bad"]
    assert (await client.list_items("q", 0)).items == []  # "done" and "left" completed

    await client.produce("q", ["kept", "given back"])
    with pytest.raises(RuntimeError):
        async with client.leased("q", 2, request_timeout="1s") as lease:
            lease.complete(lease.items[0])
            raise RuntimeError("the body failed")
    # The item marked complete was; the other went back to the queue, leasable again.
    again = await client.lease("q", 10, request_timeout="1s")
    assert [i.bytes for i in again.items] == [b"given back"]
    with pytest.raises(ValueError, match="is not an item of this lease"):
        async with client.leased("q", 1, request_timeout="10ms") as lease:
            lease.complete("2jHkrc1Wz8lrJx9yTqs8ZXl7Ebz")


async def test_an_empty_leased_block_settles_nothing(client: AsyncClient) -> None:
    await client.create_queue("q")
    async with client.leased("q", 5, request_timeout="10ms") as lease:
        assert lease.items == []


async def test_the_blocking_client_marks_outcomes_too(url: str) -> None:
    def scenario() -> None:
        with Client(url) as c:
            c.create_queue("q")
            c.produce("q", ["x", "y"])
            with c.leased("q", 2, request_timeout=1.0) as lease:
                lease.retry(lease.items[1])
            assert [i.bytes for i in c.lease("q", 5, request_timeout=1).items] == [b"y"]

    await asyncio.to_thread(scenario)


# -- retries, against a server that fails on cue -------------------------------------------------------------


class Flaky:
    """Answers each route's first ``failures`` requests with ``error``, then 200 with ``ok``."""

    def __init__(self, failures: int, error: tuple[int, str], ok: bytes = b"{}") -> None:
        self.failures = failures
        self.error = error
        self.ok = ok
        self.calls: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        n = self.calls[request.path] = self.calls.get(request.path, 0) + 1
        if n <= self.failures:
            code, message = self.error
            body = msgspec.json.encode({"code": code, "message": message})
            return web.Response(status=code, body=body, content_type="application/json")
        return web.Response(body=self.ok, content_type="application/json")


@pytest.fixture
async def runners() -> AsyncIterator[list[web.AppRunner]]:
    started: list[web.AppRunner] = []
    yield started
    for runner in started:
        await runner.cleanup()


OVERLOADED = (454, "queue is overloaded; try again")
UNKNOWN = (454, f"{TRY_AGAIN}; outcome unknown")


async def serve(runners: list[web.AppRunner], f: Flaky) -> str:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", f.handle)
    runner, base = await start_app(app)
    runners.append(runner)
    return base


async def test_a_failure_that_says_nothing_was_done_is_tried_again(runners: list[web.AppRunner]) -> None:
    f = Flaky(2, OVERLOADED)
    async with AsyncClient(await serve(runners, f), retries=FAST) as client:
        await client.complete("q", 0, ["id"])
    assert f.calls == {"/v1/queue.complete": 3}


async def test_retries_give_up_after_their_attempts(runners: list[web.AppRunner]) -> None:
    f = Flaky(5, OVERLOADED)
    async with AsyncClient(await serve(runners, f), retries=FAST) as client:
        with pytest.raises(RetryRequest, match="overloaded"):
            await client.stats("q")
    assert f.calls == {"/v1/queue.stats": 3}


async def test_an_unknown_outcome_is_tried_again_only_where_repeating_is_harmless(
    runners: list[web.AppRunner],
) -> None:
    f = Flaky(2, UNKNOWN)
    async with AsyncClient(await serve(runners, f), retries=FAST) as client:
        with pytest.raises(RetryRequest):
            await client.complete("q", 0, ["id"])  # again could fail for ids the first one completed
        with pytest.raises(RetryRequest):
            await client.produce("q", ["no dedup id"])  # again could store it twice
        await client.produce("p", ["deduplicated"], dedup_id="d-1")  # stored once whatever happens
        await client.stats("q")
    assert f.calls == {"/v1/queue.complete": 1, "/v1/queue.produce": 3, "/v1/queue.stats": 3}


async def test_the_empty_lease_message_is_not_retried_and_others_are(runners: list[web.AppRunner]) -> None:
    timed_out = Flaky(10, (454, LEASE_TIMED_OUT))
    async with AsyncClient(await serve(runners, timed_out), retries=FAST) as client:
        assert (await client.lease("q", request_timeout="1s")).items == []
    assert timed_out.calls == {"/v1/queue.lease": 1}
    overloaded = Flaky(10, OVERLOADED)
    async with AsyncClient(await serve(runners, overloaded), retries=FAST) as client:
        with pytest.raises(RetryRequest, match="overloaded"):  # overload is not "no items": back off
            await client.lease("q", request_timeout="1s")


async def test_no_retries_when_turned_off(runners: list[web.AppRunner]) -> None:
    f = Flaky(1, OVERLOADED)
    async with AsyncClient(await serve(runners, f), retries=None) as client:
        with pytest.raises(RetryRequest):
            await client.stats("q")
    assert f.calls == {"/v1/queue.stats": 1}


async def test_a_refused_connection_was_not_sent() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", retries=FAST) as client:
        with pytest.raises(ConnectionFailed) as e:
            await client.complete("q", 0, ["id"])  # not idempotent, but never sent: tried again
    assert e.value.sent is False and isinstance(e.value, ConnectionError)
