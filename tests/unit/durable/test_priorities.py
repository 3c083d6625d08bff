"""Runs of a durable app with priority levels (docs/durable.md, "Priorities"), on a node in the test's
process (querator.testing): a one-slot worker takes the higher levels first, and a child keeps its
parent's level."""

from __future__ import annotations

from datetime import timedelta

import pytest

from querator.client import AsyncClient
from querator.durable import Context, Durable
from querator.testing import Node


async def test_a_one_slot_worker_runs_the_high_run_first_and_children_keep_its_level() -> None:
    app = Durable("http://unused.invalid", concurrency=1, priorities=True)
    ran: list[str] = []

    @app.step()
    async def note(label: str) -> str:
        ran.append(label)
        return label

    @app.workflow()
    async def child(ctx: Context, label: str) -> str:
        return await ctx.run(note, label)

    @app.workflow()
    async def job(ctx: Context, label: str) -> str:
        await ctx.run(note, label)
        return await ctx.child(child, f"{label}'s child")

    async with Node() as node:
        app.worker.connect(node.url)  # started before its worker runs: one slot sees them all waiting
        handles = [await app.start(job, f"n{n}", workflow_id=f"n{n}") for n in range(2)]
        handles.append(await app.start(job, "low", workflow_id="low", priority="low"))
        handles.append(await app.start(job, "high", workflow_id="high", priority="high"))
        async with node.running(app), AsyncClient(node.url) as client:
            for handle in handles:
                await handle.result(timeout=timedelta(seconds=30))
            queues = {w.workflow_id: w.queue_name for w in await client.list_workflows()}
    assert ran[0] == "high"  # started last, run first
    assert ran.index("low") > max(ran.index("n0"), ran.index("n1"))
    assert (queues["high"], queues["high/2"], queues["low"], queues["n0"]) == (
        "durable.high",
        "durable.high",
        "durable.low",
        "durable",
    )


async def test_a_priority_needs_an_app_with_priorities_and_a_known_level() -> None:
    plain = Durable("http://unused.invalid")
    levels = Durable("http://unused.invalid", priorities=True)
    for app in (plain, levels):

        @app.workflow(name="w")
        async def w(ctx: Context) -> None: ...

    with pytest.raises(
        ValueError, match=r"^durable: a run's priority needs an app made with priorities=True$"
    ):
        await plain.start("w", priority="high")
    with pytest.raises(ValueError, match=r"^durable: priority 'urgent' is not one of high, normal, low$"):
        await levels.start("w", priority="urgent")
