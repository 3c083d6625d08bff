"""What a logical queue reports: what happened to its items, and how many requests wait on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ItemCounters:
    """What happened to items since the logical queue started (exported as Prometheus counters)."""

    produced: int = 0
    leased: int = 0
    completed: int = 0
    retried: int = 0
    released: int = 0
    """Leased items given back because their lease never reached its client."""
    lease_expired: int = 0
    """Expired leases whose items went back to the queue."""
    dead: int = 0
    """Items that died (max_attempts, expire_timeout, retry dead): dead-lettered, or dropped without a
    dead queue."""
    batch_runs: int = 0
    """Storage runs of request batches: one per partition a batch touches."""
    batch_run_requests: int = 0
    """Requests those runs answered (parked leases included): per run, the requests merged into it."""
    batch_run_s: float = 0.0
    """Time those runs took, summed."""


@dataclass
class LogicalStats:
    """The waiting counts of queue.stats."""

    produce_waiting: int
    lease_waiting: int
    complete_waiting: int
    in_flight: int
