"""``querator worker module:attr``: runs the tasks of a ``querator.worker.Worker`` until a signal."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from querator.cli._common import EXIT_USAGE
from querator.worker import load_worker, run_worker, setup_logging


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
    p.add_argument(
        "--prefetch",
        type=int,
        help="items leased ahead of the running ones, given back at a warm stop (default: the Worker's, "
        "else as many as the concurrency)",
    )
    p.add_argument("-Q", "--queues", default="", help="comma-separated queues to run (default: all)")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default info"
    )
    p.add_argument("--log-format", default="text", choices=["text", "json"], help="default text")


def run(args: argparse.Namespace) -> int:
    """Runs the ``worker`` command; its exit status."""
    setup_logging(args.log_level, args.log_format)
    try:
        worker = load_worker(args.app)
        queues = [q.strip() for q in args.queues.split(",") if q.strip()]
        run_worker(
            worker,
            queues,
            concurrency=args.concurrency,
            metrics_port=args.metrics_port,
            prefetch=args.prefetch,
        )
    except (ValueError, ImportError, AttributeError) as e:
        print(f"querator: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0
