"""The read of owner epochs that acknowledges a run's plain commit, shared by the runs of a queue
(ADR 0038, ADR 0064).

A run's commit is a plain batch; the run is acknowledged only once a quorum read of its partition's row,
sent after the batch was acknowledged, finds its own epoch: a newer owner's claim that completed before
the read would have been found, so that owner loads after the batch and sees it. The read proves every
write acknowledged before it was sent, so the runs of a queue's partitions share one
(``partition IN (...)``).

When it is sent decides how many runs share it. The engine runs a batch's partitions together and
starts the next batch when the last of them ends, so a read sent as soon as the first commit is
acknowledged serves that run alone and the others wait for another: the read waits instead until every
run of the queue under way has asked for it (or ended without), but no more than ``GATHER_S`` after the
first waiting run asked (or after the read in flight then returned), so that a slow or unrelated run
cannot hold the others' answers back (ADR 0064).
Waiting longer only sends the read later, after more acknowledged writes, which is always safe.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Final

from querator.storage.cassandra._session import Connection, Rows
from querator.storage.cassandra._statements import Statement

GATHER_S: Final = 0.02
"""Longest a run waiting for a read waits for the queue's other runs under way before the read is sent
without them (about a batch's spread of write times on a loaded machine; ADR 0064)."""


class FenceReads:
    """The epoch reads of one store's runs, one in flight per queue at a time.

    Args:
        connection: The store's connection.
        gather_s: Longest the first run waiting for a read waits for the others under way.
    """

    def __init__(self, connection: Connection, gather_s: float = GATHER_S) -> None:
        self._connection = connection
        self._gather_s = gather_s
        self._waiting: dict[str, dict[int, list[asyncio.Future[Rows]]]] = {}
        """Per queue, the partitions whose runs wait for the next read, with their futures."""
        self._running: Counter[str] = Counter()
        """Per queue, the runs under way that have not asked for a read yet (``start``)."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        """Per queue with runs waiting, the call that sends the read without the runs still under way."""
        self._reading: set[asyncio.Task[None]] = set()
        self._queues_reading: set[str] = set()

    def start(self, loop: asyncio.AbstractEventLoop, queue: str) -> Turn:
        """A run of ``queue`` is under way: the next read waits for it to ask (``Turn.read``) or end
        (``Turn.end``), up to ``gather_s``."""
        self._running[queue] += 1
        return Turn(self, loop, queue)

    def _stopped(self, queue: str) -> None:
        self._running[queue] -= 1
        if self._running[queue] <= 0:
            del self._running[queue]

    def _wait(self, loop: asyncio.AbstractEventLoop, queue: str, number: int) -> asyncio.Future[Rows]:
        future: asyncio.Future[Rows] = loop.create_future()
        self._waiting.setdefault(queue, {}).setdefault(number, []).append(future)
        return future

    def _send_if_due(self, loop: asyncio.AbstractEventLoop, queue: str, force: bool = False) -> None:
        """Sends the next read of ``queue`` if runs wait for one, none is in flight, and no run under way
        may still ask (or ``force``: the timer set when the first of them asked, or when the read in flight
        returned, ran out); else makes sure that timer is set."""
        if queue in self._queues_reading or queue not in self._waiting:
            return
        if force or not self._running[queue]:
            timer = self._timers.pop(queue, None)
            if timer is not None:
                timer.cancel()
            self._queues_reading.add(queue)
            task = loop.create_task(self._read(loop, queue, self._waiting.pop(queue)))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        elif queue not in self._timers:
            self._timers[queue] = loop.call_later(self._gather_s, self._forced, loop, queue)

    def _forced(self, loop: asyncio.AbstractEventLoop, queue: str) -> None:
        del self._timers[queue]
        self._send_if_due(loop, queue, force=True)

    async def _read(
        self, loop: asyncio.AbstractEventLoop, queue: str, waiting: dict[int, list[asyncio.Future[Rows]]]
    ) -> None:
        """One read for the partitions ``waiting``; then the next, if it is due (a read in flight answers
        only the runs that were waiting when it was sent)."""
        self._connection.counters.fence_reads += 1
        try:
            epochs = self._connection.opened().stmt(Statement.EPOCHS)
            rows = await self._connection.execute_async(loop, epochs.bind((queue, sorted(waiting))))
        except Exception as e:
            for futures in waiting.values():
                _settle(futures, error=e)
        except BaseException:
            for futures in waiting.values():
                _settle(futures)
            raise
        else:
            found = {row["partition"]: row for row in rows}
            for number, futures in waiting.items():
                _settle(futures, [found[number]] if number in found else [])
        finally:
            self._queues_reading.discard(queue)
        self._send_if_due(loop, queue)


class Turn:
    """One run's place among the runs under way that a queue's next read waits for."""

    __slots__ = ("_fences", "_loop", "_queue", "_under_way")

    def __init__(self, fences: FenceReads, loop: asyncio.AbstractEventLoop, queue: str) -> None:
        self._fences = fences
        self._loop = loop
        self._queue = queue
        self._under_way = True

    async def read(self, number: int) -> Rows:
        """Partition ``number``'s row (``partition``, ``epoch``) as a read sent after this call found it;
        no row if there is none. Once only: the run is no longer under way.

        Raises:
            Exception: what the read raised (a driver error, ``CassandraStorageError``).
        """
        assert self._under_way, "a run asks for one read"
        # Waiting first, then no longer under way: the read this may send includes this run.
        future = self._fences._wait(self._loop, self._queue, number)
        self.end()
        return await future

    def end(self) -> None:
        """The run asks for no read (or has asked); idempotent."""
        if self._under_way:
            self._under_way = False
            self._fences._stopped(self._queue)
            self._fences._send_if_due(self._loop, self._queue)


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
