"""The driver's errors as the store's own: one place decides what a failure means."""

from __future__ import annotations

from typing import Final

import psycopg

from querator.errors import StaleOwnerError, StorageError

STALE: Final = "QR001"
"""The SQLSTATE the fence raises when a newer owner holds the partition (``_schema.FENCE``)."""
GONE: Final = "QR002"
"""The SQLSTATE the fence raises when the partition's row is gone (its queue was deleted)."""


class PostgresStorageError(StorageError):
    """PostgreSQL failed or could not be reached; the transaction it happened in was rolled back, unless
    ``maybe_applied``: its commit was sent and the connection died before the answer came."""


def storage_error(
    exc: psycopg.Error, context: str = "", commit_sent: bool = False, subject: str = "the partition"
) -> StorageError:
    """The one place a driver error becomes ours; ``context`` says what was being done, ``subject`` names
    the partition the fence speaks of."""
    if exc.sqlstate == STALE:
        error: StorageError = StaleOwnerError(f"stale owner; {subject} {exc.diag.message_primary}")
    elif exc.sqlstate == GONE:
        error = PostgresStorageError(f"postgres storage error; {subject} {exc.diag.message_primary}")
    else:
        lost = isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None
        detail = f"{context}: " if context else ""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error = PostgresStorageError(
            f"postgres storage error; {detail}{type(exc).__name__}: {text}",
            maybe_applied=lost and commit_sent,
        )
    error.__cause__ = exc
    return error
