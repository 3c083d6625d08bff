"""``Context.set_search_attributes`` against recorded journals (docs/durable.md, "Search attributes";
docs/adr/0061): a journal that recorded the set replays without sending it again, code that moved it
is non-deterministic, and a new run on an in-process node records it once and is listed by it."""

from __future__ import annotations

import asyncio
import re

import msgspec
import pytest

from querator.cli import main
from querator.client import AsyncClient
from querator.durable import Context, Replayer
from querator.testing import Node
from querator.wire import messages as m
from querator.wire.search import SEARCH_ENTRY_NAME, encode_search_entry
from querator.wire.workflows import COMPLETE, FAIL, SEARCH, SUSPEND
from tests.conftest import eventually
from tests.unit.durable.test_replayer import DONE, WAITING, Steps, app_running, recorded


async def searched_first(ctx: Context, s: Steps, order: str) -> list[str]:
    ctx.set_search_attributes({"order": order, "amount": 30})
    return await recorded(ctx, s, order)


def searched(journal: m.WorkflowInfo) -> m.WorkflowInfo:
    """``journal`` as ``searched_first`` records it: the search entry at seq 1, the rest one seq later."""
    shifted = [msgspec.structs.replace(e, seq=e.seq + 1) for e in journal.entries]
    value = encode_search_entry({"order": "o-1", "amount": "30"})
    entry = m.WorkflowEntry(seq=1, kind=SEARCH, name=SEARCH_ENTRY_NAME, state="done", value=value)
    return msgspec.structs.replace(journal, entries=[entry, *shifted])


@pytest.mark.parametrize(
    ("journal", "then"), [(DONE, COMPLETE), (WAITING, SUSPEND)], ids=["completed", "waiting"]
)
async def test_a_journal_that_recorded_the_set_replays(journal: m.WorkflowInfo, then: str) -> None:
    replayed = await Replayer(app_running(searched_first)).check(searched(journal))
    assert (replayed.then, replayed.error) == (then, None)


@pytest.mark.parametrize("journal", [DONE, WAITING], ids=["completed", "waiting"])
async def test_a_set_added_before_recorded_calls_is_non_deterministic(journal: m.WorkflowInfo) -> None:
    replayed = await Replayer(app_running(searched_first)).check(journal)
    assert replayed.then == FAIL
    expected = (
        r"^the workflow's code asked for search 'search_attributes' at seq 1, but its journal records step"
    )
    assert re.search(expected, str(replayed.error)), str(replayed.error)


async def test_a_new_run_records_the_set_once_and_is_listed_by_it() -> None:
    app = app_running(searched_first)
    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        await app.start("checkout", "o-1", workflow_id="new", search_attributes={"region": "eu"})
        await app.start("checkout", "o-2", workflow_id="other")
        await eventually(lambda: _sleeping(client, "new"))
        info = await client.workflow_info("new")
        found = [w.workflow_id for w in await app.list("running", search={"amount": 30, "region": "eu"})]
        none = await app.list(search={"amount": 31})
    assert [(e.seq, e.kind) for e in info.entries] == [(1, SEARCH), (2, "step"), (3, "sleep")]
    assert info.search_attributes == {"region": "eu", "order": "o-1", "amount": "30"}
    assert (found, none) == (["new"], [])
    assert (await Replayer(app).replay(info)).then == SUSPEND


async def test_the_cli_lists_by_where_and_refuses_a_condition_without_a_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``querator workflows list --where KEY=VALUE`` (repeatable, ANDed)."""
    app = app_running(searched_first)
    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        await app.start("checkout", "o-1", workflow_id="new")
        await eventually(lambda: _sleeping(client, "new"))
        argv = ["workflows", "list", "--endpoint", node.url, "-o", "json", "--where", "order=o-1"]
        assert await asyncio.to_thread(main, [*argv, "--where", "amount=30"]) == 0
        assert [w["workflow_id"] for w in msgspec.json.decode(capsys.readouterr().out)["workflows"]] == [
            "new"
        ]
        assert await asyncio.to_thread(main, [*argv, "--where", "amount=31"]) == 0
        assert msgspec.json.decode(capsys.readouterr().out).get("workflows", []) == []
    with pytest.raises(SystemExit) as exited:
        main(["workflows", "list", "--where", "amount"])
    assert exited.value.code == 2
    assert (
        'argument --where: search attributes are invalid; "amount" is not KEY=VALUE'
        in capsys.readouterr().err
    )


async def _sleeping(client: AsyncClient, workflow_id: str) -> bool:
    info = await client.workflow_info(workflow_id)
    return any(e.kind == "sleep" for e in info.entries)
