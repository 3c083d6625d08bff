"""Loading a ``Worker`` from the user's code (``module:attr``) and running it until a signal: what
``querator worker`` does, for any program that starts workers."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Collection, Coroutine
from typing import Any

from querator.worker._worker import Worker


def find(app: str) -> Any:
    """What ``module:attribute`` names in the user's code; the working directory is importable, as for
    ``python -m``.

    Raises:
        ValueError: not ``module:attribute``.
        ImportError, AttributeError: it cannot be found.
    """
    module_name, sep, attribute = app.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"'{app}' is not module:attribute, e.g. myapp.tasks:worker")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def load(app: str) -> Worker:
    """The ``Worker`` that ``module:attribute`` names (a Durable app's, when it names one).

    Raises:
        ValueError: not ``module:attribute``, or not a Worker.
        ImportError, AttributeError: it cannot be found.
    """
    found = find(app)
    if not isinstance(found, Worker):
        # A Durable app (or anything else built on a Worker) runs its worker.
        found = getattr(found, "worker", found)
    if not isinstance(found, Worker):
        raise ValueError(f"'{app}' is a {type(found).__name__}, not a querator.worker.Worker")
    return found


def run_worker(
    worker: Worker,
    queues: Collection[str] = (),
    *,
    concurrency: int | None = None,
    metrics_port: int | None = None,
    prefetch: int | None = None,
) -> None:
    """Runs ``worker`` until SIGTERM or SIGINT, as ``querator worker`` does (on uvloop when installed):
    for programs that start workers their own way (a framework's command).

    Raises:
        ValueError: a queue that no task uses, a concurrency below 1 or a negative prefetch (before
            anything runs).
    """
    worker.selected(queues)
    if concurrency is not None and concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    if prefetch is not None and prefetch < 0:
        raise ValueError("--prefetch cannot be negative")
    _run(worker.run(queues, concurrency=concurrency, metrics_port=metrics_port, prefetch=prefetch))


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Runs ``main`` on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(main)
    else:
        uvloop.run(main)
