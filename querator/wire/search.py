"""Custom search attributes of durable workflows (docs/durable.md, "Search attributes"; docs/adr/0061):
their bounds, their text, how a run's attributes match a ``workflows.list`` filter, and how the entry
that sets them (kind ``search``) carries them. Written once: the service checks requests with it, the
journal's rules merge with it, the listing matches with it, and the client and ``querator.durable`` use
it to check and convert before sending. A condition typed as ``KEY=VALUE`` is parsed here too, for the
CLI's ``--where``; the console's filter keeps the same rule (querator/console/static/search.js), which
tests/integration/test_console_workflow_search.py pins to this one.

An attribute is a keyword: a string, an int or a bool, kept and compared as its text (``30`` is
``"30"``, ``True`` is ``"true"``), so a filter typed on a command line matches what code set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import msgspec

from querator.errors import InvalidOption

MAX_SEARCH_ATTRIBUTES: Final = 32
"""Attributes a run holds (and conditions a filter holds): each is copied into every write of its head
and every listed record."""
MAX_SEARCH_KEY_CHARS: Final = 64
MAX_SEARCH_VALUE_CHARS: Final = 256
SEARCH_ATTRIBUTES_INVALID: Final = "search attributes are invalid"
"""The stable prefix of a refused attribute or filter."""
SEARCH_ENTRY_NAME: Final = "search_attributes"
"""The name of every ``search`` entry: replay checks the code sets attributes at the same seq."""

_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")

SearchValue = str | int | bool


def search_text(value: SearchValue) -> str:
    """An attribute's value as it is kept and compared: a string as it is, a bool ``true``/``false``, an
    int in decimal. Anything else (a float, None, a list) is refused: equality on it would surprise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    raise InvalidOption(
        f"{SEARCH_ATTRIBUTES_INVALID}; a value is a string, an int or a bool, not {type(value).__name__}"
    )


def search_texts(attributes: Mapping[str, SearchValue]) -> dict[str, str]:
    """``attributes`` with their values as text, checked (``check_search_attributes``)."""
    texts = {key: search_text(value) for key, value in attributes.items()}
    check_search_attributes(texts)
    return texts


def check_search_attributes(attributes: Mapping[str, str], what: str = "attributes") -> None:
    """At most ``MAX_SEARCH_ATTRIBUTES``; each key a letter or ``_`` then letters, digits, ``_ . -``, at
    most ``MAX_SEARCH_KEY_CHARS``; each value at most ``MAX_SEARCH_VALUE_CHARS``, without control
    characters."""
    if len(attributes) > MAX_SEARCH_ATTRIBUTES:
        raise InvalidOption(
            f"{SEARCH_ATTRIBUTES_INVALID}; at most {MAX_SEARCH_ATTRIBUTES} {what}, got {len(attributes)}"
        )
    for key, value in attributes.items():
        if len(key) > MAX_SEARCH_KEY_CHARS or not _KEY.fullmatch(key):
            raise InvalidOption(
                f"{SEARCH_ATTRIBUTES_INVALID}; key {key[:MAX_SEARCH_KEY_CHARS]!r} is not a letter or '_'"
                f" followed by letters, digits, '_', '.' or '-', at most {MAX_SEARCH_KEY_CHARS} characters"
            )
        if len(value) > MAX_SEARCH_VALUE_CHARS or not value.isprintable():
            raise InvalidOption(
                f"{SEARCH_ATTRIBUTES_INVALID}; the value of {key!r} is not at most"
                f" {MAX_SEARCH_VALUE_CHARS} printable characters"
            )


def merged_search_attributes(current: Mapping[str, str], update: Mapping[str, str]) -> dict[str, str]:
    """A run's attributes after ``update`` (a key set again takes the new value), within the bound."""
    merged = {**current, **update}
    if len(merged) > MAX_SEARCH_ATTRIBUTES:
        raise InvalidOption(
            f"{SEARCH_ATTRIBUTES_INVALID}; a workflow holds at most {MAX_SEARCH_ATTRIBUTES} attributes,"
            f" this would make {len(merged)}"
        )
    return merged


def matches_search(attributes: Mapping[str, str], search: Mapping[str, str]) -> bool:
    """Whether a run's ``attributes`` hold every condition of ``search`` (ANDed equalities; an empty
    filter matches every run)."""
    return all(attributes.get(key) == value for key, value in search.items())


def parse_search_condition(text: str) -> tuple[str, str]:
    """A condition typed as ``KEY=VALUE``: split at the first ``=`` (a value may hold more), the value
    kept as text (``30`` finds 30). The key and value are checked with the filter, by the server."""
    key, sep, value = text.partition("=")
    if not sep:
        # JSON's quoting, which the console's copy of this rule can write the same.
        raise InvalidOption(
            f"{SEARCH_ATTRIBUTES_INVALID}; {msgspec.json.encode(text).decode()} is not KEY=VALUE"
        )
    return key, value


def encode_search_entry(attributes: Mapping[str, str]) -> bytes:
    """A ``search`` entry's value: the attributes as a JSON object of strings, whatever the app's
    serializer, since the server reads it."""
    return msgspec.json.encode(dict(attributes))


def decode_search_entry(value: bytes) -> dict[str, str]:
    """A ``search`` entry's attributes, checked; a value that is not a JSON object of strings is refused."""
    try:
        attributes = msgspec.json.decode(value, type=dict[str, str])
    except msgspec.DecodeError as e:
        raise InvalidOption(
            f"{SEARCH_ATTRIBUTES_INVALID}; a search entry's value is a JSON object of strings: {e}"
        ) from None
    check_search_attributes(attributes)
    return attributes
