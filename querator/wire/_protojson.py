"""protojson bodies, the lenient decoder: Go protojson's acceptance rules for what msgspec's typed decoder
refuses (both key spellings, int32 as strings or exponent literals, every base64 variant, ``null`` as
unset), and the error messages, each naming the field's path."""

from __future__ import annotations

import binascii
import re
from typing import Any, Final, TypeVar, cast

import msgspec

from querator.wire._errors import DecodeError
from querator.wire._fields import (
    INT32_MAX,
    INT32_MIN,
    K_BOOL,
    K_BYTES,
    K_INT,
    K_LIST_BYTES,
    K_LIST_MSG,
    K_LIST_STR,
    K_MAP,
    K_MSG,
    K_STR,
    K_TS,
    Field,
    fields,
)
from querator.wire._timestamps import parse_timestamp
from querator.wire.messages import Message

__all__ = ["decode_lenient"]

T = TypeVar("T", bound=Message)


class _Number:
    """A JSON number that is not an integer literal, kept as written (msgspec ``float_hook``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_ANY_DECODER: Final = msgspec.json.Decoder(float_hook=_Number)


_JSON_KEYS: dict[type[Message], dict[str, Field]] = {}


def _json_keys(cls: type[Message]) -> dict[str, Field]:
    keys = _JSON_KEYS.get(cls)
    if keys is None:
        keys = {}
        for f in fields(cls):
            keys[f.key] = f
            keys[f.camel] = f
        _JSON_KEYS[cls] = keys
    return keys


# Long on purpose: one name per JSON type, as Go's errors spell them.
def _json_type(value: Any) -> str:  # noqa: PLR0911
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


def decode_lenient(body: bytes, cls: type[T]) -> T:
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


# Long on purpose: protojson's rules, one branch per kind of field.
def _json_value(  # noqa: C901, PLR0911, PLR0912
    value: Any, kind: int, sub: type[Message] | None, path: str
) -> Any:
    if kind == K_STR:
        if isinstance(value, str):
            return value
    elif kind == K_INT:
        return _json_int32(value, path)
    elif kind == K_BOOL:
        if isinstance(value, bool):
            return value
    elif kind == K_BYTES:
        if isinstance(value, str):
            try:
                return _base64(value)
            except ValueError:
                raise DecodeError(f"Invalid base64 encoded string - at `{path}`") from None
    elif kind == K_TS:
        if isinstance(value, str):
            try:
                return parse_timestamp(value)
            except ValueError as exc:
                raise DecodeError(f"Invalid timestamp {_show(value)} ({exc}) - at `{path}`") from None
    elif kind == K_MSG:
        assert sub is not None
        if isinstance(value, dict):
            return _json_message(value, sub, path)
    elif kind == K_MAP:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, str):
                    raise DecodeError(f"Expected `str`, got `{_json_type(item)}` - at `{path}[{key!r}]`")
            return value
    elif isinstance(value, list):  # the repeated kinds
        elem = {K_LIST_STR: K_STR, K_LIST_BYTES: K_BYTES, K_LIST_MSG: K_MSG}[kind]
        return [_json_value(item, elem, sub, f"{path}[{i}]") for i, item in enumerate(value)]
    else:
        raise DecodeError(f"Expected `array`, got `{_json_type(value)}` - at `{path}`")
    expected = {K_STR: "str", K_BOOL: "bool", K_BYTES: "str", K_TS: "str"}.get(kind, "object")
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
    if result is None or not INT32_MIN <= result <= INT32_MAX:
        shown = value.text[:40] if isinstance(value, _Number) else _show(value)
        raise DecodeError(f"invalid value for int32 field: {shown} - at `{path}`")
    return result


# Long on purpose: each way Go refuses a number as an integer.
def _integral(text: str) -> int | None:  # noqa: PLR0911
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
    if not INT32_MIN <= exp <= INT32_MAX:
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
