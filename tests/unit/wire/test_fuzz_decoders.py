"""Fuzzing the decoders that read what a client sends: ``wire.decode`` for every request message (JSON and
binary protobuf) and the Go-duration parser.

A decoder may accept a body or refuse it, but only in the way the HTTP layer turns into a client error:
``wire.decode`` raises ``ClientContentError`` (455), ``parse_duration`` raises ``DurationError`` (which
every caller turns into a 400 naming the field). Anything else would escape a route's handler
(``querator.http``) as a 500 with a logged traceback, so the property is "returns an instance of the asked
type, or raises exactly that".
Hanging is covered by construction: inputs are bounded and pytest's 120 s timeout stops a runaway loop.

Inputs come in four kinds: arbitrary bytes or text; structurally valid messages (generated from the
message classes) that are then mutated (cut, bytes flipped, values of the wrong type, huge varints and
lengths, deep nesting, unknown fields); bodies whose repeated fields hold more elements than a route's
bound (``querator.service.REQUEST_BOUNDS``), which the decoder must refuse with that bound's message before
building them; and, for durations, valid strings built term by term whose value an independent model
computes with exact arithmetic. Every request is decoded with its route's bounds, as the HTTP layer does:
a bound's ``InvalidOption`` (400) is one more way to refuse.
"""

from __future__ import annotations

import inspect
import os
import re
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from querator.duration import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    SECOND,
    DurationError,
    format_duration,
    parse_duration,
)
from querator.errors import ClientContentError, InvalidOption
from querator.http import _routes
from querator.service import REQUEST_BOUNDS
from querator.wire import JSON, PROTOBUF, Bounds, _negotiation, decode, encode_json, encode_protobuf
from querator.wire import messages as m
from querator.wire._fields import Field, fields
from querator.wire._pb import querator_pb2
from tests.unit.wire.test_codec import strategy_for

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# What a route decodes: every ``*Request`` class, plus QueueInfo (queues.create and queues.update) and
# ScheduleInfo (schedules.create and update) and NamespaceInfo (namespaces.create and update).
REQUEST_TYPES: list[type[m.Message]] = sorted(
    (
        cls
        for cls in vars(m).values()
        if isinstance(cls, type)
        and issubclass(cls, m.Message)
        and (cls.__name__.endswith("Request") or cls in (m.QueueInfo, m.ScheduleInfo, m.NamespaceInfo))
    ),
    key=lambda cls: cls.__name__,
)

# Few examples per test and no deadline: the file must stay well under a minute on a shared 2-core box,
# and a slow first example (codec tables being built) is not a failure.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
"""Examples per fuzz test; raise it for a longer hunt (``FUZZ_EXAMPLES=20000 pytest ...``)."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(
    max_examples=max(80, EXAMPLES // 2), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_every_routed_type_is_fuzzed() -> None:
    # A guard on the class filter above: every type a route of querator/http/_routes.py decodes
    # (``Route(call, m.X, limit)``) must be among those fuzzed here, whatever messages.py comes to call
    # them.
    routed = set(re.findall(r"Route\([\w.]+, m\.(\w+), ", inspect.getsource(_routes)))
    assert len(routed) >= 15
    assert routed <= {cls.__name__ for cls in REQUEST_TYPES}


def bound_messages(bounds: Bounds) -> set[str]:
    """The messages of ``bounds`` and of their elements' bounds."""
    return {b.message for b in bounds.values()} | {
        message for b in bounds.values() for message in bound_messages(b.inner)
    }


def decodes_or_client_error(
    body: bytes, content_type: str, cls: type[m.Message], bounded: bool = True
) -> m.Message | None:
    """The decoded message, or None when ``decode`` refused the body the way the HTTP layer expects:
    a 455, or (``bounded``: with the route's bounds) the 400 of one of them."""
    bounds = REQUEST_BOUNDS.get(cls) if bounded else None
    try:
        msg = decode(body, content_type, cls, bounds)
    except ClientContentError as e:
        assert e.code == 455
        assert isinstance(e.message, str) and e.message
        return None
    except InvalidOption as e:
        assert bounds is not None and e.message in bound_messages(bounds), e.message
        return None
    assert type(msg) is cls
    return msg


