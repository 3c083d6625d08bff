"""What a worker tells about its runs: one structured log record per run, and Prometheus metrics.

The record's fields (``task``, ``queue``, ``item_id``, ``attempt``, ``duration_s``, ``outcome``, and
``error`` for a failure) are attributes of the log record, for handlers that keep them, and the message
is them as ``key=value`` text; ``JsonFormatter`` writes them as one JSON object per line. Completed runs
log at INFO, failed ones at WARNING with the error's traceback.

Metrics live in a private registry (a process may hold a server's too), served on ``--metrics-port``.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("querator.worker")

RUN_FIELDS = ("task", "queue", "item_id", "attempt", "duration_s", "outcome", "error", "traceparent")

OUTCOMES = ("completed", "retried", "dead_lettered", "lost")
"""How a run ends: its item completed, given back for a later attempt, dead-lettered, or its outcome not
stored (the lease was lost: the item runs again)."""

_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


@dataclass(frozen=True, slots=True)
class TaskMetrics:
    """One task's children of the metrics, made once: ``labels()`` costs a look-up per call."""

    runs: dict[str, Any]
    duration: Any


class Metrics:
    """The worker's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs = Counter(
            "querator_worker_runs",
            "Task runs, by how they ended",
            ["task", "outcome"],
            registry=self.registry,
        )
        self.failures = Counter(
            "querator_worker_failures",
            "Task runs that failed, by reason: error (raised), timeout, permanent (Permanent or a declared "
            "permanent error), undecodable (the payload is not an envelope, or does not fit the function)",
            ["task", "reason"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "querator_worker_run_duration_seconds",
            "Time a task function ran",
            ["task"],
            buckets=_BUCKETS_S,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "querator_worker_items_in_flight", "Leased items not settled yet", registry=self.registry
        )
        self._server: Any = None
        self._lock = threading.Lock()
        self._tasks: dict[str, TaskMetrics] = {}

    def of(self, task: str) -> TaskMetrics:
        """``task``'s children of ``runs`` (by outcome) and ``duration``."""
        found = self._tasks.get(task)
        if found is None:
            runs = {outcome: self.runs.labels(task, outcome) for outcome in OUTCOMES}
            found = self._tasks[task] = TaskMetrics(runs, self.duration.labels(task))
        return found

    def serve(self, port: int, address: str = "") -> None:
        """Serves ``/metrics`` on ``port`` from a daemon thread (prometheus-client's own server)."""
        with self._lock:
            if self._server is None:
                self._server = start_http_server(port, addr=address or "0.0.0.0", registry=self.registry)

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server[0].shutdown()


def log_run(fields: dict[str, Any], level: int = logging.INFO, exc_info: BaseException | None = None) -> None:
    """Logs one run with ``fields`` (see the module docstring)."""
    if not log.isEnabledFor(level):
        return
    text = " ".join(f"{k}={fields[k]}" for k in RUN_FIELDS if fields.get(k) not in (None, ""))
    log.log(level, "task run %s", text, extra={"run": fields}, exc_info=exc_info)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, msg, the run's fields when it is a run's record,
    and the error's traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        run = getattr(record, "run", None)
        if isinstance(run, dict):
            entry.update({k: v for k, v in run.items() if v not in (None, "")})
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


def setup_logging(level: str, fmt: str) -> None:
    """Logs to stderr at ``level`` (debug, info, warning, error) as ``text`` or ``json`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
