"""Trying a call again after a transient failure, with exponential back-off, when that is safe.

Transient: a 454 (``RetryRequest``: overloaded, storage failing, partition moving) or no reply
(``ConnectionFailed``); never an empty lease (``LeaseTimedOut`` is an answer, not a failure). Safe, which
depends on the call:

- every call is tried again after a failure that says nothing was done: a 454 without "outcome
  unknown" (the server refused it before applying it), or a connection that was never made;
- an idempotent call is also tried again when it may have been done: lease (items leased by a lost reply
  return when their lease ends), renew, the reads (stats, queue_info, list_queues, list_items,
  list_scheduled, cluster_info, health), reload, delete_items (unknown ids are ignored), and produce
  when every item has a dedup_id (the server stores it once within the queue's dedup window);
- the others are not: a repeated complete or retry would fail for items the first one settled, a
  produce without dedup ids could store its items twice, a repeated create_queue finds the queue made,
  clear, redrive and import could act on items that arrived since.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from querator import backoff
from querator.client._errors import ConnectionFailed
from querator.errors import LeaseTimedOut, QueratorError, RetryRequest

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Retries:
    """How often and how long to try a call again (``AsyncClient(retries=...)``; None: never).

    Args:
        attempts: tries in all, the first included (1: never again).
        first_s: the longest wait before the second try, in seconds; each further wait may be twice as
            long, up to ``max_s``. Each wait is drawn at random below its bound ("full jitter"), so that
            clients failed by the same outage do not return together.
        max_s: the bound of any one wait, in seconds.
    """

    attempts: int = 4
    first_s: float = 0.1
    max_s: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first_s < 0 or self.max_s < 0:
            raise ValueError("retries: attempts must be at least 1 and waits not negative")

    def wait_s(self, tries: int) -> float:
        """Seconds to wait after ``tries`` failed tries."""
        return backoff.wait_s(tries, self.first_s, self.max_s)


DEFAULT_RETRIES = Retries()
"""What a client does unless told otherwise: up to 4 tries, waits of at most 0.1, 0.2 and 0.4 s."""


def transient(error: QueratorError, idempotent: bool) -> bool:
    """Whether a call that failed with ``error`` may be tried again (see the module docstring)."""
    if isinstance(error, LeaseTimedOut):
        return False
    if isinstance(error, RetryRequest):
        return idempotent or not error.outcome_unknown
    if isinstance(error, ConnectionFailed):
        return idempotent or not error.sent
    return False


async def with_retries(policy: Retries | None, idempotent: bool, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``'s result, trying it again under ``policy`` after each transient failure."""
    tries = 1
    while True:
        try:
            return await call()
        except QueratorError as e:
            if policy is None or tries >= policy.attempts or not transient(e, idempotent):
                raise
        await asyncio.sleep(policy.wait_s(tries))
        tries += 1
