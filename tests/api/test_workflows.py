"""The workflow routes over real HTTP (docs/durable.md): what a worker and a caller see.

These tests play the worker by hand (lease the activation, claim, append), so each rule of the journal
shows in the replies; tests/integration/test_durable.py runs real worker processes.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import datetime, timedelta
from typing import Any

import pytest

from querator.clock import FakeClock
from querator.durable._app import QUEUE_PARTITIONS
from querator.service._validation import MAX_APPEND_ENTRIES
from querator.service._workflows import Workflows
from querator.storage.journal import INFO_ENTRIES
from querator.storage.workflows import encode_workflow
from querator.tenancy import AS_SERVER
from querator.wire import messages as m
from tests.conftest import Api, eventually

SECOND = 1_000_000
ACTIVATION = "querator.durable.run"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def start(api: Api, workflow_id: str = "wf-1", **kw: Any) -> dict[str, Any]:
    body = {
        "workflow_id": workflow_id,
        "name": "checkout",
        "queue_name": "durable",
        "input": b64(b"[1]"),
        **kw,
    }
    return await api.post("/v1/workflows.start", body)


async def activations(api: Api) -> list[dict[str, Any]]:
    """The activation items waiting in the queue (not scheduled), taken out of it."""
    listed = await api.post("/v1/storage/items.list", {"queue_name": "durable", "partition": 0})
    items = list(listed.get("items", []))
    if items:
        body = {"queue_name": "durable", "partition": 0, "ids": [i["id"] for i in items]}
        await api.post("/v1/storage/items.delete", body)
    return items


async def claim(api: Api, workflow_id: str = "wf-1") -> dict[str, Any]:
    return await api.post("/v1/workflows.claim", {"workflow_id": workflow_id, "claim_timeout": "30s"})


async def append(api: Api, fence: int, workflow_id: str = "wf-1", **kw: Any) -> dict[str, Any]:
    return await api.post("/v1/workflows.append", {"workflow_id": workflow_id, "fence": fence, **kw})


def step(seq: int, value: bytes = b'"ok"', **kw: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": "step", "name": f"s{seq}", "state": "done", "value": b64(value), **kw}


async def _has_waiter(api: Api, workflow_id: str) -> bool:
    return workflow_id in api.service.workflows._results._watches


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def test_start_stores_the_workflow_and_activates_it(durable: Api) -> None:
    """Repeated starts of a workflow no claim took yet wake it once more, together (docs/adr/0072): the
    start that created it produced its first activation without a dedup id."""
    first = await start(durable)
    assert first["created"] is True
    assert first["workflow"]["status"] == "running"
    again = await start(durable, input=b64(b"[2]"))
    assert "created" not in again  # false: omitted, as protojson does
    assert again["workflow"]["input"] == b64(b"[1]")  # the first start's, unchanged
    await start(durable)
    activation, woken = await activations(durable)  # the third start's produce was a duplicate
    for item in (activation, woken):
        assert (item["kind"], item["reference"]) == (ACTIVATION, "wf-1")
        assert base64.b64decode(item["payload"]) == b'{"args":["wf-1"]}'


async def test_starting_an_existing_id_of_another_workflow_is_a_conflict(durable: Api) -> None:
    """It returned the other workflow's run as if it were the caller's (issue 45, issue 46)."""
    await start(durable)
    await durable.create("other")
    for changed, shown in (
        ({"name": "refund"}, "'refund' on 'durable'"),
        ({"queue_name": "other"}, "on 'other'"),
    ):
        body = {"workflow_id": "wf-1", "name": "checkout", "queue_name": "durable", "input": "", **changed}
        error = await durable.error("/v1/workflows.start", body)
        assert error.status == 409
        assert error.message.startswith(
            "workflow exists already; the id is a run of 'checkout' on queue 'durable', not of"
        )
        assert shown in error.message
    assert len(await activations(durable)) == 1


async def test_start_refuses_a_missing_queue_and_bad_ids(api: Api) -> None:
    error = await api.error(
        "/v1/workflows.start", {"workflow_id": "w", "name": "n", "queue_name": "nope", "input": ""}
    )
    assert error.message == "queue does not exist; no such queue named 'nope'"
    await api.create("durable")
    for body, message in [
        ({"workflow_id": "", "name": "n"}, "workflow id is invalid; cannot be empty"),
        ({"workflow_id": "w" * 257, "name": "n"}, "workflow id is invalid; cannot be greater than '256'"),
        ({"workflow_id": "a\x00b", "name": "n"}, "workflow id is invalid; cannot contain control"),
        ({"workflow_id": "w", "name": ""}, "workflow name is invalid; cannot be empty"),
        ({"workflow_id": "w", "name": "n", "parent_id": "p"}, "parent seq is invalid"),
    ]:
        error = await api.error("/v1/workflows.start", {"queue_name": "durable", **body})
        assert error.status == 400 and error.message.startswith(message), error.message
    assert await activations(api) == []


async def test_a_claim_holds_until_its_deadline_and_fences_the_one_before(
    durable: Api, clock: FakeClock
) -> None:
    await start(durable)
    first = await claim(durable)
    assert first["outcome"] == "claimed" and first["workflow"]["fence"] == 1
    assert (await claim(durable))["outcome"] == "busy"
    clock.advance(31)  # the first worker paused past its claim
    second = await claim(durable)
    assert second["outcome"] == "claimed" and second["workflow"]["fence"] == 2
    late = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 1, "entries": [step(1)]}
    )
    assert late.status == 409 and late.message.startswith("workflow claimed elsewhere; fence 1")
    await append(durable, 2, entries=[step(1)])
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [(e["seq"], e["name"], e["state"]) for e in info["entries"]] == [(1, "s1", "done")]


async def test_claims_that_run_out_are_counted_until_the_journal_grows(
    durable: Api, clock: FakeClock
) -> None:
    """A claim that lapses is a worker lost mid-turn; the step it ran counts it as an attempt (issue 46:
    a step that kills its worker was retried without limit). A released claim is no loss."""
    await start(durable)
    assert "lapsed_claims" not in (await claim(durable))["workflow"]
    clock.advance(31)  # its worker died
    assert (await claim(durable))["workflow"]["lapsed_claims"] == 1
    clock.advance(31)
    assert (await claim(durable))["workflow"]["lapsed_claims"] == 2
    await append(durable, 3, then="suspend")  # released, not lost; nothing recorded: still 2
    assert (await claim(durable))["workflow"]["lapsed_claims"] == 2
    await append(durable, 4, entries=[step(1)])  # the turn got on
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert "lapsed_claims" not in info


async def test_the_sweep_wakes_a_workflow_whose_activation_was_lost(durable: Api, clock: FakeClock) -> None:
    """A workflow whose activation is gone (a crash between its record and the produce, a queue cleared
    by hand) stayed running for ever (issue 46). The sweep wakes those with something to do, once per
    change of their record, and leaves alone those waiting for something to arrive."""
    for workflow_id in ("never-claimed", "waiting", "lapsed", "changed"):
        await start(durable, workflow_id)
    await activations(durable)  # lost, all of them
    for workflow_id in ("waiting", "lapsed", "changed"):
        await claim(durable, workflow_id)
    await append(durable, 1, "waiting", then="suspend")  # waits for a signal: nothing to do yet
    await append(durable, 1, "changed", then="suspend")
    await durable.post("/v1/workflows.signal", {"workflow_id": "changed", "name": "go", "signal_id": "s"})
    await activations(durable)  # the signal's wake-up, lost too
    assert await durable.service.workflows.sweep() == 0  # too soon: their activations may be on the way
    clock.advance(6 * 60)  # past the grace, and past "lapsed"'s claim
    assert await durable.service.workflows.sweep() == 3
    woken = sorted(i["reference"] for i in await activations(durable))
    assert woken == ["changed", "lapsed", "never-claimed"]
    assert await durable.service.workflows.sweep() == 3  # nothing changed: their wake-ups are duplicates
    assert await activations(durable) == []


async def test_starting_a_stranded_workflow_again_wakes_it(durable: Api, clock: FakeClock) -> None:
    """A start of an existing id whose workflow has nothing to move it on (its activation lost, its last
    claim run out) produces an activation, as the sweep would: starting the same id again did not help
    (issue 46). One a claim holds is left to its worker; repeated starts wake it once per change."""
    await start(durable)
    await activations(durable)
    await claim(durable)
    await start(durable)
    assert await activations(durable) == []  # its claim holds: the worker moves it on
    clock.advance(31)  # the claim ran out, and no activation is left
    await start(durable)
    [woken] = await activations(durable)
    assert (woken["kind"], woken["reference"]) == (ACTIVATION, "wf-1")
    await start(durable)
    assert await activations(durable) == []  # the record did not change: a duplicate


async def test_the_node_sweeps_on_its_own(durable: Api, clock: FakeClock) -> None:
    await start(durable)
    await activations(durable)  # lost
    clock.advance(6 * 60)
    await eventually(lambda: _activated(durable))


async def _activated(api: Api) -> bool:
    listed = await api.post("/v1/storage/items.list", {"queue_name": "durable", "partition": 0})
    return [i["reference"] for i in listed.get("items", [])] == ["wf-1"]


async def test_deleting_a_queue_ends_its_workflows_and_schedules(durable: Api) -> None:
    """Left behind, whoever made a queue of that name next (another tenant too) got the schedules' ticks,
    and the workflows stayed running with no queue to wake them (issue 42)."""
    await start(durable, "on-durable")
    await durable.create("other")
    await start(durable, "elsewhere", queue_name="other")
    for name, queue in (("ticks", "durable"), ("others", "other")):
        body = {"name": name, "cron": "0 0 * * *", "queue_name": queue}
        await durable.post("/v1/schedules.create", body)
    assert await durable.post("/v1/queues.delete", {"queue_name": "durable"}) == {"code": 200}
    await durable.create("durable")  # the name again, anyone's
    gone = await durable.error("/v1/schedules.info", {"name": "ticks"})
    assert gone.message == "schedule does not exist; no such schedule named 'ticks'"
    assert (await durable.post("/v1/schedules.info", {"name": "others"}))["queue_name"] == "other"
    ended = await durable.post("/v1/workflows.info", {"workflow_id": "on-durable"})
    assert (ended["status"], ended["error"]) == ("failed", "Terminated: its queue durable was deleted")
    kept = await durable.post("/v1/workflows.info", {"workflow_id": "elsewhere"})
    assert kept["status"] == "running"


async def test_a_recorded_step_is_never_replaced(durable: Api) -> None:
    await start(durable)
    await claim(durable)
    await append(durable, 1, entries=[step(1, b'"first"')])
    await append(durable, 1, entries=[step(1, b'"again"')])  # the same step again: left as it was
    other = {"seq": 1, "kind": "step", "name": "other", "state": "done"}
    error = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 1, "entries": [other]}
    )
    assert error.status == 409 and "seq 1 is recorded already as step 's1'" in error.message
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert base64.b64decode(info["entries"][0]["value"]) == b'"first"'


async def test_suspend_schedules_one_timer_and_complete_ends_it(durable: Api, clock: FakeClock) -> None:
    await start(durable)
    await activations(durable)
    await claim(durable)
    wake = "2030-01-01T00:00:00Z"
    sleep = {"seq": 1, "kind": "sleep", "name": "sleep", "state": "pending", "wake_at": wake}
    assert (await append(durable, 1, entries=[sleep], then="suspend", wake_at=wake)) == {}
    scheduled = await durable.post("/v1/storage/scheduled.list", {"queue_name": "durable", "partition": 0})
    assert [i["reference"] for i in scheduled["items"]] == ["wf-1"]
    assert scheduled["items"][0]["enqueue_at"].startswith("2030-01-01T00:00:00")
    assert (await claim(durable))["outcome"] == "claimed"  # the suspend released the claim
    await append(durable, 2, then="complete", result=b64(b'{"ok":true}'))
    result = await durable.post("/v1/workflows.result", {"workflow_id": "wf-1", "request_timeout": "1s"})
    assert result["status"] == "completed" and base64.b64decode(result["result"]) == b'{"ok":true}'
    assert (await claim(durable))["outcome"] == "finished"


async def test_signals_wait_for_a_wait_and_wake_the_workflow(durable: Api) -> None:
    await start(durable)
    await activations(durable)
    for n in range(2):
        body = {
            "workflow_id": "wf-1",
            "name": "approval",
            "payload": b64(b'"yes"'),
            "signal_id": f"s-{n % 1}",
        }
        await durable.post("/v1/workflows.signal", body)  # the second is the first, retried
    assert [a["reference"] for a in await activations(durable)] == ["wf-1"]
    claimed = await claim(durable)
    assert [(s["name"], s.get("taken_by", 0)) for s in claimed["workflow"]["signals"]] == [("approval", 0)]
    received = {"seq": 1, "kind": "signal", "name": "approval", "state": "done"}
    await append(durable, 1, entries=[received])
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert base64.b64decode(info["entries"][0]["value"]) == b'"yes"'
    assert info["signals"][0]["taken_by"] == 1


async def test_a_repeated_signal_or_cancel_wakes_the_workflow_once(durable: Api) -> None:
    """docs/durable.md, "Signals": a signal sent again with its id, or a cancel asked again, produces no
    second activation into the workflow's queue (before, each produced one); another signal id does."""
    await start(durable)
    await activations(durable)
    signal = {"workflow_id": "wf-1", "name": "go", "signal_id": "once"}
    for _ in range(3):
        await durable.post("/v1/workflows.signal", signal)
    assert len(await activations(durable)) == 1
    await durable.post("/v1/workflows.signal", {**signal, "signal_id": "twice"})
    assert len(await activations(durable)) == 1
    for _ in range(3):
        await durable.post("/v1/workflows.cancel", {"workflow_id": "wf-1"})
    assert len(await activations(durable)) == 1


