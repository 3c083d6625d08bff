"""HandOffLog: this node's recent partition hand-offs, newest first, for ``/v1/cluster.info``.

An operator who sees partitions move (docs/cluster.md) wants to know which, when, to or from which node
and why; the counters in /metrics say only how many. The log is in memory and bounded: the last
``MAX_HAND_OFFS`` entries, gone on restart. It holds queue names, partition numbers and node ids only.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

MAX_HAND_OFFS = 100
"""Entries kept: enough for a few ring changes of a node with many queues, small enough to send whole."""


class Direction(enum.Enum):
    GIVEN = "given"
    """This node stopped serving the partition."""
    TAKEN = "taken"
    """The ring gave this node the partition; its next engine for the queue serves it."""


class Outcome(enum.Enum):
    STOPPING = "stopping"
    """The engine that served the queue here is finishing its batch."""
    STOPPED = "stopped"
    """It stopped writing: the partition's new owner may claim it."""
    FAILED = "failed"
    """Its shutdown raised (logged); storage fencing still keeps it from writing."""


@dataclass(slots=True)
class HandOffEntry:
    at_us: int
    queue: str
    partition: int
    direction: Direction
    other_node: str
    """The node that owns the partition now (given) or owned it before (taken); "" when not known."""
    reason: str
    """A ``HandOff`` value: ring, lease or fenced."""
    outcome: Outcome = Outcome.STOPPING


class HandOffLog:
    """The last ``capacity`` hand-offs; the oldest go first."""

    def __init__(self, capacity: int = MAX_HAND_OFFS) -> None:
        self._entries: deque[HandOffEntry] = deque(maxlen=capacity)

    def add(self, entry: HandOffEntry) -> None:
        self._entries.append(entry)

    def newest_first(self) -> list[HandOffEntry]:
        return list(reversed(self._entries))
