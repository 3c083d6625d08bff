"""``workflows.update`` over real HTTP (docs/durable.md, "Updates"; docs/adr/0060): the test plays the
worker by hand (claim, append), so what the route records and when it answers shows in the replies;
tests/unit/durable/test_updates.py runs the app's own worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from querator.clock import FakeClock
from tests.conftest import Api, ApiError, eventually

from .test_workflows import activations, append, b64, claim, start


def update(workflow_id: str = "wf-1", **kw: Any) -> dict[str, Any]:
    return {
        "workflow_id": workflow_id,
        "name": "add",
        "payload": b64(b'["apple"]'),
        "update_id": "u-1",
        "request_timeout": "10s",
        **kw,
    }


def taken(seq: int, value: bytes = b"1", state: str = "done", error: str = "") -> list[dict[str, Any]]:
    """What a turn appends when it takes an update: the update, then its handler's answer."""
    answer = {"seq": seq + 1, "kind": "update_result", "name": "add", "state": state, "value": b64(value)}
    return [{"seq": seq, "kind": "update", "name": "add", "state": "done"}, answer | {"error": error}]


async def waiting_on(api: Api, workflow_id: str) -> bool:
    return workflow_id in api.service.workflows._updates._waiters


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def test_an_update_is_kept_wakes_the_workflow_and_is_answered_by_the_turn_that_takes_it(
    durable: Api,
) -> None:
    await start(durable)
    await activations(durable)
    answered = asyncio.create_task(durable.post("/v1/workflows.update", update()))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    assert [a["reference"] for a in await activations(durable)] == ["wf-1"]  # woken
    fence = (await claim(durable))["workflow"]["fence"]
    claimed = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [(u["id"], u["name"], u.get("taken_by", 0)) for u in claimed["updates"]] == [("u-1", "add", 0)]
    assert not answered.done()
    await append(durable, fence, entries=taken(1, b"3"), then="suspend")
    reply = await answered  # woken by the append on this node, before its timeout
    assert reply == {"update_id": "u-1", "seq": 2, "state": "done", "value": b64(b"3")}
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [(e["seq"], e["kind"], e.get("value")) for e in info["entries"]] == [
        (1, "update", b64(b'["apple"]')),  # the caller's arguments, for a replay to apply again
        (2, "update_result", b64(b"3")),
    ]
    # Asked again with its id (a lost reply, a timeout): the same answer, nothing recorded again.
    assert await durable.post("/v1/workflows.update", update()) == reply
    assert await activations(durable) == []  # the workflow is not woken again for it
    assert len((await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"}))["updates"]) == 1


async def test_a_handlers_error_is_the_answer(durable: Api) -> None:
    await start(durable)
    fence = (await claim(durable))["workflow"]["fence"]
    answered = asyncio.create_task(durable.post("/v1/workflows.update", update()))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    await append(durable, fence, entries=taken(1, b"", "error", "ValueError: no"), then="suspend")
    assert await answered == {"update_id": "u-1", "seq": 2, "state": "error", "error": "ValueError: no"}


async def test_an_update_not_answered_in_time_is_pending_and_stays_recorded(
    durable: Api, clock: FakeClock
) -> None:
    await start(durable)
    answered = asyncio.create_task(durable.post("/v1/workflows.update", update()))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    clock.advance(10)
    assert await answered == {"update_id": "u-1", "state": "pending"}
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [u["id"] for u in info["updates"]] == ["u-1"]
    assert not await waiting_on(durable, "wf-1")  # nothing of the wait is left


async def test_a_workflow_that_ends_without_taking_the_update_answers_so(durable: Api) -> None:
    await start(durable)
    fence = (await claim(durable))["workflow"]["fence"]
    answered = asyncio.create_task(durable.post("/v1/workflows.update", update()))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    await append(durable, fence, then="complete", result=b64(b"1"))
    ended = "workflow ended before the update was answered; 'wf-1' is completed"
    with pytest.raises(ApiError) as refused:
        await answered  # woken by the end
    assert (refused.value.status, refused.value.message) == (400, ended)
    error = await durable.error("/v1/workflows.update", update())  # asked again
    assert (error.code, error.message) == (400, ended)
    other = await durable.error("/v1/workflows.update", update(update_id="u-2"))
    assert (other.code, other.message) == (400, "workflow is finished; 'wf-1' is completed")


async def test_bad_updates_are_refused_before_anything_is_recorded_or_waited_for(durable: Api) -> None:
    await start(durable)
    for body, message in [
        (update(update_id=""), "update id is required; the caller makes it"),
        (update(update_id="u" * 129), "update id is invalid; cannot be greater than '128' characters"),
        (update(update_id="a\x00b"), "update id is invalid"),
        (update(name=""), "update name is invalid; cannot be empty"),
        (update(request_timeout=""), "request timeout is required"),
        (update(request_timeout="16m"), "request timeout is invalid; maximum timeout is '15m'"),
        (update(workflow_id=""), "workflow id is invalid; cannot be empty"),
        (update(workflow_id="nope"), "workflow does not exist; no workflow 'nope'"),
    ]:
        error = await durable.error("/v1/workflows.update", body)
        assert (error.code, error.message.startswith(message)) == (400, True), (body, error.message)
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert info.get("updates", []) == []
    assert not durable.service.workflows._updates._waiters


async def test_no_one_but_the_claimant_records_an_update_or_its_answer(durable: Api) -> None:
    """A result recorded from outside the claim (fence 0) cannot answer for the workflow."""
    await start(durable)
    for entries in (taken(1)[:1], taken(1)[1:]):
        error = await durable.error(
            "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 0, "entries": entries}
        )
        kind = entries[0]["kind"]
        assert error.message == f"entries is invalid; only a claim's turn records {kind} entries"


async def test_an_update_answered_before_a_continue_as_new_is_refused_not_left_pending(
    durable: Api,
) -> None:
    """A continue-as-new drops the run's journal (docs/adr/0059), and with it the answers of the updates
    the run took: asked for, they are refused at once rather than pending at every call."""
    await start(durable)
    fence = (await claim(durable))["workflow"]["fence"]
    answered = asyncio.create_task(durable.post("/v1/workflows.update", update()))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    await append(durable, fence, entries=taken(1, b"3"), then="suspend")
    assert (await answered)["state"] == "done"
    fence = (await claim(durable))["workflow"]["fence"]
    second = asyncio.create_task(durable.post("/v1/workflows.update", update(update_id="u-2")))
    await eventually(lambda: waiting_on(durable, "wf-1"))
    # Taken and answered in the turn that continues: the answer is not kept for the new run.
    await append(durable, fence, entries=taken(3, b"4"), then="continue_as_new", result=b64(b"[]"))
    with pytest.raises(ApiError) as refused:
        await second
    assert (refused.value.status, refused.value.message) == (
        400,
        "update answer is gone; 'wf-1' continued as new after answering 'u-2'",
    )
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [(u["id"], u.get("payload", "")) for u in info["updates"]] == [("u-1", ""), ("u-2", "")]
    error = await durable.error("/v1/workflows.update", update())  # asked again
    gone = "update answer is gone; 'wf-1' continued as new after answering 'u-1'"
    assert (error.code, error.message) == (400, gone)
