"""querator.durable with real processes: a ``querator serve`` node on sqlite and ``querator worker``
processes running tests/integration/durable_app.py; each step run is a line in a records file, so the
tests count side effects across processes and kills.

Nothing sleeps to synchronise: the tests poll the records and the workflows with deadlines.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from querator.cli import main
from querator.client import AsyncClient
from querator.durable import WorkflowFailed
from querator.durable._app import QUEUE_PARTITIONS
from querator.errors import Conflict
from tests.integration import durable_app as wf

from .conftest import ServerProcess, Servers, WorkerProcesses, eventually, held, kill9, wait_until

pytestmark = pytest.mark.integration

DEADLINE = 30.0


class Workers(WorkerProcesses):
    """The worker processes of one test, running tests/integration/durable_app.py."""

    def __init__(self, server: ServerProcess, records: Path) -> None:
        super().__init__(server, records, "tests.integration.durable_app:app", "DURABLE_RECORDS")

    def runs(self, step: str, key: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records_of() if r["step"] == step and (key is None or r.get("key") == key)]


@pytest.fixture
def server(servers: Servers) -> ServerProcess:
    return servers.start("--storage", "sqlite")


@pytest.fixture
def workers(server: ServerProcess, tmp_path: Path) -> Iterator[Workers]:
    with Workers(server, tmp_path / "records") as started:
        yield started


@pytest.fixture
async def client(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AsyncClient]:
    """A client of the node; the test's ``app.start`` calls go there too."""
    monkeypatch.setattr(wf.app.worker, "endpoint", server.url)
    async with AsyncClient(server.url) as c:
        yield c
    await wf.app.close()


async def test_a_workflow_runs_its_steps_once_and_returns(workers: Workers, client: AsyncClient) -> None:
    workers.start()
    handle = await wf.app.start(wf.three_steps, "w", workflow_id="three")
    assert await handle.result(timeout=DEADLINE) == [3, 13, 113]
    assert [r["key"] for r in workers.runs("add")] == ["w-1", "w-2", "w-3"]
    info = await client.workflow_info("three")
    assert [(e.seq, e.kind, e.state) for e in info.entries] == [(s, "step", "done") for s in (1, 2, 3)]
    again = await wf.app.start(wf.three_steps, "other", workflow_id="three")  # idempotent by id
    assert await again.result(timeout=DEADLINE) == [3, 13, 113]
    assert len(workers.runs("add")) == 3


async def test_a_start_repeated_before_the_first_claim_runs_the_workflow_once(
    workers: Workers, client: AsyncClient
) -> None:
    """docs/adr/0072: the start that created the workflow produced its activation without a dedup id,
    so starts repeated before any claim wake it once more, together; that activation finds the
    workflow busy or finished and its worker completes it: the steps run once, no item is left."""
    await client.create_queue("durable", partitions=QUEUE_PARTITIONS)
    handle = await wf.app.start(wf.three_steps, "r", workflow_id="repeated")
    for _ in range(2):
        await wf.app.start(wf.three_steps, "r", workflow_id="repeated")
    assert (await held(client, "durable")).items == 2
    workers.start()
    assert await handle.result(timeout=DEADLINE) == [3, 13, 113]

    async def emptied() -> bool:
        left = await held(client, "durable")
        return left.items == left.scheduled == 0

    await eventually(emptied, DEADLINE, "the second activation completed")
    assert [r["key"] for r in workers.runs("add")] == ["r-1", "r-2", "r-3"]


async def test_kill_9_of_a_worker_mid_step_resumes_after_the_recorded_steps(
    workers: Workers, client: AsyncClient
) -> None:
    first = workers.start()
    handle = await wf.app.start(wf.held_in_the_middle, "k", workflow_id="held")
    wait_until(lambda: len(workers.runs("hold", "k")) == 1, DEADLINE, "the middle step started")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(DEADLINE)
    (workers.records / "release-k").touch()
    workers.start()
    assert await handle.result(timeout=DEADLINE) == [2, "held", 4]
    assert [r["key"] for r in workers.runs("add")] == ["k-1", "k-3"]  # the first step did not run again
    assert [r["phase"] for r in workers.runs("hold")] == ["started", "started", "ended"]  # in flight: again


