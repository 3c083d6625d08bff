"""The rules of custom search attributes (querator/wire/search.py; docs/durable.md, "Search attributes";
docs/adr/0061): their text, their bounds, how a filter matches and how a run's attributes merge. Each
case is a call and what it must return or the exact refusal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from querator.errors import InvalidOption
from querator.wire.search import (
    MAX_SEARCH_ATTRIBUTES,
    decode_search_entry,
    encode_search_entry,
    matches_search,
    merged_search_attributes,
    parse_search_condition,
    search_texts,
)

PREFIX = "search attributes are invalid; "


@dataclass(frozen=True)
class TextCase:
    id: str
    given: dict[str, Any]  # floats and None too, to be refused
    texts: dict[str, str] | None = None
    refusal: str = ""


TEXTS = [
    TextCase("a string is kept as it is", {"customer": "c-1"}, {"customer": "c-1"}),
    TextCase("an int is its decimal", {"amount": 30, "debt": -2}, {"amount": "30", "debt": "-2"}),
    TextCase("a bool is true or false", {"vip": True, "late": False}, {"vip": "true", "late": "false"}),
    TextCase("keys take letters, digits, _ . -", {"_a.b-c_9": ""}, {"_a.b-c_9": ""}),
    TextCase("none is fine", {}, {}),
    TextCase(
        "a float is refused", {"amount": 1.5}, refusal="a value is a string, an int or a bool, not float"
    ),
    TextCase(
        "None is refused", {"amount": None}, refusal="a value is a string, an int or a bool, not NoneType"
    ),
    TextCase("a key cannot start with a digit", {"1a": "x"}, refusal="key '1a' is not a letter or '_'"),
    TextCase("a key cannot hold '='", {"a=b": "x"}, refusal="key 'a=b' is not a letter or '_'"),
    TextCase("a key cannot be empty", {"": "x"}, refusal="key '' is not a letter or '_'"),
    TextCase("a key of 65 characters is refused", {"k" * 65: "x"}, refusal=f"key '{'k' * 64}' is not"),
    TextCase(
        "a value of 257 characters is refused",
        {"k": "v" * 257},
        refusal="the value of 'k' is not at most 256",
    ),
    TextCase("a value with a control character is refused", {"k": "a\nb"}, refusal="the value of 'k' is not"),
    TextCase(
        "33 attributes are refused",
        {f"k{i}": i for i in range(MAX_SEARCH_ATTRIBUTES + 1)},
        refusal="at most 32 attributes, got 33",
    ),
]


@pytest.mark.parametrize("case", TEXTS, ids=[c.id for c in TEXTS])
def test_search_texts(case: TextCase) -> None:
    if case.refusal:
        with pytest.raises(InvalidOption) as raised:
            search_texts(case.given)
        assert raised.value.message.startswith(PREFIX + case.refusal), raised.value.message
    else:
        assert search_texts(case.given) == case.texts


@dataclass(frozen=True)
class MatchCase:
    id: str
    attributes: dict[str, str]
    search: dict[str, str]
    matches: bool


MATCHES = [
    MatchCase("an empty filter matches any run", {}, {}, True),
    MatchCase("an equal value matches", {"customer": "c-1"}, {"customer": "c-1"}, True),
    MatchCase("another value does not", {"customer": "c-1"}, {"customer": "c-2"}, False),
    MatchCase("a missing key does not", {}, {"customer": "c-1"}, False),
    MatchCase(
        "every condition must hold",
        {"customer": "c-1", "amount": "30"},
        {"customer": "c-1", "amount": "31"},
        False,
    ),
    MatchCase(
        "all holding matches",
        {"customer": "c-1", "amount": "30", "vip": "true"},
        {"amount": "30", "customer": "c-1"},
        True,
    ),
    MatchCase("values compare as text, case and all", {"customer": "C-1"}, {"customer": "c-1"}, False),
]


@pytest.mark.parametrize("case", MATCHES, ids=[c.id for c in MATCHES])
def test_matches_search(case: MatchCase) -> None:
    assert matches_search(case.attributes, case.search) is case.matches


def test_a_key_set_again_takes_the_new_value_within_the_bound() -> None:
    assert merged_search_attributes({"a": "1", "b": "2"}, {"b": "3", "c": "4"}) == {
        "a": "1",
        "b": "3",
        "c": "4",
    }
    full = {f"k{i}": "" for i in range(MAX_SEARCH_ATTRIBUTES)}
    assert merged_search_attributes(full, {"k0": "again"})["k0"] == "again"
    with pytest.raises(InvalidOption) as raised:
        merged_search_attributes(full, {"one_more": ""})
    assert raised.value.message == PREFIX + "a workflow holds at most 32 attributes, this would make 33"


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        (b"[1]", "a search entry's value is a JSON object of strings"),
        (b'{"amount": 30}', "a search entry's value is a JSON object of strings"),
        (b"", "a search entry's value is a JSON object of strings"),
        (b'{"1": "x"}', "key '1' is not"),
    ],
)
def test_a_search_entry_holds_a_json_object_of_checked_strings(value: bytes, refusal: str) -> None:
    assert decode_search_entry(encode_search_entry({"amount": "30"})) == {"amount": "30"}
    with pytest.raises(InvalidOption) as raised:
        decode_search_entry(value)
    assert raised.value.message.startswith(PREFIX + refusal), raised.value.message


@dataclass(frozen=True)
class ConditionCase:
    id: str
    text: str
    parsed: tuple[str, str] | None = None
    refusal: str = ""


CONDITIONS = [
    ConditionCase("a key and its value", "customer=c-1", ("customer", "c-1")),
    ConditionCase("a number stays text", "amount=30", ("amount", "30")),
    ConditionCase("split at the first '='", "expr=a=b", ("expr", "a=b")),
    ConditionCase("an empty value", "stage=", ("stage", "")),
    ConditionCase("an empty key, refused later by the filter's check", "=x", ("", "x")),
    ConditionCase("spaces are kept", " k = v ", (" k ", " v ")),
    ConditionCase("markup, quotes and unicode are text", 'note=<b>"q"&\'é✓', ("note", '<b>"q"&\'é✓')),
    ConditionCase("no '=' is refused", "oops", refusal='"oops" is not KEY=VALUE'),
    ConditionCase("empty is refused", "", refusal='"" is not KEY=VALUE'),
    ConditionCase(
        "the refusal quotes as JSON does",
        'é"<\\\n\x1f\u2028',
        refusal='"é\\"<\\\\\\n\\u001f\u2028" is not KEY=VALUE',
    ),
]
"""The rule of a typed condition, with its exact refusals."""


@pytest.mark.parametrize("case", CONDITIONS, ids=[c.id for c in CONDITIONS])
def test_parse_search_condition(case: ConditionCase) -> None:
    if case.refusal:
        with pytest.raises(InvalidOption) as raised:
            parse_search_condition(case.text)
        assert raised.value.message == PREFIX + case.refusal
    else:
        assert parse_search_condition(case.text) == case.parsed
