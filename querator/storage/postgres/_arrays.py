"""The array parameters of a run's item statements, dumped straight to PostgreSQL's binary array format.

psycopg dumps a plain ``list`` by first finding its element type: for each list parameter of each
statement it walks the list, looks the element's dumper up and picks a dumper for the array, all in
Python, then dumps it element by element. An insert of one item sends 15 such arrays: about two thirds
of what psycopg spent turning a run's parameters into bytes (docs/benchmarks-log.md, "Where the cluster
stores' CPU per item goes at batch 1"). A list of one of these classes has its dumper found by its type
at once, and that dumper writes the whole array with ``struct``.

The binary array format (PostgreSQL's ``array_send``): the number of dimensions, a has-nulls flag and
the element type's oid, then per dimension its length and lower bound (1), then each element as its
length and its bytes. None of these arrays holds a NULL.
"""

from __future__ import annotations

import struct
from typing import Final

import psycopg
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

_TYPES: Final = psycopg.postgres.types
_BYTEA_OID: Final = _TYPES["bytea"].oid
_INT8_OID: Final = _TYPES["int8"].oid
_BOOL_OID: Final = _TYPES["bool"].oid
_TRUE: Final = b"\x00\x00\x00\x01\x01"
_FALSE: Final = b"\x00\x00\x00\x01\x00"
_LENGTH: Final = struct.Struct("!i")


class ByteaArray(list[str | bytes]):
    """A ``bytea[]`` parameter: a ``str`` goes as its UTF-8, as ``_pool``'s string dumper sends it."""


class Int8Array(list[int]):
    """An ``int8[]`` parameter."""


class BoolArray(list[bool]):
    """A ``bool[]`` parameter."""


def _header(element_oid: int, length: int) -> bytes:
    if not length:
        return struct.pack("!iiI", 0, 0, element_oid)  # no dimension: PostgreSQL's empty array
    return struct.pack("!iiIii", 1, 0, element_oid, length, 1)


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TYPES["bytea"].array_oid

    def dump(self, obj: ByteaArray) -> bytes:
        parts = [_header(_BYTEA_OID, len(obj))]
        for value in obj:
            data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
            parts.append(_LENGTH.pack(len(data)))
            parts.append(data)
        return b"".join(parts)


class _Int8ArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TYPES["int8"].array_oid

    def dump(self, obj: Int8Array) -> bytes:
        try:
            return _header(_INT8_OID, len(obj)) + struct.pack(
                "!" + "iq" * len(obj), *[v for value in obj for v in (8, value)]
            )
        except struct.error as e:  # what psycopg's int8 dumper raises: a value the driver cannot send
            raise OverflowError(f"cannot send {obj!r} as int8[]: {e}") from None


class _BoolArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TYPES["bool"].array_oid

    def dump(self, obj: BoolArray) -> bytes:
        return _header(_BOOL_OID, len(obj)) + b"".join(_TRUE if value else _FALSE for value in obj)


def register(adapters: AdaptersMap) -> None:
    """Makes ``adapters`` (a connection's) dump the typed arrays of this module."""
    adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
    adapters.register_dumper(Int8Array, _Int8ArrayDumper)
    adapters.register_dumper(BoolArray, _BoolArrayDumper)
