"""One partition of a queue: its owner epoch, and runs ending with the fence.

A partition is claimed on its first run with the store's epoch (a node alone: its start time), or taken
over by ``claim`` (a cluster node) with an epoch above every epoch it finds. Every run ends with the
fence (``_schema``'s ``querator_fence``): the partition's row must still hold this owner's epoch, or the
run is rolled back (its reads discarded) and the partition refuses every run until it is claimed again
(docs/adr/0045). It is one statement with the run's last write (docs/adr/0073), or, in a run that only
read, a statement of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from querator.errors import StaleOwnerError
from querator.storage.base import PartitionTx
from querator.storage.postgres import _statements as sql
from querator.storage.postgres._pool import Conn, Run, run_statements
from querator.storage.postgres._tx import PostgresTx

if TYPE_CHECKING:
    from querator.storage.postgres._store import PostgresStore

T = TypeVar("T")


class PostgresPartition:
    """One partition of a queue in a ``PostgresStore``."""

    def __init__(self, store: PostgresStore, queue_name: str, number: int) -> None:
        self._store = store
        self.queue = queue_name
        self.number = number
        self.epoch = 0
        """The epoch this owner writes with (0: not claimed yet)."""
        self._stale: StaleOwnerError | None = None
        self._lock = asyncio.Lock()
        self._head_from = ""
        """No item below this id is queued (``_tx``'s head bound); "" while nothing is known."""

    @property
    def _subject(self) -> str:
        return f"partition {self.number} of '{self.queue}'"

    def forget(self) -> None:
        """Its rows were deleted (``delete_partitions``): the next run claims it again."""
        self.epoch = 0
        self._stale = None
        self._head_from = ""

    async def run(self, fn: Callable[[PartitionTx], T]) -> T:
        """Runs ``fn`` in one transaction on a worker thread; returns once it committed.

        Raises:
            StaleOwnerError: another owner claimed the partition with a newer epoch; nothing is applied
                and every later run is refused until ``claim``.
            PostgresStorageError: PostgreSQL failed; nothing of ``fn`` was applied unless
                ``maybe_applied``.
            Exception: whatever ``fn`` raised, unchanged; nothing of ``fn`` was applied.
        """
        async with self._lock:
            if self._stale is not None:
                raise self._stale
            try:
                if not self.epoch:
                    self.epoch = await self._store.pool.run(self._claim)
                return await self._store.pool.run(lambda conn: self._run(conn, fn))
            except StaleOwnerError as e:
                self._stale = e
                raise

    def _run(self, conn: Conn, fn: Callable[[PartitionTx], T]) -> T:
        run = Run(conn)
        tx = PostgresTx(run, self.queue, self.number, self._head_from)

        def body() -> T:
            result = fn(tx)
            tx.end(self.epoch)
            return result

        result = run_statements(run, body, self._subject)
        self._head_from = tx.head_from()
        return result

    def _claim(self, conn: Conn) -> int:
        """Worker thread: makes the store's epoch the owner's, unless a newer one is there."""
        epoch = self._store.epoch
        row = conn.execute(sql.CLAIM, (self.queue, self.number, epoch)).fetchone()
        if row is None:
            found = conn.execute(sql.CURRENT_EPOCH, (self.queue, self.number)).fetchone()
            raise StaleOwnerError(
                f"stale owner; {self._subject} is owned by epoch {found[0] if found else 'none'}, not {epoch}"
            )
        return epoch

    async def claim(self) -> None:
        """Takes the partition over: its epoch becomes the store's epoch or, if that is not above the
        current owner's, one above it (docs/adr/0011); the previous owner's next write is refused.

        Raises:
            PostgresStorageError: PostgreSQL failed.
        """
        async with self._lock:

            def take_over(conn: Conn) -> int:
                row = conn.execute(sql.TAKE_OVER, (self.queue, self.number, self._store.epoch)).fetchone()
                assert row is not None
                return int(row[0])

            self.epoch = await self._store.pool.run(take_over)
            self._stale = None
            self._head_from = ""  # another owner may have written since