# --------------------------------------------------------------------------------------------------------
# Valid messages, generated from the field types of messages.py (test_codec's strategies)


def typed_message() -> st.SearchStrategy[tuple[type[m.Message], m.Message]]:
    return st.sampled_from(REQUEST_TYPES).flatmap(lambda cls: st.tuples(st.just(cls), strategy_for(cls)))


@ROUND_TRIP
@given(typed_message())
def test_valid_messages_round_trip_through_json(case: tuple[type[m.Message], m.Message]) -> None:
    cls, msg = case
    assert decode(encode_json(msg), JSON, cls) == msg


@ROUND_TRIP
@given(typed_message())
def test_valid_messages_round_trip_through_protobuf(case: tuple[type[m.Message], m.Message]) -> None:
    cls, msg = case
    assert decode(encode_protobuf(msg), PROTOBUF, cls) == msg


# --------------------------------------------------------------------------------------------------------
# Arbitrary bytes


@FUZZ
@given(st.sampled_from(REQUEST_TYPES), st.sampled_from([JSON, PROTOBUF]), st.binary(max_size=200))
@example(m.QueueProduceRequest, JSON, b"")
@example(m.QueueProduceRequest, PROTOBUF, b"\xff" * 11)
@example(m.QueueInfo, JSON, b"\xef\xbb\xbf{}")  # a UTF-8 byte-order mark
@example(m.QueueLeaseRequest, JSON, b'{"batch_size":1e309}')
def test_arbitrary_bytes(cls: type[m.Message], content_type: str, body: bytes) -> None:
    decodes_or_client_error(body, content_type, cls)


@FUZZ
@given(
    st.sampled_from(REQUEST_TYPES),
    st.text(alphabet=st.sampled_from(list('{}[]":,0123456789.-eE tfnrul\\')), max_size=80),
)
def test_json_shaped_text(cls: type[m.Message], text: str) -> None:
    decodes_or_client_error(text.encode(), JSON, cls)


# --------------------------------------------------------------------------------------------------------
# Mutated valid bodies, byte level