@pytest.mark.parametrize("workflow", ["deadly", "deadly_gathered"])
async def test_a_step_that_kills_its_worker_fails_after_its_attempts(
    workers: Workers, client: AsyncClient, workflow: str
) -> None:
    """Each worker it kills counts as an attempt, run in the workflow's turn or dispatched: it was run
    again without limit (issue 46)."""
    handle = await wf.app.start(getattr(wf, workflow), "d", workflow_id=workflow)
    for before in (0, 1):
        worker = workers.start()
        wait_until(lambda n=before: len(workers.runs("kills", "d")) > n, DEADLINE, "the step ran")
        (workers.records / f"release-d-{before}").touch()
        worker.wait(DEADLINE)  # killed by the step
    workers.start()
    assert await handle.result(timeout=DEADLINE) == (
        "caught WorkerLost: its worker was lost while it ran, after 2 attempt(s)"
    )
    assert len(workers.runs("kills", "d")) == 2  # not run a third time
    info = await client.workflow_info(workflow)
    assert (info.entries[0].state, info.entries[0].attempts) == ("error", 2)


async def test_a_failing_step_is_retried_then_recorded(workers: Workers, client: AsyncClient) -> None:
    workers.start()
    handle = await wf.app.start(wf.retried, "f", 2, workflow_id="flaky")
    assert await handle.result(timeout=DEADLINE) == "ok after 3"
    info = await client.workflow_info("flaky")
    assert (info.entries[0].state, info.entries[0].attempts) == ("done", 3)


async def test_an_exhausted_step_raises_in_the_workflow_where_it_is_caught(
    workers: Workers, client: AsyncClient
) -> None:
    workers.start()
    handle = await wf.app.start(wf.catches, "c", workflow_id="catches")
    assert await handle.result(timeout=DEADLINE) == "caught ValueError: never works"
    assert len(workers.runs("doomed", "c")) == 2  # max_attempts


async def test_an_uncaught_failure_runs_compensations_in_reverse(
    workers: Workers, client: AsyncClient
) -> None:
    workers.start()
    handle = await wf.app.start(wf.saga, "s", workflow_id="saga")
    with pytest.raises(WorkflowFailed) as failed:
        await handle.result(timeout=DEADLINE)
    assert failed.value.status == "failed"
    assert failed.value.error.startswith("StepFailed: ") and "Permanent: not allowed" in failed.value.error
    assert [r["what"] for r in workers.runs("undo", "s")] == ["b", "a"]
    assert len(workers.runs("forbidden", "s")) == 1  # permanent: no retry


@pytest.mark.parametrize("how", ["unserializable", "too large"])
async def test_an_outcome_that_cannot_be_recorded_fails_the_workflow(
    workers: Workers, client: AsyncClient, how: str
) -> None:
    """It was retried for ever, the workflow running without a way forward (issue 46)."""
    workers.start()
    handle = await wf.app.start(wf.unrecordable, how, workflow_id=f"unrecordable-{how.replace(' ', '-')}")
    with pytest.raises(WorkflowFailed) as failed:
        await handle.result(timeout=DEADLINE)
    assert failed.value.status == "failed"
    assert failed.value.error.startswith("the workflow's outcome could not be recorded: ")
    expected = "TypeError" if how == "unserializable" else "InvalidOption: request body exceeds"
    assert expected in failed.value.error


async def test_a_durable_sleep_survives_a_server_restart(
    servers: Servers, server: ServerProcess, workers: Workers, client: AsyncClient, tmp_path: Path
) -> None:
    workers.start()
    handle = await wf.app.start(wf.sleeper, "z", 3.0, workflow_id="sleeper")
    wait_until(lambda: len(workers.runs("add", "z-before")) == 1, DEADLINE, "asleep")
    await eventually(lambda: _pending(client, "sleeper", "sleep"), DEADLINE, "sleeping")
    kill9(server)
    restarted = servers.start("--storage", "sqlite", port=server.port, cwd=server.cwd)
    assert restarted.port == server.port
    assert await handle.result(timeout=DEADLINE) == "awake"
    assert [r["key"] for r in workers.runs("add")] == ["z-before", "z-after"]