async def test_a_signal_during_a_claim_makes_the_suspend_resume(durable: Api) -> None:
    await start(durable)
    await claim(durable)
    await durable.post("/v1/workflows.signal", {"workflow_id": "wf-1", "name": "go"})
    assert (await append(durable, 1, then="suspend")) == {"resume": True}
    assert (await append(durable, 1, then="suspend")) == {}


async def test_dispatched_steps_wake_the_workflow_when_their_group_is_done(durable: Api) -> None:
    await start(durable)
    await claim(durable)
    pending = [
        {"seq": s, "kind": "step", "name": f"s{s}", "state": "pending", "group": 1, "group_size": 2}
        for s in (1, 2)
    ]
    await append(durable, 1, entries=pending, then="suspend")
    await activations(durable)
    await append(durable, 0, entries=[step(1)])
    assert await activations(durable) == []  # one of two: not yet
    await append(durable, 0, entries=[step(2)])
    assert [a["reference"] for a in await activations(durable)] == ["wf-1"]
    await append(durable, 0, entries=[step(2)])  # a retried recording: woken again, kept once
    assert len(await activations(durable)) == 1
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [base64.b64decode(e["value"]) for e in info["entries"]] == [b'"ok"', b'"ok"']


async def test_a_result_from_outside_the_claim_never_replaces_another(durable: Api) -> None:
    """docs/durable.md, "The journal and fencing": an append with fence 0 records a dispatched step's
    result once; a different result for that seq, or a result of another call at a seq holding a timer
    or a wait, is a 409, and the journal keeps what it held. Before, a different result was dropped
    without a word, and a result for a timer's seq replaced the timer."""
    await start(durable)
    await claim(durable)
    sleep = {"seq": 2, "kind": "sleep", "name": "nap", "state": "pending", "wake_at": "2030-01-01T00:00:00Z"}
    await append(durable, 1, entries=[step(1), sleep], then="suspend")
    await append(durable, 0, entries=[step(1)])  # the same result again: accepted, kept once
    for forged, message in [
        (step(1, b'"forged"'), "seq 1 holds another result of step 's1'"),
        (step(1, state="error", error="Boom: no"), "seq 1 holds another result of step 's1'"),
        (step(2), "seq 2 is sleep 'nap', not step 's2'"),
    ]:
        refused = await durable.error("/v1/workflows.append", {"workflow_id": "wf-1", "entries": [forged]})
        assert (refused.status, refused.message) == (409, f"workflow entry recorded already; {message}")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert [(e["kind"], e["state"]) for e in info["entries"]] == [("step", "done"), ("sleep", "pending")]
    assert base64.b64decode(info["entries"][0]["value"]) == b'"ok"'


