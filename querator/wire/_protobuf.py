"""Binary protobuf bodies: parsed and written by Google's upb runtime through the classes protoc generated
from querator/proto/querator.proto (``_pb/querator_pb2.py``, docs/adr/0013), and converted to and from
the msgspec Structs of ``messages``, the one message type the rest of Querator sees.

Each Struct class is paired with the generated class of the same name, field by field on the JSON key
(a Struct field's encode name is the ``json_name`` of its .proto field), so field numbers exist only in
the .proto. A field missing on either side, or of another type, is a TypeError the first time the class
is used.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar, cast

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError as _PbDecodeError
from google.protobuf.timestamp_pb2 import Timestamp

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
from querator.wire._pb import querator_pb2
from querator.wire.messages import Message

__all__ = ["decode_protobuf", "encode_protobuf"]

T = TypeVar("T", bound=Message)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MASK32: Final = (1 << 32) - 1

_SCALARS: Final = {K_STR: "string", K_BYTES: "bytes", K_INT: "int32", K_BOOL: "bool"}
_COPIED: Final = {K_LIST_STR: "list", K_LIST_BYTES: "list", K_MAP: "dict"}  # upb containers to plain values
_PROTO_SCALARS: Final = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_BOOL: "bool",
}


class _Codec:
    """One Struct class's conversions from and to its generated class, compiled from generated source
    (as ``dataclasses`` compiles ``__init__``): straight-line attribute reads and one constructor call
    per message run several times faster than a loop over a field table."""

    __slots__ = ("from_pb", "pb_cls", "source", "to_pb")

    def __init__(self, cls: type[Message], pb_cls: Any, pairs: list[tuple[Field, FieldDescriptor]]) -> None:
        self.pb_cls = pb_cls
        env: dict[str, Any] = {
            "cls": cls,
            "_datetime": _datetime,
            "_set_timestamp": _set_timestamp,
            "_wrap_int32": _wrap_int32,
        }
        reads: list[str] = []  # keyword arguments of the Struct, read from ``pb``
        writes: list[str] = []  # keyword arguments of the generated message, read from ``msg``
        after: list[str] = []  # statements that fill ``out`` in place: timestamps, (repeated) messages
        for i, (f, d) in enumerate(pairs):
            attr, name = f.attr, d.name
            if f.kind == K_TS:
                reads.append(f"{attr}=_datetime(pb.{name}) if pb.HasField({name!r}) else None")
                after.append(f"if msg.{attr} is not None: _set_timestamp(out.{name}, msg.{attr})")
            elif f.kind == K_LIST_MSG:
                assert f.sub is not None
                sub = _codec(f.sub)
                env[f"from_{i}"], env[f"to_{i}"] = sub.from_pb, sub.to_pb
                reads.append(f"{attr}=[from_{i}(item) for item in pb.{name}]")
                after.append(f"add = out.{name}.add\nfor item in msg.{attr}: to_{i}(item, add)")
            elif f.kind == K_MSG:
                assert f.sub is not None
                sub = _codec(f.sub)
                env[f"from_{i}"], env[f"to_{i}"], env[f"cls_{i}"] = sub.from_pb, sub.to_pb, sub.pb_cls
                reads.append(f"{attr}=from_{i}(pb.{name}) if pb.HasField({name!r}) else None")
                after.append(f"if msg.{attr} is not None: out.{name}.CopyFrom(to_{i}(msg.{attr}, cls_{i}))")
            elif f.kind in _COPIED:
                reads.append(f"{attr}={_COPIED[f.kind]}(pb.{name})")
                writes.append(f"{name}=msg.{attr}")
            else:
                reads.append(f"{attr}=pb.{name}")
                if f.kind == K_INT:  # Go's int32 conversion keeps the low 32 bits of a larger value
                    in_range = f"{INT32_MIN} <= (v := msg.{attr}) <= {INT32_MAX}"
                    writes.append(f"{name}=v if {in_range} else _wrap_int32(v)")
                else:
                    writes.append(f"{name}=msg.{attr}")
        body = "\n".join(after).replace("\n", "\n    ")
        self.source = (
            f"def from_pb(pb):\n    return cls({', '.join(reads)})\n\n"
            f"def to_pb(msg, make):\n    out = make({', '.join(writes)})\n    {body}\n    return out\n"
        )
        exec(compile(self.source, f"<querator.wire protobuf codec of {cls.__name__}>", "exec"), env)
        self.from_pb: Callable[[Any], Message] = env["from_pb"]
        self.to_pb: Callable[[Message, Callable[..., Any]], Any] = env["to_pb"]


_CODECS: dict[type[Message], _Codec] = {}


def _codec(cls: type[Message]) -> _Codec:
    codec = _CODECS.get(cls)
    if codec is not None:
        return codec
    pb_cls = getattr(querator_pb2, cls.__name__, None)
    if pb_cls is None:
        raise TypeError(f"{cls.__name__} is not a message of querator/proto/querator.proto")
    by_key = {d.json_name: d for d in pb_cls.DESCRIPTOR.fields}
    ours = fields(cls)
    missing = {f.key for f in ours} ^ set(by_key)
    if missing:
        raise TypeError(f"{cls.__name__} and its .proto message differ in fields {sorted(missing)}")
    pairs = [(f, by_key[f.key]) for f in ours]
    for f, d in pairs:
        if _proto_type(d) != _struct_type(f):
            raise TypeError(
                f"{cls.__name__}.{f.attr} is {_struct_type(f)} but the .proto field {d.name} is "
                f"{_proto_type(d)}"
            )
    codec = _CODECS[cls] = _Codec(cls, pb_cls, pairs)
    return codec


def _struct_type(f: Field) -> str:  # noqa: PLR0911 - one return per kind of field
    """A Struct field's type, spelled as in a .proto."""
    if f.kind in _SCALARS:
        return _SCALARS[f.kind]
    if f.kind == K_TS:
        return "google.protobuf.Timestamp"
    if f.kind == K_LIST_STR:
        return "repeated string"
    if f.kind == K_LIST_BYTES:
        return "repeated bytes"
    if f.kind == K_MAP:
        return "map<string, string>"
    if f.kind == K_LIST_MSG:
        assert f.sub is not None
        return f"repeated querator.{f.sub.__name__}"
    assert f.kind == K_MSG and f.sub is not None
    return f"querator.{f.sub.__name__}"


