"""Wire codec: protojson and binary protobuf for the message classes of ``messages.py``, plus the duh
content negotiation of spec §1.1. Everything is derived generically from each class's msgspec fields and
``__pb__`` numbers, once per class, and cached.

JSON (``decode_json``/``encode_json``)
    Decoding first tries msgspec's typed decoder (C speed), which takes the canonical protojson shape:
    ``json_name`` keys, int32 as JSON integers, bytes as padded standard base64. A cheap check then covers
    what msgspec does not: int32 range, and timestamps -- msgspec's RFC 3339 parser takes inputs Go rejects
    (no offset, a space or lower-case ``t``), so when a message carries timestamps their strings are
    re-read (a second msgspec pass over a struct holding only them) and parsed by Go's rules. Anything
    msgspec refuses goes to the lenient path, which reproduces Go protojson's acceptance rules: keys may be
    the ``json_name`` (``queue_name``) or the lowerCamelCase proto field name (``queueName``); int32 takes
    a JSON number or a decimal string (Go's integer rules: ``1e2`` yes, ``1.0`` no); bytes take standard
    or URL-safe base64, padding optional, CR/LF ignored; ``null`` means unset for every field; timestamps
    must be RFC 3339 with ``Z`` or a numeric offset and at most nine fractional digits (kept to the
    microsecond, truncated). Unknown keys, a field given in both spellings, a non-object
    top level and invalid JSON are errors. Not reproduced: Go also rejects a key repeated verbatim
    (msgspec keeps the last), and msgspec rejects lone surrogate escapes (``\\uD800``).
    Decoded datetimes are always aware UTC.

    Encoding is msgspec's: zero values omitted, ``json_name`` keys, padded standard base64, int32 as
    numbers. Datetimes must be aware UTC to come out as Go writes them (``...Z``); msgspec prints 0 or 6
    fractional digits where Go prints 0/3/6/9, which parse the same. Ints are written as given: keep them
    in int32 range.

Binary protobuf (``decode_protobuf``/``encode_protobuf``)
    int -> int32 varint (negative values as 10-byte two's complement; decoded values and, on encode,
    out-of-range ones are truncated to int32 as Go's conversion does), bool -> varint, str -> UTF-8 (invalid
    UTF-8 is an error, as in Go's proto3), bytes, nested message, list[...] -> repeated (unpacked),
    dict[str, str] -> map, ``datetime | None`` -> google.protobuf.Timestamp (decoded as aware UTC with
    microsecond precision, sub-microsecond nanos truncated; a naive datetime is encoded as UTC). Encoding
    omits proto3 zero values but always writes a datetime that is not None (even Go's zero time), fields in
    number order, map entries with both key and value. Decoding skips unknown fields of wire types
    0/1/2/5, treats a known field number with another wire type as unknown (as Go does), merges repeated
    occurrences of a singular message field, and rejects groups, invalid field numbers and wire types,
    over-long varints and truncated input.

Negotiation (``decode``/``encode``/``negotiate_accept``)
    A header is cut at the first ``;`` or ``,``, trimmed and lower-cased: empty/None, ``*/*``,
    ``application/*``, ``application/json`` select JSON; ``application/protobuf`` selects binary; anything
    else raises ``ClientContentError`` (455). As duh does, the Content-Type message quotes the header
    exactly as given, and the Accept message quotes it cut at the first ``;``/``,`` but neither trimmed
    nor lower-cased. A body that does not decode raises ``ClientContentError`` with the decoder's text.
"""

from __future__ import annotations

import binascii
import re
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from types import NoneType, UnionType
from typing import Any, Final, TypeVar, Union, cast, get_args, get_origin

import msgspec

from querator.errors import ClientContentError
from querator.wire.messages import Message

__all__ = [
    "JSON",
    "PROTOBUF",
    "DecodeError",
    "decode",
    "decode_json",
    "decode_protobuf",
    "encode",
    "encode_json",
    "encode_protobuf",
    "negotiate_accept",
]

JSON: Final = "application/json"
PROTOBUF: Final = "application/protobuf"

T = TypeVar("T", bound=Message)


