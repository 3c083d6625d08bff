"""The history checker: what a run lost, invented, duplicated or stranded.

- **lost**: an acknowledged produce (200) whose item was never completed (the workloads set no
  max_attempts or expire_timeout, so completion is the only way an item may end). A complete whose
  answer never came (the server died) counts as done when the item was never delivered again: the
  drain would have found it otherwise;
- **unexpected**: a delivered item nobody produced, or whose produce was answered with an error (an
  error must mean "not stored");
- **duplicates**: an item delivered again after it was completed (a real duplicate: a bug), or after a
  delivery that ended without an acknowledged complete or retry (explained: the lease expired, or the
  complete's answer was lost). Deliveries after an acknowledged retry are expected, not duplicates;
- **stranded**: items still queued or leased at the end, after the drain;
- **within a lease** (when the lease's length is given): an item delivered again before the delivery
  ahead of it could have expired, with no complete or retry of it sent in between: two consumers held
  it at once. The server's lease starts after the first lease was called and the second delivery
  before its answer returned, so comparing those two client times never blames a correct server.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from .history import History


@dataclass
class Report:
    acknowledged: int = 0
    unknown_produces: int = 0
    deliveries: int = 0
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    """Delivered again after an acknowledged complete."""
    explained: Counter[str] = field(default_factory=Counter)
    """Re-deliveries explained by a lease that ended without an acknowledged complete or retry."""
    stranded: int = 0
    within_lease: list[str] = field(default_factory=list)
    """Delivered again while a delivery of it was certainly still leased (checked with ``lease_s``)."""

    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} lost: {self.lost[:10]}")
        if self.unexpected:
            found.append(f"{len(self.unexpected)} unexpected: {self.unexpected[:10]}")
        if self.duplicated:
            found.append(f"{len(self.duplicated)} duplicated after completion: {self.duplicated[:10]}")
        if self.stranded:
            found.append(f"{self.stranded} stranded")
        if self.within_lease:
            found.append(f"{len(self.within_lease)} delivered twice within a lease: {self.within_lease[:10]}")
        return found

    def summary(self) -> str:
        return (
            f"acknowledged {self.acknowledged}, unknown-outcome produces {self.unknown_produces}, "
            f"deliveries {self.deliveries}, lost {len(self.lost)}, unexpected {len(self.unexpected)}, "
            f"duplicated {len(self.duplicated)}, re-deliveries after expiry {sum(self.explained.values())}, "
            f"stranded {self.stranded}, delivered twice within a lease {len(self.within_lease)}"
        )


# Long on purpose: every property of a history, checked in one pass.
def check(history: History, stranded: int, lease_s: float | None = None) -> Report:  # noqa: C901, PLR0912
    """Checks a history that ends with a drain; ``stranded`` is what the server still holds after it;
    ``lease_s``, the queue's lease timeout, also checks that no delivery overlapped a lease."""
    report = Report(stranded=stranded)
    if lease_s is not None:
        report.within_lease = within_lease(history, lease_s)
    acked = {p for op in history.of("produce", "ok") for p in op.payloads}
    maybe = {p for op in history.of("produce", "unknown") for p in op.payloads}
    refused = {p for op in history.of("produce", "fail") for p in op.payloads}
    report.acknowledged, report.unknown_produces = len(acked), len(maybe)

    # Per item, its events in return order: each delivery, and how that delivery ended.
    events: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for op in history.ops:
        if op.outcome != "ok" or op.kind not in ("lease", "complete", "retry"):
            continue
        for payload in op.payloads:
            events[payload].append((op.returned, op.kind))
    completed: set[str] = set()
    for payload, seq in events.items():
        seq.sort()
        deliveries = [kind for _, kind in seq if kind == "lease"]
        report.deliveries += len(deliveries)
        if (payload not in acked and payload not in maybe) or payload in refused:
            report.unexpected.append(payload)
        ended = "start"  # how the previous delivery ended: start, complete, retry, or open (no ack)
        for _, kind in seq:
            if kind == "lease":
                if ended == "complete":
                    report.duplicated.append(payload)
                elif ended == "open":
                    report.explained["lease expired or answer lost"] += 1
                ended = "open"
            else:
                ended = kind
        if "complete" in (kind for _, kind in seq):
            completed.add(payload)
    for op in history.of("complete", "unknown"):
        for payload in op.payloads:
            # Done by the unanswered complete, unless delivered again after it was sent.
            if all(t < op.called for t, kind in events[payload] if kind == "lease"):
                completed.add(payload)
    report.lost = sorted(acked - completed)
    return report


def within_lease(history: History, lease_s: float) -> list[str]:
    """Items delivered again less than ``lease_s`` after the previous delivery was called, with no
    complete or retry of them (answered or not) sent in between."""
    leases: dict[str, list[tuple[float, float]]] = defaultdict(list)
    settles: dict[str, list[float]] = defaultdict(list)
    for op in history.ops:
        if op.kind == "lease" and op.outcome == "ok":
            for payload in op.payloads:
                leases[payload].append((op.called, op.returned))
        elif op.kind in ("complete", "retry"):
            for payload in op.payloads:
                settles[payload].append(op.called)
    found = []
    for payload, seq in leases.items():
        seq.sort()
        for (first, _), (_, second) in pairwise(seq):
            ended = any(first <= t <= second for t in settles[payload])
            if second < first + lease_s and not ended:
                found.append(payload)
                break
    return sorted(found)


def trace(history: History, payloads: list[str], limit: int = 5) -> str:
    """Every operation that concerned the first ``limit`` of ``payloads``, in call order: what a failure
    message shows so that a lost or unexpected item can be followed through the run."""
    lines = []
    start = history.ops[0].called if history.ops else 0.0
    for payload in payloads[:limit]:
        lines.append(f"{payload}:")
        for op in sorted((o for o in history.ops if payload in o.payloads), key=lambda o: o.called):
            lines.append(
                f"  {op.called - start:8.3f}-{op.returned - start:8.3f} {op.kind} {op.outcome} by {op.client}"
                f" partition {op.partition} {op.error}"
            )
    return "\n".join(lines)