@st.composite
def mutated(draw: st.DrawFn, encoder: Any) -> tuple[type[m.Message], bytes]:
    cls, msg = draw(typed_message())
    body = bytearray(encoder(msg))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "delete", "duplicate"]))
        if op == "cut":
            del body[draw(st.integers(0, len(body))) :]
        elif op == "flip" and body:
            i = draw(st.integers(0, len(body) - 1))
            body[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            i = draw(st.integers(0, len(body)))
            body[i:i] = draw(st.binary(min_size=1, max_size=12))
        elif op == "delete" and body:
            i = draw(st.integers(0, len(body) - 1))
            del body[i : i + draw(st.integers(1, 8))]
        elif op == "duplicate" and body:
            i = draw(st.integers(0, len(body) - 1))
            j = draw(st.integers(i, len(body)))
            body[j:j] = body[i:j]
    return cls, bytes(body)


@FUZZ
@given(mutated(encode_protobuf))
def test_mutated_protobuf_bytes(case: tuple[type[m.Message], bytes]) -> None:
    decodes_or_client_error(case[1], PROTOBUF, case[0])


@FUZZ
@given(mutated(encode_json))
def test_mutated_json_bytes(case: tuple[type[m.Message], bytes]) -> None:
    decodes_or_client_error(case[1], JSON, case[0])


# --------------------------------------------------------------------------------------------------------
# Protobuf, field level: hand-made fields with any number and wire type, spliced into valid bodies


def varint(value: int) -> bytes:
    """``value`` (taken as unsigned, any size) as base-128 groups; more than ten bytes when it is huge."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


HUGE = st.sampled_from([2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, 2**100])
FIELD_NUMBERS = st.integers(1, 16) | st.sampled_from([0, 100, 2**29 - 1, 2**29, 2**32])


@st.composite
def raw_field(draw: st.DrawFn, depth: int = 0) -> bytes:
    """One wire field: a known or unknown number, any wire type, and a payload that may lie about itself."""
    number = draw(FIELD_NUMBERS)
    wire = draw(st.integers(0, 7))
    tag = varint(number << 3 | wire)
    if wire == 0:
        value = draw(st.integers(0, 2**64 - 1) | HUGE)
        return tag + varint(value)
    if wire == 1:
        return tag + draw(st.binary(min_size=0, max_size=9))
    if wire == 5:
        return tag + draw(st.binary(min_size=0, max_size=5))
    if wire == 2:
        if depth < 6 and draw(st.booleans()):
            # Nested fields: a message in a message field (or garbage in a string one), several levels deep.
            payload = b"".join(draw(st.lists(raw_field(depth + 1), max_size=3)))
        else:
            payload = draw(st.binary(max_size=16))
        claimed = len(payload) if draw(st.booleans()) else draw(HUGE | st.integers(0, 64))
        return tag + varint(claimed) + payload
    return tag + draw(st.binary(max_size=4))  # groups (3, 4) and invalid wire types (6, 7)


@st.composite
def spliced_protobuf(draw: st.DrawFn) -> tuple[type[m.Message], bytes]:
    cls, msg = draw(typed_message())
    body = encode_protobuf(msg)
    fields = draw(st.lists(raw_field(), min_size=1, max_size=4))
    at = draw(st.integers(0, len(body)))
    return cls, body[:at] + b"".join(fields) + body[at:]


@FUZZ
@given(spliced_protobuf())
@example((m.QueueProduceRequest, b"\x1a" + varint(2**63 - 1)))  # items claiming 8 EiB
@example((m.QueueProduceRequest, b"\x1a\x10\x22" + varint(2**64 - 1)))  # an enqueue_at of 16 EiB
@example((m.QueueLeaseRequest, b"\x10" + b"\xff" * 20))  # batch_size: a 21-byte varint
@example((m.StorageItemsImportRequest, b"\x1a\x0d\x3a\x0b\x08" + b"\x80" * 9 + b"\x01"))  # created_at -2^63 s
@example((m.QueueRetryRequest, b"\x1a\x04\x12\x02\x10\x80"))  # retry_at with a truncated nanos varint
def test_protobuf_raw_fields(case: tuple[type[m.Message], bytes]) -> None:
    decodes_or_client_error(case[1], PROTOBUF, case[0])


def test_protobuf_many_repeated_fields_decode_in_linear_time() -> None:
    # Half a megabyte of one-byte timestamps and list items: a decoder that re-copied what it had merged
    # so far on every occurrence would take minutes here (pytest's timeout), not milliseconds.
    stamps = b"\x12\x02\x08\x01" * 100_000  # QueueInfo.created_at, merged occurrence by occurrence
    parts = b"\x52\x02\x08\x01" * 100_000  # QueueInfo.partitions, appended
    msg = decodes_or_client_error(stamps + parts, PROTOBUF, m.QueueInfo, bounded=False)
    assert isinstance(msg, m.QueueInfo)
    assert msg.created_at == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert len(msg.partitions) == 100_000


# --------------------------------------------------------------------------------------------------------
# JSON, value level: a valid body parsed, one value replaced by something of the wrong shape


def json_junk(depth: int = 0) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
        st.sampled_from(
            [
                "1e2",
                "-0",
                " 1",
                "0x10",
                "1e99999999999",
                "9" * 400,
                "2024-01-01T00:00:00Z",
                "0001-01-01T00:00:00+23:59",
                "9999-12-31T23:59:59-23:59",
                "2024-02-30T00:00:00Z",
                "2024-01-01 00:00:00Z",
                "AAAA",
                "A===",
                "-_-_",
            ]
        ),
    )
    if depth >= 3:
        return scalars
    inner = st.deferred(lambda: json_junk(depth + 1))
    return scalars | st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


def paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a parsed JSON document a value could be replaced (dict keys and list indexes)."""
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, (*path, i))
    return out