def _proto_type(d: FieldDescriptor) -> str:
    if d.message_type is not None and d.message_type.GetOptions().map_entry:
        key, value = (_proto_type(entry) for entry in d.message_type.fields)
        return f"map<{key}, {value}>"
    name = d.message_type.full_name if d.message_type is not None else _PROTO_SCALARS.get(d.type, "other")
    return f"repeated {name}" if d.is_repeated else name


# --------------------------------------------------------------------------------------------------------
# Decoding


def decode_protobuf(body: bytes, type: type[T]) -> T:
    """Parse binary protobuf ``body`` as a ``type``; raises ``DecodeError``."""
    codec = _CODECS.get(type) or _codec(type)
    try:
        pb = codec.pb_cls.FromString(body)
    except _PbDecodeError as exc:  # upb's text: "Error parsing message with type 'x': <reason>"
        raise DecodeError(f"proto: cannot parse {type.__name__}: {str(exc).rpartition(': ')[2]}") from None
    return cast("T", codec.from_pb(pb))


def _datetime(stamp: Timestamp) -> datetime:
    """An aware UTC datetime, sub-microsecond nanos truncated; out-of-range values (negative nanos
    included) are normalised as Go's time.Unix does."""
    try:
        return _EPOCH + timedelta(0, stamp.seconds, stamp.nanos // 1000)
    except OverflowError:
        raise DecodeError(
            f"proto: google.protobuf.Timestamp out of range (seconds={stamp.seconds}, nanos={stamp.nanos})"
        ) from None


# --------------------------------------------------------------------------------------------------------
# Encoding


def encode_protobuf(msg: Message) -> bytes:
    """``msg`` as binary protobuf (proto3: zero values omitted, fields in number order)."""
    codec = _CODECS.get(msg.__class__) or _codec(msg.__class__)
    return cast("bytes", codec.to_pb(msg, codec.pb_cls).SerializeToString())


def _set_timestamp(stamp: Timestamp, value: datetime) -> None:
    """Fill ``stamp`` (setting it even to the epoch marks it present); a naive ``value`` is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    stamp.seconds = delta.days * 86400 + delta.seconds
    stamp.nanos = delta.microseconds * 1000


def _wrap_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value > INT32_MAX else value