async def test_a_sleep_past_the_expire_timeout_wakes_a_worker_back_from_a_deploy(
    workers: Workers, client: AsyncClient
) -> None:
    """The timer's activation is due 6 s after it is produced, on a queue whose expire_timeout is 5 s,
    and no worker runs when it comes due: it waits the queue's whole expire timeout from then for the
    worker to come back (docs/semantics.md §5.3, ADR 0033). It was dropped as it came due, and the
    workflow stayed running (issue 45)."""
    await client.create_queue("durable", lease_timeout="3s", expire_timeout="5s")
    worker = workers.start()
    handle = await wf.app.start(wf.sleeper, "d", 6.0, workflow_id="deployed")

    async def timers(n: int) -> bool:
        return len((await client.list_scheduled("durable", 0)).items) == n

    await eventually(lambda: timers(1), DEADLINE, "asleep, its timer scheduled")
    worker.terminate()  # the deploy
    worker.wait(DEADLINE)
    await eventually(lambda: timers(0), DEADLINE, "the timer came due")
    workers.start()
    assert await handle.result(timeout=DEADLINE) == "awake"
    assert [r["key"] for r in workers.runs("add")] == ["d-before", "d-after"]


async def test_signals_before_and_after_the_wait_and_the_timeout(
    workers: Workers, client: AsyncClient
) -> None:
    workers.start()
    early = await wf.app.start(wf.approval, "a", 60.0, workflow_id="early")
    await wf.app.signal("early", "approval", {"ok": 1})  # may arrive before the workflow waits
    await eventually(
        lambda: _pending(client, "early", "signal"), DEADLINE, "waiting"
    )  # now it waits for the second
    await wf.app.signal("early", "approval", {"ok": 2})
    assert await early.result(timeout=DEADLINE) == [{"ok": 1}, {"ok": 2}]
    late = await wf.app.start(wf.approval, "t", 1.0, workflow_id="late")
    assert await late.result(timeout=DEADLINE) == "timed out"


async def test_fan_out_of_100_steps_over_three_workers(workers: Workers, client: AsyncClient) -> None:
    for _ in range(3):
        workers.start()
    handle = await wf.app.start(wf.fan_out, "g", 100, workflow_id="fan")
    assert await handle.result(timeout=DEADLINE) == sum(range(100))
    runs = workers.runs("add")
    assert sorted(r["key"] for r in runs) == sorted(f"g-{i}" for i in range(100))
    assert len({r["pid"] for r in runs}) > 1  # the steps ran in more than one worker


async def test_a_child_workflow_and_cancel_that_reaches_it(workers: Workers, client: AsyncClient) -> None:
    workers.start()
    handle = await wf.app.start(wf.parent, "p", workflow_id="parent")
    assert await handle.result(timeout=DEADLINE) == {"child": [3, 13, 113]}
    assert (await client.workflow_info("parent/1")).status == "completed"
    waiting = await wf.app.start(wf.waits_forever, "w", workflow_id="forever")
    await eventually(lambda: _status(client, "forever/2", "running"), DEADLINE, "child started")
    await wf.app.cancel("forever")
    with pytest.raises(WorkflowFailed) as cancelled:
        await waiting.result(timeout=DEADLINE)
    assert cancelled.value.status == "cancelled"
    assert [r["what"] for r in workers.runs("undo", "w")] == ["first"]
    await eventually(lambda: _status(client, "forever/2", "cancelled"), DEADLINE, "child cancelled")


async def test_a_timeout_fails_a_waiting_workflow_compensates_and_cancels_its_children(
    workers: Workers, client: AsyncClient
) -> None:
    """The server's deadline wakes a workflow waiting on a child that waits for an hour (docs/adr/0047)."""
    workers.start()
    handle = await wf.app.start(wf.waits_forever, "t", workflow_id="timed", timeout="2s")
    with pytest.raises(WorkflowFailed) as failed:
        await handle.result(timeout=DEADLINE)
    assert (failed.value.status, failed.value.error) == (
        "failed",
        "WorkflowTimeout: workflow timed passed its timeout of 2s",
    )
    assert [r["what"] for r in workers.runs("undo", "t")] == ["first"]
    await eventually(lambda: _status(client, "timed/2", "cancelled"), DEADLINE, "child cancelled")