async def test_a_child_tells_its_parent_and_a_cancel_reaches_children(durable: Api) -> None:
    await start(durable, "parent")
    await claim(durable, "parent")
    child_entry = {"seq": 1, "kind": "child", "name": "checkout", "state": "pending"}
    await append(durable, 1, "parent", entries=[child_entry])
    await start(durable, "parent/1", parent_id="parent", parent_seq=1)
    await start(durable, "parent/2", parent_id="parent", parent_seq=2)
    await append(durable, 1, "parent", entries=[{**child_entry, "seq": 2}], then="suspend")
    await activations(durable)
    await claim(durable, "parent/1")
    await append(durable, 1, "parent/1", then="complete", result=b64(b'"shipped"'))
    info = await durable.post("/v1/workflows.info", {"workflow_id": "parent"})
    assert [(e["seq"], e["state"]) for e in info["entries"]] == [(1, "done"), (2, "pending")]
    assert base64.b64decode(info["entries"][0]["value"]) == b'"shipped"'
    await durable.post("/v1/workflows.cancel", {"workflow_id": "parent"})
    parent = await claim(durable, "parent")
    assert parent["workflow"]["cancel_requested"] is True
    await append(durable, parent["workflow"]["fence"], "parent", then="cancel", error="Cancelled: by request")
    child = await durable.post("/v1/workflows.info", {"workflow_id": "parent/2"})
    assert child["cancel_requested"] is True


