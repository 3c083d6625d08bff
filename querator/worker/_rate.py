"""``RateLimit``: how often a task may start in this worker process, for each key (docs/worker.md,
"Rate limits"); ``take_shared``: the same limit kept by the server for every worker of the cluster.

Starts are spaced evenly: at ``"10/s"`` one every 100 ms, at ``"100/m"`` one every 600 ms, so no
window of the period holds more than the limit and one. Each start takes the next free slot of its key,
in the order they asked (a slot is a reservation, not a poll), and waits for it; keys are apart, and
only the keys with a slot still ahead are kept, so their number stays bounded by what waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from querator.client import AsyncClient, ConnectionFailed, seconds_of
from querator.errors import RetryRequest

log = logging.getLogger("querator.worker")

PERIODS_S: Final = {"s": 1.0, "m": 60.0, "h": 3600.0}
SCOPES: Final = ("process", "cluster")
SHARED_MAX_WAIT_S = 30.0
"""How far ahead a worker reserves a start of a cluster-wide limit: it waits for it holding the item's
lease (renewed meanwhile), and a farther one is asked for again then."""
SHARED_FAILED_WAIT_S = 1.0
"""Seconds before asking again when the server could not answer (454, no reply)."""


class RateLimit:
    """At most ``spec`` starts (``"<n>/s"``, ``"<n>/m"`` or ``"<n>/h"``) per key.

    Raises:
        ValueError: ``spec`` is not of that form, or ``n`` is not positive.
    """

    def __init__(self, spec: str, owner: str = "worker") -> None:
        count, _, unit = spec.partition("/")
        if not count.isdigit() or int(count) < 1 or unit not in PERIODS_S:
            raise ValueError(f"{owner}: rate_limit {spec!r} is not '<n>/s', '<n>/m' or '<n>/h' with n >= 1")
        self.spec = spec
        self.count = int(count)
        self.period_s = PERIODS_S[unit]
        self.interval_s = self.period_s / self.count
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


def rate_limit_of(
    spec: str | None, key: Callable[..., str] | None, scope: str, owner: str
) -> RateLimit | None:
    """The limit of a task's (or a durable step's) ``rate_limit``, checked with its ``rate_key`` and
    ``rate_scope``; None without a limit. ``owner`` begins the messages (``worker``, ``durable``).

    Raises:
        ValueError: a bad limit, an unknown scope, or a key or scope without a limit.
    """
    limit = None if spec is None else RateLimit(spec, owner)
    if key is not None and limit is None:
        raise ValueError(f"{owner}: rate_key needs a rate_limit")
    if scope not in SCOPES:
        raise ValueError(f"{owner}: rate_scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scope != "process" and limit is None:
        raise ValueError(f"{owner}: rate_scope needs a rate_limit")
    return limit


async def take_shared(client: AsyncClient, queue: str, rate: RateLimit, key: str, task_name: str) -> None:
    """Waits for the next start of ``key`` under the cluster-wide ``rate`` of task ``task_name``, which
    the server keeps for ``queue`` (``AsyncClient.take_rate``); asks again while none is free within
    ``SHARED_MAX_WAIT_S``, or while the server cannot answer.

    Raises:
        QueratorError: the server refused the limit (its queue is gone, say): the run fails.
    """
    while True:
        try:
            reply = await client.take_rate(
                queue,
                f"{task_name}/{key}",
                limit=rate.count,
                period=rate.period_s,
                max_wait=SHARED_MAX_WAIT_S,
            )
        except (RetryRequest, ConnectionFailed) as e:
            log.warning("task %s: cluster rate limit not reached, asking again: %s", task_name, e)
            await asyncio.sleep(SHARED_FAILED_WAIT_S)
            continue
        wait_s = seconds_of(reply.wait)
        if reply.granted:
            await asyncio.sleep(wait_s)
            return
        log.info(
            "task %s: cluster rate limit %s: no start free within %gs, asking again in %.1fs",
            task_name,
            rate.spec,
            SHARED_MAX_WAIT_S,
            wait_s,
        )
        await asyncio.sleep(min(wait_s, SHARED_MAX_WAIT_S))
