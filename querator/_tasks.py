"""Starting background tasks so that none dies silently (every background task goes through here).

A one-shot task (``start``) has its unexpected failure logged. A long-lived one (``keep``) is also
started again, after a back-off, and counted: a node whose scheduler or purger died would otherwise keep
answering /health and /ready while doing none of that work. One that keeps failing says so through
``Supervised.failing``, which the node's readiness reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from querator.clock import MICROS, Clock, sleep_until

log = logging.getLogger(__name__)

RESTART_US: Final = MICROS
"""How long after its first failure in a row a long-lived task starts again; the wait doubles with each
failure in a row, up to ``MAX_RESTART_US``."""
MAX_RESTART_US: Final = 30 * MICROS
FAILING_AFTER: Final = 3
"""Failures in a row after which a task counts as failing (the node is not ready). A run that lasts
``MAX_RESTART_US`` starts the count again."""


def start(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """Runs ``coro`` as a named task whose unexpected failure is logged with its traceback."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    task.add_done_callback(_report)
    return task


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())


class Supervised:
    """A long-lived task: ``factory()`` is run again after each unexpected failure (an exception other
    than a cancellation), until it returns or the task is stopped.

    Args:
        factory: Makes the task's coroutine; called again for each restart, so it should start from
            what it keeps (a restart must not rely on the state of the run that failed).
        name: The task's name, in logs, metrics and readiness.
        clock: The time of the back-off.
    """

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, None]], name: str, clock: Clock) -> None:
        self.name = name
        self.restarts = 0
        """Restarts since the task was started (``querator_task_restarts_total``)."""
        self.failures = 0
        """Failures in a row."""
        self._error = ""
        self._clock = clock
        self.task = start(self._supervise(factory), name)

    def failing(self) -> str:
        """Why the task counts as failing ("" when it does not)."""
        if self.failures < FAILING_AFTER:
            return ""
        return f"background task {self.name} keeps failing ({self.failures} times in a row): {self._error}"

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _supervise(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        while True:
            # A run that lasts through the longest back-off has recovered: the count starts again.
            recovered = self._clock.call_at(self._clock.now() + MAX_RESTART_US, self._recovered)
            try:
                await factory()
                return
            except Exception as e:
                self.failures += 1
                self.restarts += 1
                self._error = f"{type(e).__name__}: {e}"
                wait_us = min(MAX_RESTART_US, RESTART_US << min(self.failures - 1, 16))
                log.exception("task %s failed (started again in %.0fs)", self.name, wait_us / MICROS)
            finally:
                recovered.cancel()
            await sleep_until(self._clock, self._clock.now() + wait_us)

    def _recovered(self) -> None:
        self.failures = 0
