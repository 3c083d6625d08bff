"""Queries (docs/durable.md, "Queries"): a workflow's state read by a replay of its journal in the caller,
on a node in the test's process (querator.testing). Nothing runs and nothing is written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from querator.durable import Context, Durable, NonDeterminism, UnknownQuery
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
