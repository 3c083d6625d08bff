"""Cron schedules on the server (docs/schedules.md): each tick of a schedule produces one item into its
queue, once, also across restarts, clock jumps and ownership changes in a cluster.

- ``_calendar``: pure rules -- a cron expression in a time zone, its ticks, the jitter of a tick, and
  which due ticks fire under a catch-up policy (``plan``);
- ``_scheduler``: the ``Scheduler`` of one node -- fires the schedules this node owns on the ring, and
  records each fired tick after its produce succeeded.
"""

from querator.schedules._calendar import (
    ALL,
    CATCH_UP_POLICIES,
    LATE_AFTER_US,
    MAX_CATCH_UP,
    ONE,
    SKIP,
    Calendar,
    Plan,
    Timing,
    jitter_of,
    plan,
    tick_time,
)
from querator.schedules._scheduler import RELOAD_US, Fire, Scheduler

__all__ = [
    "ALL",
    "CATCH_UP_POLICIES",
    "LATE_AFTER_US",
    "MAX_CATCH_UP",
    "ONE",
    "RELOAD_US",
    "SKIP",
    "Calendar",
    "Fire",
    "Plan",
    "Scheduler",
    "Timing",
    "jitter_of",
    "plan",
    "tick_time",
]