class DecodeError(ValueError):
    """A request body that is not a valid encoding of the expected message."""


# --------------------------------------------------------------------------------------------------------
# Field model, derived once per class from msgspec's resolved field types and ``__pb__``.

# Numbered so the decoder tests the common kinds first; the varint kinds are >= _K_INT.
_K_STR: Final = 0
_K_BYTES: Final = 1
_K_LIST_MSG: Final = 2
_K_TS: Final = 3
_K_LIST_STR: Final = 4
_K_LIST_BYTES: Final = 5
_K_MAP: Final = 6
_K_MSG: Final = 7
_K_INT: Final = 8
_K_BOOL: Final = 9

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_MASK32: Final = (1 << 32) - 1
_MASK64: Final = (1 << 64) - 1
_MAX_FIELD_NUMBER: Final = (1 << 29) - 1


class _Field:
    __slots__ = ("attr", "camel", "key", "kind", "number", "sub")

    def __init__(self, attr: str, key: str, number: int, kind: int, sub: type[Message] | None) -> None:
        self.attr = attr  # python attribute name (snake)
        self.key = key  # JSON key msgspec reads and writes (json_name)
        self.camel = _lower_camel(attr)  # the proto field name
        self.number = number
        self.kind = kind
        self.sub = sub


def _lower_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _is_message(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Message)


def _classify(tp: Any, where: str) -> tuple[int, type[Message] | None]:
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        args = get_args(tp)
        inner = [a for a in args if a is not NoneType]
        if len(inner) == 1 and len(args) == 2:
            if inner[0] is datetime:
                return _K_TS, None
            if _is_message(inner[0]):
                return _K_MSG, cast("type[Message]", inner[0])
    elif origin is list:
        (elem,) = get_args(tp)
        if elem is str:
            return _K_LIST_STR, None
        if elem is bytes:
            return _K_LIST_BYTES, None
        if _is_message(elem):
            return _K_LIST_MSG, cast("type[Message]", elem)
    elif origin is dict:
        if get_args(tp) == (str, str):
            return _K_MAP, None
    elif tp is bool:
        return _K_BOOL, None
    elif tp is int:
        return _K_INT, None
    elif tp is str:
        return _K_STR, None
    elif tp is bytes:
        return _K_BYTES, None
    elif tp is datetime:
        return _K_TS, None
    elif _is_message(tp):
        return _K_MSG, cast("type[Message]", tp)
    raise TypeError(f"{where}: type {tp!r} has no protobuf mapping in querator.wire.codec")


_FIELDS: dict[type[Message], tuple[_Field, ...]] = {}


def _fields(cls: type[Message]) -> tuple[_Field, ...]:
    """The fields of ``cls`` in field-number order, checked against ``__pb__``."""
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    numbers = cls.__pb__
    infos = msgspec.structs.fields(cls)
    names = {info.name for info in infos}
    if set(numbers) != names:
        raise TypeError(f"{cls.__name__}.__pb__ does not match its fields: {sorted(set(numbers) ^ names)}")
    if len(set(numbers.values())) != len(numbers):
        raise TypeError(f"{cls.__name__}.__pb__ reuses a field number")
    out = []
    for info in infos:
        kind, sub = _classify(info.type, f"{cls.__name__}.{info.name}")
        number = numbers[info.name]
        if not 1 <= number <= _MAX_FIELD_NUMBER:
            raise TypeError(f"{cls.__name__}.{info.name}: invalid field number {number}")
        out.append(_Field(info.name, info.encode_name, number, kind, sub))
    result = tuple(sorted(out, key=lambda f: f.number))
    _FIELDS[cls] = result
    return result


# --------------------------------------------------------------------------------------------------------
# Timestamps

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# RFC 3339 as Go's time.Parse(time.RFC3339Nano) takes it (protojson's rule). The canonical shape is Go's
# fast path: upper-case T and Z, a '.' fraction of 1-9 digits (protojson's limit), Z or +hh:mm with
# hh <= 23 and mm <= 59. When that fails Go falls back to its general layout parser, which also takes a
# one-digit hour and a ',' fraction of any length (protojson's digit check only looks for '.').
_TS_CANONICAL: Final = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)", re.ASCII
)
_TS_GENERAL: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d?):(\d\d):(\d\d)(?:\.(\d{1,9})|,(\d+))?(?:Z|([+-])(\d\d):(\d\d))",
    re.ASCII,
)


