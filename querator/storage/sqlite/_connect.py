"""Opening the database file: the pragmas, the schema and its migrations, and the refusals of a file that
lost its store (the initialised marker) or is damaged (``PRAGMA quick_check``)."""

from __future__ import annotations

import logging
import os
import sqlite3
from typing import Final

from querator.storage.sqlite._errors import SqliteStorageError
from querator.storage.sqlite._schedules import fill_slots
from querator.storage.sqlite._schema import (
    BUSY_TIMEOUT_MS,
    CACHE_SIZE_KIB,
    JOURNAL_SIZE_LIMIT,
    MIGRATIONS,
    MMAP_SIZE,
    PAGE_SIZE,
    SCHEMA,
    SCHEMA_VERSION,
)

log = logging.getLogger("querator.storage.sqlite")

INITIALISED_SUFFIX: Final = ".initialised"
"""The marker file next to the database (``querator.db.initialised``), written once the database's schema
was first committed: from then on a missing or empty database is damage, never a new store to create.
A database without the marker (a new data dir, or one written before the marker existed) is checked
like any other, and gets it."""
MAX_PROBLEMS: Final = 100
"""Most problems ``PRAGMA quick_check`` looks for before the start-up refusal (it shows the first)."""


# Long on purpose: opening a database file: each refusal (damage, a foreign file) is its own branch.
def connect(path: str, synchronous: str) -> sqlite3.Connection:  # noqa: C901, PLR0912
    on_disk = path != ":memory:"
    marker = path + INITIALISED_SUFFIX
    existing = on_disk and os.path.exists(path) and os.path.getsize(path) > 0
    if on_disk and not existing and os.path.exists(marker):
        # sqlite would take a missing or empty file for a new database: every stored item gone.
        raise SqliteStorageError(
            f"sqlite storage error; the database {path} is "
            f"{'empty' if os.path.exists(path) else 'missing'}, but {marker} says it held a store: "
            "restore it from a backup, or remove both files to start an empty store"
        )
    if on_disk and not os.path.exists(path):
        # Payloads are nobody else's business: sqlite would create the file 0644, and gives its WAL
        # and shared-memory files the database file's mode.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only takes effect on a new database
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal" and path != ":memory:":
            log.warning("sqlite: %s cannot use WAL mode; journal mode is %s", path, mode)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA cache_size = -{CACHE_SIZE_KIB}")
        conn.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        if existing:
            _check(conn, path)
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SqliteStorageError(
                    f"sqlite storage error; schema version {version} of {path} is newer than "
                    f"the supported version {SCHEMA_VERSION}"
                )
            for statement in SCHEMA:
                conn.execute(statement)
            for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target]:
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            fill_slots(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if on_disk and not os.path.exists(marker):
            _write_marker(marker)
    except UnicodeDecodeError as exc:
        # sqlite's error message quotes a damaged schema's names, and the driver cannot decode them.
        conn.close()
        raise _not_utf8(path, exc) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _not_utf8(path: str, exc: UnicodeDecodeError) -> SqliteStorageError:
    # As bytes' repr, less its b: every byte that is not printable ASCII escaped, none reaching the log.
    text = repr(bytes(exc.object))[1:]
    return SqliteStorageError(
        f"sqlite storage error; the database {path} is damaged: sqlite reported text that is not UTF-8,"
        f" {text}; restore it from a backup or repair it (sqlite3's .recover)"
    )


def _check(conn: sqlite3.Connection, path: str) -> None:
    """Refuses a database that fails ``PRAGMA quick_check`` (a damaged file would otherwise start,
    answer zero counts and take writes)."""
    log.debug("sqlite: checking %s (PRAGMA quick_check)", path)
    try:
        rows = [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({MAX_PROBLEMS})")]
    except sqlite3.DatabaseError as exc:  # damage the check itself trips over
        rows = [f"{getattr(exc, 'sqlite_errorname', '')}: {exc}"]
    if rows != ["ok"]:
        # A row may hold several lines, under a "*** in database main ***" heading.
        problems = [line for row in rows for line in row.splitlines() if line and not line.startswith("***")]
        at_least = "at least " if len(problems) >= MAX_PROBLEMS else ""
        more = f" and {at_least}{len(problems) - 1} more" if len(problems) > 1 else ""
        raise SqliteStorageError(
            f"sqlite storage error; the database {path} is damaged: PRAGMA quick_check found "
            f"{(problems or rows)[0]!r}{more}; restore it from a backup or repair it (sqlite3's .recover)"
        )


def _write_marker(path: str) -> None:
    """Writes the marker that the database next to it holds a store, durably (file and directory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"querator: the sqlite database next to this file holds a store (docs/storage.md)\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
