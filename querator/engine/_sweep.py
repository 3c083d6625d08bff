"""Sweep: one timer per logical queue answers the requests whose deadline passes while they wait.

A timer per request cost a small request about 3 us of its ~50 (arming and cancelling a loop timer;
docs/benchmarks-log.md, "Small requests"), and nearly every request is answered long before its deadline.
The sweep is armed at the earliest deadline of the requests waiting, so with the usual timeouts it fires
about once per request timeout, however many requests pass.
"""

from __future__ import annotations

from collections.abc import Callable

from querator.clock import Clock, TimerHandle


class Sweep:
    """The timer; ``expire(now)`` answers what is due at ``now`` and returns the earliest deadline of a
    request still waiting (0 when none is)."""

    __slots__ = ("_at", "_clock", "_expire", "_timer")

    def __init__(self, clock: Clock, expire: Callable[[int], int]) -> None:
        self._clock = clock
        self._expire = expire
        self._timer: TimerHandle | None = None
        self._at = 0

    def watch(self, deadline: int) -> None:
        """A request waits until ``deadline`` at the latest."""
        if self._timer is None or deadline < self._at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._clock.call_at(deadline, self._fired)
            self._at = deadline

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fired(self) -> None:
        self._timer = None
        next_at = self._expire(self._clock.now())
        if next_at:
            self.watch(next_at)
