"""What a workflow costs the node in requests, counted by route from its own metrics (a node in the
test's process, querator.testing): counts, not times, so they hold on a loaded machine."""

from __future__ import annotations

import re
from datetime import timedelta

import aiohttp

from querator.durable import Context, Durable
from querator.testing import Node

ROUTE_COUNT = re.compile(
    r'^querator_request_duration_seconds_count\{code="2\d\d",route="([^"]+)"\} (\S+)$', re.M
)


async def requests(node: Node) -> dict[str, float]:
    """The node's answered requests so far, by route."""
    async with aiohttp.ClientSession() as session, session.get(f"{node.url}/metrics") as reply:
        text = await reply.text()
    counts: dict[str, float] = {}
    for route, value in ROUTE_COUNT.findall(text):
        counts[route] = counts.get(route, 0.0) + float(value)
    return counts


async def test_a_turn_that_ends_after_a_step_records_both_in_one_append() -> None:
    """Three steps run in one turn: an append per step but the last, whose result goes with the end
    (docs/adr/0070)."""
    app = Durable("http://unused.invalid", concurrency=1)

    @app.step()
    async def add(n: int) -> int:
        return n + 1

    @app.workflow()
    async def three(ctx: Context) -> int:
        n = await ctx.run(add, 0)
        n = await ctx.run(add, n)
        return await ctx.run(add, n)

    async with Node() as node, node.running(app):
        before = await requests(node)
        handle = await app.start(three, workflow_id="three")
        assert await handle.result(timeout=timedelta(seconds=30)) == 3
        after = await requests(node)
        info = await app.client()
        journal = await info.workflow_journal("three")
    assert [(e.seq, e.state, e.value) for e in journal.entries] == [
        (1, "done", b"1"),
        (2, "done", b"2"),
        (3, "done", b"3"),
    ]
    spent = {route: after.get(route, 0.0) - before.get(route, 0.0) for route in after}
    assert spent["/v1/workflows.claim"] == 1
    assert spent["/v1/workflows.append"] == 3
    # The ending completed the activation (docs/adr/0070): the worker sends no complete of its own.
    assert spent.get("/v1/queue.complete", 0.0) == 0


async def test_a_step_runs_only_once_the_steps_before_it_are_recorded() -> None:
    """A step's result waits for the turn's next append, but never past the start of another step, here
    or dispatched: a crash then runs again only the last step (docs/durable.md, Guarantees)."""
    app = Durable("http://unused.invalid", concurrency=2)

    @app.step()
    async def recorded() -> list[int]:
        journal = await (await app.client()).workflow_journal("ordered")
        return [e.seq for e in journal.entries if e.state == "done"]

    @app.workflow()
    async def ordered(ctx: Context) -> list[object]:
        first = await ctx.run(recorded)
        second = await ctx.run(recorded)
        return [first, second, await ctx.gather(ctx.run(recorded))]

    async with Node() as node, node.running(app):
        handle = await app.start(ordered, workflow_id="ordered")
        assert await handle.result(timeout=timedelta(seconds=30)) == [[], [1], [[1, 2]]]
