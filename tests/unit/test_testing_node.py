"""querator.testing: a node in the test's process whose time skips, as users' own tests use it."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from querator.client import AsyncClient
from querator.durable import Context, Durable, WorkflowFailed
from querator.testing import Node, SkippingClock
from querator.worker import Worker
from tests.conftest import eventually

CHECKOUT_EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "durable_checkout.py"


async def test_a_delayed_task_runs_once_its_delay_is_skipped() -> None:
    worker = Worker("http://unused.invalid")
    ran: list[str] = []

    @worker.task(queue="emails", create_queue=True)
    async def send(to: str) -> None:
        ran.append(to)

    async with Node() as node, node.running(worker):
        await send.enqueue("a@example.com", delay=timedelta(days=2))
        async with AsyncClient(node.url) as client:
            stats = await client.stats("emails")
        assert stats.logical_queues[0].partitions[0].scheduled == 1
        assert ran == []
        await node.skip(timedelta(days=2))
        await eventually(lambda: _true(ran == ["a@example.com"]))


async def test_a_workflow_sleeping_two_days_ends_after_a_skip() -> None:
    app = Durable("http://unused.invalid")

    @app.step()
    async def stamp(label: str) -> str:
        return label.upper()

    @app.workflow()
    async def slow(ctx: Context, label: str) -> str:
        first = await ctx.run(stamp, label)
        await ctx.sleep(timedelta(days=2))
        return first + "!"

    async with Node() as node, node.running(app):
        handle = await app.start(slow, "done", workflow_id="w-1")
        await eventually(lambda: _sleeping(app))
        await node.skip(timedelta(days=2, seconds=1))
        assert await handle.result(timeout=timedelta(seconds=30)) == "DONE!"


async def test_a_skip_runs_only_the_timers_it_passes() -> None:
    clock = SkippingClock()
    fired: list[str] = []
    later = clock.call_at(clock.now() + 3_600_000_000, lambda: fired.append("hour"))
    clock.call_at(clock.now() + 86_400_000_000, lambda: fired.append("day"))
    cancelled = clock.call_at(clock.now() + 60_000_000, lambda: fired.append("cancelled"))
    cancelled.cancel()
    clock.skip(7200)
    await eventually(lambda: _true(fired == ["hour"]))
    later.cancel()  # harmless once it ran
    with pytest.raises(ValueError, match="only skips forward"):
        clock.skip(-1)
    clock.skip(86_400)
    await eventually(lambda: _true(fired == ["hour", "day"]))


def test_the_pytest_plugin_gives_a_users_tests_a_node(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["querator.testing.fixtures"]\n')
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            from querator.client import AsyncClient

            async def test_a_queue_on_the_node(querator_node):
                async with AsyncClient(querator_node.url) as client:
                    await client.create_queue("q")
                    await client.produce("q", [b"x"])
                    assert (await client.stats("q")).logical_queues[0].partitions[0].total == 1
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


async def test_the_docs_checkout_refunds_an_order_nobody_approves_within_two_days(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/examples/durable_checkout.py as a user's test runs it: its two-day wait for approval ends
    after a skip, and the saga refunds the charge."""
    spec = importlib.util.spec_from_file_location("durable_checkout", CHECKOUT_EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    app: Durable = example.app

    async def waits_for_approval() -> bool:
        info = await app.handle("checkout-o-3").info()
        return any(entry.kind == "signal" for entry in info.entries)

    async with Node() as node, node.running(app):
        handle = await app.start(example.checkout, "o-3", 900, workflow_id="checkout-o-3")
        await eventually(waits_for_approval)
        await node.skip(timedelta(days=2, seconds=1))
        with pytest.raises(WorkflowFailed, match="SignalTimeout"):
            await handle.result(timeout=timedelta(seconds=30))
    assert capsys.readouterr().out.splitlines() == ["o-3: charged 900 cents", "receipt-o-3: refunded"]


async def _true(value: bool) -> bool:
    await asyncio.sleep(0)
    return value


async def _sleeping(app: Durable) -> bool:
    info = await app.handle("w-1").info()
    return any(entry.kind == "sleep" for entry in info.entries)
