"""One partition of a queue: its runs are jobs of the store's writer thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from querator.storage.base import PartitionTx
from querator.storage.sqlite._tx import SqliteTx
from querator.storage.sqlite._worker import Worker

if TYPE_CHECKING:
    from querator.storage.sqlite._store import SqliteStore

T = TypeVar("T")


class SqlitePartition:
    """One partition of a queue in a ``SqliteStore``; its key is resolved on first use."""

    __slots__ = ("_number", "_queue", "_store")

    def __init__(self, store: SqliteStore, queue_name: str, number: int) -> None:
        self._store = store
        self._queue = queue_name
        self._number = number

    async def run(self, fn: Callable[[PartitionTx], T]) -> T:
        """Runs ``fn`` on the writer thread in one transaction; returns once that transaction committed.

        ``fn`` may share its transaction with other waiting jobs (group commit), each inside its own
        savepoint. A caller cancelled before the thread reached its job skips it; one cancelled later
        may find ``fn`` applied.

        Raises:
            SqliteStorageError: sqlite failed (or the store is not open); nothing of ``fn`` was applied.
            Exception: whatever ``fn`` raised, unchanged; nothing of ``fn`` was applied.
        """
        queue_name, number = self._queue, self._number

        def job(worker: Worker) -> T:
            return fn(SqliteTx(worker.conn, worker.partition_key(queue_name, number), queue_name))

        return await self._store._submit(job)

    async def claim(self) -> None:
        """Nothing to take over: only one process opens a sqlite store (its writer thread)."""
