"""The field model both codecs derive from a message class: each field's kind (string, int32, repeated
message, timestamp, ...), its JSON key and its proto name, from msgspec's resolved field types, once per
class and cached."""

from __future__ import annotations

from datetime import datetime
from types import NoneType, UnionType
from typing import Any, Final, Union, cast, get_args, get_origin

import msgspec

from querator.wire.messages import Message

# The kinds of field.
K_STR: Final = 0
K_BYTES: Final = 1
K_LIST_MSG: Final = 2
K_TS: Final = 3
K_LIST_STR: Final = 4
K_LIST_BYTES: Final = 5
K_MAP: Final = 6
K_MSG: Final = 7
K_INT: Final = 8
K_BOOL: Final = 9

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1


class Field:
    """One field of a message class."""

    __slots__ = ("attr", "camel", "key", "kind", "sub")

    def __init__(self, attr: str, key: str, kind: int, sub: type[Message] | None) -> None:
        self.attr = attr  # python attribute name (snake)
        self.key = key  # JSON key msgspec reads and writes (json_name)
        self.camel = _lower_camel(attr)  # the proto field name
        self.kind = kind
        self.sub = sub


def _lower_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _is_message(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Message)


# Long on purpose: one branch per kind of field type a message may declare.
def _classify(tp: Any, where: str) -> tuple[int, type[Message] | None]:  # noqa: C901, PLR0911, PLR0912
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        args = get_args(tp)
        inner = [a for a in args if a is not NoneType]
        if len(inner) == 1 and len(args) == 2:
            if inner[0] is datetime:
                return K_TS, None
            if _is_message(inner[0]):
                return K_MSG, cast("type[Message]", inner[0])
    elif origin is list:
        (elem,) = get_args(tp)
        if elem is str:
            return K_LIST_STR, None
        if elem is bytes:
            return K_LIST_BYTES, None
        if _is_message(elem):
            return K_LIST_MSG, cast("type[Message]", elem)
    elif origin is dict:
        if get_args(tp) == (str, str):
            return K_MAP, None
    elif tp is bool:
        return K_BOOL, None
    elif tp is int:
        return K_INT, None
    elif tp is str:
        return K_STR, None
    elif tp is bytes:
        return K_BYTES, None
    elif tp is datetime:
        return K_TS, None
    elif _is_message(tp):
        return K_MSG, cast("type[Message]", tp)
    raise TypeError(f"{where}: type {tp!r} has no protobuf mapping in querator.wire")


_CACHE: dict[type[Message], tuple[Field, ...]] = {}


def fields(cls: type[Message]) -> tuple[Field, ...]:
    """The fields of ``cls``, in declaration order."""
    cached = _CACHE.get(cls)
    if cached is None:
        cached = _CACHE[cls] = tuple(
            Field(info.name, info.encode_name, *_classify(info.type, f"{cls.__name__}.{info.name}"))
            for info in msgspec.structs.fields(cls)
        )
    return cached
