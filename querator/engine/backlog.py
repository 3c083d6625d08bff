"""How long a partition's un-leased items have waited, as far as the logical queue can tell.

The engine sees counts, not items: a transaction says how many items it leased and how many a lease
could take afterwards. Leases take items in id order, and everything that becomes leasable (a produce,
a re-queue, a scheduled item coming due) takes a new id at the tail, so the un-leased items are a FIFO
whose arrival times the engine can keep as runs of ``(queued_at, count)``: leased ones leave the front,
new ones join the tail. The distribution reads the front's time to keep a partition from starving.
"""

from __future__ import annotations

from collections import deque

MAX_RUNS = 64
"""Runs kept per partition; past it, the two runs closest in time become one (the newer one's items
then look as old as the older one's: the smallest error one merge can make)."""
JOIN_US = 10_000
"""Items that join the tail within this many microseconds of the tail run's time join that run. Every
batch of a busy queue adds items: as runs of their own, the backlog would reach ``MAX_RUNS`` within a
few milliseconds and then pay a merge (a scan of every run) per batch. An item may so look up to 10 ms
older than it is, a tenth of the distribution's ``FAIRNESS_US``."""


class Backlog:
    """Arrival times of a partition's un-leased items, oldest first."""

    __slots__ = ("_runs", "_total")

    def __init__(self) -> None:
        self._runs: deque[list[int]] = deque()
        self._total = 0

    def take(self, count: int) -> None:
        """``count`` items left from the front (leased, or removed before any lease took them)."""
        runs = self._runs
        while count > 0 and runs:
            run = runs[0]
            if run[1] > count:
                run[1] -= count
                self._total -= count
                return
            count -= run[1]
            self._total -= run[1]
            runs.popleft()

    def sync(self, total: int, now: int) -> None:
        """The partition holds ``total`` un-leased items now: more than known joined the tail at ``now``;
        fewer means some left without a lease (expired, cleared, dead-lettered), oldest first."""
        runs = self._runs
        if total > self._total:
            if runs and now - runs[-1][0] < JOIN_US:
                runs[-1][1] += total - self._total
                self._total = total
                return
            runs.append([now, total - self._total])
            if len(runs) > MAX_RUNS:
                i = min(range(len(runs) - 1), key=lambda i: runs[i + 1][0] - runs[i][0])
                runs[i][1] += runs[i + 1][1]
                del runs[i + 1]
            self._total = total
        elif total < self._total:
            self.take(self._total - total)

    def queued_at(self, skip: int = 0) -> int | None:
        """When the oldest item left after taking ``skip`` from the front was queued; None when none is."""
        for at, count in self._runs:
            if skip < count:
                return at
            skip -= count
        return None