async def test_terminate_ends_a_workflow_and_its_children_without_a_worker(durable: Api) -> None:
    """A workflow no worker has the code of could not be ended (issue 46): terminate needs no worker.
    Its claimant is refused at its next write, its parent hears of it, its children end too."""
    await start(durable, "grand")
    await claim(durable, "grand")
    child_entry = {"seq": 1, "kind": "child", "name": "checkout", "state": "pending"}
    await append(durable, 1, "grand", entries=[child_entry])
    await start(durable, "grand/1", parent_id="grand", parent_seq=1)
    await claim(durable, "grand/1")
    await append(durable, 1, "grand/1", entries=[child_entry], then="suspend")
    await start(durable, "grand/1/1", parent_id="grand/1", parent_seq=1)
    await durable.post(
        "/v1/workflows.terminate", {"workflow_id": "grand/1", "reason": "its code was removed"}
    )
    for workflow_id, error in (
        ("grand/1", "Terminated: its code was removed"),
        ("grand/1/1", "Terminated: its parent grand/1 was"),
    ):
        info = await durable.post("/v1/workflows.info", {"workflow_id": workflow_id})
        assert (info["status"], info["error"]) == ("failed", error)
    parent = await durable.post("/v1/workflows.info", {"workflow_id": "grand"})
    assert [(e["state"], e["error"]) for e in parent["entries"]] == [
        ("error", "Terminated: its code was removed")
    ]
    late = await durable.error(
        "/v1/workflows.append", {"workflow_id": "grand/1", "fence": 1, "then": "suspend"}
    )
    assert late.status == 409
    # Again, or on a finished workflow: nothing changes.
    await durable.post("/v1/workflows.terminate", {"workflow_id": "grand/1", "reason": "again"})
    info = await durable.post("/v1/workflows.info", {"workflow_id": "grand/1"})
    assert info["error"] == "Terminated: its code was removed"
    bad = await durable.error("/v1/workflows.terminate", {"workflow_id": "grand", "reason": "x" * 1025})
    assert (bad.status, bad.message) == (400, "reason is invalid; cannot be greater than '1024' characters")
    unknown = await durable.error("/v1/workflows.terminate", {"workflow_id": "nope"})
    assert unknown.message == "workflow does not exist; no workflow 'nope'"


async def test_only_a_failure_of_the_code_resumes(durable: Api) -> None:
    await start(durable, "ndx")
    await claim(durable, "ndx")
    await append(durable, 1, "ndx", entries=[step(1)], then="fail", error="NonDeterminism: x", resumable=True)
    assert (await durable.post("/v1/workflows.info", {"workflow_id": "ndx"}))["resumable"] is True
    await durable.post("/v1/workflows.resume", {"workflow_id": "ndx"})
    info = await durable.post("/v1/workflows.info", {"workflow_id": "ndx"})
    assert (info["status"], "error" in info, "resumable" in info) == ("running", False, False)
    assert [e["seq"] for e in info["entries"]] == [1]  # its journal kept
    assert [a["reference"] for a in await activations(durable)][-1] == "ndx"
    again = await durable.error("/v1/workflows.resume", {"workflow_id": "ndx"})
    assert (again.status, again.message) == (
        409,
        "workflow cannot be resumed; 'ndx' is running and did not fail for its code (non-determinism)",
    )
    await start(durable, "plain")
    await claim(durable, "plain")
    await append(durable, 1, "plain", then="fail", error="ValueError: no")
    assert (await durable.error("/v1/workflows.resume", {"workflow_id": "plain"})).status == 409
    # A child's failure is recorded in its parent: it does not resume on its own.
    await start(durable, "ndx/2", parent_id="ndx", parent_seq=2)
    await claim(durable, "ndx/2")
    await append(durable, 1, "ndx/2", then="fail", error="NonDeterminism: y", resumable=True)
    assert (await durable.error("/v1/workflows.resume", {"workflow_id": "ndx/2"})).status == 409


