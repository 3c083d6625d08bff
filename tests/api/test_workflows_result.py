"""``workflows.result`` calls waiting together (docs/durable.md, "Waiting for a result"): the calls of one
workflow on one node share one read per poll interval and one converted reply, and a node holds a
bounded number of them (issue 42: each call re-read the whole record every second and held it, so 150
calls on an 8 MiB workflow took 1.1 GB)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from msgspec.structs import replace

from querator.clock import FakeClock
from querator.errors import StorageError
from querator.service import _result_waits
from querator.wire.workflows import COMPLETED
from tests.conftest import Api, ApiError, eventually

from .test_workflows import append, claim, start

WAITERS = 50
POLL_S = _result_waits.RESULT_POLL_US / 1_000_000


class Reads:
    """Counts the store's reads of one workflow's record (after each read, so a poll that is counted
    has already set its next wake-up)."""

    def __init__(self, api: Api, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
        rows = api.service.workflows._rows
        self.get = rows.get_workflow
        self.count = 0

        async def counted(workflow_id: str) -> Any:
            wf = await self.get(workflow_id)
            self.count += workflow_id == key
            return wf

        monkeypatch.setattr(rows, "get_workflow", counted)

    async def reached(self, count: int) -> None:
        async def check() -> bool:
            return self.count >= count

        await eventually(check)


def waits(api: Api) -> dict[str, Any]:
    return api.service.workflows._results._watches


def wait_for(api: Api, workflow_id: str, n: int, timeout: str = "10m") -> list[asyncio.Task[dict[str, Any]]]:
    body = {"workflow_id": workflow_id, "request_timeout": timeout}
    return [asyncio.create_task(api.post("/v1/workflows.result", body)) for _ in range(n)]


async def parked(api: Api, workflow_id: str, n: int) -> None:
    async def check() -> bool:
        watch = waits(api).get(workflow_id)
        return watch is not None and watch.waiters == n

    await eventually(check)


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def test_waiters_share_one_read_per_poll_and_see_another_nodes_finish(
    durable: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 calls wait while the workflow runs: one read per poll interval, not one per call. Another
    node's finish (written behind this node's back) is seen by that one poll and answers them all."""
    await start(durable, "wf")
    reads = Reads(durable, monkeypatch, "wf")
    waiting = wait_for(durable, "wf", WAITERS)
    await parked(durable, "wf", WAITERS)
    await reads.reached(1)  # the watch's first read, which every arrival shared
    polls = 3
    for poll in range(1, polls + 1):
        clock.advance(POLL_S)
        await reads.reached(1 + poll)
    # As another node would finish it: straight into the store, so only the poll can see it.
    wf = await reads.get("wf")
    assert wf is not None
    done = replace(wf, status=COMPLETED, result=b"7", finished_at=clock.now(), version=wf.version + 1)
    assert await durable.service.workflows._rows.put_workflow(done, wf.version)
    clock.advance(POLL_S)
    results = await asyncio.gather(*waiting)
    assert {(r["status"], base64.b64decode(r["result"])) for r in results} == {(COMPLETED, b"7")}
    assert reads.count == 1 + polls + 1  # was one per call per poll: 50 times as many
    assert waits(durable) == {}


async def test_a_finish_on_this_node_answers_every_waiter_without_a_read(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start(durable, "wf")
    await claim(durable, "wf")
    reads = Reads(durable, monkeypatch, "wf")
    waiting = wait_for(durable, "wf", WAITERS)
    await parked(durable, "wf", WAITERS)
    await reads.reached(1)
    await append(durable, 1, "wf", then="complete", result=base64.b64encode(b"8").decode())
    results = await asyncio.gather(*waiting)
    assert {(r["status"], base64.b64decode(r["result"])) for r in results} == {(COMPLETED, b"8")}
    # The watch's first read only: the append wrote on the head this node's claim wrote, reading none
    # (docs/adr/0046), and the finished record it wrote is every call's reply.
    assert reads.count == 1
    assert waits(durable) == {}


async def test_waiters_whose_deadline_passes_together_share_one_read(
    durable: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start(durable, "wf")
    reads = Reads(durable, monkeypatch, "wf")
    waiting = wait_for(durable, "wf", WAITERS, timeout="10s")
    await parked(durable, "wf", WAITERS)
    await reads.reached(1)
    clock.advance(10)
    results = await asyncio.gather(*waiting)
    assert {r["status"] for r in results} == {"running"}
    # The watch's first read, its next poll's (if it read before the last call left) and one shared
    # read of the workflow as it is at the deadline.
    assert reads.count <= 3
    assert waits(durable) == {}


async def test_a_node_refuses_result_calls_beyond_its_bound(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond MAX_RESULT_WAITS calls waiting on a node (of any workflows), a call gets 454 at once: its
    client backs off and tries again, instead of the node's memory growing with the callers."""
    monkeypatch.setattr(_result_waits, "MAX_RESULT_WAITS", 3)
    for workflow_id in ("a", "b", "c"):
        await start(durable, workflow_id)
    waiting_a = wait_for(durable, "a", 2)
    [waiting_b] = wait_for(durable, "b", 1)
    await parked(durable, "a", 2)
    await parked(durable, "b", 1)
    body = {"workflow_id": "c", "request_timeout": "1s"}
    refused = await asyncio.wait_for(durable.error("/v1/workflows.result", body), 10)  # not parked
    assert (refused.status, refused.message) == (
        454,
        "workflow results are overloaded; 3 workflows.result calls wait on this node, try again later",
    )
    await claim(durable, "b")
    await append(durable, 1, "b", then="complete")
    assert (await waiting_b)["status"] == COMPLETED
    # A place is free again.
    await claim(durable, "c")
    [waiting_c] = wait_for(durable, "c", 1)
    await parked(durable, "c", 1)
    await append(durable, 1, "c", then="complete")
    assert (await waiting_c)["status"] == COMPLETED
    for task in waiting_a:
        task.cancel()


async def test_a_failed_poll_answers_every_waiter_with_a_454(
    durable: Api, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared poll's storage failure is each call's, as its own read's was: a 454 to try again."""
    await start(durable, "wf")
    reads = Reads(durable, monkeypatch, "wf")
    waiting = wait_for(durable, "wf", 3)
    await parked(durable, "wf", 3)
    await reads.reached(1)

    async def failing(workflow_id: str) -> Any:
        raise StorageError("disk on fire")

    monkeypatch.setattr(durable.service.workflows._rows, "get_workflow", failing)
    clock.advance(POLL_S)
    for outcome in await asyncio.gather(*waiting, return_exceptions=True):
        assert isinstance(outcome, ApiError) and outcome.status == 454, outcome
    assert waits(durable) == {}
