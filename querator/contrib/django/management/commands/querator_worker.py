"""``python manage.py querator_worker``: runs the project's worker (``QUERATOR['WORKER']``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from querator.contrib.django._settings import QueratorSettings, querator_settings
from querator.worker import Worker, run_worker


class Command(BaseCommand):
    help = (
        "Run the tasks of the project's querator Worker until SIGTERM or SIGINT (warm shutdown: what is in "
        "flight finishes; a second signal exits at once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("worker", nargs="?", help="module:attribute (default: QUERATOR['WORKER'])")
        parser.add_argument("-c", "--concurrency", type=int, help="items run at once (default: the Worker's)")
        parser.add_argument("-Q", "--queues", default="", help="comma-separated queues to run (default: all)")
        parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")

    def handle(self, *args: Any, **options: Any) -> None:
        found = querator_settings()
        if options["worker"]:
            found = QueratorSettings(found.endpoint, found.api_key, options["worker"])
        worker = found.load_worker()
        _close_connections_around_sync_tasks(worker)
        queues = [q.strip() for q in options["queues"].split(",") if q.strip()]
        try:
            run_worker(
                worker, queues, concurrency=options["concurrency"], metrics_port=options["metrics_port"]
            )
        except ValueError as e:
            raise CommandError(str(e)) from e


def _close_connections_around_sync_tasks(worker: Worker) -> None:
    """Sync tasks run on the worker's threads, each with its own database connections, and no request
    ends to close them: close the stale or broken ones before and after each run (as Django does around
    a request, honouring CONN_MAX_AGE). Async tasks reach the ORM through ``sync_to_async``, whose
    thread Django manages."""
    for task in worker.tasks.values():
        if not task.is_async:
            task.fn = _closing(task.fn)


def _closing(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run
