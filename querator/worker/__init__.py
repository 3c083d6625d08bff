"""Background tasks on Querator queues: declare a task, enqueue calls of it, run workers.

::

    from querator.worker import Worker, backoff

    worker = Worker("http://localhost:2319", concurrency=16)

    @worker.task(queue="emails", max_attempts=5, retry=backoff.exponential(first="1s", cap="10m"),
                 lease_timeout="30s", create_queue=True)
    async def send_email(to: str, subject: str) -> None: ...

    await send_email.enqueue("a@example.com", subject="hi")      # the job's id (current_job_id())
    send_email.enqueue_sync("b@example.com", subject="hi")       # the same, without an event loop

and ``querator worker myapp.tasks:worker --concurrency 16`` runs it. Sync functions run in a thread
pool, async ones on the loop; arguments travel as JSON (or the worker's ``Serializer``) and arrive typed
by the function's annotations; leases are renewed while a task runs; a task that raises is retried at
``retry_at`` from its back-off, and dead-lettered after ``max_attempts`` or at once on ``Permanent``;
SIGTERM stops a worker warmly. docs/worker.md has all of it, docs/adr/0014 why it is built so.

Modules: ``backoff`` (retry policies, public), ``_worker`` (``Worker``: tasks, ``run``, shutdown),
``_task`` (``Task``, enqueue), ``_priority`` (priority levels, a queue each), ``_runner`` (a queue's
lease loop and each run), ``_slots`` (the worker's slots and the items held ahead of them), ``_settle``
(batched completes and retries), ``_serializer`` (JSON, typed arguments), ``_envelope`` (the payload),
``_trace`` (W3C trace context), ``_observe`` (run logs, metrics; ``setup_logging``) and ``_run``
(``load_worker``, ``run_worker`` and ``find_app``: what ``querator worker`` does, for programs that
start workers their own way). ``Signature``, ``typed`` (a function's arguments decoded by its
annotations), ``span`` (a traced block) and the rate limits (``RateLimit``, ``rate_limit_of``,
``take_shared``) are exported for ``querator.durable``, which imports only this module.
"""

from __future__ import annotations

from querator.worker import backoff
from querator.worker._envelope import EnvelopeError
from querator.worker._observe import JsonFormatter, setup_logging
from querator.worker._priority import check_level, level_queue
from querator.worker._rate import RateLimit, rate_limit_of, take_shared
from querator.worker._run import find as find_app
from querator.worker._run import load as load_worker
from querator.worker._run import run_worker
from querator.worker._serializer import JsonSerializer, Serializer, Signature, typed
from querator.worker._task import (
    Lease,
    Leaser,
    Permanent,
    RetryLater,
    Task,
    current_attempt,
    current_item,
    current_job_id,
    current_lease,
)
from querator.worker._trace import current_traceparent, span, use_traceparent
from querator.worker._worker import Worker

__all__ = [
    "EnvelopeError",
    "JsonFormatter",
    "JsonSerializer",
    "Lease",
    "Leaser",
    "Permanent",
    "RateLimit",
    "RetryLater",
    "Serializer",
    "Signature",
    "Task",
    "Worker",
    "backoff",
    "check_level",
    "current_attempt",
    "current_item",
    "current_job_id",
    "current_lease",
    "current_traceparent",
    "find_app",
    "level_queue",
    "load_worker",
    "rate_limit_of",
    "run_worker",
    "setup_logging",
    "span",
    "take_shared",
    "typed",
    "use_traceparent",
]
