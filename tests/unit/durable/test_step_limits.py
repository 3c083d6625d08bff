"""A step's concurrency and rate limits (docs/durable.md, "Steps"), on a node in the test's process
(querator.testing): dispatched and inline runs wait for them, per worker process or across the cluster."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from querator.client import AsyncClient
from querator.durable import Context, Durable
from querator.testing import Node
from tests.conftest import eventually


async def test_no_more_runs_of_a_step_at_once_than_its_concurrency() -> None:
    app = Durable("http://unused.invalid", concurrency=8)
    running = 0
    most = 0
    all_in = asyncio.Event()

    @app.step(concurrency=2)
    async def slow(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == 6:
            all_in.set()
        # Waits for every run to be in (which only happens without a limit), or a while.
        await asyncio.wait([asyncio.ensure_future(all_in.wait())], timeout=0.2)
        running -= 1
        return n

    @app.workflow()
    async def fan_out(ctx: Context) -> list[int]:
        return await ctx.gather(*(ctx.run(slow, n) for n in range(6)))

    async with Node() as node, node.running(app):
        handle = await app.start(fan_out, workflow_id="fan-out")
        assert await handle.result(timeout=timedelta(seconds=30)) == list(range(6))
    assert most == 2


async def test_a_rate_limited_step_waits_for_its_next_start_holding_its_item() -> None:
    app = Durable("http://unused.invalid", concurrency=8)
    runs: list[str] = []

    @app.step(rate_limit="1/h", rate_key=lambda customer: customer)
    async def charge(customer: str) -> str:
        runs.append(customer)
        return customer

    @app.step()
    async def note(text: str) -> str:
        return text

    @app.workflow()
    async def billing(ctx: Context) -> list[str]:
        return await ctx.gather(ctx.run(charge, "a"), ctx.run(charge, "a"), ctx.run(charge, "b"))

    @app.workflow()
    async def other(ctx: Context) -> str:
        return await ctx.run(note, "done")

    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        await app.start(billing, workflow_id="billing")

        async def one_waits() -> bool:
            stats = await client.stats(app.queue)
            leased = sum(p.total_leased for lq in stats.logical_queues for p in lq.partitions)
            return sorted(runs) == ["a", "b"] and leased == 1

        await eventually(one_waits)  # key "b" ran at once; the second "a" holds its item, waiting
        handle = await app.start(other, workflow_id="other")
        assert await handle.result(timeout=timedelta(seconds=30)) == "done"  # the worker goes on
        info = await client.workflow_info("billing")
        assert info.status == "running" and sorted(runs) == ["a", "b"]


async def test_a_cluster_wide_rate_limit_holds_an_inline_step_in_its_turn() -> None:
    app = Durable("http://unused.invalid")
    runs: list[int] = []

    @app.step(rate_limit="1/h", rate_scope="cluster")
    async def call_api(n: int) -> int:
        runs.append(n)
        return n

    @app.workflow()
    async def twice(ctx: Context) -> list[int]:
        return [await ctx.run(call_api, 1), await ctx.run(call_api, 2)]

    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        await app.start(twice, workflow_id="twice")

        async def first_recorded() -> bool:
            info = await client.workflow_info("twice")
            return [e.state for e in info.entries] == ["done"]

        await eventually(first_recorded)
        info = await client.workflow_info("twice")
        assert info.status == "running" and info.claim_deadline is not None  # the turn waits, claimed
        assert runs == [1]


def test_limits_are_checked_when_the_step_is_declared() -> None:
    app = Durable("http://unused.invalid")

    async def f() -> None: ...

    for options, message in [
        ({"concurrency": 0}, "durable: concurrency must be at least 1, not 0"),
        ({"rate_limit": "5/d"}, "durable: rate_limit '5/d' is not '<n>/s', '<n>/m' or '<n>/h' with n >= 1"),
        ({"rate_key": str}, "durable: rate_key needs a rate_limit"),
        (
            {"rate_limit": "1/s", "rate_scope": "node"},
            "durable: rate_scope 'node' is not one of process, cluster",
        ),
        ({"rate_scope": "cluster"}, "durable: rate_scope needs a rate_limit"),
    ]:
        with pytest.raises(ValueError) as raised:
            app.step(**options)(f)  # type: ignore[call-overload]
        assert str(raised.value) == message
