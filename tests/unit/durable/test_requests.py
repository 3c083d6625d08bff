"""What a workflow costs the node in requests, counted by route from its own metrics (a node in the
test's process, querator.testing): counts, not times, so they hold on a loaded machine."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from querator.client import AsyncClient
from querator.durable import Context, Durable
from querator.testing import Node
from querator.wire import messages as m

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
    assert spent["/v1/workflows.append"] == 3
    # The ending completed the activation (docs/adr/0070): the worker sends no complete of its own.
    assert spent.get("/v1/queue.complete", 0.0) == 0
    # Its lease claimed the workflow (docs/adr/0071): no claim of its own, no lease but that one.
    assert spent.get("/v1/workflows.claim", 0.0) == 0
    assert spent["/v1/workflows.lease"] == 1
    assert spent.get("/v1/queue.lease", 0.0) == 0


async def test_a_worker_claims_on_its_own_from_a_node_without_the_claiming_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nodes are upgraded before workers, but a worker newer than its node is not stuck: the node
    answers the route it does not know 501, and the worker leases and claims apart (docs/adr/0071)."""

    async def older_node(
        client: AsyncClient, queue: str, *args: Any, **kwargs: Any
    ) -> m.WorkflowsLeaseResponse:
        """A route this node does not know, as an older node does not know workflows.lease."""
        asked = m.WorkflowsLeaseRequest(queue_name=queue)
        return await client.call("/v1/workflows.nosuch", asked, m.WorkflowsLeaseResponse)

    monkeypatch.setattr(AsyncClient, "lease_workflows", older_node)
    app = Durable("http://unused.invalid", concurrency=1)

    @app.step()
    async def add(n: int) -> int:
        return n + 1

    @app.workflow()
    async def two(ctx: Context) -> int:
        return await ctx.run(add, await ctx.run(add, 0))

    async with Node() as node, node.running(app):
        handles = [await app.start(two, workflow_id=f"two-{n}") for n in range(2)]
        assert [await h.result(timeout=timedelta(seconds=30)) for h in handles] == [2, 2]
        spent = await requests(node)
    assert spent["/v1/workflows.claim"] == 2
    assert spent.get("/v1/workflows.lease", 0.0) == 0


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