def replaced(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[head] = replaced(doc[head], tuple(rest), new)
    return copy


NEST = "\x00nest\x00"


@st.composite
def mutated_json_values(draw: st.DrawFn) -> tuple[type[m.Message], bytes]:
    cls, msg = draw(typed_message())
    doc: Any = msgspec.json.decode(encode_json(msg))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)))
        action = draw(st.sampled_from(["replace", "unknown key", "nest"]))
        if action == "replace":
            doc = replaced(doc, where, draw(json_junk()))
        elif action == "unknown key":
            target: Any = doc
            for key in where:
                target = target[key]
            if isinstance(target, dict):
                doc = replaced(doc, where, {**target, draw(st.text(max_size=8)): draw(json_junk(2))})
        else:  # spliced in as text below: deeper than an encoder would write
            doc = replaced(doc, where, NEST)
    depth = draw(st.integers(1, 5000))
    opening, closing = draw(st.sampled_from([(b"[", b"]"), (b'{"enqueue_at":', b"}")]))
    nested = opening * depth + b"1" + closing * depth
    return cls, msgspec.json.encode(doc).replace(msgspec.json.encode(NEST), nested)


@FUZZ
@given(mutated_json_values())
@example((m.QueueProduceRequest, b'{"items":[{"enqueue_at":"0001-01-01T00:00:00+00:01"}]}'))
@example((m.QueueProduceRequest, b'{"items":[{"bytes":"@@@@"}]}'))
@example((m.QueueLeaseRequest, b'{"batch_size":"1' + b"0" * 300 + b'e-300"}'))
@example((m.QueueInfo, b'{"created_at":"2024-01-01T00:00:00.1234567891Z"}'))
@example((m.StorageItemsImportRequest, b'{"items":[{"dead_deadline":{"seconds":1}}]}'))
@example((m.QueueStatsRequest, b'{"queue_name":"\\ud800"}'))  # a lone surrogate escape
def test_json_values_of_the_wrong_shape(case: tuple[type[m.Message], bytes]) -> None:
    decodes_or_client_error(case[1], JSON, case[0])


@pytest.mark.parametrize("content_type", [JSON, PROTOBUF])
def test_megabytes_of_nesting_are_refused_quickly(content_type: str) -> None:
    # Deeper than any recursion limit: a decoder that recursed per level would overflow the C stack or
    # raise RecursionError past the HTTP layer.
    if content_type == JSON:
        body = b'{"items":' + b"[" * 500_000 + b"]" * 500_000 + b"}"
    else:
        body = b""
        for _ in range(2_000):  # an unknown length-delimited field in one in one ... (skipped, not parsed)
            body = b"\x7a" + varint(len(body)) + body
        body = b"\x1a" + varint(len(body)) + body  # ... in an item
    decodes_or_client_error(body, content_type, m.QueueProduceRequest)


# --------------------------------------------------------------------------------------------------------
# Repeated fields over their bound: refused with the bound's message, nothing built


BOUNDED = sorted(REQUEST_BOUNDS, key=lambda cls: cls.__name__)


def field_of(cls: type[m.Message], attr: str) -> Field:
    return next(f for f in fields(cls) if f.attr == attr)


def field_number(cls: type[m.Message], f: Field) -> int:
    return next(
        d.number for d in getattr(querator_pb2, cls.__name__).DESCRIPTOR.fields if d.json_name == f.key
    )


class Hostile(NamedTuple):
    cls: type[m.Message]
    content_type: str
    body: bytes
    message: str
    """The bound's message the body must be refused with."""


