"""querator.durable.Replayer: recorded journals (tests/unit/durable/journals/checkout.json, recorded by
tests/unit/durable/recorded.py) replayed against changed code, with no server; and journals read from a
node."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from querator.cli import main
from querator.client import AsyncClient
from querator.durable import Context, Durable, NonDeterminism, Replayer, Step, dump, load
from querator.testing import Node
from querator.wire import encode_json
from querator.wire import messages as m
from querator.wire.workflows import COMPLETE, FAIL, PATCH, SUSPEND
from tests.conftest import eventually
from tests.unit.durable.recorded import JOURNALS, checkout_app

DONE, WAITING = load(JOURNALS)


@dataclass
class Steps:
    charge: Step[..., Any]
    pack: Step[..., Any]
    ship: Step[..., Any]
    bill: Step[..., Any]
    notify: Step[..., Any]


async def _named(*args: Any) -> str:
    return "x"


Body = Callable[[Context, Steps, str], Awaitable[Any]]


def app_running(body: Body) -> Durable:
    """An app whose ``checkout`` workflow runs ``body``, with the steps the recorded one had and two more."""
    app = Durable("http://unused.invalid")
    steps = Steps(*(app.step(name=name)(_named) for name in ("charge", "pack", "ship", "bill", "notify")))

    @app.workflow(name="checkout")
    async def checkout(ctx: Context, order: str) -> Any:
        return await body(ctx, steps, order)

    return app


async def recorded(ctx: Context, s: Steps, order: str) -> list[str]:
    """The code the journals were recorded with (``recorded.checkout_app``), spelled over ``Steps``."""
    receipt = await ctx.run(s.charge, order)
    await ctx.sleep(timedelta(days=1))
    decision = await ctx.wait_for_signal("approval")
    parts = await ctx.gather(ctx.run(s.pack, order, 1), ctx.run(s.pack, order, 2))
    return [receipt, decision, *parts, await ctx.run(s.ship, order)]


async def other_result(ctx: Context, s: Steps, order: str) -> str:
    """What the code does between durable calls changed: deterministic all the same."""
    values = await recorded(ctx, s, order)
    return ",".join(reversed(values))


async def renamed_step(ctx: Context, s: Steps, order: str) -> None:
    await ctx.run(s.bill, order)
    await recorded(ctx, s, order)


async def sleep_first(ctx: Context, s: Steps, order: str) -> None:
    await ctx.sleep(timedelta(days=1))
    await ctx.run(s.charge, order)


async def step_added_at_the_end(ctx: Context, s: Steps, order: str) -> None:
    await recorded(ctx, s, order)
    await ctx.run(s.notify, order)


async def step_before_the_signal(ctx: Context, s: Steps, order: str) -> None:
    await ctx.run(s.charge, order)
    await ctx.sleep(timedelta(days=1))
    await ctx.run(s.notify, order)
    await ctx.wait_for_signal("approval")


async def last_step_removed(ctx: Context, s: Steps, order: str) -> str:
    await ctx.run(s.charge, order)
    await ctx.sleep(timedelta(days=1))
    await ctx.wait_for_signal("approval")
    await ctx.gather(ctx.run(s.pack, order, 1), ctx.run(s.pack, order, 2))
    return "no label"


async def fails_after_the_signal(ctx: Context, s: Steps, order: str) -> None:
    await ctx.run(s.charge, order)
    await ctx.sleep(timedelta(days=1))
    await ctx.wait_for_signal("approval")
    raise ValueError("refused")


async def patched_bill_first(ctx: Context, s: Steps, order: str) -> Any:
    """``renamed_step`` behind a patch: runs recorded without it keep their code."""
    if ctx.patched("bill-first"):
        await ctx.run(s.bill, order)
    return await recorded(ctx, s, order)


async def deprecated_bill_first(ctx: Context, s: Steps, order: str) -> Any:
    """The patch's second step: the old branch removed, the marker's place kept."""
    ctx.deprecate_patch("bill-first")
    await ctx.run(s.bill, order)
    return await recorded(ctx, s, order)


async def patched_before_the_signal(ctx: Context, s: Steps, order: str) -> None:
    """``step_before_the_signal`` behind a patch."""
    await ctx.run(s.charge, order)
    await ctx.sleep(timedelta(days=1))
    if ctx.patched("notify"):
        await ctx.run(s.notify, order)
    await ctx.wait_for_signal("approval")


@dataclass(frozen=True)
class Case:
    body: Body
    done: tuple[str, str | None]
    """How the completed journal replays: the turn's ending, and the NonDeterminism's message (a regex)
    or None."""
    waiting: tuple[str, str | None]
    """The same for the journal of the workflow waiting for its signal."""


UNREACHED_PACK = r"^the journal records step 'pack' at seq 4, which the workflow's code no longer reaches"
MISMATCH_AT_1 = r"^the workflow's code asked for {} at seq 1, but its journal records step 'charge' there$"

CASES = {
    "unchanged": Case(recorded, (COMPLETE, None), (SUSPEND, None)),
    "other result": Case(other_result, (COMPLETE, None), (SUSPEND, None)),
    "renamed step": Case(
        renamed_step, (FAIL, MISMATCH_AT_1.format("step 'bill'")), (FAIL, MISMATCH_AT_1.format("step 'bill'"))
    ),
    "sleep first": Case(
        sleep_first,
        (FAIL, MISMATCH_AT_1.format("sleep 'sleep'")),
        (FAIL, MISMATCH_AT_1.format("sleep 'sleep'")),
    ),
    "step added at the end": Case(
        step_added_at_the_end,
        (
            SUSPEND,
            r"^the workflow completed, but its code now asks for step 'notify' at seq 7, which its journal "
            r"does not hold$",
        ),
        (SUSPEND, None),  # still running: the code past its journal is what it will do next
    ),
    "step before the signal": Case(
        step_before_the_signal,
        (FAIL, r"asked for step 'notify' at seq 3, but its journal records signal 'approval' there$"),
        (FAIL, r"asked for step 'notify' at seq 3, but its journal records signal 'approval' there$"),
    ),
    "last step removed": Case(
        last_step_removed,
        (
            COMPLETE,
            r"^the journal records step 'ship' at seq 6, which the workflow's code no longer reaches \(it "
            r"made 5 durable calls\)$",
        ),
        (SUSPEND, None),
    ),
    "patched step before the first": Case(patched_bill_first, (COMPLETE, None), (SUSPEND, None)),
    "patched step before the signal": Case(
        patched_before_the_signal, (COMPLETE, UNREACHED_PACK), (SUSPEND, None)
    ),
    "patch deprecated under runs from before it": Case(
        deprecated_bill_first,
        (FAIL, MISMATCH_AT_1.format("step 'bill'")),
        (FAIL, MISMATCH_AT_1.format("step 'bill'")),
    ),
    "fails after the signal": Case(
        fails_after_the_signal,
        (FAIL, UNREACHED_PACK),
        (SUSPEND, None),
    ),
}


@pytest.mark.parametrize("journal", [DONE, WAITING], ids=["completed", "waiting"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_a_recorded_journal_replayed_against_changed_code(case: Case, journal: m.WorkflowInfo) -> None:
    then, error = case.done if journal is DONE else case.waiting
    replayed = await Replayer(app_running(case.body)).check(journal)
    assert (replayed.workflow_id, replayed.name, replayed.then) == (journal.workflow_id, "checkout", then)
    if error is None:
        assert replayed.error is None
    else:
        assert isinstance(replayed.error, NonDeterminism)
        assert re.search(error, str(replayed.error)), str(replayed.error)


def marked(journal: m.WorkflowInfo) -> m.WorkflowInfo:
    """``journal`` as ``patched_bill_first`` records it: the marker of ``bill-first`` at seq 1, then
    ``bill`` and the recorded entries, two seqs later."""
    shifted = [msgspec.structs.replace(e, seq=e.seq + 2) for e in journal.entries]
    marker = m.WorkflowEntry(seq=1, kind=PATCH, name="bill-first", state="done")
    bill = m.WorkflowEntry(seq=2, kind="step", name="bill", state="done", value=b'"x"')
    return msgspec.structs.replace(journal, entries=[marker, bill, *shifted])


MARKER_AT_1 = r"^the workflow's code asked for {} at seq 1, but its journal records patch 'bill-first' there$"

MARKED_CASES = {
    "patched": Case(patched_bill_first, (COMPLETE, None), (SUSPEND, None)),
    "deprecated": Case(deprecated_bill_first, (COMPLETE, None), (SUSPEND, None)),
    "deprecation removed too soon": Case(
        renamed_step,
        (FAIL, MARKER_AT_1.format("step 'bill'")),
        (FAIL, MARKER_AT_1.format("step 'bill'")),
    ),
    "rolled back": Case(
        recorded, (FAIL, MARKER_AT_1.format("step 'charge'")), (FAIL, MARKER_AT_1.format("step 'charge'"))
    ),
}


@pytest.mark.parametrize("journal", [DONE, WAITING], ids=["completed", "waiting"])
@pytest.mark.parametrize("case", MARKED_CASES.values(), ids=MARKED_CASES.keys())
async def test_a_journal_recorded_with_a_patch_replayed(case: Case, journal: m.WorkflowInfo) -> None:
    """docs/durable.md, "Changing a workflow's code": a run that took a patch keeps taking it, through
    its deprecation; removing the deprecation (or the patch) while such runs are left breaks them."""
    then, error = case.done if journal is DONE else case.waiting
    replayed = await Replayer(app_running(case.body)).check(marked(journal))
    assert replayed.then == then
    if error is None:
        assert replayed.error is None
    else:
        assert re.search(error, str(replayed.error)), str(replayed.error)


async def test_a_new_run_records_the_patch_and_takes_its_code() -> None:
    app = app_running(patched_bill_first)
    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        await app.start("checkout", "o-1", workflow_id="new")
        await eventually(lambda: _sleeping_after(client, "new", 3))
        info = await client.workflow_info("new")
    assert [(e.seq, e.kind, e.name, e.state) for e in info.entries] == [
        (1, PATCH, "bill-first", "done"),
        (2, "step", "bill", "done"),
        (3, "step", "charge", "done"),
        (4, "sleep", "sleep", "pending"),
    ]
    assert (await Replayer(app).replay(info)).then == SUSPEND


async def _sleeping_after(client: AsyncClient, workflow_id: str, seq: int) -> bool:
    info = await client.workflow_info(workflow_id)
    return any(e.kind == "sleep" and e.seq == seq + 1 for e in info.entries)


def test_a_patch_needs_an_id() -> None:
    ctx = Context(app_running(patched_bill_first), cast(AsyncClient, None), WAITING, "30s")
    with pytest.raises(ValueError, match="a patch's id cannot be empty"):
        ctx.patched("")


async def test_replay_raises_what_check_reports() -> None:
    assert (await Replayer(checkout_app()).replay(DONE)).then == COMPLETE
    with pytest.raises(NonDeterminism, match=r"asked for step 'bill' at seq 1"):
        await Replayer(app_running(renamed_step)).replay(DONE)


async def test_a_journal_of_a_workflow_the_app_does_not_define() -> None:
    [replayed] = await Replayer(Durable("http://unused.invalid")).replay_all([WAITING])
    assert replayed.then == ""
    assert str(replayed.error) == "workflow waiting runs 'checkout', which the app does not define"


def test_journals_round_trip_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "journals.json"
    path.write_bytes(dump([DONE, WAITING]))
    assert load(path) == [DONE, WAITING]
    shown = tmp_path / "shown.json"  # as `querator workflows show done > shown.json` writes it
    shown.write_bytes(msgspec.json.format(encode_json(DONE), indent=2))
    assert load(shown) == [DONE]


async def test_journals_read_from_a_node() -> None:
    """A change checked against the running workflows of a node, before it is deployed there."""
    app = checkout_app()
    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        for order in ("o-1", "o-2", "o-3"):
            await app.start("checkout", order, workflow_id=f"w-{order}")
        await eventually(lambda: _all_sleeping(client, 3))
        unchanged = await Replayer(checkout_app()).replay_node(client)
        # Inserted after the sleep, where they wait: they would go on well with this code.
        later = await Replayer(app_running(step_before_the_signal)).replay_node(client)
        changed = await Replayer(app_running(sleep_first)).replay_node(client)
        one = await Replayer(app_running(renamed_step)).replay_node(client, ["w-o-2"])
    assert [(r.workflow_id, r.then, r.error) for r in unchanged] == [
        (f"w-o-{n}", SUSPEND, None) for n in (1, 2, 3)
    ]
    assert [(r.then, r.error) for r in later] == [(SUSPEND, None)] * 3
    assert [r.workflow_id for r in changed if isinstance(r.error, NonDeterminism)] == [
        "w-o-1",
        "w-o-2",
        "w-o-3",
    ]
    assert [(r.workflow_id, r.then) for r in one] == [("w-o-2", FAIL)]


async def _all_sleeping(client: AsyncClient, count: int) -> bool:
    """``count`` workflows sleep through their day: their journals hold the charge and the sleep."""
    infos = [await client.workflow_info(wf.workflow_id) for wf in await client.list_workflows()]
    return len(infos) == count and all(len(i.entries) == 2 for i in infos)


RECORDED_APP = checkout_app()
CHANGED_APP = app_running(sleep_first)
PATCHED_APP = app_running(patched_bill_first)


@pytest.mark.parametrize(
    ("app", "status", "errors"),
    [
        ("RECORDED_APP", 0, ["", ""]),
        ("CHANGED_APP", 5, [MISMATCH_AT_1.format("sleep 'sleep'")] * 2),
        ("PATCHED_APP", 0, ["", ""]),
    ],
    ids=["unchanged", "changed", "changed behind a patch"],
)
def test_the_cli_replays_a_file(
    app: str, status: int, errors: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``querator workflows replay APP --file F`` before a deploy: exit status 5 on non-determinism."""
    argv = [
        "workflows",
        "replay",
        f"{__name__}:{app}",
        "--file",
        str(JOURNALS),
        "--endpoint",
        "http://unused.invalid",
    ]
    assert main(argv) == status
    lines = [msgspec.json.decode(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["workflow_id"], r["name"]) for r in lines] == [("done", "checkout"), ("waiting", "checkout")]
    assert all(
        re.search(e, r["error"]) if e else r["error"] == "" for e, r in zip(errors, lines, strict=True)
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "replay: 'nope' is not module:attribute"),
        (
            [f"{__name__}:Steps"],
            "replay: 'tests.unit.durable.test_replayer:Steps' is a type, not a querator.durable.Durable",
        ),
        ([f"{__name__}:RECORDED_APP", "--file", "/nonexistent.json"], "replay: [Errno 2]"),
    ],
    ids=["not module:attribute", "not an app", "no such file"],
)
def test_the_cli_refuses_what_it_cannot_replay(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["workflows", "replay", *argv, "--endpoint", "http://unused.invalid"]) == 2
    assert capsys.readouterr().err.startswith(f"querator: {message}")
