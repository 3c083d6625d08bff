"""Totals of a write -- items, requests, retries, skipped rows -- and how the driver reports them.

Each task counts what it did in a ``WriteTotals``; the driver sums the tasks of a write (or of a
micro-batch) and ``report`` logs the sum on the ``querator.spark`` logger and, with ``reportFile``,
appends it as one JSON line, so a program can read the numbers of a job it ran.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec

from querator.spark._config import SinkConfig

__all__ = ["WriteTotals", "report"]

log = logging.getLogger("querator.spark")
_encoder = msgspec.json.Encoder()


@dataclass
class WriteTotals:
    """What one task (or, summed, one write or micro-batch) did."""

    items: int = 0
    """Items acknowledged by the server (including ones it recognised as duplicates)."""
    requests: int = 0
    """Produce requests answered 200."""
    retries: int = 0
    """Produce requests sent again after a retryable failure."""
    skipped: int = 0
    """Bad rows dropped because of ``onBadRow=skip``."""
    bytes: int = 0
    """Estimated encoded bytes of the acknowledged items."""
    tasks: int = 1
    """Tasks whose totals are included."""

    def add(self, other: WriteTotals) -> None:
        """Adds ``other``'s counts to these."""
        self.items += other.items
        self.requests += other.requests
        self.retries += other.retries
        self.skipped += other.skipped
        self.bytes += other.bytes
        self.tasks += other.tasks

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)


def report(config: SinkConfig, what: str, outcome: str, totals: WriteTotals, failed_tasks: int = 0) -> None:
    """Logs a write's totals (INFO when committed, WARNING otherwise) and appends them to ``reportFile``.

    Args:
        config: the sink's settings (queue name, ``reportFile``).
        what: names the write, e.g. ``write 5f3c...`` or ``micro-batch 7``.
        outcome: ``committed``, ``aborted`` or ``failed``.
        totals: the summed totals of the tasks that succeeded.
        failed_tasks: tasks that reported nothing.
    """
    log.log(
        logging.INFO if outcome == "committed" else logging.WARNING,
        "querator %s %s to queue %r: %d items in %d requests (%d retries, %d bad rows skipped) from %d "
        "tasks, %d failed",
        what,
        outcome,
        config.queue,
        totals.items,
        totals.requests,
        totals.retries,
        totals.skipped,
        totals.tasks,
        failed_tasks,
    )
    if config.report_file:
        line: dict[str, object] = {"write": what, "outcome": outcome, "queue": config.queue}
        line.update(totals.as_dict())
        line["failed_tasks"] = failed_tasks
        with Path(config.report_file).open("ab") as f:
            f.write(_encoder.encode(line) + b"\n")