@st.composite
def json_elements(draw: st.DrawFn, f: Field, count: int, inner: Bounds | None) -> bytes:
    """``count`` elements of ``f`` as a JSON array: the emptiest valid ones, some of the wrong type; with
    ``inner``, one element holds a field over its own bound."""
    empty = b"{}" if f.sub is not None else b'""'
    junk = draw(st.sampled_from([empty, empty, b"0", b"null", b"[]", b'"x"', b"{}", b'{"unknown":[1,2]}']))
    elements = [empty] * count
    if inner:  # a wrong-typed element is refused by the decoder, in its words, whatever else is wrong
        assert f.sub is not None
        attr, bound = draw(st.sampled_from(sorted(inner.items())))
        g = field_of(f.sub, attr)
        key = draw(st.sampled_from([g.key, g.camel]))
        elements[-1] = b'{"%s":[%s]}' % (key.encode(), b",".join([b"{}"] * (bound.limit + 1)))
    else:
        elements[draw(st.integers(0, count - 1))] = junk
    return b"[" + b",".join(elements) + b"]"


@st.composite
def over_bound_json(draw: st.DrawFn) -> Hostile:
    cls = draw(st.sampled_from(BOUNDED))
    attr, bound = draw(st.sampled_from(sorted(REQUEST_BOUNDS[cls].items())))
    f = field_of(cls, attr)
    nested = bool(bound.inner) and draw(st.booleans())
    if nested:  # few elements, one of them with an inner field over its bound
        count, message = draw(st.integers(1, 3)), next(iter(bound.inner.values())).message
    else:
        count, message = bound.limit + draw(st.integers(1, 2 * bound.limit)), bound.message
    doc = msgspec.json.decode(encode_json(msgspec.structs.replace(draw(strategy_for(cls)), **{attr: []})))
    assert isinstance(doc, dict)
    hostile = b'"%s":%s' % (
        draw(st.sampled_from([f.key, f.camel])).encode(),
        draw(json_elements(f, count, bound.inner if nested else None)),
    )
    members = [msgspec.json.encode(k) + b":" + msgspec.json.encode(v) for k, v in doc.items()]
    members.insert(draw(st.integers(0, len(members))), hostile)
    # The same key again, before or after, with a short array: protojson keeps one occurrence and msgspec
    # the last, so the over-long one must be refused wherever it is.
    repeat = draw(st.sampled_from([None, b"[]", b"[{}]" if f.sub is not None else b'[""]', b"null"]))
    if repeat is not None:
        again = b'"%s":%s' % (draw(st.sampled_from([f.key, f.camel])).encode(), repeat)
        members.insert(draw(st.integers(0, len(members))), again)
    return Hostile(cls, JSON, b"{" + b",".join(members) + b"}", message)


@st.composite
def over_bound_protobuf(draw: st.DrawFn) -> Hostile:
    cls = draw(st.sampled_from(BOUNDED))
    attr, bound = draw(st.sampled_from(sorted(REQUEST_BOUNDS[cls].items())))
    f = field_of(cls, attr)
    tag = varint(field_number(cls, f) << 3 | 2)
    count = bound.limit + draw(st.integers(1, 2 * bound.limit))
    element = tag + draw(st.sampled_from([b"\x00", b"\x01\x00" if f.sub is None else b"\x02\x08\x01"]))
    message = bound.message
    elements = [element] * count
    if bound.inner and draw(st.booleans()):  # few elements, the last with an inner field over its bound
        assert f.sub is not None
        attr_in, inner = draw(st.sampled_from(sorted(bound.inner.items())))
        inner_tag = varint(field_number(f.sub, field_of(f.sub, attr_in)) << 3 | 2)
        held = (inner_tag + b"\x00") * (inner.limit + 1)
        elements = [element] * draw(st.integers(0, 2)) + [tag + varint(len(held)) + held]
        message = inner.message
    body = encode_protobuf(msgspec.structs.replace(draw(strategy_for(cls)), **{attr: []}))
    # A repeated field's occurrences need not be adjacent: split them around the rest of the message.
    split = draw(st.integers(0, len(elements)))
    return Hostile(cls, PROTOBUF, b"".join(elements[:split]) + body + b"".join(elements[split:]), message)


