"""Waiting: the requests a logical queue has not answered yet, and the deadlines that answer them.

Requests wait on the request list (``pending``) until the logical queue's task takes them into a batch;
a lease then waits in ``leases`` until items come or its deadline passes. A produce or a lease not parked
yet (on the list, or in its first batch) is answered at its deadline by the queue's one sweep timer
(``Sweep``); a parked lease by a timer of its own, so that a round of the sweep never walks every parked
long-poll. The timers answer from the event loop, not the task, which may be stuck on storage (a load or
a write waiting out Cassandra's timeouts) for longer than any client waits; they only answer requests
and take them off the lists, never while the task is walking one.
"""

from __future__ import annotations

import functools
from collections import deque

from querator.clock import Clock
from querator.engine._requests import Complete, Lease, Produce, Release, Renew, Request, Retry, fail_future
from querator.engine._stats import LogicalStats
from querator.engine._sweep import Sweep
from querator.errors import LeaseTimedOut, QueratorError, RetryRequest

LEASE_GRACE_US = 500_000
"""Microseconds a lease whose write is in flight at its deadline may still wait for it: long enough for
any healthy write, well inside the second a client waits beyond its request_timeout (the reference's ADR
0009, docs/semantics.md §4.10)."""
LEASE_NOT_STORED = "request timeout; the lease could not be stored before request_timeout, try again"
PRODUCE_TIMED_OUT = "request timeout; the items could not be stored before request_timeout, try again"


class Waiting:
    """A logical queue's unanswered requests. See the module docstring."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.pending: deque[Request] = deque()
        self.leases: list[Lease] = []
        """Leases taken into a batch and not answered: in their first batch, or parked."""
        self._sweep = Sweep(clock, self._expire_due)

    def add(self, request: Request, deadline: int = 0) -> None:
        """Puts ``request`` on the list; one still waiting for its batch at ``deadline`` (if given) is
        answered 454 then (a lease: ``LeaseTimedOut``)."""
        self.pending.append(request)
        if deadline:
            self._sweep.watch(deadline)

    def settled(self) -> None:
        """After a batch: drops the leases it answered, and gives each one it left waiting (parked) a
        timer of its own."""
        self.leases = [lease for lease in self.leases if not lease.future.done()]
        for lease in self.leases:
            if lease.timer is None:
                lease.timer = self._clock.call_at(lease.deadline, functools.partial(self._lease_due, lease))

    def withdraw(self, lease: Lease) -> None:
        """Takes a lease whose caller went away off the lists at once, rather than at the next batch: it
        is no longer counted as waiting, and no batch serves it (one whose write is in flight gives back
        what it leased to it: ``Transaction.answer``)."""
        if lease in self.pending:
            self.pending.remove(lease)
        elif lease in self.leases:
            self.leases.remove(lease)

    def expire_parked(self) -> None:
        """Answers the parked leases whose deadline passed while their write was in flight and that
        came back without items."""
        now = self._clock.now()
        for lease in self.leases:
            if lease.deadline <= now:
                fail_future(lease.future, LeaseTimedOut())
        self.leases = [lease for lease in self.leases if not lease.future.done()]

    def counts(self, in_flight: int) -> LogicalStats:
        """The counts of queue.stats; ``in_flight``: callers waiting for an answer."""
        pending = self.pending
        produce = sum(1 for r in pending if isinstance(r, Produce))
        complete = sum(1 for r in pending if isinstance(r, Complete | Retry | Renew | Release))
        leases = len(self.leases) + sum(isinstance(r, Lease) for r in pending)
        return LogicalStats(produce, leases, complete, in_flight)

    def stop(self, error: QueratorError) -> None:
        """Answers every request still waiting with ``error``."""
        for req in [*self.pending, *self.leases]:
            fail_future(req.future, error)
        self.pending.clear()
        self.leases.clear()
        self._sweep.cancel()

    def _expire_due(self, now: int) -> int:
        """The sweep: answers the produces and the leases not parked yet whose deadline is past at
        ``now``; returns the next deadline of one still waiting (0: none). A lease whose write is in
        flight is given ``LEASE_GRACE_US`` more (see ``_lease_due``)."""
        next_at = 0
        expired: list[tuple[Request, QueratorError]] = []
        for req in [*self.pending, *self.leases]:
            if req.future.done() or not isinstance(req, Produce | Lease):
                continue
            if isinstance(req, Lease) and req.timer is not None:
                continue  # parked: its own timer answers it
            due = req.deadline
            if due <= now and isinstance(req, Lease) and req.writing:
                due += LEASE_GRACE_US
                if due <= now:
                    expired.append((req, RetryRequest(LEASE_NOT_STORED)))
                    continue
            if due > now:
                next_at = min(next_at or due, due)
            else:
                timed_out = LeaseTimedOut() if isinstance(req, Lease) else RetryRequest(PRODUCE_TIMED_OUT)
                expired.append((req, timed_out))
        for req, error in expired:
            self._drop(req, error)
        return next_at

    def _lease_due(self, lease: Lease) -> None:
        if not lease.writing:
            self._drop(lease, LeaseTimedOut())
            return
        # Its write may be leasing items to it right now: wait a little rather than make a round trip of
        # them. If it still answers late, the batch gives them back (Transaction.answer).
        lease.timer = self._clock.call_at(
            lease.deadline + LEASE_GRACE_US, functools.partial(self._lease_grace_over, lease)
        )

    def _lease_grace_over(self, lease: Lease) -> None:
        self._drop(lease, RetryRequest(LEASE_NOT_STORED) if lease.writing else LeaseTimedOut())

    def _drop(self, request: Request, error: QueratorError) -> None:
        if isinstance(request, Lease):
            self.withdraw(request)
        elif request in self.pending:
            self.pending.remove(request)
        fail_future(request.future, error)
