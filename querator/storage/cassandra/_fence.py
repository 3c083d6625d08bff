"""The read of owner epochs that acknowledges a run's plain commit, shared by the runs of a queue
(ADR 0038).

A run's commit is a plain batch; the run is acknowledged only once a quorum read of its partition's row,
sent after the batch was acknowledged, finds its own epoch: a newer owner's claim that completed before
the read would have been found, so that owner loads after the batch and sees it. The read proves every
write acknowledged before it was sent, so the runs of a queue's partitions share one: a run whose batch
is acknowledged while a read is in flight waits for the next one, which asks for every partition waiting
by then (``partition IN (...)``). ADR 0075 says why it is sent as soon as a run asks rather than
once a batch's runs have all asked (ADR 0064, superseded).
"""

from __future__ import annotations

import asyncio

from querator.storage.cassandra._session import Connection, Rows
from querator.storage.cassandra._statements import Statement


class FenceReads:
    """The epoch reads of one store's runs, one in flight per queue at a time."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._waiting: dict[str, dict[int, list[asyncio.Future[Rows]]]] = {}
        """Per queue, the partitions whose runs wait for the next read, with their futures."""
        self._reading: set[asyncio.Task[None]] = set()
        self._queues_reading: set[str] = set()

    async def read(self, loop: asyncio.AbstractEventLoop, queue: str, number: int) -> Rows:
        """The partition's row (``partition``, ``epoch``) as a read sent after this call found it; no
        row if there is none.

        Raises:
            Exception: what the read raised (a driver error, ``CassandraStorageError``).
        """
        future: asyncio.Future[Rows] = loop.create_future()
        self._waiting.setdefault(queue, {}).setdefault(number, []).append(future)
        if queue not in self._queues_reading:
            self._queues_reading.add(queue)
            task = loop.create_task(self._read(loop, queue))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        return await future

    async def _read(self, loop: asyncio.AbstractEventLoop, queue: str) -> None:
        """Reads for every partition waiting, until none is left (a read in flight answers only the runs
        that were waiting when it was sent)."""
        try:
            while waiting := self._waiting.pop(queue, None):
                self._connection.counters.fence_reads += 1
                try:
                    epochs = self._connection.opened().stmt(Statement.EPOCHS)
                    rows = await self._connection.execute_async(loop, epochs.bind((queue, sorted(waiting))))
                except Exception as e:
                    for futures in waiting.values():
                        _settle(futures, error=e)
                    continue
                except BaseException:
                    for futures in waiting.values():
                        _settle(futures)
                    raise
                found = {row["partition"]: row for row in rows}
                for number, futures in waiting.items():
                    _settle(futures, [found[number]] if number in found else [])
        finally:
            self._queues_reading.discard(queue)


def _settle(
    futures: list[asyncio.Future[Rows]], rows: Rows | None = None, error: Exception | None = None
) -> None:
    """Gives ``futures`` the rows, the error, or (neither) cancels them: the read will not come."""
    for future in futures:
        if future.done():  # a run cancelled while it waited
            continue
        if error is not None:
            future.set_exception(error)
        elif rows is not None:
            future.set_result(rows)
        else:
            future.cancel()