def _parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp as Go protojson accepts it, as an aware UTC datetime (sub-microsecond digits
    truncated); raises ValueError."""
    try:
        if _TS_CANONICAL.fullmatch(text) is not None:
            value = datetime.fromisoformat(text)  # the shape is checked; this validates the ranges
            return value if text[-1] == "Z" else value.astimezone(UTC)
        m = _TS_GENERAL.fullmatch(text)
        if m is None:
            raise ValueError("not an RFC 3339 timestamp with Z or a numeric offset")
        year, month, day, hour, minute, second, frac, comma_frac, sign, off_h, off_m = m.groups()
        digits = frac or (comma_frac[:9] if comma_frac else "")
        micros = int(digits.ljust(9, "0")) // 1000 if digits else 0
        value = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=UTC
        )
        if sign is not None:
            oh, om = int(off_h), int(off_m)
            if oh > 23 or om > 59:
                raise ValueError("time zone offset out of range")
            offset = timedelta(hours=oh, minutes=om)
            value = value - offset if sign == "+" else value + offset
        return value
    except OverflowError:  # before 0001-01-01 or after 9999-12-31 in UTC
        raise ValueError("timestamp out of range") from None


def _ts_to_parts(value: datetime) -> tuple[int, int]:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return delta.days * 86400 + delta.seconds, delta.microseconds * 1000


# --------------------------------------------------------------------------------------------------------
# JSON

_JSON_ENCODER: Final = msgspec.json.Encoder()
_JSON_DECODERS: dict[type[Message], msgspec.json.Decoder[Any]] = {}


class _Number:
    """A JSON number that is not an integer literal, kept as written (msgspec ``float_hook``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_ANY_DECODER: Final = msgspec.json.Decoder(float_hook=_Number)


def encode_json(msg: Message) -> bytes:
    """``msg`` as protojson: json_name keys, zero values omitted."""
    return _JSON_ENCODER.encode(msg)


def decode_json(body: bytes, type: type[T]) -> T:
    """Parse protojson ``body`` as a ``type``; raises ``DecodeError``."""
    decoder = _JSON_DECODERS.get(type)
    if decoder is None:
        _fields(type)  # fail early on a class the codec cannot map
        decoder = _JSON_DECODERS[type] = msgspec.json.Decoder(type)
    try:
        msg = decoder.decode(body)
    except (msgspec.ValidationError, RecursionError):
        return _decode_json_lenient(body, type)
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
    return _decode_json_lenient(body, type)


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
    for f in _fields(cls):
        if f.kind == _K_INT:
            ints.append(f.attr)
        elif f.kind == _K_TS:
            stamps.append(f.attr)
        elif f.sub is not None:
            sub = _json_check(f.sub, building)
            if sub is None:
                continue
            if f.kind == _K_MSG:
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


def _json_clean(msg: Any, check: _Check, ignore_timestamps: bool) -> bool:
    """True when every int32 is in range and (unless ignored) no timestamp is set."""
    ints, stamps, subs, lists = check
    for name in ints:
        value = getattr(msg, name)
        if value > _INT32_MAX or value < _INT32_MIN:
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
            if max(map(getter, items)) > _INT32_MAX or min(map(getter, items)) < _INT32_MIN:
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
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    names: list[str] = []
    subs: list[tuple[str, Any]] = []
    lists: list[tuple[str, Any]] = []
    for f in _fields(cls):
        if f.kind == _K_TS:
            fields.append((f.attr, str | None, None))
            names.append(f.attr)
        elif f.sub is not None:
            inner = _ts_shadow_type(f.sub, building)
            if inner is None:
                continue
            if f.kind == _K_MSG:
                fields.append((f.attr, inner[0] | None, None))
                subs.append((f.attr, inner[1]))
            else:
                fields.append((f.attr, list[inner[0]], msgspec.field(default_factory=list)))  # type: ignore[valid-type]
                lists.append((f.attr, inner[1]))
        else:
            continue
        rename[f.attr] = f.key
    result: tuple[Any, _TsPlan] | None = None
    if fields:
        shadow = msgspec.defstruct(f"_{cls.__name__}Timestamps", fields, rename=rename, kw_only=True)
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
            setattr(msg, name, _parse_timestamp(text))
    for name, sub in subs:
        inner = getattr(shadow, name)
        if inner is not None:
            _apply_timestamps(getattr(msg, name), inner, sub)
    for name, sub in lists:
        for item, inner in zip(getattr(msg, name), getattr(shadow, name), strict=True):
            _apply_timestamps(item, inner, sub)


_JSON_KEYS: dict[type[Message], dict[str, _Field]] = {}


def _json_keys(cls: type[Message]) -> dict[str, _Field]:
    keys = _JSON_KEYS.get(cls)
    if keys is None:
        keys = {}
        for f in _fields(cls):
            keys[f.key] = f
            keys[f.camel] = f
        _JSON_KEYS[cls] = keys
    return keys


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, _Number):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    return "object"


