"""Continue-as-new and the journal's pages over real HTTP (docs/durable.md, "Continuing as new";
docs/adr/0059-continue-as-new-numbers-a-run-on-from-the-last.md), the worker played by hand as in
tests/api/test_workflows.py; tests/integration/test_durable.py runs real workers."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.api.test_workflows import activations, append, b64, claim, start, step
from tests.conftest import Api


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


def seqs(workflow: dict[str, Any]) -> list[int]:
    return [e["seq"] for e in workflow.get("entries", [])]


async def continue_as_new(api: Api, fence: int, new_input: bytes, **kw: Any) -> dict[str, Any]:
    return await append(api, fence, "wf", then="continue_as_new", result=b64(new_input), **kw)


async def test_a_continue_starts_the_same_id_over_with_an_empty_journal(durable: Api) -> None:
    await start(durable, "wf")
    await activations(durable)
    await claim(durable, "wf")
    await append(durable, 1, "wf", entries=[step(1), step(2)])
    await continue_as_new(durable, 1, b"[2]", entries=[step(3)])
    [activation] = await activations(durable)  # the new run is woken
    assert activation["reference"] == "wf"
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    assert (info["status"], base64.b64decode(info["input"]), seqs(info)) == ("running", b"[2]", [])
    assert (info["seq_base"], info["runs"]) == (3, 1)
    # The continue spent its claim: sent again (a lost reply), it is refused, not continued twice.
    again = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf", "fence": 1, "then": "continue_as_new"}
    )
    assert again.status == 409
    claimed = (await claim(durable, "wf"))["workflow"]
    assert (claimed["fence"], seqs(claimed), claimed["seq_base"]) == (3, [], 3)
    refused = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf", "fence": 3, "entries": [step(3)]}
    )
    assert (refused.status, refused.message) == (400, "entries are invalid; seq must be at least 4, got 3")
    await append(durable, 3, "wf", entries=[step(4)])
    await append(durable, 3, "wf", then="complete", result=b64(b'"done"'))
    done = await durable.post("/v1/workflows.result", {"workflow_id": "wf", "request_timeout": "1s"})
    assert (done["status"], base64.b64decode(done["result"])) == ("completed", b'"done"')
    assert seqs(await durable.post("/v1/workflows.info", {"workflow_id": "wf"})) == [4]


async def test_signals_sent_across_a_continue_reach_the_new_run(durable: Api) -> None:
    """A signal no wait took stays for the next run; one a wait took is not delivered again, even when
    its sender retries it after a lost reply."""
    await start(durable, "wf")
    await claim(durable, "wf")
    for signal_id in ("s-1", "s-2"):
        body = {"workflow_id": "wf", "name": "go", "signal_id": signal_id, "payload": b64(signal_id.encode())}
        await durable.post("/v1/workflows.signal", body)
    received = {"seq": 1, "kind": "signal", "name": "go", "state": "done"}
    await append(durable, 1, "wf", entries=[received])
    await continue_as_new(durable, 1, b"[]")
    await durable.post("/v1/workflows.signal", {"workflow_id": "wf", "name": "go", "signal_id": "s-1"})
    claimed = (await claim(durable, "wf"))["workflow"]
    await append(durable, claimed["fence"], "wf", entries=[{**received, "seq": 2}])
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf"})
    [entry] = info["entries"]
    assert (entry["seq"], base64.b64decode(entry["value"])) == (2, b"s-2")
    assert [(s["id"], s.get("taken_by", 0)) for s in info["signals"]] == [("s-1", 1), ("s-2", 2)]


async def test_a_late_result_of_an_earlier_run_is_not_the_new_runs(durable: Api) -> None:
    """A dispatched step's result sent again after the continue (its worker retried it) would land at a
    seq of the new run: the seqs of the new run follow the old one's, so it is dropped."""
    await start(durable, "wf")
    await claim(durable, "wf")
    pending = {"seq": 1, "kind": "step", "name": "s1", "state": "pending", "group": 1, "group_size": 1}
    await append(durable, 1, "wf", entries=[pending])
    await append(durable, 0, "wf", entries=[step(1, b'"first"', group=1, group_size=1)])
    await continue_as_new(durable, 1, b"[]")
    late = step(1, b'"late"', group=1, group_size=1)
    assert await append(durable, 0, "wf", entries=[late]) == {}
    claimed = (await claim(durable, "wf"))["workflow"]
    assert (seqs(claimed), claimed["seq_base"]) == ([], 1)


async def test_a_continue_waits_for_its_children(durable: Api) -> None:
    await start(durable, "wf")
    await claim(durable, "wf")
    child = {"seq": 1, "kind": "child", "name": "fetch", "state": "pending"}
    await append(durable, 1, "wf", entries=[child])
    error = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf", "fence": 1, "then": "continue_as_new"}
    )
    assert (error.status, error.message) == (
        400,
        "workflow cannot continue as new; seq 1, child 'fetch', is not finished",
    )


async def test_info_pages_a_journal_after_a_seq(durable: Api) -> None:
    await start(durable, "wf")
    await claim(durable, "wf")
    await append(durable, 1, "wf", entries=[step(seq) for seq in range(1, 26)])
    await append(
        durable, 1, "wf", entries=[{"seq": 26, "kind": "sleep", "name": "sleep", "state": "pending"}]
    )
    page = await durable.post("/v1/workflows.info", {"workflow_id": "wf", "limit": 10})
    assert seqs(page) == list(range(1, 11))
    journal = seqs(page)
    while page.get("entries"):
        page = await durable.post(
            "/v1/workflows.info", {"workflow_id": "wf", "after": journal[-1], "limit": 10}
        )
        journal += seqs(page)
    assert journal == list(range(1, 27))  # the head's open entry last
    assert seqs(await durable.post("/v1/workflows.info", {"workflow_id": "wf", "after": 20})) == list(
        range(21, 27)
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"after": -1}, "after is invalid; cannot be negative, but -1 was requested"),
        ({"limit": -1}, "limit is invalid; cannot be negative, but -1 was requested"),
        ({"limit": 10_001}, "limit is invalid; cannot be greater than 10000"),
    ],
)
async def test_info_refuses_a_bad_page(durable: Api, body: dict[str, int], message: str) -> None:
    await start(durable, "wf")
    error = await durable.error("/v1/workflows.info", {"workflow_id": "wf", **body})
    assert (error.status, error.message) == (400, message)
