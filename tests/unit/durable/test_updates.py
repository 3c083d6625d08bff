"""Updates (docs/durable.md, "Updates"; docs/adr/0060): validated in the caller on a replay, recorded in
the journal by the turn that takes them, answered with the handler's value; on a node in the test's
process (querator.testing) with the app's worker running beside it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from querator.cli import main
from querator.durable import (
    Context,
    Durable,
    UnknownUpdate,
    UpdateFailed,
    UpdateRejected,
    UpdateTimeout,
)
from querator.errors import InvalidOption
from querator.testing import Node
from tests.conftest import eventually

APP = Durable("http://unused.invalid")
DEADLINE = timedelta(seconds=30)


@APP.step()
async def pack(items: list[str]) -> str:
    return "+".join(items)


@APP.workflow(name="cart")
async def cart(ctx: Context, limit: int) -> str:
    items: list[str] = []

    def add(item: str, times: int = 1) -> int:
        if item == "boom":
            raise RuntimeError("the handler failed")
        items.extend([item] * times)
        return len(items)

    def check(item: str, times: int = 1) -> None:
        if not item:
            raise ValueError("an item cannot be empty")
        if len(items) + times > limit:
            raise ValueError(f"the cart holds {limit} items")

    ctx.on_update("add", add, validator=check)
    ctx.on_query("items", lambda: list(items))
    await ctx.wait_for_signal("checkout")
    return await ctx.run(pack, items)  # a later step sees what the updates did


def kinds(entries: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.kind, e.name, e.state) for e in entries]


async def waiting(app: Durable, workflow_id: str) -> None:
    """Until the workflow has suspended at its wait (its first turn ran)."""

    async def suspended() -> bool:
        info = await app.handle(workflow_id).info()
        return any(e.kind == "signal" for e in info.entries) and info.claim_deadline is None

    await eventually(suspended)


async def test_an_accepted_update_answers_with_the_handlers_value_and_changes_the_state() -> None:
    async with Node() as node, node.running(APP):
        handle = await APP.start(cart, 5, workflow_id="c-1")
        await waiting(APP, "c-1")
        assert await handle.update("add", "apple") == 1
        assert await APP.update("c-1", "add", "pear", 2) == 3
        assert await handle.query("items") == ["apple", "pear", "pear"]  # a replay applies them again
        info = await handle.info()
        assert kinds(info.entries) == [
            ("signal", "checkout", "pending"),
            ("update", "add", "done"),
            ("update_result", "add", "done"),
            ("update", "add", "done"),
            ("update_result", "add", "done"),
        ]
        assert msgspec.json.decode(info.entries[1].value) == ["apple"]  # the arguments, recorded
        assert msgspec.json.decode(info.entries[2].value) == 1  # the answer
        assert [(u.name, u.taken_by) for u in info.updates] == [("add", 2), ("add", 4)]
        await handle.signal("checkout")
        assert await handle.result(timeout=DEADLINE) == "apple+pear+pear"


async def test_a_rejected_update_raises_in_the_caller_and_is_recorded_nowhere() -> None:
    async with Node() as node, node.running(APP):
        handle = await APP.start(cart, 1, workflow_id="c-2")
        await waiting(APP, "c-2")
        before = await handle.info()
        with pytest.raises(UpdateRejected, match="ValueError: the cart holds 1 items"):
            await handle.update("add", "apple", 2)
        with pytest.raises(UpdateRejected, match="ValueError: an item cannot be empty"):
            await handle.update("add", "")
        with pytest.raises(UnknownUpdate, match=r"takes no update 'remove' \(it takes: add\)"):
            await handle.update("remove", "apple")
        after = await handle.info()
        assert (after.updates, after.entries, after.updated_at) == ([], before.entries, before.updated_at)
        assert await handle.update("add", "apple") == 1  # within the limit
        with pytest.raises(UpdateRejected):
            await handle.update("add", "pear")  # the validator sees the state the first one left


async def test_a_failing_handler_answers_its_error_and_the_workflow_goes_on() -> None:
    async with Node() as node, node.running(APP):
        handle = await APP.start(cart, 5, workflow_id="c-3")
        await waiting(APP, "c-3")
        with pytest.raises(UpdateFailed, match="RuntimeError: the handler failed"):
            await handle.update("add", "boom")
        assert await handle.update("add", "fig") == 1
        await handle.signal("checkout")
        assert await handle.result(timeout=DEADLINE) == "fig"


async def test_an_update_of_a_finished_workflow_is_refused() -> None:
    async with Node() as node, node.running(APP):
        handle = await APP.start(cart, 5, workflow_id="c-4")
        await handle.signal("checkout")
        assert await handle.result(timeout=DEADLINE) == ""
        with pytest.raises(InvalidOption, match="workflow is finished; 'c-4' is completed"):
            await handle.update("add", "late")
        assert (await handle.info()).updates == []


async def test_an_update_not_answered_in_time_stays_recorded_and_is_answered_once_asked_again() -> None:
    """With no worker running, the wait ends with ``UpdateTimeout``; asked again with its id once a
    worker runs, the same update is answered, once."""
    async with Node() as node:
        async with node.running(APP):
            handle = await APP.start(cart, 5, workflow_id="c-5")
            await waiting(APP, "c-5")
        with pytest.raises(UpdateTimeout, match="it stays recorded as u-1"):
            await handle.update("add", "kiwi", update_id="u-1", timeout="100ms")
        assert [(u.id, u.taken_by) for u in (await handle.info()).updates] == [("u-1", 0)]
        async with node.running(APP):
            assert await handle.update("add", "kiwi", update_id="u-1") == 1
            assert await handle.update("add", "kiwi", update_id="u-1") == 1  # the same answer again
            assert await handle.query("items") == ["kiwi"]
            assert [e.kind for e in (await handle.info()).entries].count("update") == 1


async def test_the_cli_sends_an_update_validated_with_the_apps_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``querator workflows update ID NAME --args JSON [--app APP]``: the answer; a rejection with
    ``--app`` is a usage error (exit status 2) and sends nothing."""
    async with Node() as node, node.running(APP):
        handle = await APP.start(cart, 1, workflow_id="c-6")
        await waiting(APP, "c-6")
        argv = ["workflows", "update", "c-6", "add", "--endpoint", node.url, "-o", "json"]
        app = ["--app", f"{__name__}:APP"]
        assert await asyncio.to_thread(main, [*argv, *app, "--args", '["a", 2]']) == 2
        assert "ValueError: the cart holds 1 items" in capsys.readouterr().err
        assert await asyncio.to_thread(main, [*argv, *app, "--args", '["a"]', "--update-id", "cli-1"]) == 0
        reply = msgspec.json.decode(capsys.readouterr().out)
        assert (reply["update_id"], reply["state"], reply["seq"]) == ("cli-1", "done", 3)
        assert await handle.query("items") == ["a"]
