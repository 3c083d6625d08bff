"""Queries (docs/durable.md, "Queries"): a workflow's state read by a replay of its journal in the caller,
on a node in the test's process (querator.testing). Nothing runs and nothing is written."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import msgspec
import pytest

from querator.cli import main
from querator.durable import Context, Durable, NonDeterminism, Replayer, UnknownQuery
from querator.testing import Node
from tests.conftest import eventually


async def test_a_query_answers_from_the_journal_without_running_or_writing() -> None:
    app = Durable("http://unused.invalid")
    charged: list[str] = []

    @app.step()
    async def charge(order: str, cents: int) -> str:
        charged.append(order)
        return f"receipt-{order}"

    @app.workflow()
    async def order(ctx: Context, order_id: str) -> str:
        state = {"stage": "charging", "receipts": []}
        ctx.on_query("stage", lambda: state["stage"])
        ctx.on_query("receipts", lambda prefix="": [r for r in state["receipts"] if r.startswith(prefix)])
        state["receipts"].append(await ctx.run(charge, order_id, 500))
        state["stage"] = "waiting for approval"
        await ctx.wait_for_signal("approval")
        state["receipts"].append(await ctx.run(charge, order_id + "-extra", 100))
        state["stage"] = "done"
        return state["stage"]

    async with Node() as node, node.running(app):
        handle = await app.start(order, "o-1", workflow_id="o-1")

        async def waiting() -> bool:
            return any(e.kind == "signal" for e in (await handle.info()).entries)

        await eventually(waiting)
        before = await handle.info()
        assert await handle.query("stage") == "waiting for approval"
        assert await app.query("o-1", "receipts", prefix="receipt-o") == ["receipt-o-1"]
        with pytest.raises(UnknownQuery, match=r"answers no query 'total' \(it answers: receipts, stage\)"):
            await handle.query("total")
        after = await handle.info()
        assert (after.updated_at, after.fence, after.entries) == (
            before.updated_at,
            before.fence,
            before.entries,
        )
        assert charged == ["o-1"]  # the queries ran no step
        await handle.signal("approval")
        assert await handle.result(timeout=timedelta(seconds=30)) == "done"
        assert await handle.query("stage") == "done"  # an ended workflow answers too
        assert charged == ["o-1", "o-1-extra"]

        # Code that no longer matches the journal answers nothing rather than a wrong state.
        changed = Durable(node.url)

        @changed.step(name=charge.name)
        async def charge_twice(order: str, cents: int) -> str:
            return order

        @changed.workflow(name=order.name)
        async def reordered(ctx: Context, order_id: str) -> str:
            ctx.on_query("stage", lambda: "never")
            await ctx.wait_for_signal("approval")
            return ""

        with pytest.raises(NonDeterminism):
            await changed.query("o-1", "stage")
        await changed.close()


QUERY_APP = Durable("http://unused.invalid")


@QUERY_APP.workflow(name="counting")
async def counting(ctx: Context, upto: int) -> int:
    seen = 0
    ctx.on_query("seen", lambda plus=0: seen + plus)
    for _ in range(upto):
        await ctx.wait_for_signal("tick")
        seen += 1
    return seen


async def test_the_cli_prints_a_querys_answer_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``querator workflows query ID NAME --app APP --args JSON``: the answer as JSON; an unknown query is
    a usage error (exit status 2), naming the ones the workflow answers."""
    async with Node() as node, node.running(QUERY_APP):
        handle = await QUERY_APP.start(counting, 3, workflow_id="c-1")
        await handle.signal("tick")

        async def one_seen() -> bool:
            return [e.kind for e in (await handle.info()).entries] == ["signal", "signal"]

        await eventually(one_seen)
        argv = ["workflows", "query", "c-1", "seen", "--app", f"{__name__}:QUERY_APP", "--endpoint", node.url]
        assert await asyncio.to_thread(main, [*argv, "--args", "[10]", "-o", "json"]) == 0
        assert msgspec.json.decode(capsys.readouterr().out) == {
            "workflow_id": "c-1",
            "query": "seen",
            "answer": 11,
        }
        unknown = [*argv[:3], "total", *argv[4:]]
        assert await asyncio.to_thread(main, unknown) == 2
        assert capsys.readouterr().err == (
            "querator: query: workflow c-1 answers no query 'total' (it answers: seen)\n"
        )


async def test_a_query_replays_a_journal_longer_than_one_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """workflows.info answers a page of a journal (10,000 entries; 3 here): a query, a replay check and a
    worker's replay after a resumed turn read every page, or steps past the first would look unrun."""
    monkeypatch.setattr("querator.service._validation.INFO_ENTRIES", 3)
    app = Durable("http://unused.invalid")

    @app.step()
    async def add(n: int) -> int:
        return n + 1

    @app.workflow()
    async def count(ctx: Context, steps: int) -> int:
        state = {"n": 0}
        ctx.on_query("n", lambda: state["n"])
        for _ in range(steps):
            state["n"] = await ctx.run(add, state["n"])
        return state["n"]

    async with Node() as node, node.running(app):
        handle = await app.start(count, 5, workflow_id="c-1")
        assert await handle.result(timeout=timedelta(seconds=30)) == 5
        assert len((await handle.info()).entries) == 3  # one page
        assert await handle.query("n") == 5
        [replayed] = await Replayer(app).replay_node(await app.client(), ["c-1"])
        assert (replayed.then, replayed.error) == ("complete", None)
