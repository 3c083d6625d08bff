"""Count bounds of repeated fields, checked on the encoded body before it is decoded: a small body of
empty elements (two bytes each in protobuf, three in JSON) would otherwise become millions of messages,
hundreds of megabytes and seconds of a blocked event loop before any count check could refuse it.

A ``Bound`` allows at most ``limit`` elements of one repeated field (by attribute name); ``inner`` bounds
the repeated fields of each element. The checks stop at the first element past the limit and build no
message: protobuf by walking the field keys of the body (and of the bounded fields' elements), JSON by a
msgspec pass that keeps each field's value as ``msgspec.Raw`` and reads a bounded array into a struct of
``limit + 1`` raw slots, skipping whatever follows in C. Anything malformed is left to the decoder, which
refuses it with its own message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from querator.errors import InvalidOption
from querator.wire._errors import DecodeError
from querator.wire._fields import fields
from querator.wire._pb import querator_pb2
from querator.wire.messages import Message

__all__ = ["Bound", "Bounds", "check_json_bounds", "check_protobuf_bounds"]


@dataclass(frozen=True, slots=True)
class Bound:
    """At most ``limit`` elements, else ``InvalidOption(message)``; ``inner``: the bounds of each
    element's own repeated fields."""

    limit: int
    message: str
    inner: Mapping[str, Bound] = field(default_factory=dict)


Bounds = Mapping[str, Bound]
"""The bounds of a message's repeated fields, by attribute name."""


# --------------------------------------------------------------------------------------------------------
# Protobuf: a walk over field keys, no message built

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = range(6)
_FIXED: Final = {_I64: 8, _I32: 4}
_Plan = dict[int, tuple[Bound, "_Plan | None"]]
_PLANS: dict[tuple[type[Message], int], tuple[Bounds, _Plan]] = {}


def _plan(cls: type[Message], bounds: Bounds) -> _Plan:
    """The bounds by field number (the .proto's, found by JSON key as the codec pairs them)."""
    key = (cls, id(bounds))
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is bounds:
        return cached[1]
    numbers = {d.json_name: d.number for d in getattr(querator_pb2, cls.__name__).DESCRIPTOR.fields}
    plan = {}
    for f in fields(cls):
        bound = bounds.get(f.attr)
        if bound is not None:
            assert f.sub is not None or not bound.inner, f"{cls.__name__}.{f.attr} has no elements to bound"
            plan[numbers[f.key]] = (bound, _plan(f.sub, bound.inner) if bound.inner and f.sub else None)
    _PLANS[key] = (bounds, plan)
    return plan


def _least(bounds: Bounds) -> int:
    """The smallest limit of ``bounds`` and of their elements' bounds."""
    return min(min(b.limit, _least(b.inner) if b.inner else b.limit) for b in bounds.values())