def refused_unbuilt(case: Hostile) -> None:
    """``case`` is refused with its bound's message, the body's decoder never called."""

    def unreachable(*args: Any) -> Any:
        raise AssertionError("the body was decoded before its bounds were checked")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_negotiation, "decode_json", unreachable)
        patch.setattr(_negotiation, "decode_protobuf", unreachable)
        with pytest.raises(InvalidOption) as refused:
            decode(case.body, case.content_type, case.cls, REQUEST_BOUNDS[case.cls])
    assert refused.value.message == case.message


def empties(n: int) -> bytes:
    return b",".join([b"{}"] * n)


@FUZZ
@given(over_bound_json() | over_bound_protobuf())
@example(  # the over-long occurrence of a repeated key is not the one a decoder keeps
    Hostile(
        m.QueueProduceRequest,
        JSON,
        b'{"items":[%s],"items":[]}' % empties(1001),
        REQUEST_BOUNDS[m.QueueProduceRequest]["items"].message,
    )
)
@example(
    Hostile(
        m.StorageItemsImportRequest,
        JSON,
        b'{"items":[{"failures":[%s],"failures":[]}]}' % empties(11),
        REQUEST_BOUNDS[m.StorageItemsImportRequest]["items"].inner["failures"].message,
    )
)
def test_repeated_fields_over_their_bound_are_refused_unbuilt(
    case: Hostile,
) -> None:
    refused_unbuilt(case)


def hostile_bodies() -> list[Hostile]:
    """The probe's bodies: a million empty elements, a few megabytes, for each bounded route that takes
    batches (produce, retry, complete, storage items.import, workflows.append)."""
    cases = []
    for cls, attr in [
        (m.QueueProduceRequest, "items"),
        (m.QueueRetryRequest, "items"),
        (m.QueueCompleteRequest, "ids"),
        (m.QueueCompleteRequest, "lease_tokens"),
        (m.StorageItemsImportRequest, "items"),
        (m.WorkflowsAppendRequest, "entries"),
    ]:
        f = field_of(cls, attr)
        message = REQUEST_BOUNDS[cls][attr].message
        empty = b"{}" if f.sub is not None else b'""'
        body = b'{"%s":[%s]}' % (f.key.encode(), b",".join([empty] * 1_000_000))
        cases.append(Hostile(cls, JSON, body, message))
        cases.append(Hostile(cls, PROTOBUF, varint(field_number(cls, f) << 3 | 2) + b"\x00", message))
        cases[-1] = cases[-1]._replace(body=cases[-1].body * 1_000_000)
    return cases


@pytest.mark.parametrize(
    "case",
    hostile_bodies(),
    ids=lambda c: f"{c.cls.__name__}-{c.content_type.rsplit('/', 1)[-1]}-{len(c.body)}",
)
def test_a_million_empty_elements_are_refused_unbuilt(case: Hostile) -> None:
    refused_unbuilt(case)


# --------------------------------------------------------------------------------------------------------
# Go durations


