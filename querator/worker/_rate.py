"""``RateLimit``: how often a task may start in this worker process, for each key (docs/worker.md,
"Rate limits").

Starts are spaced evenly: at ``"10/s"`` one every 100 ms, at ``"100/m"`` one every 600 ms, so no
window of the period holds more than the limit and one. Each start takes the next free slot of its key,
in the order they asked (a slot is a reservation, not a poll), and waits for it; keys are apart, and
only the keys with a slot still ahead are kept, so their number stays bounded by what waits.
"""

from __future__ import annotations

import asyncio
from typing import Final

PERIODS_S: Final = {"s": 1.0, "m": 60.0, "h": 3600.0}


class RateLimit:
    """At most ``spec`` starts (``"<n>/s"``, ``"<n>/m"`` or ``"<n>/h"``) per key.

    Raises:
        ValueError: ``spec`` is not of that form, or ``n`` is not positive.
    """

    def __init__(self, spec: str) -> None:
        count, _, unit = spec.partition("/")
        if not count.isdigit() or int(count) < 1 or unit not in PERIODS_S:
            raise ValueError(f"worker: rate_limit {spec!r} is not '<n>/s', '<n>/m' or '<n>/h' with n >= 1")
        self.spec = spec
        self.interval_s = PERIODS_S[unit] / int(count)
        self._next_s: dict[str, float] = {}
        """The next free start of each key that has one ahead (loop time, seconds)."""

    def reserve(self, key: str, now_s: float) -> float:
        """Takes the next free start of ``key`` at ``now_s`` or later; returns it."""
        if len(self._next_s) > 1024:  # drop the keys whose next slot has passed: they start at once anyway
            self._next_s = {k: t for k, t in self._next_s.items() if t > now_s}
        start_s = max(now_s, self._next_s.get(key, now_s))
        self._next_s[key] = start_s + self.interval_s
        return start_s

    async def take(self, key: str) -> None:
        """Waits for the next free start of ``key``."""
        loop = asyncio.get_running_loop()
        now_s = loop.time()
        start_s = self.reserve(key, now_s)
        if start_s > now_s:
            await asyncio.sleep(start_s - now_s)