def _show(value: Any) -> str:
    """``repr(value)``, cut short: error messages echo what the client sent."""
    text = repr(value)
    return text if len(text) <= 48 else text[:44] + "..."


def _decode_json_lenient(body: bytes, cls: type[T]) -> T:
    try:
        data = _ANY_DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DecodeError(f"Expected `object`, got `{_json_type(data)}`")
    return cast("T", _json_message(data, cls, "$"))


def _json_message(data: dict[str, Any], cls: type[Message], path: str) -> Message:
    keys = _json_keys(cls)
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for key, value in data.items():
        f = keys.get(key)
        if f is None:
            where = "" if path == "$" else f" - at `{path}`"
            raise DecodeError(f"Object contains unknown field `{key}`{where}")
        if f.attr in seen:
            raise DecodeError(f"duplicate field `{key}` - at `{path}`")
        seen.add(f.attr)
        if value is None:  # protojson: null leaves any field unset
            continue
        values[f.attr] = _json_value(value, f.kind, f.sub, f"{path}.{f.key}")
    return cls(**values)


def _json_value(value: Any, kind: int, sub: type[Message] | None, path: str) -> Any:
    if kind == _K_STR:
        if isinstance(value, str):
            return value
    elif kind == _K_INT:
        return _json_int32(value, path)
    elif kind == _K_BOOL:
        if isinstance(value, bool):
            return value
    elif kind == _K_BYTES:
        if isinstance(value, str):
            try:
                return _base64(value)
            except ValueError:
                raise DecodeError(f"Invalid base64 encoded string - at `{path}`") from None
    elif kind == _K_TS:
        if isinstance(value, str):
            try:
                return _parse_timestamp(value)
            except ValueError as exc:
                raise DecodeError(f"Invalid timestamp {_show(value)} ({exc}) - at `{path}`") from None
    elif kind == _K_MSG:
        assert sub is not None
        if isinstance(value, dict):
            return _json_message(value, sub, path)
    elif kind == _K_MAP:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, str):
                    raise DecodeError(f"Expected `str`, got `{_json_type(item)}` - at `{path}[{key!r}]`")
            return value
    elif isinstance(value, list):  # the repeated kinds
        elem = {_K_LIST_STR: _K_STR, _K_LIST_BYTES: _K_BYTES, _K_LIST_MSG: _K_MSG}[kind]
        return [_json_value(item, elem, sub, f"{path}[{i}]") for i, item in enumerate(value)]
    else:
        raise DecodeError(f"Expected `array`, got `{_json_type(value)}` - at `{path}`")
    expected = {_K_STR: "str", _K_BOOL: "bool", _K_BYTES: "str", _K_TS: "str"}.get(kind, "object")
    raise DecodeError(f"Expected `{expected}`, got `{_json_type(value)}` - at `{path}`")


_JSON_NUMBER_RE: Final = re.compile(r"(-?)(?:0|([1-9][0-9]*))(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")


