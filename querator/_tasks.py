"""Starting background tasks so that none dies silently (every long-lived task goes through here)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


def start(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """Runs ``coro`` as a named task whose unexpected failure is logged with its traceback."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    task.add_done_callback(_report)
    return task


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())
