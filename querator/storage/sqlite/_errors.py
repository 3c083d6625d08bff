"""sqlite's errors as the store's own."""

from __future__ import annotations

import sqlite3

from querator.errors import StorageError


class SqliteStorageError(StorageError):
    """sqlite failed; the transaction it happened in was rolled back (the driver's error is the cause)."""


def storage_error(exc: sqlite3.Error, context: str = "") -> SqliteStorageError:
    """The one place a driver error becomes ours; ``context`` says what was being done."""
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    error = SqliteStorageError(f"sqlite storage error; {context}{': ' if context else ''}{name}: {exc}")
    error.__cause__ = exc
    return error


def lost_error() -> SqliteStorageError:
    return SqliteStorageError(
        "sqlite storage error; the transaction was rolled back by a failure of a job committed with it"
    )
