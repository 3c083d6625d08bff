"""How the journal's append rule merges search attributes (querator/storage/journal.py; docs/adr/0061):
the ``search`` entries new to the journal are merged once, in seq order; one recorded already (an append
sent again, an entry read from rows) is not merged again over a later one."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from msgspec.structs import replace

from querator.errors import InvalidOption
from querator.storage import journal as j
from querator.storage.workflows import Entry, Workflow
from querator.wire.search import SEARCH_ENTRY_NAME, encode_search_entry
from querator.wire.workflows import DONE, SEARCH, STEP

NOW = 1_000_000_000
CLAIMED = Workflow(id="wf", name="checkout", queue="durable", fence=1, search_attributes={"customer": "c-1"})


def search(seq: int, **attributes: str) -> Entry:
    return Entry(
        seq=seq, kind=SEARCH, name=SEARCH_ENTRY_NAME, state=DONE, value=encode_search_entry(attributes)
    )


@dataclass(frozen=True)
class SearchCase:
    id: str
    current: Workflow
    entries: list[Entry]
    attributes: dict[str, str]
    recorded: dict[int, Entry] = field(default_factory=dict)


CASES = [
    SearchCase(
        "an entry merges into the start's",
        CLAIMED,
        [search(1, amount="30")],
        {"customer": "c-1", "amount": "30"},
    ),
    SearchCase(
        "later entries win, in seq order",
        CLAIMED,
        [
            search(3, amount="40"),
            Entry(seq=2, kind=STEP, name="s", state=DONE),
            search(1, amount="30", vip="true"),
        ],
        {"customer": "c-1", "amount": "40", "vip": "true"},
    ),
    SearchCase(
        "an entry the head holds is not merged again",
        replace(CLAIMED, search_attributes={"amount": "40"}, entries=[search(1, amount="30")]),
        [search(1, amount="30")],
        {"amount": "40"},
    ),
    SearchCase(
        "an entry recorded as a row is not merged again",
        replace(CLAIMED, search_attributes={"amount": "40"}, length=2),
        [search(1, amount="30")],
        {"amount": "40"},
        recorded={1: search(1, amount="30")},
    ),
    SearchCase(
        "other entries leave them as they are",
        CLAIMED,
        [Entry(seq=1, kind=STEP, name="s", state=DONE)],
        {"customer": "c-1"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_append_merges_new_search_entries(case: SearchCase) -> None:
    _, stored = j.append(case.current, "wf", 1, case.entries, j.Ending(), NOW, 0, 0, case.recorded)
    assert stored is not None and stored.search_attributes == case.attributes


def test_an_append_past_the_bound_is_refused() -> None:
    full = replace(CLAIMED, search_attributes={f"k{i}": "" for i in range(32)})
    with pytest.raises(InvalidOption) as raised:
        j.append(full, "wf", 1, [search(1, more="x")], j.Ending(), NOW, 0, 0)
    assert raised.value.message.startswith("search attributes are invalid; a workflow holds at most 32")


def test_a_fork_keeps_the_originals_attributes() -> None:
    original = replace(CLAIMED, entries=[search(1, amount="30")], search_attributes={"amount": "30"})
    assert j.fork(original, "wf-2", 2, NOW).search_attributes == {"amount": "30"}