def _json_int32(value: Any, path: str) -> int:
    """An int32 as Go protojson reads it: a JSON number or a string holding one, integral as written."""
    result: int | None = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        result = value
    elif isinstance(value, _Number):
        result = _integral(value.text)
    elif isinstance(value, str):
        if value == value.strip():
            result = _integral(value)
    else:
        raise DecodeError(f"Expected `int`, got `{_json_type(value)}` - at `{path}`")
    if result is None or not _INT32_MIN <= result <= _INT32_MAX:
        shown = value.text[:40] if isinstance(value, _Number) else _show(value)
        raise DecodeError(f"invalid value for int32 field: {shown} - at `{path}`")
    return result


def _integral(text: str) -> int | None:
    """The integer a JSON number literal denotes, or None when Go would not take it as one (``1.0``)."""
    m = _JSON_NUMBER_RE.fullmatch(text)
    if m is None:
        return None
    neg, intp, frac, exp_text = m.groups()
    intp = intp or ""
    frac = frac or ""
    if not intp and not frac:
        return 0
    exp_digits = (exp_text or "0").lstrip("+-").lstrip("0")
    if len(exp_digits) > 10:  # Go parses the exponent as an int32
        return None
    exp = int(exp_text) if exp_text else 0
    if not _INT32_MIN <= exp <= _INT32_MAX:
        return None
    if exp >= 0:
        if len(frac) > exp or len(intp) + exp > 100:
            return None
        digits = intp + frac + "0" * (exp - len(frac))
    else:
        index = len(intp) + exp
        if frac or index < 0 or intp[index:].strip("0"):
            return None
        digits = intp[:index]
    digits = digits.lstrip("0")
    if len(digits) > 10:  # out of int32 range whatever the digits
        return None
    number = int(digits) if digits else 0
    return -number if neg else number


_URL_TO_STD: Final = str.maketrans("-_", "+/")


def _base64(text: str) -> bytes:
    """Go protojson's bytes rule: URL-safe alphabet if '-' or '_' occur, unpadded if the length is not a
    multiple of 4, CR and LF ignored."""
    url = "-" in text or "_" in text
    padded = len(text) % 4 == 0
    if "\r" in text or "\n" in text:
        text = text.replace("\r", "").replace("\n", "")
    if url:
        if "+" in text or "/" in text:
            raise ValueError("mixed base64 alphabets")
        text = text.translate(_URL_TO_STD)
    if not padded:
        if "=" in text:
            raise ValueError("unexpected padding")
        text += "=" * (-len(text) % 4)
    return binascii.a2b_base64(text, strict_mode=True)


# --------------------------------------------------------------------------------------------------------
# Binary protobuf


class _PbTable:
    """Per-class decode and encode tables."""

    __slots__ = ("by_tag", "cls", "encode", "msg_fields")

    def __init__(self, cls: type[Message]) -> None:
        self.cls = cls
        # decode: full tag varint (number << 3 | wire type) -> (kind, attr, sub table)
        self.by_tag: dict[int, tuple[int, str, Any]] = {}
        # singular nested messages: raw bytes are collected and parsed at the end (protobuf merge rule)
        self.msg_fields: tuple[tuple[str, _PbTable], ...] = ()
        # encode: (attr, kind, tag bytes, sub table) in field-number order
        self.encode: tuple[tuple[str, int, bytes, Any], ...] = ()


_PB_TABLES: dict[type[Message], _PbTable] = {}


def _pb_table(cls: type[Message]) -> _PbTable:
    table = _PB_TABLES.get(cls)
    if table is None:
        pending: dict[type[Message], _PbTable] = {}
        table = _build_pb_table(cls, pending)
        _PB_TABLES.update(pending)  # published only once complete
    return table


