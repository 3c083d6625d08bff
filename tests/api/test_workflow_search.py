"""Custom search attributes over real HTTP (docs/durable.md, "Search attributes"; docs/adr/0061): set at
the start and by the claimant's ``search`` entries, shown by info and list, filtered on by list, and
refused out of bounds with ``search attributes are invalid; ...``."""

from __future__ import annotations

from typing import Any

import pytest

from querator.service._workflows import FILTERED_PAGE
from querator.storage.workflows import Workflow
from querator.wire.search import encode_search_entry
from tests.api.test_workflows import append, b64, claim, start
from tests.conftest import Api

PREFIX = "search attributes are invalid; "


def search(seq: int, **attributes: str) -> dict[str, Any]:
    value = b64(encode_search_entry(attributes))
    return {"seq": seq, "kind": "search", "name": "search_attributes", "state": "done", "value": value}


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def listed(api: Api, **body: Any) -> list[str]:
    return [w["workflow_id"] for w in (await api.post("/v1/workflows.list", body)).get("workflows", [])]


async def test_lists_filter_on_attributes_set_at_the_start_and_by_the_code(durable: Api) -> None:
    await start(durable, "a", search_attributes={"customer": "c-1", "amount": "30"})
    await start(durable, "b", search_attributes={"customer": "c-2"})
    await start(durable, "c")
    await claim(durable, "c")
    await append(durable, 1, "c", entries=[search(1, customer="c-1"), search(2, amount="40", vip="true")])
    # The same entries again (a lost reply's append sent again) are recorded once, and merged once.
    await append(durable, 1, "c", entries=[search(1, customer="c-1")], then="suspend")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "c"})
    assert info["search_attributes"] == {"customer": "c-1", "amount": "40", "vip": "true"}
    assert [e["kind"] for e in info["entries"]] == ["search", "search"]
    await claim(durable, "b")
    await append(durable, 1, "b", then="complete", result=b64(b"1"))

    assert await listed(durable, search={"customer": "c-1"}) == ["a", "c"]
    assert await listed(durable, search={"customer": "c-1", "amount": "40"}) == ["c"]
    assert await listed(durable, search={"customer": "c-1", "amount": "31"}) == []
    assert await listed(durable, status="completed", search={"customer": "c-2"}) == ["b"]
    assert await listed(durable, status="running", search={"customer": "c-2"}) == []
    assert await listed(durable, search={"customer": "c-1"}, limit=1) == ["a"]
    assert await listed(durable, search={"customer": "c-1"}, pivot="b") == ["c"]
    page = (await durable.post("/v1/workflows.list", {"search": {"vip": "true"}}))["workflows"]
    assert page[0]["search_attributes"] == info["search_attributes"]


async def test_attributes_out_of_bounds_are_refused(durable: Api) -> None:
    too_many = {f"k{i}": "v" for i in range(33)}
    for route, field, base in [
        (
            "/v1/workflows.start",
            "search_attributes",
            {"workflow_id": "x", "name": "n", "queue_name": "durable"},
        ),
        ("/v1/workflows.list", "search", {}),
    ]:
        for attributes, message in [
            (too_many, "at most 32 "),
            ({"1st": "v"}, "key '1st' is not a letter or '_'"),
            ({"k" * 65: "v"}, "key '"),
            ({"k": "v" * 257}, "the value of 'k' is not at most 256 printable characters"),
            ({"k": "a\x00b"}, "the value of 'k' is not"),
        ]:
            error = await durable.error(route, {**base, field: attributes})
            assert error.status == 400 and error.message.startswith(PREFIX + message), (route, error.message)
    await start(durable, "wf-1", search_attributes={f"k{i}": "v" for i in range(32)})
    await claim(durable, "wf-1")
    full = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 1, "entries": [search(1, more="x")]}
    )
    assert (full.status, full.message) == (
        400,
        PREFIX + "a workflow holds at most 32 attributes, this would make 33",
    )
    for entry, message in [
        (
            {**search(1, k="v"), "value": b64(b'{"k": 1}')},
            "a search entry's value is a JSON object of strings",
        ),
        ({**search(1, k="v"), "state": "pending"}, "a search entry is recorded done, by the claim's fence"),
    ]:
        error = await durable.error(
            "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 1, "entries": [entry]}
        )
        assert error.status == 400 and error.message.startswith(PREFIX + message), error.message
    outside = await durable.error(
        "/v1/workflows.append", {"workflow_id": "wf-1", "fence": 0, "entries": [search(1, k="v")]}
    )
    assert outside.status == 400 and outside.message.startswith(PREFIX + "a search entry is recorded done")


async def test_a_filtered_list_reads_the_store_a_page_at_a_time(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rare match does not cost a call of the store per record scanned (FILTERED_PAGE)."""
    for i in range(30):
        await start(durable, f"r-{i:02}")
    await start(durable, "z", search_attributes={"customer": "c-1"})
    rows = durable.service.workflows._rows
    asked: list[int] = []
    read = rows.list_workflows

    async def counted(status: str, pivot: str, limit: int) -> list[Workflow]:
        asked.append(limit)
        return await read(status, pivot, limit)

    monkeypatch.setattr(rows, "list_workflows", counted)
    assert await listed(durable, search={"customer": "c-1"}, limit=1) == ["z"]
    assert asked == [FILTERED_PAGE]
    asked.clear()
    assert await listed(durable, limit=2) == ["r-00", "r-01"]
    assert asked == [2]  # unfiltered: what was asked for, no more
