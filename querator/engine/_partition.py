"""PartitionState: what a logical queue knows of one partition it owns, and when to try a failing one again.

Only the logical queue's task reads or changes it (see ``querator.engine.logical_queue``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from querator.clock import TimerHandle
from querator.engine.backlog import Backlog
from querator.errors import RetryRequest
from querator.ksuid import KsuidGenerator
from querator.storage.base import Deadlines, Partition, PartitionTx

BACKOFF_MIN_US = 500_000
"""The wait before a partition is tried again after its first failure; each further failure waits 1.5
times as long, up to ``BACKOFF_MAX_US``."""
BACKOFF_MAX_US = 5_000_000


@dataclass(eq=False)
class PartitionState:
    """The logical queue's view of one partition it owns."""

    number: int
    storage: Partition
    ids: KsuidGenerator | None = None
    un_leased: int = 0
    estimate: int = 0
    failures: int = 0
    error: str = ""
    """Why the partition is failing (its last failure), while ``failures``."""
    deadlines: Deadlines = field(default_factory=Deadlines)
    due: bool = False
    timer: TimerHandle | None = None
    timer_at: int = 0
    claimed: bool = False
    backlog: Backlog = field(default_factory=Backlog)

    def recount(self, delta: int, at: int, left: int = 0) -> None:
        """``delta`` more items a lease could take; ``left`` of the oldest ones left (leased, or dead
        before any lease took them) and the rest of the change joined the tail, at monotonic ``at``."""
        # Never below zero: a count a lost answer left too low must not subtract from the others'.
        self.un_leased = max(0, self.un_leased + delta)
        self.backlog.take(left)
        self.backlog.sync(self.un_leased, at)

    def new_id(self) -> str:
        assert self.ids is not None, "partition used before it was loaded"
        return self.ids.next()

    def read_deadlines(self, tx: PartitionTx) -> Deadlines:
        """A storage function that refreshes the un-leased count and returns the partition's deadlines."""
        stats = tx.stats(0)
        self.un_leased = stats.total - stats.leased
        return tx.deadlines()

    def backoff_us(self) -> int:
        """Microseconds to wait before trying the partition again after its ``failures``-th failure."""
        return min(BACKOFF_MAX_US, int(BACKOFF_MIN_US * 1.5 ** max(0, self.failures - 1)))

    def unavailable(self) -> RetryRequest:
        """The answer to a request for the partition while it is failing (or not loaded yet)."""
        return RetryRequest(f"partition not available; partition '{self.number}' is failing, retry again")