UNITS: dict[str, int] = {
    "ns": 1,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,
    "\u03bcs": MICROSECOND,
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
# Fraction digits a unit can take with an exact result: a unit of 10^k x n nanoseconds divided by 10^d
# is a whole number for d <= k, so Go's float64 arithmetic is exact and the model's fractions agree.
EXACT_FRACTION_DIGITS = {"ns": 0, "us": 3, "\u00b5s": 3, "\u03bcs": 3, "ms": 6, "s": 9, "m": 10, "h": 11}


class Duration(NamedTuple):
    text: str
    ns: int
    """The model's value: each term's exact value truncated toward zero (Go truncates term by term),
    summed, with the sign applied."""
    terms: int


@st.composite
def term(draw: st.DrawFn, exact: bool) -> tuple[str, int]:
    """One ``<number><unit>`` term as text, and its value in nanoseconds, computed exactly and truncated."""
    unit = draw(st.sampled_from(list(UNITS)))
    whole = draw(
        st.none()
        | st.integers(0, 10**7).map(str)
        | st.builds(lambda zeros, n: "0" * zeros + str(n), st.integers(0, 3), st.integers(0, 9999))
    )
    max_digits = EXACT_FRACTION_DIGITS[unit] if exact else 25
    frac = draw(st.none() | st.text(st.sampled_from("0123456789"), max_size=max_digits))
    if whole is None and not frac:  # "." alone is not a number
        whole = "1"
    text = (whole or "") + ("" if frac is None else "." + frac) + unit
    value = Fraction(int(whole or "0")) + (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    return text, int(value * UNITS[unit])  # int() of a positive Fraction truncates


def durations(exact: bool) -> st.SearchStrategy[Duration]:
    def join(sign: str, terms: list[tuple[str, int]]) -> Duration:
        total = sum(ns for _, ns in terms)
        return Duration(sign + "".join(t for t, _ in terms), -total if sign == "-" else total, len(terms))

    return st.builds(join, st.sampled_from(["", "+", "-"]), st.lists(term(exact), min_size=1, max_size=5))


def in_range(ns: int) -> bool:
    return INT64_MIN <= ns <= INT64_MAX


@FUZZ
@given(durations(exact=True))
@example(Duration("1h2m3s4ms5us6ns", 3723004005006, 6))
@example(Duration("-2562047h47m16.854775808s", INT64_MIN, 3))
@example(Duration("2562047h47m16.854775808s", INT64_MAX + 1, 3))
@example(Duration(".00000000001h", 36, 1))
def test_exact_durations_match_the_model(case: Duration) -> None:
    if in_range(case.ns):
        assert parse_duration(case.text) == case.ns
    else:
        with pytest.raises(DurationError):
            parse_duration(case.text)


@FUZZ
@given(durations(exact=False))
@example(Duration("0.3333333333333333333h", 20 * MINUTE - 1, 1))
@example(Duration(".6ns.7ns.7ns", 0, 3))
def test_any_fraction_is_within_a_nanosecond_a_term_of_the_model(case: Duration) -> None:
    # Go scales a fraction in float64 before truncating it: each term may land a nanosecond off the exact
    # value (``0.3333333333333333333h`` is 20m exactly for Go, a nanosecond less exactly).
    assume(abs(case.ns) < INT64_MAX - case.terms)
    assert abs(parse_duration(case.text) - case.ns) <= case.terms


@FUZZ
@given(st.integers(INT64_MIN, INT64_MAX) | st.integers(-(10**12), 10**12))
def test_format_then_parse_round_trips(ns: int) -> None:
    text = format_duration(ns)
    assert re.fullmatch(r"-?([0-9.]+(h|m|s|ms|\u00b5s|ns))+", text), text
    assert parse_duration(text) == ns


@FUZZ
@given(durations(exact=True))
def test_parse_then_format_then_parse_is_stable(case: Duration) -> None:
    try:
        ns = parse_duration(case.text)
    except DurationError:
        return
    assert parse_duration(format_duration(ns)) == ns


DURATION_CHARS = st.sampled_from([*"0123456789.+-nsumh \u00b5\u03bc\u00e9\u0000\udc80", "ms", "us", "9" * 30])


@FUZZ
@given(st.text(max_size=40) | st.lists(DURATION_CHARS, max_size=24).map("".join))
@example("")
@example("." * 5000)
@example("1" + "0" * 5000 + "s")
@example("0." + "0" * 5000 + "1s")
@example("1\udc80s")
def test_arbitrary_text_parses_or_raises_duration_error(text: str) -> None:
    try:
        value = parse_duration(text)
    except DurationError as e:
        assert str(e).startswith("time: ")
    else:
        assert INT64_MIN <= value <= INT64_MAX
