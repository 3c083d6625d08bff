"""Search attributes set by a real worker (docs/durable.md, "Search attributes"; docs/adr/0061): a list
finds the run by them mid-run, and they survive a kill -9 of the worker and the replay that follows
without being recorded twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from querator.cli import main
from querator.client import AsyncClient
from tests.integration import durable_app as wf

from .conftest import eventually, wait_until
from .test_durable import DEADLINE, Workers, client, server, workers

pytestmark = pytest.mark.integration
__all__ = ["client", "server", "workers"]  # the fixtures of test_durable.py, used here


async def _found(search: dict[str, object]) -> list[str]:
    return [w.workflow_id for w in await wf.app.list(search=search)]


async def test_attributes_set_mid_run_survive_a_kill_9_and_are_found(
    workers: Workers, client: AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    first = workers.start()
    handle = await wf.app.start(wf.searched, "k", workflow_id="order-k", search_attributes={"order": 7})
    await wf.app.start(wf.three_steps, "other", workflow_id="other", search_attributes={"order": 8})
    wait_until(lambda: len(workers.runs("hold", "k")) == 1, DEADLINE, "the held step started")
    # Set by the code before the step, and found while the step runs.
    assert await _found({"customer": "k", "amount": 30, "order": 7}) == ["order-k"]
    assert await _found({"customer": "k", "amount": 40}) == []
    os.kill(first.pid, signal.SIGKILL)
    first.wait(DEADLINE)
    (workers.records / "release-k").touch()
    workers.start()
    assert await handle.result(timeout=DEADLINE) == "held"
    info = await client.workflow_info("order-k")
    # The replay found its recorded attributes and sent none again: one entry per call.
    assert [(e.seq, e.kind) for e in info.entries] == [(1, "search"), (2, "step"), (3, "search"), (4, "step")]
    assert info.search_attributes == {"order": "7", "customer": "k", "amount": "40", "shipped": "true"}
    assert [r["phase"] for r in workers.runs("hold")] == ["started", "started", "ended"]  # in flight: again
    await eventually(lambda: _status_is("other", "completed"), DEADLINE, "the other run completed")
    assert await _found({"customer": "k", "amount": 40, "shipped": True}) == ["order-k"]
    assert await _found({"customer": "k", "amount": 30}) == []
    completed = await client.list_workflows("completed", search={"order": 7})
    assert [w.workflow_id for w in completed] == ["order-k"]
    where = ["--where", "customer=k", "--where", "amount=40"]
    argv = ["--endpoint", wf.app.worker.endpoint, "workflows", "list", "--status", "completed", *where]
    assert await asyncio.to_thread(main, argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [w["workflow_id"] for w in printed["workflows"]] == ["order-k"]


async def _status_is(workflow_id: str, status: str) -> bool:
    return (await wf.app.handle(workflow_id).info()).status == status
