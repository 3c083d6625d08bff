"""Binary protobuf bodies, by a table-driven codec derived from each message class's fields and ``__pb__``
numbers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar, cast

from querator.wire._errors import DecodeError
from querator.wire._fields import (
    INT32_MAX,
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
    MAX_FIELD_NUMBER,
    fields,
)
from querator.wire.messages import Message

__all__ = ["decode_protobuf", "encode_protobuf"]

T = TypeVar("T", bound=Message)

_MASK32: Final = (1 << 32) - 1
_MASK64: Final = (1 << 64) - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _ts_to_parts(value: datetime) -> tuple[int, int]:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return delta.days * 86400 + delta.seconds, delta.microseconds * 1000


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
    for f in fields(cls):
        sub = _build_pb_table(f.sub, pending) if f.sub is not None else None
        wire = 0 if f.kind in (K_INT, K_BOOL) else 2
        tag = f.number << 3 | wire
        table.by_tag[tag] = (f.kind, f.attr, sub)
        encode.append((f.attr, f.kind, _varint_bytes(tag), sub))
        if f.kind == K_MSG:
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
    if number < 1 or number > MAX_FIELD_NUMBER:
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
            if kind >= K_INT:
                if kind == K_INT:
                    n &= _MASK32
                    values[name] = n - (1 << 32) if n > INT32_MAX else n
                else:
                    values[name] = n != 0
                continue
            start = pos
            pos += n
            if pos > end:
                raise _truncated()
            if kind == K_STR:
                values[name] = buf[start:pos].decode()
            elif kind == K_BYTES:
                values[name] = buf[start:pos]
            elif kind == K_LIST_MSG:
                item = _pb_decode(buf, start, pos, sub)
                items = values.get(name)
                if items is None:
                    values[name] = [item]
                else:
                    items.append(item)
            elif kind == K_TS:
                values[name] = _pb_timestamp(buf, start, pos, values.get(name))
            elif kind in (K_LIST_STR, K_LIST_BYTES):
                element = buf[start:pos].decode() if kind == K_LIST_STR else buf[start:pos]
                items = values.get(name)
                if items is None:
                    values[name] = [element]
                else:
                    items.append(element)
            elif kind == K_MAP:
                key, value = _pb_map_entry(buf, start, pos)
                mapping = values.get(name)
                if mapping is None:
                    values[name] = {key: value}
                else:
                    mapping[key] = value
            else:  # K_MSG: merge every occurrence, parse once
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
    if value > INT32_MAX:  # negative int32: sign-extended to 64 bits, ten bytes on the wire
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
        if kind <= K_BYTES:  # str or bytes, inlined: the bulk of every message
            if value:
                data = value.encode() if kind == K_STR else value
                n = len(data)
                out += tag
                if n < 0x80:
                    out.append(n)
                else:
                    _put_varint(out, n)
                out += data
        elif kind == K_INT:
            if value:
                out += tag
                _put_int32(out, value)
        elif kind == K_BOOL:
            if value:
                out += tag
                out.append(1)
        elif kind == K_TS:
            if value is not None:
                _put_delimited(out, tag, _pb_timestamp_bytes(value))
        elif kind == K_LIST_MSG:
            for item in value:
                _put_delimited(out, tag, _pb_encode(item, sub))
        elif kind == K_LIST_STR:
            for item in value:
                _put_delimited(out, tag, item.encode())
        elif kind == K_LIST_BYTES:
            for item in value:
                _put_delimited(out, tag, item)
        elif kind == K_MAP:
            for key, item in value.items():
                entry = bytearray()
                _put_delimited(entry, b"\x0a", key.encode())
                _put_delimited(entry, b"\x12", item.encode())
                _put_delimited(out, tag, entry)
        elif value is not None:  # K_MSG
            _put_delimited(out, tag, _pb_encode(value, sub))
    return out


def encode_protobuf(msg: Message) -> bytes:
    """``msg`` as binary protobuf (proto3: zero values omitted, fields in number order)."""
    cls = msg.__class__
    table = _PB_TABLES.get(cls) or _pb_table(cls)
    return bytes(_pb_encode(msg, table))
