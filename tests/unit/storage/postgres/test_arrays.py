"""The PostgreSQL store's typed array parameters (querator/storage/postgres/_arrays.py): each dumps to
the bytes and the type psycopg's own list dumper gives the same list on a store connection, so the
server reads the same values; no server needed."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.adapt import AdaptersMap, PyFormat, Transformer

from querator.storage.base import Item
from querator.storage.postgres._arrays import BoolArray, ByteaArray, Int8Array
from querator.storage.postgres._codec import item_arrays, update_arrays
from querator.storage.postgres._pool import register_dumpers


@dataclass
class _Context:
    """What a ``Transformer`` needs of a connection: its adapters."""

    adapters: AdaptersMap
    connection: Any = None


def _dumped(values: list[Any]) -> list[tuple[bytes, int]]:
    """Each value as a store connection dumps it (binary): its bytes and its type's oid."""
    adapters = AdaptersMap(psycopg.adapters)
    register_dumpers(adapters)
    tx = Transformer(_Context(adapters))
    dumped = tx.dump_sequence(values, [PyFormat.BINARY] * len(values))
    assert tx.types is not None
    return [(bytes(d or b""), oid) for d, oid in zip(dumped, tx.types, strict=True)]


@pytest.mark.parametrize(
    ("typed", "plain"),
    [
        # A lone surrogate passes as the bytes of its code point, as the store's str dumper sends it.
        (ByteaArray(["a", "é", "\udcff", ""]), ["a", "é", "\udcff", ""]),
        (ByteaArray([b"\x00\xff" * 600, b""]), [b"\x00\xff" * 600, b""]),
        (ByteaArray(["id", b"payload"]), ["id", "payload"]),
        (Int8Array([0, 1, -1, 2**63 - 1, -(2**63)]), [0, 1, -1, 2**63 - 1, -(2**63)]),
        (BoolArray([True, False, True]), [True, False, True]),
    ],
)
def test_a_typed_array_dumps_as_psycopgs_list_dumper(typed: list[Any], plain: list[Any]) -> None:
    assert _dumped([typed]) == _dumped([plain])


def test_an_empty_array_has_no_dimension() -> None:
    [(data, oid)] = _dumped([Int8Array()])
    assert data == struct.pack("!iiI", 0, 0, psycopg.postgres.types["int8"].oid)
    assert oid == psycopg.postgres.types["int8"].array_oid


def test_an_integer_beyond_int8_is_refused_as_psycopg_refuses_it() -> None:
    """An ``OverflowError``, as psycopg's int8 dumper raises: the run is rolled back before its sync
    (tests/storage/test_postgres.py, ``test_a_run_that_fails_after_writing_applies_nothing``)."""
    with pytest.raises(OverflowError):
        _dumped([[2**63]])
    with pytest.raises(OverflowError, match="int8"):
        _dumped([Int8Array([2**63])])


def test_a_runs_item_columns_dump_as_their_plain_lists() -> None:
    items = [
        Item(id="1", source_id="s", is_leased=True, lease_deadline=5, expire_deadline=6, enqueue_at=7,
             created_at=8, attempts=2, max_attempts=3, reference="r", encoding="e", kind="k",
             payload=b"p", job_id="j", failures=b"f"),
        Item(id="2", payload=b"\x00"),
    ]  # fmt: skip
    for arrays in (item_arrays(items), update_arrays(items)):
        assert _dumped(list(arrays)) == _dumped([list(a) for a in arrays])
