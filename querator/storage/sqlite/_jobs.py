"""The writer thread's jobs, and how their outcomes get back to the event loops awaiting them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from querator.storage.sqlite._worker import Worker


@dataclass(slots=True)
class Job:
    """One unit of work for the writer thread and the future its caller awaits."""

    fn: Callable[[Worker], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    stop: bool = False
    """The last job: finish what came before, close the connection, end the thread."""


Outcome = tuple[Job, Any, BaseException | None]


def _settle(outcomes: list[Outcome]) -> None:
    """Runs on the event loop: resolves the futures nobody gave up on."""
    for job, value, error in outcomes:
        if job.future.done():
            continue
        if error is None:
            job.future.set_result(value)
        else:
            job.future.set_exception(error)


def deliver(outcomes: list[Outcome]) -> None:
    """Hands outcomes to their loops, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, batch)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def noop(_: Worker) -> None:
    return None