async def test_fan_in_records_many_results_in_few_writes(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each result of a gather was a compare-and-set write of the whole record, and they lost to each
    other: a 1,000-step gather took 56 s and re-ran 9% of its steps (issue 46). Results arriving together
    are written together now."""
    size = 200
    await start(durable, "fan")
    await claim(durable, "fan")
    group = [
        {"seq": n, "kind": "step", "name": f"s{n}", "state": "pending", "group": 1, "group_size": size}
        for n in range(1, size + 1)
    ]
    await append(durable, 1, "fan", entries=group, then="suspend")
    await activations(durable)
    rows = durable.service.workflows._rows
    put = rows.put_workflow
    writes = 0

    async def counted(wf: Any, version: int, journal: Any = ()) -> bool:
        nonlocal writes
        writes += 1
        return await put(wf, version, journal)

    monkeypatch.setattr(rows, "put_workflow", counted)
    await asyncio.gather(*(append(durable, 0, "fan", entries=[step(n)]) for n in range(1, size + 1)))
    info = await durable.post("/v1/workflows.info", {"workflow_id": "fan"})
    assert [e["state"] for e in info["entries"]] == ["done"] * size
    assert writes < size // 2  # one per round of the results that arrived meanwhile, not one each
    assert len(await activations(durable)) == 1  # woken once, when the group is complete


async def test_lists_page_by_id_and_filter_by_status(durable: Api) -> None:
    for workflow_id in ("c", "a", "b"):
        await start(durable, workflow_id)
    await claim(durable, "b")
    await append(durable, 1, "b", then="fail", error="ValueError: no")
    page = await durable.post("/v1/workflows.list", {"limit": 2})
    assert [w["workflow_id"] for w in page["workflows"]] == ["a", "b"]
    assert "entries" not in page["workflows"][0]
    failed = await durable.post("/v1/workflows.list", {"status": "failed"})
    assert [(w["workflow_id"], w["error"]) for w in failed["workflows"]] == [("b", "ValueError: no")]
    error = await durable.error("/v1/workflows.list", {"status": "done"})
    assert error.message == "status is invalid; 'done' is not running, completed, failed or cancelled"


async def test_runs_are_claimed_by_workers_of_their_version(durable: Api) -> None:
    """docs/durable.md, "App versions" (docs/adr/0049): a run records its app's version at its start;
    a worker of another version does not claim it (nothing written), a worker or run of none goes
    with any; lists show and filter by it."""
    await start(durable, "a", app_version="v1")
    await start(durable, "b")
    await start(durable, "c", app_version="v2")

    async def claimed_by(workflow_id: str, version: str) -> dict[str, Any]:
        body = {"workflow_id": workflow_id, "claim_timeout": "30s", "app_version": version}
        return await durable.post("/v1/workflows.claim", body)

    left = await claimed_by("a", "v2")
    assert (left["outcome"], left["workflow"]["app_version"]) == ("other_version", "v1")
    assert "fence" not in left["workflow"]  # not claimed: no fence taken, no claim to run out
    assert (await claimed_by("a", "v1"))["outcome"] == "claimed"
    assert (await claimed_by("b", "v2"))["outcome"] == "claimed"  # a run of no version: any worker's
    assert (await claimed_by("c", ""))["outcome"] == "claimed"  # a worker of no version: any run
    v1 = await durable.post("/v1/workflows.list", {"app_version": "v1"})
    assert [(w["workflow_id"], w["app_version"]) for w in v1["workflows"]] == [("a", "v1")]
    every = await durable.post("/v1/workflows.list", {})
    assert [w.get("app_version", "") for w in every["workflows"]] == ["v1", "", "v2"]
    for route, body in [
        ("/v1/workflows.start", {"workflow_id": "d", "name": "n", "queue_name": "durable"}),
        ("/v1/workflows.claim", {"workflow_id": "a"}),
        ("/v1/workflows.list", {}),
    ]:
        for version, message in [
            (" ", "app version is invalid; cannot be empty"),
            ("v" * 257, "app version is invalid; cannot be greater than '256' characters"),
            ("v\x001", "app version is invalid; cannot contain control"),
        ]:
            error = await durable.error(route, {**body, "app_version": version})
            assert error.status == 400 and error.message.startswith(message), (route, error.message)


async def test_result_waits_for_the_end(durable: Api, clock: FakeClock) -> None:
    await start(durable)
    waiting = asyncio.create_task(
        durable.post("/v1/workflows.result", {"workflow_id": "wf-1", "request_timeout": "10s"})
    )
    await claim(durable)
    clock.advance(9)
    assert not waiting.done()
    await append(durable, 1, then="complete", result=b64(b"1"))
    assert (await waiting)["status"] == "completed"  # woken by the finish, before its timeout
    clock.advance(60)
    await start(durable, "wf-2")
    waiting = asyncio.create_task(
        durable.post("/v1/workflows.result", {"workflow_id": "wf-2", "request_timeout": "10s"})
    )
    await eventually(lambda: _has_waiter(durable, "wf-2"))
    clock.advance(10)
    assert (await waiting)["status"] == "running"
    unknown = await durable.error("/v1/workflows.result", {"workflow_id": "nope", "request_timeout": "1s"})
    assert unknown.message == "workflow does not exist; no workflow 'nope'"
    bad = await durable.error("/v1/workflows.result", {"workflow_id": "wf-1"})
    assert bad.message.startswith("request timeout is required")


async def test_bad_appends_are_refused_before_anything_is_read(durable: Api) -> None:
    for body, message in [
        ({"fence": -1}, "fence is invalid; cannot be negative"),
        ({"fence": 1, "then": "later"}, "then is invalid; 'later' is not suspend"),
        ({"fence": 0, "then": "complete"}, "fence is invalid; only entries may be recorded"),
        (
            {"fence": 1, "entries": [{"seq": 0, "kind": "step", "name": "s", "state": "done"}]},
            "entries is invalid; seq",
        ),
        (
            {"fence": 1, "entries": [{"seq": 1, "kind": "nap", "name": "s", "state": "done"}]},
            "entries is invalid; 'nap'",
        ),
        ({"fence": 1, "claim_timeout": "1h"}, "claim timeout is invalid; must be between 1s and 15m"),
    ]:
        error = await durable.error("/v1/workflows.append", {"workflow_id": "unknown", **body})
        assert error.status == 400 and error.message.startswith(message), error.message


async def test_a_finished_workflow_is_kept_for_its_retention_then_dropped(
    durable: Api, clock: FakeClock
) -> None:
    await start(durable)
    await claim(durable)
    await append(durable, 1, then="complete")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    finished, expires = (datetime.fromisoformat(info[k]) for k in ("finished_at", "expires_at"))
    assert expires - finished == timedelta(days=7)
    clock.advance(7 * 86_400 + 61)  # past the retention and the next purge
    await eventually(lambda: _gone(durable, "wf-1"))


async def _gone(api: Api, workflow_id: str) -> bool:
    reply = await api.post("/v1/workflows.list", {})
    return workflow_id not in [w["workflow_id"] for w in reply.get("workflows", [])]


async def test_a_list_page_ends_early_rather_than_pass_its_byte_bound(durable: Api) -> None:
    big = b64(b"x" * 600_000)
    ids = [f"w{n}" for n in range(8)]
    for workflow_id in ids:
        await start(durable, workflow_id, input=big)
    first = await durable.post("/v1/workflows.list", {})
    assert [w["workflow_id"] for w in first["workflows"]] == ids[:6]  # a 7th would pass 4 MiB of inputs
    rest = await durable.post("/v1/workflows.list", {"pivot": "w5\x01"})
    assert [w["workflow_id"] for w in rest["workflows"]] == ids[6:]


async def test_ending_with_a_child_that_never_started_still_ends(durable: Api) -> None:
    """A parent that recorded a child and ended before starting it: its end cancels the children it
    recorded, and a missing one made the append answer 400 after the parent was stored as ended."""
    await start(durable, "parent")
    await claim(durable, "parent")
    child = {"seq": 1, "kind": "child", "name": "checkout", "state": "pending"}
    assert await append(durable, 1, "parent", entries=[child], then="cancel", error="Cancelled: x") == {}
    info = await durable.post("/v1/workflows.info", {"workflow_id": "parent"})
    assert info["status"] == "cancelled"


async def test_the_apps_queue_never_drops_an_activation(api: Api, clock: FakeClock) -> None:
    """The queue a Durable app makes keeps an activation however long no worker runs: its expire
    timeout was the client's default, 60 times the claim timeout (30 min), after which a started
    workflow, or a timer that came due, was dropped and the workflow stayed running (issue 46)."""
    from querator.durable import Durable

    app = Durable(api.base)
    try:

        @app.workflow(name="idle")
        async def idle(ctx: Any) -> None: ...

        client = await app.client()
        assert (await client.queue_info("durable")).expire_timeout == "2562047h0m0s"
        await app.start(idle, workflow_id="wf-idle")
        clock.advance(30 * 24 * 3600)  # a month without a worker
        [item] = (await api.lease("durable"))["items"]
        assert (item["kind"], item["reference"]) == (ACTIVATION, "wf-idle")
    finally:
        await app.close()


@pytest.mark.parametrize(("options", "partitions"), [({}, QUEUE_PARTITIONS), ({"partitions": 3}, 3)])
async def test_the_apps_queue_has_partitions_enough_for_its_leases(
    api: Api, options: dict[str, int], partitions: int
) -> None:
    """The queue a Durable app makes has ``QUEUE_PARTITIONS`` partitions (or the app's ``partitions``):
    with one, every lease and complete of the app ran one after the other in its one partition, each
    a Paxos round on Cassandra (issue 38)."""
    from querator.durable import Durable

    app = Durable(api.base, **options)
    try:
        client = await app.client()
        assert (await client.queue_info("durable")).requested_partitions == partitions
    finally:
        await app.close()


async def _scheduled(api: Api) -> list[tuple[str, str]]:
    listed = await api.post("/v1/storage/scheduled.list", {"queue_name": "durable", "partition": 0})
    return [(i["reference"], i["enqueue_at"]) for i in listed.get("items", [])]


async def test_a_timeout_schedules_its_deadline_and_the_claim_after_it_times_out(
    durable: Api, clock: FakeClock
) -> None:
    """A workflow's timeout (docs/adr/0047) is the server's: an activation at its deadline, and the claim
    it brings says the workflow timed out, however long its code meant to sleep."""
    started = await start(durable, timeout="1m")
    deadline = started["workflow"]["deadline"]
    assert started["workflow"]["timeout"] == "1m0s"
    assert await _scheduled(durable) == [("wf-1", deadline)]
    await activations(durable)
    await claim(durable)
    wake = "2030-01-01T00:00:00Z"
    sleep = {"seq": 1, "kind": "sleep", "name": "sleep", "state": "pending", "wake_at": wake}
    assert await append(durable, 1, entries=[sleep], then="suspend", wake_at=wake) == {}
    again = await start(durable, timeout="5m")  # an existing run keeps its timeout
    assert (again["workflow"]["timeout"], again["workflow"]["deadline"]) == ("1m0s", deadline)
    clock.advance(60)  # the deadline's activation is delivered
    claimed = await claim(durable)
    assert (claimed["outcome"], claimed["workflow"]["timed_out"]) == ("claimed", True)
    await append(durable, 2, then="fail", error="WorkflowTimeout: workflow wf-1 passed its timeout of 1m0s")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert (info["status"], info["timed_out"]) == ("failed", True)


async def test_a_deadline_passed_during_a_turn_is_told_to_its_worker(durable: Api, clock: FakeClock) -> None:
    """A turn that runs past the deadline (steps run in the worker, no suspend) hears of it in the
    append's reply, and a suspend then replays at once instead of sleeping: the timeout ends the
    workflow at its deadline, not at its next wake-up. Its children are cancelled when it fails."""
    await start(durable, timeout="10s")
    await claim(durable)
    assert await append(durable, 1, entries=[step(1)]) == {}
    clock.advance(11)
    child = {"seq": 2, "kind": "child", "name": "c", "state": "pending"}
    await start(durable, "wf-1/2", parent_id="wf-1", parent_seq=2)
    resumed = await append(durable, 1, entries=[child], then="suspend")
    assert resumed == {"resume": True, "timed_out": True}
    # Its compensation, recorded in the replay that follows: the reply says it still.
    assert await append(durable, 1, entries=[step(3)]) == {"timed_out": True}
    await append(durable, 1, then="fail", error="WorkflowTimeout: x")
    ended = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1/2"})
    assert ended["cancel_requested"] is True


async def test_a_lost_deadline_activation_is_swept(durable: Api, clock: FakeClock) -> None:
    await start(durable, timeout="1m")
    await claim(durable)
    await append(durable, 1, then="suspend")  # waits for a signal
    await activations(durable)
    clock.advance(7 * 60)  # its deadline's activation lost (a crash before the produce, say)
    assert await durable.service.workflows.sweep() == 1


async def test_bad_timeouts_are_refused_before_anything_is_stored(durable: Api) -> None:
    for timeout, message in [
        ("soon", "timeout is invalid; time: invalid duration"),
        ("500ms", "timeout is invalid; must be at least 1s, got 500ms"),
        ("1" * 16 + "s", "timeout is invalid; cannot be greater than '15' characters"),
    ]:
        error = await durable.error(
            "/v1/workflows.start",
            {"workflow_id": "t", "name": "n", "queue_name": "durable", "timeout": timeout},
        )
        assert error.status == 400 and error.message.startswith(message), error.message
    assert await durable.error("/v1/workflows.info", {"workflow_id": "t"})


async def _forkable(api: Api) -> None:
    """wf-1, failed after three steps, a gather of seqs 4 and 5 and a pending timer at 6."""
    await start(api, timeout="1h")
    await claim(api)
    gathered = [step(s, group=4, group_size=2) for s in (4, 5)]
    sleep = {
        "seq": 6,
        "kind": "sleep",
        "name": "sleep",
        "state": "pending",
        "wake_at": "2030-01-01T00:00:00Z",
    }
    await append(api, 1, entries=[step(1), step(2), step(3), *gathered, sleep])
    await append(api, 1, then="fail", error="ValueError: step 4 broke")
    await activations(api)


async def test_fork_starts_a_new_run_with_the_journal_before_its_step(durable: Api, clock: FakeClock) -> None:
    """DBOS's fork (docs/adr/0048): a new workflow with the original's input and entries before the
    step, activated; the original untouched; repeated with its id, the same run."""
    await _forkable(durable)
    clock.advance(5)
    body = {"workflow_id": "wf-1", "new_workflow_id": "wf-2", "from_step": 3}
    forked = await durable.post("/v1/workflows.fork", body)
    assert forked["created"] is True
    wf = forked["workflow"]
    assert (wf["name"], wf["queue_name"], wf["input"], wf["status"]) == (
        "checkout",
        "durable",
        b64(b"[1]"),
        "running",
    )
    assert (wf["forked_from"], wf["timeout"]) == ("wf-1", "1h0m0s")  # its timeout counts from the fork
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-2"})
    assert [(e["seq"], e["name"]) for e in info["entries"]] == [(1, "s1"), (2, "s2")]
    assert [a["reference"] for a in await activations(durable)] == ["wf-2"]
    original = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert (original["status"], len(original["entries"])) == ("failed", 6)
    again = await durable.post("/v1/workflows.fork", body)
    assert "created" not in again and again["workflow"]["workflow_id"] == "wf-2"
    made = await durable.post("/v1/workflows.fork", {"workflow_id": "wf-1", "from_step": 6})
    assert made["workflow"]["workflow_id"] not in ("wf-1", "wf-2")  # an id of its own
    whole = await durable.post("/v1/workflows.fork", {"workflow_id": "wf-2", "from_step": 3})
    assert whole["workflow"]["forked_from"] == "wf-2"


async def test_fork_refuses_a_step_the_journal_cannot_start_from(durable: Api) -> None:
    await _forkable(durable)
    for body, status, message in [
        ({"from_step": 0}, 400, "from step is invalid; steps count from 1, got 0"),
        ({"from_step": 8}, 400, "from step is invalid; the journal's steps are 1 to 7, not 8"),
        ({"from_step": 7}, 400, "from step is invalid; seq 6, before 7, is sleep 'sleep' pending"),
        ({"from_step": 5}, 400, "from step is invalid; 5 is inside the gather that starts at seq 4"),
        ({"workflow_id": "nope", "from_step": 1}, 400, "workflow does not exist; no workflow 'nope'"),
        ({"workflow_id": "", "from_step": 1}, 400, "workflow id is invalid; cannot be empty"),
        ({"new_workflow_id": "a\x00b", "from_step": 1}, 400, "new workflow id is invalid; cannot contain"),
    ]:
        error = await durable.error("/v1/workflows.fork", {"workflow_id": "wf-1", **body})
        assert (error.status, error.message.startswith(message)) == (status, True), error.message
    await start(durable, "taken", name="other")
    taken = await durable.error(
        "/v1/workflows.fork", {"workflow_id": "wf-1", "new_workflow_id": "taken", "from_step": 1}
    )
    assert taken.status == 409 and taken.message.startswith(
        "workflow exists already; the id is a run of 'other'"
    )


async def test_an_append_writes_what_it_adds_whatever_the_journal_holds(durable: Api) -> None:
    """docs/adr/0046: a journal's final entries are rows of their own; the head an append rewrites holds
    none of them, so it is as large after a thousand steps as after ten (each append rewrote the whole
    journal before, and a workflow of n steps wrote O(n^2) bytes)."""
    await start(durable, "wf")
    await claim(durable, "wf")
    rows = durable.service.workflows._rows
    sizes = []
    for seq in range(1, 1001):
        await append(durable, 1, "wf", entries=[step(seq)])
        if seq in (10, 1000):
            head = await rows.get_workflow("wf")
            assert head is not None and head.entries == [] and head.length == seq
            sizes.append(len(encode_workflow(head)))
    assert sizes[1] - sizes[0] < 16  # a few more digits in its counters
    claimed = await claim_again(durable, "wf")
    assert [e["seq"] for e in claimed["workflow"]["entries"]] == list(range(1, 1001))


async def claim_again(api: Api, workflow_id: str) -> dict[str, Any]:
    """A claim of a workflow whose claim its holder let go (a suspend)."""
    await append(
        api,
        (await api.post("/v1/workflows.info", {"workflow_id": workflow_id}))["fence"],
        workflow_id,
        then="suspend",
    )
    return await claim(api, workflow_id)


async def test_a_journal_holds_more_than_ten_thousand_entries(durable: Api) -> None:
    """The limit was 10,000 entries in one record; a claim returns all of a longer journal, which the
    worker replays, and ``workflows.info`` its first ``INFO_ENTRIES`` (docs/semantics.md)."""
    await start(durable, "wf")
    await claim(durable, "wf")
    total = INFO_ENTRIES + 1500
    for first in range(1, total + 1, MAX_APPEND_ENTRIES):
        last = min(first + MAX_APPEND_ENTRIES, total + 1)
        await append(durable, 1, "wf", entries=[step(seq) for seq in range(first, last)])
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert [e["seq"] for e in info["entries"]] == list(range(1, INFO_ENTRIES + 1))
    rest = await durable.post("/v1/workflows.info", {"workflow_id": "wf", "after": INFO_ENTRIES})
    assert [e["seq"] for e in rest["entries"]] == list(range(INFO_ENTRIES + 1, total + 1))
    claimed = await claim_again(durable, "wf")
    assert [e["seq"] for e in claimed["workflow"]["entries"]] == list(range(1, total + 1))


async def test_a_head_a_node_kept_gives_way_to_another_nodes_write(durable: Api) -> None:
    """docs/adr/0046: a node writes on the head it wrote last without reading it; when another node
    wrote since (here a signal through a second ``Workflows`` over the same store), the compare-and-set
    refuses the kept head and the write reads and applies its rule again: the suspend sees the signal."""
    await start(durable, "wf")
    await claim(durable, "wf")  # this node keeps the head it claimed
    here = durable.service.workflows
    there = Workflows(
        here._rows,
        here._clock,
        here._produce,
        here._complete,
        here._queue_namespace,
        here._lease,
        here._release,
    )
    await there.signal(AS_SERVER, m.WorkflowsSignalRequest(workflow_id="wf", name="go", signal_id="s-1"))
    assert await append(durable, 1, "wf", then="suspend") == {"resume": True}
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert [s["id"] for s in info["signals"]] == ["s-1"]


def calls_to(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    """The argument of every later call of ``owner``'s one-argument coroutine method ``name``, which
    still runs."""
    method = getattr(owner, name)
    calls: list[Any] = []

    async def recorded(arg: Any) -> Any:
        calls.append(arg)
        return await method(arg)

    monkeypatch.setattr(owner, name, recorded)
    return calls


async def test_a_start_of_a_new_id_reads_nothing(durable: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/adr/0066: a start guesses that its id is new and inserts at once; only when the insert is
    refused (the id exists) does it read the head, and it then answers with the run stored. It finds
    its queue's namespace in the settings the node routes by, not in a read (docs/adr/0072)."""
    reads = calls_to(monkeypatch, durable.service.workflows._rows, "get_workflow")
    await start(durable, "warm")  # the queue's settings are read once, as by any route of the queue
    reads.clear()
    queue_reads = calls_to(monkeypatch, durable.service.store, "get_queue")
    assert (await start(durable, "wf"))["created"] is True
    assert (reads, queue_reads) == ([], [])  # docs/adr/0072: nor its queue's record
    again = await start(durable, "wf")
    assert (again.get("created", False), again["workflow"]["workflow_id"], len(reads)) == (False, "wf", 1)
    durable.service.workflows._heads.forget("wf")  # another node's start: nothing kept here
    assert "created" not in await start(durable, "wf")  # (false is left out of a reply)
    assert len(reads) == 2


async def test_a_created_workflow_s_activations_carry_no_dedup_id(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/adr/0072: the start that creates a workflow produces its activations (the first, and the
    one at its deadline) with no dedup id, whose marker cost every workflow a write and a check (two
    Paxos rounds on Cassandra). A repeated start of a workflow still stranded keeps one: the repeats
    make one activation between them."""
    requests: list[m.QueueProduceRequest] = calls_to(monkeypatch, durable.service.workflows, "_produce")
    await start(durable, timeout="1h")
    produced = [i for r in requests for i in r.items]
    assert [(i.dedup_id, i.enqueue_at is not None) for i in produced] == [("", True), ("", False)]
    await start(durable, timeout="1h")  # never claimed yet: a repeat wakes it, deduplicated
    await start(durable, timeout="1h")
    produced = [i for r in requests for i in r.items]
    assert [i.dedup_id.split(":")[0] for i in produced[2:]] == ["start", "start"]
    assert len(await activations(durable)) == 2


async def test_an_ending_completes_the_activation_its_turn_ran_for(durable: Api) -> None:
    """A worker's ending names the activation its turn ran for: completed with it, for the same caller,
    so the worker sends no complete of its own (docs/adr/0070); one not leased any more is left to the
    worker (``settled`` false), and the ending is stored all the same."""
    await start(durable)
    leased = await durable.lease("durable", timeout="1s")
    [item] = leased["items"]
    activation = {"partition": leased.get("partition", 0), "id": item["id"]}
    await claim(durable)
    # A continuing append does not end the turn: it names no activation.
    error = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 1, "activation": activation}
    )
    assert error.status == 400 and error.message.startswith("activation is invalid; it goes with an ending")
    assert await _items(durable) == [item["id"]]  # leased
    ended = await append(durable, 1, entries=[step(1)], then="suspend", activation=activation)
    assert ended == {"settled": True}
    assert await _items(durable) == []
    await durable.post("/v1/workflows.signal", {"workflow_id": "wf-1", "name": "go"})  # wakes it again
    await claim(durable)
    assert await append(durable, 2, then="complete", activation=activation) == {}  # completed already
    assert (await claim(durable))["outcome"] == "finished"


async def _items(api: Api) -> list[str]:
    """The ids of the items in the app's queue, leased or not."""
    listed = await api.post("/v1/storage/items.list", {"queue_name": "durable", "partition": 0})
    return [i["id"] for i in listed.get("items", [])]
