"""Cluster-wide rate limits (docs/extensions.md, "Rate limits"; docs/adr/0044): the next start of a key,
kept in memory by the ring owner of the key.

Each key's state is one number, the time its next start is free (the "theoretical arrival time" of the
generic cell rate algorithm): a take reserves ``max(now, next)`` when that is at most ``max_wait`` away
and moves ``next`` one interval (``period / limit``) on, so starts are spaced evenly and no window of a
period holds more than ``limit`` and one. A key whose next start has passed is as good as unknown, so
only keys with a start ahead are kept, and at most ``MAX_KEYS`` of them.
"""

from __future__ import annotations

from typing import Final

from querator.clock import MICROS
from querator.duration import MICROSECOND, DurationError, format_micros, parse_duration
from querator.errors import InvalidOption, try_again
from querator.names import check_printable
from querator.wire import messages as m

MAX_KEY = 1024
"""Characters of a key."""
MAX_LIMIT = 1_000_000
"""Starts per period."""
MAX_PERIOD_US: Final = 24 * 3600 * MICROS
MAX_WAIT_US: Final = 15 * 60 * MICROS
"""The furthest a start may be reserved ahead, as the longest request timeout."""
MAX_KEYS = 100_000
"""Keys with a start ahead that one node keeps; beyond, a take is refused with 454 until some pass."""


def check_take(req: m.RateLimitsTakeRequest) -> tuple[int, int]:
    """The request's interval between starts and its ``max_wait``, in microseconds.

    Raises:
        InvalidOption: a field out of its bounds.
    """
    if len(req.key) > MAX_KEY:
        raise InvalidOption(f"key is invalid; cannot be greater than '{MAX_KEY}' characters")
    check_printable("key", req.key)
    if not 1 <= req.limit <= MAX_LIMIT:
        raise InvalidOption(f"limit is invalid; must be between 1 and {MAX_LIMIT} but {req.limit} was given")
    period_us = _duration_us(req.period, "period", "1s, 1m or 1h")
    if not 0 < period_us <= MAX_PERIOD_US:
        raise InvalidOption(
            f"period is invalid; must be more than 0s and at most '24h' but '{req.period}' was given"
        )
    max_wait_us = _duration_us(req.max_wait, "max wait", "0s, 500ms or 30s") if req.max_wait else 0
    if not 0 <= max_wait_us <= MAX_WAIT_US:
        raise InvalidOption(
            f"max wait is invalid; must be between 0s and '15m' but '{req.max_wait}' was given"
        )
    return max(1, period_us // req.limit), max_wait_us


def _duration_us(text: str, what: str, formats: str) -> int:
    if not text:
        raise InvalidOption(f"{what} is required; expected format: {formats}")
    try:
        return parse_duration(text) // MICROSECOND
    except DurationError as e:
        raise InvalidOption(f"{what} is invalid; {e} - expected format: {formats}") from None


class RateLimits:
    """The next free start of each key with one ahead, by (queue, key)."""

    def __init__(self) -> None:
        self._next_us: dict[tuple[str, str], int] = {}

    def take(
        self, queue: str, key: str, interval_us: int, max_wait_us: int, now_us: int
    ) -> m.RateLimitsTakeResponse:
        """Reserves the next start of ``key`` of ``queue`` when it is at most ``max_wait_us`` from
        ``now_us``.

        Raises:
            RetryRequest: ``MAX_KEYS`` keys have a start ahead.
        """
        at = (queue, key)
        start_us = max(now_us, self._next_us.get(at, now_us))
        if start_us - now_us > max_wait_us:
            return m.RateLimitsTakeResponse(
                granted=False, wait=format_micros(start_us - now_us - max_wait_us)
            )
        if at not in self._next_us and len(self._next_us) >= MAX_KEYS:
            self._next_us = {k: t for k, t in self._next_us.items() if t > now_us}
            if len(self._next_us) >= MAX_KEYS:
                raise try_again(f"this node holds {MAX_KEYS} rate limit keys with a start ahead")
        self._next_us[at] = start_us + interval_us
        return m.RateLimitsTakeResponse(granted=True, wait=format_micros(start_us - now_us))

    def __len__(self) -> int:
        return len(self._next_us)