def _build_pb_table(cls: type[Message], pending: dict[type[Message], _PbTable]) -> _PbTable:
    table = _PB_TABLES.get(cls) or pending.get(cls)
    if table is not None:
        return table
    table = pending[cls] = _PbTable(cls)  # registered first, so a self-referencing type terminates
    encode = []
    msg_fields = []
    for f in _fields(cls):
        sub = _build_pb_table(f.sub, pending) if f.sub is not None else None
        wire = 0 if f.kind in (_K_INT, _K_BOOL) else 2
        tag = f.number << 3 | wire
        table.by_tag[tag] = (f.kind, f.attr, sub)
        encode.append((f.attr, f.kind, _varint_bytes(tag), sub))
        if f.kind == _K_MSG:
            assert sub is not None
            msg_fields.append((f.attr, sub))
    table.encode = tuple(encode)
    table.msg_fields = tuple(msg_fields)
    return table


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _put_varint(out, value)
    return bytes(out)


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _bad_wire(detail: str) -> DecodeError:
    return DecodeError(f"proto: cannot parse invalid wire-format data ({detail})")


def _truncated() -> DecodeError:
    return _bad_wire("truncated message")


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a varint at ``pos``: (value as uint64, next position). Go's limits: at most 10 bytes, the
    tenth being 0 or 1. Unrolled for up to five bytes (a non-negative int32, a timestamp's seconds until
    the year 3000); reads may run past ``end`` (never past the buffer), the end is checked before
    returning."""
    try:
        b = buf[pos]
        if b < 0x80:
            result = b
            pos += 1
        else:
            result = b & 0x7F
            b = buf[pos + 1]
            if b < 0x80:
                result |= b << 7
                pos += 2
            else:
                result |= (b & 0x7F) << 7
                b = buf[pos + 2]
                if b < 0x80:
                    result |= b << 14
                    pos += 3
                else:
                    result |= (b & 0x7F) << 14
                    b = buf[pos + 3]
                    if b < 0x80:
                        result |= b << 21
                        pos += 4
                    else:
                        result |= (b & 0x7F) << 21
                        b = buf[pos + 4]
                        if b < 0x80:
                            result |= b << 28
                            pos += 5
                        else:
                            result, pos = _varint_tail(buf, pos + 4, result | (b & 0x7F) << 28)
    except IndexError:
        raise _truncated() from None
    if pos > end:
        raise _truncated()
    return result, pos


def _varint_tail(buf: bytes, pos: int, result: int) -> tuple[int, int]:
    """Bytes six to ten of a varint whose first five (at ``pos - 4`` .. ``pos``) had continuation bits."""
    shift = 35
    while True:
        pos += 1
        b = buf[pos]
        if shift == 63:
            if b > 1:
                raise _bad_wire("variable length integer overflow")
            return result | b << 63, pos + 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7


def _skip_field(buf: bytes, pos: int, end: int, tag: int) -> int:
    number = tag >> 3
    wire = tag & 7
    if number < 1 or number > _MAX_FIELD_NUMBER:
        raise _bad_wire(f"invalid field number {number}")
    if wire == 0:
        _, pos = _varint(buf, pos, end)
    elif wire == 2:
        length, pos = _varint(buf, pos, end)
        pos += length
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire in (3, 4):
        raise _bad_wire(f"group in field {number} not supported")
    else:
        raise _bad_wire(f"invalid wire type {wire}")
    if pos > end:
        raise _truncated()
    return pos


def _pb_timestamp(buf: bytes, pos: int, end: int, previous: datetime | None) -> datetime:
    seconds, nanos = (0, 0) if previous is None else _ts_to_parts(previous)
    while pos < end:
        tag = buf[pos]
        pos += 1
        if tag == 0x08:
            seconds, pos = _varint(buf, pos, end)
            if seconds >= 1 << 63:
                seconds -= 1 << 64
        elif tag == 0x10:
            nanos, pos = _varint(buf, pos, end)
            nanos &= _MASK32
            if nanos >= 1 << 31:
                nanos -= 1 << 32
        else:
            if tag >= 0x80:
                tag, pos = _varint(buf, pos - 1, end)
            pos = _skip_field(buf, pos, end, tag)
    try:
        return _EPOCH + timedelta(0, seconds, nanos // 1000)
    except OverflowError:
        raise DecodeError(
            f"proto: google.protobuf.Timestamp out of range (seconds={seconds}, nanos={nanos})"
        ) from None


def _pb_map_entry(buf: bytes, pos: int, end: int) -> tuple[str, str]:
    key = value = ""
    while pos < end:
        tag = buf[pos]
        pos += 1
        if tag >= 0x80:
            tag, pos = _varint(buf, pos - 1, end)
        if tag in (0x0A, 0x12):
            length, pos = _varint(buf, pos, end)
            start = pos
            pos += length
            if pos > end:
                raise _truncated()
            if tag == 0x0A:
                key = buf[start:pos].decode()
            else:
                value = buf[start:pos].decode()
        else:
            pos = _skip_field(buf, pos, end, tag)
    return key, value


def _pb_decode(buf: bytes, pos: int, end: int, table: _PbTable) -> Any:
    by_tag = table.by_tag
    values: dict[str, Any] = {}
    try:
        while pos < end:
            tag = buf[pos]
            pos += 1
            if tag >= 0x80:
                tag, pos = _varint(buf, pos - 1, end)
            try:
                kind, name, sub = by_tag[tag]
            except KeyError:  # unknown field, or a known number with an unexpected wire type (Go: unknown)
                pos = _skip_field(buf, pos, end, tag)
                continue
            if pos >= end:
                raise _truncated()
            n = buf[pos]  # the length of a length-delimited field, or the value of a varint one
            pos += 1
            if n >= 0x80:
                n, pos = _varint(buf, pos - 1, end)
            if kind >= _K_INT:
                if kind == _K_INT:
                    n &= _MASK32
                    values[name] = n - (1 << 32) if n > _INT32_MAX else n
                else:
                    values[name] = n != 0
                continue
            start = pos
            pos += n
            if pos > end:
                raise _truncated()
            if kind == _K_STR:
                values[name] = buf[start:pos].decode()
            elif kind == _K_BYTES:
                values[name] = buf[start:pos]
            elif kind == _K_LIST_MSG:
                item = _pb_decode(buf, start, pos, sub)
                items = values.get(name)
                if items is None:
                    values[name] = [item]
                else:
                    items.append(item)
            elif kind == _K_TS:
                values[name] = _pb_timestamp(buf, start, pos, values.get(name))
            elif kind in (_K_LIST_STR, _K_LIST_BYTES):
                element = buf[start:pos].decode() if kind == _K_LIST_STR else buf[start:pos]
                items = values.get(name)
                if items is None:
                    values[name] = [element]
                else:
                    items.append(element)
            elif kind == _K_MAP:
                key, value = _pb_map_entry(buf, start, pos)
                mapping = values.get(name)
                if mapping is None:
                    values[name] = {key: value}
                else:
                    mapping[key] = value
            else:  # _K_MSG: merge every occurrence, parse once
                raw = values.get(name)
                values[name] = buf[start:pos] if raw is None else raw + buf[start:pos]
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"proto: a string field of {table.cls.__name__} contains invalid UTF-8 ({exc})"
        ) from None
    for name, sub in table.msg_fields:
        raw = values.get(name)
        if raw is not None:
            values[name] = _pb_decode(raw, 0, len(raw), sub)
    return table.cls(**values)


def decode_protobuf(body: bytes, type: type[T]) -> T:
    """Parse binary protobuf ``body`` as a ``type``; raises ``DecodeError``."""
    table = _PB_TABLES.get(type) or _pb_table(type)
    buf = body if isinstance(body, bytes) else bytes(body)
    try:
        return cast("T", _pb_decode(buf, 0, len(buf), table))
    except IndexError:  # defensive: every read is bounds-checked
        raise _truncated() from None


def _put_int32(out: bytearray, value: int) -> None:
    value &= _MASK32
    if value > _INT32_MAX:  # negative int32: sign-extended to 64 bits, ten bytes on the wire
        value = (value - (1 << 32)) & _MASK64
    _put_varint(out, value)


def _pb_timestamp_bytes(value: datetime) -> bytes:
    seconds, nanos = _ts_to_parts(value)
    out = bytearray()
    if seconds:
        out.append(0x08)
        _put_varint(out, seconds & _MASK64)
    if nanos:
        out.append(0x10)
        _put_varint(out, nanos)
    return bytes(out)


def _put_delimited(out: bytearray, tag: bytes, data: bytes | bytearray) -> None:
    out += tag
    n = len(data)
    if n < 0x80:
        out.append(n)
    else:
        _put_varint(out, n)
    out += data


def _pb_encode(msg: Any, table: _PbTable) -> bytearray:
    out = bytearray()
    for name, kind, tag, sub in table.encode:
        value = getattr(msg, name)
        if kind <= _K_BYTES:  # str or bytes, inlined: the bulk of every message
            if value:
                data = value.encode() if kind == _K_STR else value
                n = len(data)
                out += tag
                if n < 0x80:
                    out.append(n)
                else:
                    _put_varint(out, n)
                out += data
        elif kind == _K_INT:
            if value:
                out += tag
                _put_int32(out, value)
        elif kind == _K_BOOL:
            if value:
                out += tag
                out.append(1)
        elif kind == _K_TS:
            if value is not None:
                _put_delimited(out, tag, _pb_timestamp_bytes(value))
        elif kind == _K_LIST_MSG:
            for item in value:
                _put_delimited(out, tag, _pb_encode(item, sub))
        elif kind == _K_LIST_STR:
            for item in value:
                _put_delimited(out, tag, item.encode())
        elif kind == _K_LIST_BYTES:
            for item in value:
                _put_delimited(out, tag, item)
        elif kind == _K_MAP:
            for key, item in value.items():
                entry = bytearray()
                _put_delimited(entry, b"\x0a", key.encode())
                _put_delimited(entry, b"\x12", item.encode())
                _put_delimited(out, tag, entry)
        elif value is not None:  # _K_MSG
            _put_delimited(out, tag, _pb_encode(value, sub))
    return out


def encode_protobuf(msg: Message) -> bytes:
    """``msg`` as binary protobuf (proto3: zero values omitted, fields in number order)."""
    cls = msg.__class__
    table = _PB_TABLES.get(cls) or _pb_table(cls)
    return bytes(_pb_encode(msg, table))


# --------------------------------------------------------------------------------------------------------
# Content negotiation (duh)

_JSON_MEDIA: Final = frozenset({"", "*/*", "application/*", JSON})
_CUT_RE: Final = re.compile(r"[;,]")


def _cut(header: str) -> str:
    m = _CUT_RE.search(header)
    return header if m is None else header[: m.start()]


def _media(header: str | None) -> str | None:
    """JSON or PROTOBUF for a Content-Type/Accept value, None when unrecognized."""
    if not header or header == JSON:
        return JSON
    media = _cut(header).strip().lower()
    if media in _JSON_MEDIA:
        return JSON
    if media == PROTOBUF:
        return PROTOBUF
    return None


def negotiate_accept(accept: str | None) -> str:
    """The reply content type for an ``Accept`` header; raises ``ClientContentError`` (455)."""
    media = _media(accept)
    if media is None:
        assert accept is not None
        raise ClientContentError(
            f"Accept header '{_cut(accept)}' is invalid format or unrecognized content type, "
            f"only [{JSON},{PROTOBUF}] are supported by this method"
        )
    return media


def decode(body: bytes, content_type: str | None, type: type[T]) -> T:
    """Decode a request body as the ``Content-Type`` says; raises ``ClientContentError`` (455)."""
    media = _media(content_type)
    try:
        if media == JSON:
            return decode_json(body, type)
        if media == PROTOBUF:
            return decode_protobuf(body, type)
    except DecodeError as exc:
        raise ClientContentError(str(exc)) from None
    raise ClientContentError(
        f"Content-Type header '{content_type}' is invalid format or unrecognized content type"
    )


def encode(msg: Message, accept: str | None) -> tuple[bytes, str]:
    """Encode a reply as the ``Accept`` header asks: (body, Content-Type); raises ``ClientContentError``."""
    if negotiate_accept(accept) == PROTOBUF:
        return encode_protobuf(msg), PROTOBUF
    return encode_json(msg), JSON
