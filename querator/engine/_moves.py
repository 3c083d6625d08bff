"""Moves: the ring changes a logical queue applies between two batches (docs/adr/0039).

A move gives some partitions away and takes others; ``LogicalQueue.move`` queues it and the queue's task
applies it between batches, so nothing is in flight on a partition it gives. The partitions taken are
claimed by tasks beside the queue's task (a claim is a Paxos round on Cassandra): ``Moves`` keeps them
so that a partition given away again before its claim ended, or the queue stopping, cancels its claim.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from querator.engine._partition import PartitionState
from querator.engine._requests import fail_future, settle
from querator.engine._waiting import Waiting
from querator.errors import TRY_AGAIN, RetryRequest
from querator.storage.base import Partition

PARTITION_MOVED = f"{TRY_AGAIN}; the partition moved to another node"


@dataclass(slots=True)
class Move:
    """One ``LogicalQueue.move``: ``done`` once the partitions ``give`` are written no more."""

    give: set[int]
    take: list[tuple[int, Partition]]
    done: asyncio.Future[None]


@dataclass(slots=True)
class Moves:
    """The moves a logical queue has not applied yet, and the claims of the partitions it took."""

    queued: list[Move] = field(default_factory=list)
    claims: dict[int, asyncio.Task[None]] = field(default_factory=dict)

    def give(self, partitions: dict[int, PartitionState], waiting: Waiting, number: int) -> None:
        """Stops serving partition ``number``: what is queued for it gets 454, its timer and claim stop."""
        p = partitions.pop(number, None)
        if p is None:
            return
        claim = self.claims.pop(number, None)
        if claim is not None:
            claim.cancel()
        if p.timer is not None:
            p.timer.cancel()
        moved = RetryRequest(PARTITION_MOVED)
        pending = waiting.pending
        for req in [r for r in pending if r.partition is p]:  # complete, retry, renew, release
            pending.remove(req)
            fail_future(req.future, moved)

    def claim_ended(self, number: int) -> None:
        """The claim task of partition ``number`` (the one running now) ended."""
        if self.claims.get(number) is asyncio.current_task():
            del self.claims[number]

    def stop(self) -> None:
        """The queue's task ended: no claim goes on, and nothing writes to any partition any more."""
        for claim in self.claims.values():
            claim.cancel()
        self.claims.clear()
        for move in self.queued:
            settle(move.done, None)
        self.queued.clear()
