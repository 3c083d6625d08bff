"""The one task of bench/task_queues.py, written for each task queue as its documentation shows.

Every variant does the same: wait ``io_ms`` (0: return at once), then append one line to this process's
record file (``TQ_RECORDS``): the task's id, when it was enqueued, when it started and when it ended
(wall-clock seconds). The harness reads the records; the worker processes import this module by name.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path


def redis_url() -> str:
    return os.environ.get("TQ_REDIS_URL", "redis://127.0.0.1:6379/0")


def amqp_url() -> str:
    """The RabbitMQ broker of Celery and Dramatiq (``--broker rabbitmq``), or "" for Redis."""
    return os.environ.get("TQ_AMQP_URL", "")


RECORDS = Path(os.environ.get("TQ_RECORDS", "/tmp/tq-records"))
LEASE_S = 5
"""How long a killed worker's tasks wait before they come back, where the system lets us choose."""

_lock = threading.Lock()
_files: dict[int, int] = {}


def record(task_id: str, enqueued_at: float, started_at: float) -> None:
    line = f"{task_id} {enqueued_at:.6f} {started_at:.6f} {time.time():.6f}\n".encode()
    pid = os.getpid()
    with _lock:
        fd = _files.get(pid)
        if fd is None:
            RECORDS.mkdir(parents=True, exist_ok=True)
            fd = _files[pid] = os.open(RECORDS / f"{pid}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, line)  # one write per line with O_APPEND: lines of threads do not interleave


def sync_work(task_id: str, enqueued_at: float, io_ms: int) -> None:
    started = time.time()
    if io_ms:
        time.sleep(io_ms / 1000)
    record(task_id, enqueued_at, started)


async def async_work(task_id: str, enqueued_at: float, io_ms: int) -> None:
    started = time.time()
    if io_ms:
        await asyncio.sleep(io_ms / 1000)
    record(task_id, enqueued_at, started)


# -- querator.worker ---------------------------------------------------------------------------------------


def querator_worker():  # type: ignore[no-untyped-def]
    from querator.worker import Worker

    # TQ_PREFETCH: the items held ahead of the worker's slots (default: the Worker's, a quarter of them).
    prefetch = os.environ.get("TQ_PREFETCH")
    worker = Worker(
        os.environ.get("QUERATOR_ENDPOINT", "http://127.0.0.1:2319"),
        prefetch=None if prefetch is None else int(prefetch),
    )
    worker.task(queue="tq", name="work", max_attempts=0, lease_timeout=f"{LEASE_S}s", create_queue=True)(
        async_work
    )
    return worker


# -- Celery (threads pool; acks_late with reject_on_worker_lost: its documented at-least-once setting) ------


def celery_app():  # type: ignore[no-untyped-def]
    from celery import Celery

    app = Celery("tq", broker=amqp_url() or redis_url())
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=4,
        broker_transport_options={"visibility_timeout": LEASE_S},
        worker_hijack_root_logger=False,
    )
    app.task(name="work", ignore_result=True)(sync_work)
    return app


# -- RQ ---------------------------------------------------------------------------------------------------


def rq_work(task_id: str, enqueued_at: float, io_ms: int) -> None:
    sync_work(task_id, enqueued_at, io_ms)


# -- Dramatiq --------------------------------------------------------------------------------------------


def dramatiq_broker():  # type: ignore[no-untyped-def]
    import dramatiq

    if amqp_url():
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        # Unacknowledged messages come back when the worker's connection closes: no timeout to set.
        broker: dramatiq.Broker = RabbitmqBroker(url=amqp_url())
    else:
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=redis_url(), heartbeat_timeout=LEASE_S * 1000)
    dramatiq.set_broker(broker)
    return dramatiq.actor(actor_name="work", max_retries=0, queue_name="tq")(sync_work)


# -- arq --------------------------------------------------------------------------------------------------


async def arq_work(ctx: dict, task_id: str, enqueued_at: float, io_ms: int) -> None:  # type: ignore[type-arg]
    await async_work(task_id, enqueued_at, io_ms)


def arq_settings() -> type:
    from arq.connections import RedisSettings

    class ArqSettings:
        functions = [arq_work]
        redis_settings = RedisSettings.from_dsn(redis_url())
        max_jobs = int(os.environ.get("TQ_CONCURRENCY", "16"))
        job_timeout = 60
        queue_name = "tq"

    return ArqSettings


# What each system's worker command loads (TQ_SYSTEM says which; the harness sets none).
SYSTEM = os.environ.get("TQ_SYSTEM", "")
if SYSTEM == "querator":
    querator = querator_worker()
elif SYSTEM == "celery":
    celery = celery_app()
elif SYSTEM == "dramatiq":
    dramatiq_work = dramatiq_broker()
elif SYSTEM == "arq":
    ArqSettings = arq_settings()
