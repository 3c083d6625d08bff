"""The vocabulary of durable workflows both sides speak (docs/durable.md): statuses, the kinds and states of
journal entries, and how a child workflow's id is made."""

from __future__ import annotations

from typing import Final

RUNNING: Final = "running"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
STATUSES: Final = (RUNNING, COMPLETED, FAILED, CANCELLED)

# An entry's kinds: what the workflow did at its sequence number.
STEP: Final = "step"
SLEEP: Final = "sleep"
SIGNAL: Final = "signal"
CHILD: Final = "child"

# An entry's states. The first two are final: a final entry is never replaced by a different one.
DONE: Final = "done"
ERROR: Final = "error"
PENDING: Final = "pending"
"""Started and not finished: a dispatched step or child, a timer, a wait for a signal, a step between
attempts."""
FINAL_STATES: Final = frozenset({DONE, ERROR})


def child_id(parent_id: str, seq: int) -> str:
    """A child workflow's id: its parent's and the seq that started it, so a replay starts the same one."""
    return f"{parent_id}/{seq}"