def _varint(body: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        byte = body[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            break
    raise _Malformed


class _Malformed(Exception):
    """The body is not well-formed protobuf: the decoder says so in its own words."""


def check_protobuf_bounds(body: bytes, cls: type[Message], bounds: Bounds) -> None:
    """Raises the ``InvalidOption`` of the first bounded field of ``body`` (a ``cls``) that holds more
    elements than its bound allows."""
    if len(body) <= 2 * _least(bounds):
        return  # every element takes at least two bytes: no field can be over its limit
    try:
        _walk(body, 0, len(body), _plan(cls, bounds))
    except _Malformed:
        pass


def _walk(body: bytes, pos: int, end: int, plan: _Plan) -> None:
    counts = dict.fromkeys(plan, 0)
    depth = 0  # inside groups, which upb keeps as unknown fields: their contents are not ours
    while pos < end:
        key, pos = _varint(body, pos, end)
        number, wire = key >> 3, key & 7
        if wire == _LEN:
            length, pos = _varint(body, pos, end)
            start, pos = pos, pos + length
            if depth == 0 and number in counts and pos <= end:
                bound, inner = plan[number]
                counts[number] += 1
                if counts[number] > bound.limit:
                    raise InvalidOption(bound.message)
                if inner is not None:
                    _walk(body, start, pos, inner)
        elif wire == _VARINT:
            _, pos = _varint(body, pos, end)
        elif wire in _FIXED:
            pos += _FIXED[wire]
        elif wire == _SGROUP or (wire == _EGROUP and depth > 0):
            depth += 1 if wire == _SGROUP else -1
        else:
            raise _Malformed
    if pos > end:
        raise _Malformed


# --------------------------------------------------------------------------------------------------------
# JSON: msgspec passes that keep values raw

_Shadow = tuple[msgspec.json.Decoder[Any], tuple[tuple[str, Bound, Any], ...]]
_STRICT: dict[tuple[type[Message], int], tuple[Bounds, msgspec.json.Decoder[Any]]] = {}
_SHADOWS: dict[tuple[type[Message], int], tuple[Bounds, _Shadow]] = {}
_CAPS: dict[tuple[int, Any, bool], Any] = {}


def _cap(limit: int, element: Any, strict: bool) -> Any:
    """An array of at most ``limit`` ``element``s (``strict``: refused at the next one) or, not strict, of
    ``limit + 1`` raw slots: either way the elements past them are skipped by msgspec, not built."""
    key = (limit, element, strict)
    cap = _CAPS.get(key)
    if cap is None:
        slots = [(f"e{i}", element | msgspec.UnsetType, msgspec.UNSET) for i in range(limit + (not strict))]
        cap = _CAPS[key] = msgspec.defstruct(
            f"_Cap{limit}", slots, array_like=True, forbid_unknown_fields=strict, gc=False
        )
    return cap


def _struct(cls: type[Message], bounds: Bounds, slot_type: Any) -> tuple[Any, list[tuple[str, Bound, Any]]]:
    """A struct of ``cls``'s bounded fields (under both key spellings protojson allows; other keys are
    skipped), each typed ``slot_type(field, bound)``, and the (slot, bound, field) of each."""
    slots: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    checks: list[tuple[str, Bound, Any]] = []
    for f in fields(cls):
        bound = bounds.get(f.attr)
        if bound is None:
            continue
        for n, spelling in enumerate(dict.fromkeys((f.key, f.camel))):
            slot = f"{f.attr}_{n}"
            slots.append((slot, slot_type(f, bound) | msgspec.UnsetType, msgspec.UNSET))
            rename[slot] = spelling
            checks.append((slot, bound, f))
    struct = msgspec.defstruct(f"_{cls.__name__}Bounded", slots, rename=rename, kw_only=True, gc=False)
    return struct, checks


def _strict_type(cls: type[Message], bounds: Bounds) -> Any:
    """``cls``'s bounded fields as strict caps, their elements raw or, with inner bounds, checked alike:
    every occurrence of a key (msgspec decodes each, then keeps the last) is checked as it is read."""

    def slot_type(f: Any, bound: Bound) -> Any:
        element = _strict_type(f.sub, bound.inner) if bound.inner and f.sub else msgspec.Raw
        return _cap(bound.limit, element, strict=True) | None  # protojson's null: unset

    return _struct(cls, bounds, slot_type)[0]


def _shadow(cls: type[Message], bounds: Bounds) -> _Shadow:
    """``cls``'s bounded fields kept raw, to find which one is over its bound (the strict pass says only
    that something is wrong), with the shadow of their elements' bounds."""
    key = (cls, id(bounds))
    cached = _SHADOWS.get(key)
    if cached is not None and cached[0] is bounds:
        return cached[1]
    struct, checks = _struct(cls, bounds, lambda f, bound: msgspec.Raw)
    inner = tuple(
        (slot, bound, _shadow(f.sub, bound.inner) if bound.inner and f.sub else None)
        for slot, bound, f in checks
    )
    shadow = (msgspec.json.Decoder(struct), inner)
    _SHADOWS[key] = (bounds, shadow)
    return shadow


_NOT_CHECKED: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def check_json_bounds(body: bytes, cls: type[Message], bounds: Bounds) -> None:
    """As ``check_protobuf_bounds``, for a protojson ``body``. A body whose bounded fields are not all
    arrays (of objects, where their elements are bounded too) raises ``DecodeError``: telling which of
    that and a repeated key hides a long array would take building it."""
    if body.count(b",") < _least(bounds):
        return  # the elements of an array are separated by commas: none can be over its limit
    key = (cls, id(bounds))
    cached = _STRICT.get(key)
    if cached is not None and cached[0] is bounds:
        strict = cached[1]
    else:
        strict = msgspec.json.Decoder(_strict_type(cls, bounds))
        _STRICT[key] = (bounds, strict)
    try:
        strict.decode(body)
    except msgspec.ValidationError as exc:
        _find_over(body, _shadow(cls, bounds))
        _find_over_repeated(body, cls, bounds)
        raise DecodeError(f"proto: {exc}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        pass  # not JSON, read no further than the first error: the decoder says so


def _find_over(body: bytes | msgspec.Raw, shadow: _Shadow) -> None:
    """Raises the bound of the first field (last occurrence of its key) over it, if any."""
    decoder, checks = shadow
    try:
        raw = decoder.decode(body)
    except _NOT_CHECKED:
        return
    for slot, bound, inner in checks:
        value = getattr(raw, slot)
        if value is msgspec.UNSET:
            continue
        try:
            elements = msgspec.json.decode(value, type=_cap(bound.limit, msgspec.Raw, strict=False))
        except _NOT_CHECKED:
            continue
        if getattr(elements, f"e{bound.limit}") is not msgspec.UNSET:
            raise InvalidOption(bound.message)
        if inner is not None:
            for i in range(bound.limit):
                element = getattr(elements, f"e{i}")
                if element is msgspec.UNSET:
                    break
                _find_over(element, inner)


_ANY_ARRAY: Final = msgspec.defstruct("_AnyArray", [], array_like=True, gc=False)
"""Any JSON array, its elements skipped in C."""
_PASSES: dict[tuple[type[Message], str, str, bool, int], tuple[Bound, msgspec.json.Decoder[Any]]] = {}


def _find_over_repeated(body: bytes, cls: type[Message], bounds: Bounds) -> None:
    """Raises the bound of the first field over it in any occurrence of its key: a key repeated keeps
    only its last value in the shadow. A field fails a pass capped at its bound either for its count or
    for its type; the same pass with any array allowed tells them apart (the decoder refuses the type)."""
    for attr, bound in bounds.items():
        assert all(not b.inner for b in bound.inner.values()), "bounds nest one level deep"
        for inner in ("", *bound.inner):
            if _passes(body, cls, attr, inner, bound, capped=True):
                continue
            if _passes(body, cls, attr, inner, bound, capped=False):
                raise InvalidOption(bound.inner[inner].message if inner else bound.message)
            return


def _passes(body: bytes, cls: type[Message], attr: str, inner: str, bound: Bound, capped: bool) -> bool:
    """Whether every occurrence of ``attr`` (or, with ``inner``, of that field of each of its elements) is
    an array, of at most its bound's elements when ``capped``."""
    key = (cls, attr, inner, capped, id(bound))
    cached = _PASSES.get(key)
    if cached is not None and cached[0] is bound:
        decoder = cached[1]
    else:

        def array(limit: int, element: Any, cap: bool) -> Any:
            return (_cap(limit, element, strict=True) if cap else _ANY_ARRAY) | None

        def slot_type(f: Any, b: Bound) -> Any:
            if not inner:
                return array(b.limit, msgspec.Raw, capped)
            element = _struct(
                f.sub, {inner: b.inner[inner]}, lambda g, ib: array(ib.limit, msgspec.Raw, capped)
            )
            # The outer counts passed already: capping them here builds at most ``limit`` elements.
            return array(b.limit, element[0], True)

        decoder = msgspec.json.Decoder(_struct(cls, {attr: bound}, slot_type)[0])
        _PASSES[key] = (bound, decoder)
    try:
        decoder.decode(body)
    except _NOT_CHECKED:
        return False
    return True
