"""Back-off policies: how long a task that failed waits before its next attempt.

A policy is any callable from the number of failed attempts so far (1 after the first) to seconds; the
worker gives the item back with ``retry_at`` = now + that many seconds, so the wait costs the worker
nothing and survives its restart::

    @worker.task(queue="emails", retry=backoff.exponential(first="1s", cap="10m"))

Durations are Go strings (``"1m30s"``), ``timedelta``s or seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from querator import backoff
from querator.client import Duration, seconds_of

Policy = Callable[[int], float]
"""Failed attempts so far (>= 1) -> seconds to wait before the next one."""


@dataclass(frozen=True, slots=True)
class Exponential:
    """``first_s``, then ``factor`` times longer after each failure, never more than ``cap_s``. With
    ``jitter`` each wait is drawn between half its bound and the bound, so that items failed by one
    outage do not all return at once, and none returns sooner than half its wait."""

    first_s: float
    cap_s: float
    factor: float = 2.0
    jitter: bool = True

    def __call__(self, failures: int) -> float:
        return backoff.wait_s(failures, self.first_s, self.cap_s, self.factor, 0.5 if self.jitter else 0.0)


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same wait after every failure."""

    wait_s: float

    def __call__(self, failures: int) -> float:
        return self.wait_s


def exponential(
    first: Duration = "1s", cap: Duration = "10m", factor: float = 2.0, jitter: bool = True
) -> Exponential:
    """Waits of ``first``, ``first * factor``, ... up to ``cap`` (see ``Exponential``).

    Raises:
        ValueError: a negative duration or a factor below 1.
    """
    first_s, cap_s = seconds_of(first), seconds_of(cap)
    if first_s < 0 or cap_s < 0 or factor < 1:
        raise ValueError("backoff: durations cannot be negative and the factor must be at least 1")
    return Exponential(first_s, cap_s, factor, jitter)


def fixed(wait: Duration) -> Fixed:
    """The same ``wait`` after every failure (0: retry at once, at the queue's tail)."""
    wait_s = seconds_of(wait)
    if wait_s < 0:
        raise ValueError("backoff: the wait cannot be negative")
    return Fixed(wait_s)


__all__ = ["Exponential", "Fixed", "Policy", "exponential", "fixed"]