async def test_a_timeout_stops_a_turn_that_runs_past_it(workers: Workers, client: AsyncClient) -> None:
    """A step that outlasts the deadline finishes and is recorded; the reply tells the worker, and the
    workflow's next step never runs."""
    workers.start()
    handle = await wf.app.start(wf.held_in_the_middle, "m", workflow_id="outlasted", timeout="1s")
    wait_until(lambda: len(workers.runs("hold", "m")) == 1, DEADLINE, "the middle step started")
    await eventually(lambda: _past_deadline(client, "outlasted"), DEADLINE, "the deadline passed")
    (workers.records / "release-m").touch()
    with pytest.raises(WorkflowFailed) as failed:
        await handle.result(timeout=DEADLINE)
    assert failed.value.error.startswith("WorkflowTimeout: workflow outlasted passed its timeout of 1s")
    assert [r["key"] for r in workers.runs("add")] == ["m-1"]  # m-3 never ran
    info = await client.workflow_info("outlasted")
    assert [(e.seq, e.state) for e in info.entries] == [(1, "done"), (2, "done")]


async def _past_deadline(client: AsyncClient, workflow_id: str) -> bool:
    """Whether the server's clock is past the workflow's deadline (a signal's sent_at is its time)."""
    await client.signal_workflow(workflow_id, "tick")
    info = await client.workflow_info(workflow_id)
    assert info.deadline is not None
    return any(s.sent_at is not None and s.sent_at >= info.deadline for s in info.signals)


async def test_a_fork_replays_the_steps_before_its_step_and_runs_the_rest(
    workers: Workers, client: AsyncClient
) -> None:
    """DBOS's fork (docs/adr/0048): steps before the fork's step are not run again; the original stays."""
    workers.start()
    original = await wf.app.start(wf.three_steps, "f", workflow_id="forked")
    assert await original.result(timeout=DEADLINE) == [3, 13, 113]
    fork = await wf.app.fork("forked", 3, new_workflow_id="forked-3")
    assert await fork.result(timeout=DEADLINE) == [3, 13, 113]
    assert sorted(r["key"] for r in workers.runs("add")) == ["f-1", "f-2", "f-3", "f-3"]
    info = await client.workflow_info("forked-3")
    assert (info.forked_from, [e.seq for e in info.entries]) == ("forked", [1, 2, 3])
    assert (await client.workflow_info("forked")).fence == 1  # the original was not claimed again


async def test_changed_code_fails_the_workflow_with_non_determinism_until_resumed(
    workers: Workers, client: AsyncClient
) -> None:
    """Once the code is fixed, the failed workflow resumes from its journal (issue 46: it failed for
    good, with no way to run it again)."""
    before = workers.start()
    handle = await wf.app.start(wf.evolving, "e", workflow_id="evolving")
    await eventually(lambda: _pending(client, "evolving", "signal"), DEADLINE, "waiting")
    before.terminate()
    before.wait(DEADLINE)
    broken = workers.start(env={"DURABLE_VARIANT": "renamed"})
    await wf.app.signal("evolving", "go")
    with pytest.raises(WorkflowFailed) as failed:
        await handle.result(timeout=DEADLINE)
    assert failed.value.error.startswith("NonDeterminism: the workflow's code asked for step")
    assert workers.runs("undo", "e") == []  # the new step never ran in place of the recorded one
    assert (await client.workflow_info("evolving")).resumable
    broken.terminate()
    broken.wait(DEADLINE)
    workers.start()  # the fix: the code as it was
    await wf.app.resume("evolving")
    assert await handle.result(timeout=DEADLINE) == 4
    assert [r["key"] for r in workers.runs("add")] == ["e-1", "e-2"]  # the recorded step did not run again
    with pytest.raises(Conflict, match="workflow cannot be resumed; 'evolving' is completed"):
        await wf.app.resume("evolving")


