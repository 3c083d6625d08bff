"""Priority levels: a task's items wait in one queue per level, and a worker leases the levels in order
(docs/worker.md, "Priorities"; docs/adr/0036).

The FIFO queue server knows nothing of priorities: the normal level is the task's queue itself (what a
producer that knows no priorities writes to, a schedule's ticks included), the others are the queues
``<queue>.high`` and ``<queue>.low``. A retry leaves an item in its queue, so its level survives retries.
"""

from __future__ import annotations

from typing import Final

LEVELS: Final = ("high", "normal", "low")
"""The levels, highest first: the order a worker leases them in."""
NORMAL: Final = "normal"


def check_level(level: str, owner: str = "worker") -> str:
    """``level``, once it is one of ``LEVELS``; ``owner`` begins the message (``worker``, ``durable``).

    Raises:
        ValueError: it is not.
    """
    if level not in LEVELS:
        raise ValueError(f"{owner}: priority {level!r} is not one of {', '.join(LEVELS)}")
    return level


def level_queue(queue: str, level: str) -> str:
    """The queue holding the items of ``level`` of a task whose queue is ``queue``."""
    return queue if level == NORMAL else f"{queue}.{level}"


def level_queues(queue: str) -> list[str]:
    """The queues of every level of ``queue``, highest first."""
    return [level_queue(queue, level) for level in LEVELS]
