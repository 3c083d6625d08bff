"""protojson bodies, the fast path: msgspec's typed decoder and encoder, with the checks msgspec does not
make (int32 range, Go's timestamp rules); anything msgspec refuses goes to ``_protojson``'s lenient decoder,
which applies Go protojson's acceptance rules and writes the error messages."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Final, TypeVar, cast

import msgspec

from querator.wire._errors import DecodeError
from querator.wire._fields import INT32_MAX, INT32_MIN, K_INT, K_MSG, K_TS, fields
from querator.wire._protojson import decode_lenient
from querator.wire._timestamps import parse_timestamp
from querator.wire.messages import Message

__all__ = ["decode_json", "encode_json"]

T = TypeVar("T", bound=Message)

_JSON_ENCODER: Final = msgspec.json.Encoder()
_JSON_DECODERS: dict[type[Message], msgspec.json.Decoder[Any]] = {}


def encode_json(msg: Message) -> bytes:
    """``msg`` as protojson: json_name keys, zero values omitted."""
    return _JSON_ENCODER.encode(msg)


def decode_json(body: bytes, type: type[T]) -> T:
    """Parse protojson ``body`` as a ``type``; raises ``DecodeError``."""
    decoder = _JSON_DECODERS.get(type)
    if decoder is None:
        fields(type)  # fail early on a class the codec cannot map
        decoder = _JSON_DECODERS[type] = msgspec.json.Decoder(type)
    try:
        msg = decoder.decode(body)
    except (msgspec.ValidationError, RecursionError):
        return decode_lenient(body, type)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # not JSON at all
        raise DecodeError(f"invalid JSON: {exc}") from None
    check = _json_check(type)
    if check is None or _json_clean(msg, check, False):
        return cast("T", msg)
    # An int32 out of range, or timestamps that msgspec parsed by its own (looser) rules.
    stamps = _ts_shadow(type)
    if stamps is not None and _json_clean(msg, check, True):
        shadow_decoder, plan = stamps
        try:  # re-read just the timestamp strings and parse them as Go does
            _apply_timestamps(msg, shadow_decoder.decode(body), plan)
        except ValueError:
            pass  # the lenient path reports it, with the field's path
        else:
            return cast("T", msg)
    return decode_lenient(body, type)


# The fast path's post-check, per class: the int32 fields to range-check, the timestamp fields, singular
# nested messages that need checking, and repeated ones. A repeated field's elements are checked with C
# loops (``map`` over attribute getters) for their own int32s and timestamps; only their nested messages,
# if any need checking, cost a Python call per element. None when nothing needs checking.
_Check = tuple[
    tuple[str, ...],  # int32 fields
    tuple[str, ...],  # timestamp fields
    tuple[tuple[str, Any], ...],  # (field, check of the nested message)
    tuple[tuple[str, tuple[Any, ...], tuple[Any, ...], Any], ...],  # (field, int32 getters, timestamp
    # getters, check of the element's nested messages or None)
]
_CHECKS: dict[type[Message], _Check | None] = {}


def _no_recursion(cls: type[Message], outer: tuple[type[Message], ...]) -> tuple[type[Message], ...]:
    """``outer`` plus ``cls``: the message types being built, outermost first."""
    if cls in outer:
        raise TypeError(f"{cls.__name__}: recursive message types are not supported by the JSON codec")
    return (*outer, cls)


def _json_check(cls: type[Message], outer: tuple[type[Message], ...] = ()) -> _Check | None:
    if cls in _CHECKS:
        return _CHECKS[cls]
    building = _no_recursion(cls, outer)
    ints: list[str] = []
    stamps: list[str] = []
    subs: list[tuple[str, Any]] = []
    lists: list[tuple[str, tuple[Any, ...], tuple[Any, ...], Any]] = []
    for f in fields(cls):
        if f.kind == K_INT:
            ints.append(f.attr)
        elif f.kind == K_TS:
            stamps.append(f.attr)
        elif f.sub is not None:
            sub = _json_check(f.sub, building)
            if sub is None:
                continue
            if f.kind == K_MSG:
                subs.append((f.attr, sub))
            else:
                sub_ints, sub_stamps, sub_subs, sub_lists = sub
                nested = ((), (), sub_subs, sub_lists) if sub_subs or sub_lists else None
                int_getters = tuple(attrgetter(name) for name in sub_ints)
                stamp_getters = tuple(attrgetter(name) for name in sub_stamps)
                lists.append((f.attr, int_getters, stamp_getters, nested))
    check: _Check | None = None
    if ints or stamps or subs or lists:
        check = (tuple(ints), tuple(stamps), tuple(subs), tuple(lists))
    _CHECKS[cls] = check
    return check


# Long on purpose: the slow path's checks of Go's rules, one per kind of field, in one walk.
def _json_clean(msg: Any, check: _Check, ignore_timestamps: bool) -> bool:  # noqa: C901, PLR0911, PLR0912
    """True when every int32 is in range and (unless ignored) no timestamp is set."""
    ints, stamps, subs, lists = check
    for name in ints:
        value = getattr(msg, name)
        if value > INT32_MAX or value < INT32_MIN:
            return False
    if not ignore_timestamps:
        for name in stamps:
            if getattr(msg, name) is not None:
                return False
    for name, sub in subs:
        value = getattr(msg, name)
        if value is not None and not _json_clean(value, sub, ignore_timestamps):
            return False
    for name, int_getters, stamp_getters, nested in lists:
        items = getattr(msg, name)
        if not items:
            continue
        for getter in int_getters:
            if max(map(getter, items)) > INT32_MAX or min(map(getter, items)) < INT32_MIN:
                return False
        if not ignore_timestamps:
            for getter in stamp_getters:
                if any(map(getter, items)):  # a datetime is truthy, None is not
                    return False
        if nested is not None:
            for item in items:
                if not _json_clean(item, nested, ignore_timestamps):
                    return False
    return True


# Per class with timestamps: a decoder for a "shadow" struct holding just the timestamp strings (other keys
# are skipped), and the plan to copy them onto the real message: timestamp fields, singular and repeated
# nested messages.
_TsPlan = tuple[tuple[str, ...], tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...]]
_TS_SHADOWS: dict[type[Message], tuple[msgspec.json.Decoder[Any], _TsPlan] | None] = {}
_TS_SHADOW_TYPES: dict[type[Message], tuple[Any, _TsPlan] | None] = {}


def _ts_shadow_type(cls: type[Message], outer: tuple[type[Message], ...] = ()) -> tuple[Any, _TsPlan] | None:
    if cls in _TS_SHADOW_TYPES:
        return _TS_SHADOW_TYPES[cls]
    building = _no_recursion(cls, outer)
    shadow_fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    names: list[str] = []
    subs: list[tuple[str, Any]] = []
    lists: list[tuple[str, Any]] = []
    for f in fields(cls):
        if f.kind == K_TS:
            shadow_fields.append((f.attr, str | None, None))
            names.append(f.attr)
        elif f.sub is not None:
            inner = _ts_shadow_type(f.sub, building)
            if inner is None:
                continue
            if f.kind == K_MSG:
                shadow_fields.append((f.attr, inner[0] | None, None))
                subs.append((f.attr, inner[1]))
            else:
                shadow_fields.append((f.attr, list[inner[0]], msgspec.field(default_factory=list)))  # type: ignore[valid-type]
                lists.append((f.attr, inner[1]))
        else:
            continue
        rename[f.attr] = f.key
    result: tuple[Any, _TsPlan] | None = None
    if shadow_fields:
        shadow = msgspec.defstruct(f"_{cls.__name__}Timestamps", shadow_fields, rename=rename, kw_only=True)
        result = (shadow, (tuple(names), tuple(subs), tuple(lists)))
    _TS_SHADOW_TYPES[cls] = result
    return result


def _ts_shadow(cls: type[Message]) -> tuple[msgspec.json.Decoder[Any], _TsPlan] | None:
    if cls in _TS_SHADOWS:
        return _TS_SHADOWS[cls]
    shadow = _ts_shadow_type(cls)
    result = None if shadow is None else (msgspec.json.Decoder(shadow[0]), shadow[1])
    _TS_SHADOWS[cls] = result
    return result


def _apply_timestamps(msg: Any, shadow: Any, plan: _TsPlan) -> None:
    names, subs, lists = plan
    for name in names:
        text = getattr(shadow, name)
        if text is not None:
            setattr(msg, name, parse_timestamp(text))
    for name, sub in subs:
        inner = getattr(shadow, name)
        if inner is not None:
            _apply_timestamps(getattr(msg, name), inner, sub)
    for name, sub in lists:
        for item, inner in zip(getattr(msg, name), getattr(shadow, name), strict=True):
            _apply_timestamps(item, inner, sub)