async def test_a_patched_change_deployed_under_running_workflows(
    workers: Workers, client: AsyncClient, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/durable.md, "Changing a workflow's code": the change that fails
    test_changed_code_fails_the_workflow_with_non_determinism_until_resumed, behind ``ctx.patched``,
    deployed with real workers in three steps: a run from before the patch keeps its old code, a run
    started under the patch keeps its new code through the patch's deprecation."""
    before = workers.start()
    old = await wf.app.start(wf.evolving, "old", workflow_id="old")
    await eventually(lambda: _pending(client, "old", "signal"), DEADLINE, "old waiting")
    before.terminate()
    before.wait(DEADLINE)
    replay = ["workflows", "replay", "tests.integration.durable_app:app", "--endpoint", server.url]
    for variant, status in (("renamed", 5), ("patched", 0)):  # what the check before the deploy says
        monkeypatch.setenv("DURABLE_VARIANT", variant)
        assert await asyncio.to_thread(main, replay) == status, variant
    monkeypatch.delenv("DURABLE_VARIANT")
    patched = workers.start(env={"DURABLE_VARIANT": "patched"})
    new = await wf.app.start(wf.evolving, "new", workflow_id="new")
    await eventually(lambda: _pending(client, "new", "signal"), DEADLINE, "new waiting")
    info = await client.workflow_info("new")
    assert [(e.kind, e.name) for e in info.entries[:3]] == [
        ("patch", "undo-first"),
        ("step", wf.undo.name),
        ("step", wf.add.name),
    ]
    await wf.app.signal("old", "go")
    assert await old.result(timeout=DEADLINE) == 4
    assert workers.runs("undo", "old") == []  # the old code: no marker where `add` was recorded
    patched.terminate()
    patched.wait(DEADLINE)
    workers.start(env={"DURABLE_VARIANT": "deprecated"})
    await wf.app.signal("new", "go")
    assert await new.result(timeout=DEADLINE) == 4
    newest = await wf.app.start(wf.evolving, "newest", workflow_id="newest")
    await eventually(lambda: _pending(client, "newest", "signal"), DEADLINE, "newest waiting")
    await wf.app.signal("newest", "go")
    assert await newest.result(timeout=DEADLINE) == 4
    assert [r["key"] for r in workers.runs("undo")] == ["new", "newest"]  # once each, never for old
    assert "patch" not in [e.kind for e in (await client.workflow_info("newest")).entries]


async def test_workers_claim_only_the_runs_of_their_app_version(
    workers: Workers, client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/adr/0049: a run started by version v1 is left by the workers of v2, offered again (not
    failed), until a worker of v1 runs it; runs of v2 and of no version run meanwhile."""
    v2 = workers.start(env={"DURABLE_APP_VERSION": "v2"})
    monkeypatch.setattr(wf.app, "version", "v1")
    old = await wf.app.start(wf.three_steps, "old", workflow_id="old")
    monkeypatch.setattr(wf.app, "version", "v2")
    new = await wf.app.start(wf.fan_out, "new", 3, workflow_id="new")  # dispatched steps too
    monkeypatch.setattr(wf.app, "version", "")
    unversioned = await wf.app.start(wf.three_steps, "any", workflow_id="any")
    assert await new.result(timeout=DEADLINE) == 3
    assert await unversioned.result(timeout=DEADLINE) == [3, 13, 113]
    await eventually(lambda: _offered(client, "old", 2), DEADLINE, "offered to v2 again")
    info = await client.workflow_info("old")
    assert (info.status, info.fence, info.app_version) == ("running", 0, "v1")
    assert workers.runs("add", "old-1") == []
    v1 = workers.start(env={"DURABLE_APP_VERSION": "v1"})
    assert await old.result(timeout=DEADLINE) == [3, 13, 113]
    assert {r["pid"] for r in workers.runs("add") if r["key"].startswith("old-")} == {v1.pid}
    assert {r["pid"] for r in workers.runs("add") if r["key"].startswith("new-")} == {v2.pid}
    listed = await client.list_workflows(app_version="v1")
    assert [(w.workflow_id, w.app_version) for w in listed] == [("old", "v1")]


async def _offered(client: AsyncClient, workflow_id: str, times: int) -> bool:
    """Whether the activation of ``workflow_id`` waits in the queue after being leased ``times``."""
    for partition in range(QUEUE_PARTITIONS):
        for listed in (client.list_items, client.list_scheduled):
            page = await listed("durable", partition)
            if any(i.reference == workflow_id and i.attempts >= times for i in page.items):
                return True
    return False


async def _pending(client: AsyncClient, workflow_id: str, kind: str) -> bool:
    info = await client.workflow_info(workflow_id)
    return any(e.kind == kind and e.state == "pending" for e in info.entries)


async def _status(client: AsyncClient, workflow_id: str, status: str) -> bool:
    try:
        return (await client.workflow_info(workflow_id)).status == status
    except Exception:
        return False


async def test_a_schedule_starts_one_workflow_per_tick(workers: Workers, client: AsyncClient) -> None:
    workers.start()
    await wf.app.schedule("every-second", wf.three_steps, "* * * * * *", "other")
    # Declared again by code at its next start: replaced, not refused as a taken name (issue 45).
    info = await wf.app.schedule("every-second", wf.three_steps, "* * * * * *", "tick")
    assert b"tick" in info.payload and b"other" not in info.payload
    await eventually(lambda: _completed_ticks(client, 2), DEADLINE, "two ticks ran their workflows")
    await client.delete_schedule("every-second")
    ticks = [w for w in await client.list_workflows() if w.workflow_id.startswith("every-second@")]
    assert len({w.workflow_id for w in ticks}) == len(ticks)  # one workflow per tick
    for tick in ticks:
        if tick.status == "completed":
            assert await wf.app.handle(tick.workflow_id).result(timeout=DEADLINE) == [3, 13, 113]


async def _completed_ticks(client: AsyncClient, n: int) -> bool:
    done = [w for w in await client.list_workflows("completed") if w.workflow_id.startswith("every-second@")]
    return len(done) >= n


async def test_a_workflow_continued_as_new_fifty_times_keeps_one_runs_journal(
    workers: Workers, client: AsyncClient
) -> None:
    """docs/durable.md, "Continuing as new": the same id starts over 50 times; the last run's journal
    holds its own entry only, and every step ran once."""
    workers.start()
    handle = await wf.app.start(wf.looping, "c", 0, 50, 0, workflow_id="looping")
    assert await handle.result(timeout=DEADLINE) == sum(range(51))
    assert sorted(r["key"] for r in workers.runs("count")) == sorted(f"c-{i}" for i in range(51))
    info = await client.workflow_info("looping")
    assert (info.runs, info.seq_base, [(e.seq, e.name) for e in info.entries]) == (
        50,
        50,
        [(51, wf.count.name)],
    )


async def test_signals_sent_across_continues_are_each_received_once(
    workers: Workers, client: AsyncClient
) -> None:
    workers.start()
    handle = await wf.app.start(wf.collector, "s", [], 10, workflow_id="collector")
    for n in range(10):  # while it continues, run after run
        await wf.app.signal("collector", "item", f"v{n}", signal_id=f"s{n}")
    await wf.app.signal("collector", "item", "v0", signal_id="s0")  # a retry after a lost reply: once
    assert await handle.result(timeout=DEADLINE) == [f"v{n}" for n in range(10)]
    assert (await client.workflow_info("collector")).runs == 9


async def test_kill_9_around_a_continue_loses_nothing(workers: Workers, client: AsyncClient) -> None:
    """A worker killed after a run's step and before its continue was sent, and one killed in the first
    step of a run that followed a continue: the workflow ends with the same result, and both steps ran
    again (at least once, docs/durable.md): the first one's result goes with the continue, in one
    append (docs/adr/0070); the steps recorded never ran again."""
    for marker in ("die-before-continue-k-3", "die-in-step-k-6"):
        (workers.records / marker).touch()
    handle = await wf.app.start(wf.looping, "k", 0, 8, 0, workflow_id="killed")
    for _ in range(2):
        workers.start().wait(DEADLINE)  # killed at its marker
    workers.start()
    assert await handle.result(timeout=DEADLINE) == sum(range(9))
    runs = sorted(r["key"] for r in workers.runs("count"))
    assert runs == sorted([*(f"k-{i}" for i in range(9)), "k-3", "k-6"])  # the two the kills cut off
    assert (await client.workflow_info("killed")).runs == 8
