"""One batch of a logical queue: which partition's transaction each request joins, and its answers.

A batch makes one storage transaction per partition it touches. ``BatchPlan.place`` puts the hot
requests and every parked lease on partitions (produces and leases with the distribution), building each
``Transaction``'s operations and the list of requests its end answers; the logical queue runs the
transactions and ``Transaction.answer`` answers each one's requests from its result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from querator.engine._partition import PartitionState
from querator.engine._requests import (
    Complete,
    Lease,
    Produce,
    Release,
    Renew,
    Request,
    Retry,
    fail_future,
    settle,
)
from querator.engine.distribution import Distribution
from querator.errors import LeaseTimedOut, RetryRequest, StorageError, try_again
from querator.storage.base import QueueRecord
from querator.storage.operations import BatchResult, LeaseOp, PartitionBatch


@dataclass(eq=False, slots=True)
class Transaction:
    """One partition's share of a batch: what it asks of storage, and whom its end answers."""

    partition: PartitionState
    ops: PartitionBatch = field(default_factory=PartitionBatch)
    requests: list[Request] = field(default_factory=list)
    """The requests its end answers: the batch's own in arrival order, then the parked leases."""

    def written(self) -> None:
        """Its write ended: no lease waits on it any more (see ``Lease.writing``)."""
        for req in self.requests:
            if isinstance(req, Lease):
                req.writing = False

    def answer(self, result: BatchResult | StorageError) -> tuple[int, list[str]]:
        """Answers its requests; returns how many items it leased, and the ids of those leased to
        requests already answered (timed out, or their caller gone) meanwhile."""
        failed = isinstance(result, StorageError)
        leased = 0
        undelivered: list[str] = []
        for req in self.requests:
            if isinstance(req, Lease):
                # Items of a transaction that failed were never leased: the request stays parked.
                if req.op is None or not req.op.items or failed:
                    continue
                leased += len(req.op.items)
                if req.future.done():
                    undelivered.extend(i.id for i in req.op.items)
                else:
                    settle(req.future, (self.partition.number, req.op.items))
            elif isinstance(result, StorageError):
                fail_future(req.future, try_again(outcome_unknown=result.maybe_applied))
            elif isinstance(req, Complete | Retry | Renew) and req.op.error is not None:
                fail_future(req.future, req.op.error)
            elif isinstance(req, Produce):
                # Read now, in the batch's own step: the produce rule gave each stored item its id
                # (a duplicate by dedup_id keeps ""), and nothing may change them before this.
                settle(req.future, [item.id for item in req.items])
            else:
                settle(req.future, None)
        return leased, undelivered


class BatchPlan:
    """Where one batch's requests go: ``transactions``, in the order their partitions were first given
    a request."""

    def __init__(self, dist: Distribution[PartitionState], settings: QueueRecord, now: int) -> None:
        self._dist = dist
        self._settings = settings
        self._now = now
        self.transactions: dict[PartitionState, Transaction] = {}

    def place(self, hot: list[Request], leases: list[Lease]) -> None:
        """Places the ``hot`` requests (their leases join the parked ``leases``), then every parked lease
        not answered yet. A request that cannot be placed is answered: its partition (or every one) is
        failing, or a lease's deadline has passed."""
        self._place_hot(hot, leases)
        self._place_leases(leases)
        self._enlist(hot, leases)

    def _ops(self, p: PartitionState) -> PartitionBatch:
        """The operations of ``p``'s transaction, which starts with the first request placed on it."""
        transaction = self.transactions.get(p)
        if transaction is None:
            transaction = self.transactions[p] = Transaction(p)
        return transaction.ops

    def _place_hot(self, hot: list[Request], leases: list[Lease]) -> None:
        for req in hot:
            if isinstance(req, Produce):
                self._place_produce(req)
            elif isinstance(req, Lease):
                leases.append(req)
            else:
                assert req.partition is not None
                if req.partition.failures or req.partition.ids is None:
                    fail_future(req.future, req.partition.unavailable())
                elif isinstance(req, Complete):
                    self._ops(req.partition).complete.append(req.op)
                elif isinstance(req, Retry):
                    self._ops(req.partition).retry.append(req.op)
                elif isinstance(req, Renew):
                    self._ops(req.partition).renew.append(req.op)
                elif isinstance(req, Release):
                    self._ops(req.partition).release.append(req.op)

    def _place_produce(self, req: Produce) -> None:
        settings = self._settings
        target = self._dist.produce(len(req.items))
        if target is None:
            fail_future(
                req.future,
                RetryRequest(
                    f"partition not available; every partition of '{settings.name}' is failing, retry again"
                ),
            )
            return
        req.partition = target
        for item in req.items:
            item.max_attempts = settings.max_attempts
        self._ops(target).produce.extend(req.items)

    def _place_leases(self, leases: list[Lease]) -> None:
        now = self._now
        lease_deadline = now + self._settings.lease_timeout
        for lease in leases:
            lease.op = None
            lease.writing = False
            if lease.future.done():
                continue
            if lease.deadline <= now:  # its write ended after its deadline, empty-handed: not another one
                fail_future(lease.future, LeaseTimedOut())
                continue
            lease.partition = self._dist.lease(lease.batch_size)
            if lease.partition is not None:
                lease.op = LeaseOp(lease.batch_size, lease_deadline)
                self._ops(lease.partition).lease.append(lease.op)
                lease.writing = True

    def _enlist(self, hot: list[Request], leases: list[Lease]) -> None:
        """Gives each transaction the requests its end answers."""
        transactions = self.transactions
        for req in hot:  # hot leases are among ``leases`` already
            if req.partition is not None and not req.future.done() and not isinstance(req, Lease):
                transactions[req.partition].requests.append(req)
        for lease in leases:
            if lease.op is not None:
                assert lease.partition is not None
                transactions[lease.partition].requests.append(lease)
