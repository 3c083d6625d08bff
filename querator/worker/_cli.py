"""``querator worker module:attr``: loads a ``Worker`` from the user's code and runs it until a signal."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Coroutine
from typing import Any

from querator.worker._observe import setup_logging
from querator.worker._worker import Worker

EXIT_USAGE = 2


def add_parser(sub: Any) -> None:
    """Adds the ``worker`` command to the ``querator`` command's subparsers."""
    p = sub.add_parser(
        "worker",
        help="run the tasks of a querator.worker.Worker",
        description="Run the tasks of a querator.worker.Worker until SIGTERM or SIGINT (warm shutdown: "
        "what is in flight finishes; a second signal exits at once). The worker connects where its "
        "Worker says (by default QUERATOR_ENDPOINT, QUERATOR_API_KEY).",
    )
    p.add_argument(
        "app",
        help="module:attribute of the Worker (or querator.durable.Durable app), e.g. myapp.tasks:worker",
    )
    p.add_argument("-c", "--concurrency", type=int, help="items run at once (default: the Worker's)")
    p.add_argument("-Q", "--queues", default="", help="comma-separated queues to run (default: all)")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default info"
    )
    p.add_argument("--log-format", default="text", choices=["text", "json"], help="default text")


def load(app: str) -> Worker:
    """The ``Worker`` that ``module:attribute`` names (``find``), or the worker of the app it names.

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


def run(args: argparse.Namespace) -> int:
    """Runs the ``worker`` command; its exit status."""
    setup_logging(args.log_level, args.log_format)
    try:
        worker = load(args.app)
        queues = [q.strip() for q in args.queues.split(",") if q.strip()]
        worker.selected(queues)
        if args.concurrency is not None and args.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
    except (ValueError, ImportError, AttributeError) as e:
        print(f"querator: {e}", file=sys.stderr)
        return EXIT_USAGE
    _run(worker.run(queues, concurrency=args.concurrency, metrics_port=args.metrics_port))
    return 0


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Runs ``main`` on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(main)
    else:
        uvloop.run(main)
