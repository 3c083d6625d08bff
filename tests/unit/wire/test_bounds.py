"""``querator.wire``'s count bounds on their own (querator/wire/_bounds.py): a field at its limit passes,
one past it is refused with its bound's message, whatever else the body holds; what is not a bounded
field is not counted, and a malformed body is left to the decoder."""

from __future__ import annotations

import pytest

from querator.errors import InvalidOption
from querator.wire import Bound, Bounds
from querator.wire import messages as m
from querator.wire._bounds import check_json_bounds, check_protobuf_bounds
from querator.wire._errors import DecodeError

LIMIT = 3
ITEMS: Bounds = {"items": Bound(LIMIT, "too many items")}
NESTED: Bounds = {"items": Bound(LIMIT, "too many items", {"failures": Bound(2, "too many failures")})}
COMPLETE: Bounds = {"ids": Bound(LIMIT, "too many ids"), "lease_tokens": Bound(LIMIT, "too many tokens")}

ITEM = b"\x1a\x00"
"""An empty ``items`` element (field 3, length 0) of a produce or an import."""
FAILURE = b"\xaa\x06\x00"
"""An empty ``failures`` element (field 101) of an imported item."""


def item_with(failures: int) -> bytes:
    inner = FAILURE * failures
    return b"\x1a" + bytes([len(inner)]) + inner


def refused(check: object, body: bytes, cls: type[m.Message], bounds: Bounds) -> str:
    with pytest.raises(InvalidOption) as e:
        check(body, cls, bounds)  # type: ignore[operator]
    return e.value.message


# -- protobuf ----------------------------------------------------------------------------------------------


def test_protobuf_at_the_limit_passes_and_one_more_is_refused() -> None:
    check_protobuf_bounds(ITEM * LIMIT, m.QueueProduceRequest, ITEMS)
    assert (
        refused(check_protobuf_bounds, ITEM * (LIMIT + 1), m.QueueProduceRequest, ITEMS) == "too many items"
    )
    # Occurrences need not be adjacent: other fields between them do not restart the count.
    body = ITEM * 2 + b"\x0a\x01q" + ITEM * 2
    assert refused(check_protobuf_bounds, body, m.QueueProduceRequest, ITEMS) == "too many items"


def test_protobuf_counts_each_field_on_its_own() -> None:
    ids, tokens = b"\x22\x00" * LIMIT, b"\xa2\x06\x00" * LIMIT  # fields 4 and 100
    check_protobuf_bounds(ids + tokens, m.QueueCompleteRequest, COMPLETE)
    body = ids + tokens + b"\xa2\x06\x00"
    assert refused(check_protobuf_bounds, body, m.QueueCompleteRequest, COMPLETE) == "too many tokens"


def test_protobuf_nested_bounds_count_each_element() -> None:
    check_protobuf_bounds(item_with(2) * LIMIT, m.StorageItemsImportRequest, NESTED)
    body = item_with(2) + item_with(3)
    assert refused(check_protobuf_bounds, body, m.StorageItemsImportRequest, NESTED) == "too many failures"


def test_protobuf_unknown_fields_and_groups_are_not_counted() -> None:
    unknown = b"\x7a\x00" * 50  # field 15, not in the message
    check_protobuf_bounds(unknown + ITEM * LIMIT, m.QueueProduceRequest, ITEMS)
    # A group (field 20: start 0xa3 0x01, end 0xa4 0x01), kept by upb as an unknown field: its contents,
    # items fields included, are not the message's items.
    group = b"\xa3\x01" + ITEM * 50 + b"\xa4\x01"
    check_protobuf_bounds(group + ITEM * LIMIT, m.QueueProduceRequest, ITEMS)


@pytest.mark.parametrize(
    "body",
    [
        ITEM + b"\x1a\xff",  # a length cut short
        ITEM + b"\x1a\x7f" + ITEM * 10,  # a length past the end: the rest is inside it
        b"\x0f" + ITEM * 10,  # wire type 7
        b"\xa4\x01" + ITEM * 10,  # a group's end outside any group
        b"\xff" * 11 + ITEM * 10,  # a key longer than ten bytes
    ],
)
def test_malformed_protobuf_is_left_to_the_decoder(body: bytes) -> None:
    check_protobuf_bounds(body, m.QueueProduceRequest, ITEMS)


# -- JSON --------------------------------------------------------------------------------------------------


def items(n: int, key: str = "items") -> bytes:
    return b'"%s":[%s]' % (key.encode(), b",".join([b"{}"] * n))


def test_json_at_the_limit_passes_and_one_more_is_refused() -> None:
    check_json_bounds(b"{%s}" % items(LIMIT), m.QueueProduceRequest, ITEMS)
    body = b'{"queue_name":"q",%s}' % items(LIMIT + 1)
    assert refused(check_json_bounds, body, m.QueueProduceRequest, ITEMS) == "too many items"


@pytest.mark.parametrize(
    "body",
    [
        b"{%s,%s}" % (items(LIMIT + 1), items(1)),  # the over-long occurrence first
        b"{%s,%s}" % (items(1), items(LIMIT + 1)),
        b'{%s,"items":null}' % items(LIMIT + 1),
    ],
)
def test_json_every_occurrence_of_a_key_is_counted(body: bytes) -> None:
    assert refused(check_json_bounds, body, m.QueueProduceRequest, ITEMS) == "too many items"


def test_json_nested_bounds_count_each_element() -> None:
    ok = b'{"items":[{"failures":[{},{}]},{"failures":[{},{}]}]}'
    check_json_bounds(ok, m.StorageItemsImportRequest, NESTED)
    body = b'{"items":[{"failures":[{},{}]},{"failures":[{},{},{}]}]}'
    assert refused(check_json_bounds, body, m.StorageItemsImportRequest, NESTED) == "too many failures"
    body = b'{"items":[{"failures":[{},{},{}],"failures":[]}]}'  # a repeated key inside an element
    assert refused(check_json_bounds, body, m.StorageItemsImportRequest, NESTED) == "too many failures"


def test_json_unknown_keys_are_not_counted() -> None:
    body = b'{"unknown":[%s],"nested":{"items":[%s]},%s}' % (
        b"1," * 50 + b"1",
        b"{}," * 50 + b"{}",
        items(LIMIT),
    )
    check_json_bounds(body, m.QueueProduceRequest, ITEMS)


def test_json_a_bounded_field_that_is_no_array_is_the_decoders_error() -> None:
    with pytest.raises(DecodeError):
        check_json_bounds(b'{"items":"%s"}' % (b"," * 10), m.QueueProduceRequest, ITEMS)


@pytest.mark.parametrize("body", [b'{"items":[{},{} {},{}]}', b'{"items":[{},{},{},', b"\xff,,,,,"])
def test_malformed_json_is_left_to_the_decoder(body: bytes) -> None:
    check_json_bounds(body, m.QueueProduceRequest, ITEMS)
