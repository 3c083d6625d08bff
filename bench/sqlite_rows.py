"""What the sqlite backend's statements cost without the server: the ceiling of its cycle, and whether
moving payloads out of the item rows would raise it (docs/benchmarks-log.md, sqlite).

    python bench/sqlite_rows.py                 # both layouts, 3 runs each, alternating
    python bench/sqlite_rows.py --layout inline --runs 1 --batch 1000

One 1 KiB item per row, on a fresh database in a temporary directory with the backend's own pragmas.
Each round is the cycle as three transactions: insert ``--batch`` items, lease the oldest ``--batch``
(select, then update their lease fields), delete them, with ``--backlog`` items queued ahead throughout.
- ``inline``: the backend's schema and statements (``querator.storage.sqlite``): the payload is a column
  of the item row, so a lease rewrites it.
- ``split``: the payloads in a table of their own, the same columns otherwise: a lease rewrites only
  the small row, a produce and a complete write both tables.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from querator.storage.sqlite import _codec, _schema, _statements

T = TypeVar("T")
PAYLOAD = os.urandom(1024)
PART = 1
SPLIT_SCHEMA = (
    "CREATE TABLE payloads (part INTEGER NOT NULL, id TEXT NOT NULL, payload BLOB NOT NULL, "
    "PRIMARY KEY (part, id)) WITHOUT ROWID",
)
SPLIT_HEAD = (
    "SELECT i.id, p.payload FROM items i INDEXED BY items_queued JOIN payloads p ON p.part = i.part "
    "AND p.id = i.id WHERE i.part = ? AND i.is_leased = 0 AND i.enqueue_at = 0 ORDER BY i.id LIMIT ?"
)
SPLIT_INSERT = "INSERT INTO payloads (part, id, payload) VALUES (?, ?, ?)"
SPLIT_DELETE = "DELETE FROM payloads WHERE part = ? AND id IN (SELECT value FROM json_each(?))"


def connect(path: Path, layout: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {_schema.PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"PRAGMA cache_size = -{_schema.CACHE_SIZE_KIB}")
    conn.execute(f"PRAGMA mmap_size = {_schema.MMAP_SIZE}")
    conn.execute(f"PRAGMA journal_size_limit = {_schema.JOURNAL_SIZE_LIMIT}")
    for statement in _schema.SCHEMA + (SPLIT_SCHEMA if layout == "split" else ()):
        conn.execute(statement)
    return conn


def in_transaction(conn: sqlite3.Connection, work: Callable[[], T]) -> T:
    conn.execute("BEGIN")
    result = work()
    conn.execute("COMMIT")
    return result


def run(layout: str, batch: int, backlog: int, seconds: float) -> float:
    """Items per second through the cycle."""
    split = layout == "split"
    counter = iter(range(1, 1 << 62))

    with tempfile.TemporaryDirectory() as tmp:
        conn = connect(Path(tmp) / "bench.db", layout)

        def produce(count: int) -> None:
            ids = [f"{next(counter):020d}" for _ in range(count)]
            payload = b"" if split else PAYLOAD
            rows = [(PART, i, "", 0, 0, 10**15, 0, 1, 0, 0, "", "", "", payload) for i in ids]
            conn.executemany(_statements.SQL_INSERT_ITEM, rows)
            if split:
                conn.executemany(SPLIT_INSERT, [(PART, i, PAYLOAD) for i in ids])

        def lease() -> list[str]:
            head = conn.execute(SPLIT_HEAD if split else _statements.SQL_HEAD, (PART, batch)).fetchall()
            ids = [row[0] for row in head]
            conn.executemany(_statements.SQL_UPDATE_ITEM, [(1, 5, 1, 0, PART, i) for i in ids])
            return ids

        def complete(ids: list[str]) -> None:
            encoded = _codec.IDS_ENCODER.encode(ids)
            conn.execute(_statements.SQL_DELETE_ITEMS, (PART, encoded))
            if split:
                conn.execute(SPLIT_DELETE, (PART, encoded))

        in_transaction(conn, partial(produce, backlog))
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            in_transaction(conn, partial(produce, batch))
            leased = in_transaction(conn, lease)
            in_transaction(conn, partial(complete, leased))
            done += len(leased)
        elapsed = time.perf_counter() - start
        conn.close()
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layout", choices=["inline", "split"], action="append")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"sqlite {sqlite3.sqlite_version}, batch {args.batch}, backlog {args.backlog}")
    for n in range(args.runs):
        for layout in args.layout or ["inline", "split"]:
            rate = run(layout, args.batch, args.backlog, args.seconds)
            print(f"run {n + 1} {layout}: {rate:,.0f} items/s")


if __name__ == "__main__":
    main()
