"""The tasks of tests/integration/test_worker.py, run by real ``querator worker`` processes.

Each run appends a JSON line to ``$WORKER_RECORDS/<pid>.jsonl`` (appends of one short line do not
interleave), so the test sees every run of every process. ``held`` waits for the file
``$WORKER_RECORDS/release``, which the test creates when it is ready. With ``$WORKER_SPANS`` set, the
process exports its OpenTelemetry spans to that file, one JSON line each.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from querator.worker import (
    Permanent,
    Worker,
    backoff,
    current_attempt,
    current_item,
    current_job_id,
    current_traceparent,
)

worker = Worker(concurrency=4)
RECORDS = Path(os.environ.get("WORKER_RECORDS", "."))
WAIT_S = 10.0
"""How long ``crowd`` and ``pair`` wait for their limit to be reached before they end anyway."""
TIMEOUT_S = 0.5
"""The ``timeout`` of ``slow`` and ``slow_sync``."""


def export_spans(path: Path) -> None:
    """Makes this process's OpenTelemetry tracer an SDK one that writes each ended span to ``path``."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class ToFile(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with path.open("a") as f:
                for span in spans:
                    context, parent = span.get_span_context(), span.parent
                    entry = {
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": trace.format_trace_id(context.trace_id),
                        "span_id": trace.format_span_id(context.span_id),
                        "parent_id": trace.format_span_id(parent.span_id) if parent else None,
                        "attributes": dict(span.attributes or {}),
                    }
                    f.write(json.dumps(entry) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ToFile()))
    trace.set_tracer_provider(provider)


if "WORKER_SPANS" in os.environ:
    export_spans(Path(os.environ["WORKER_SPANS"]))


def record(**fields: Any) -> None:
    with (RECORDS / f"{os.getpid()}.jsonl").open("a") as f:
        f.write(json.dumps({**fields, "pid": os.getpid()}) + "\n")


def runs(task: str, key: str) -> int:
    """Runs of ``task`` on ``key`` recorded so far, by every process."""
    lines = (json.loads(line) for path in RECORDS.glob("*.jsonl") for line in path.read_text().splitlines())
    return sum(1 for r in lines if r["task"] == task and r["key"] == key)


@worker.task(queue="flaky", retry=backoff.fixed(0), create_queue=True)
def flaky(key: str, failures: int) -> None:
    before = runs("flaky", key)
    record(task="flaky", key=key)
    if before < failures:
        raise RuntimeError(f"failure {before + 1} of {failures}")


@worker.task(queue="slow", timeout=TIMEOUT_S, retry=backoff.fixed(0), create_queue=True)
async def slow(key: str) -> None:
    """Its first run outlasts its timeout (and is cancelled there); the next ends at once."""
    first = runs("slow", key) == 0
    record(task="slow", key=key, event="start")
    if first:
        await asyncio.sleep(WAIT_S)
    record(task="slow", key=key, event="done")


@worker.task(queue="slow-sync", timeout=TIMEOUT_S, retry=backoff.fixed(0), create_queue=True)
def slow_sync(key: str) -> None:
    """``slow`` in the thread pool, where a run cannot be stopped: the first one's thread sleeps on past
    its timeout, and then ends unrecorded (the worker dropped its outcome at the timeout)."""
    first = runs("slow_sync", key) == 0
    record(task="slow_sync", key=key, event="start")
    if first:
        time.sleep(WAIT_S)
        return
    record(task="slow_sync", key=key, event="done")


@worker.task(queue="mixed", create_queue=True)
def mixed_a(key: str) -> None:
    """``mixed_a`` and ``mixed_b`` share a queue: each item's kind picks which one runs it."""
    record(task="mixed", key=key, ran="a")


@worker.task(queue="mixed")
async def mixed_b(key: str) -> None:
    record(task="mixed", key=key, ran="b")


@worker.task(queue="later", retry=backoff.fixed("1h"), create_queue=True)
def fails_later(key: str) -> None:
    record(task="fails_later", key=key, at=time.time())
    raise RuntimeError("not now")


@worker.task(queue="doomed", max_attempts=3, retry=backoff.fixed(0), create_queue=True)
async def doomed(key: str) -> None:
    record(task="doomed", key=key, job_id=current_job_id())
    raise RuntimeError("never works")


class Refused(Exception):
    """Declared permanent: retrying cannot help."""


@worker.task(queue="refused", permanent=[Refused], create_queue=True)
def refused(key: str) -> None:
    record(task="refused", key=key)
    raise Refused("not this one")


@worker.task(queue="hopeless", create_queue=True)
async def hopeless(key: str) -> None:
    record(task="hopeless", key=key)
    raise Permanent("cannot ever work")


@worker.task(queue="held", lease_timeout="2s", create_queue=True)
async def held(key: str) -> None:
    record(task="held", key=key, event="start")
    while not (RECORDS / "release").exists():  # noqa: ASYNC110 - another process creates the file
        await asyncio.sleep(0.02)
    record(task="held", key=key, event="done")


@worker.task(queue="long", lease_timeout="1s", create_queue=True)
async def long(key: str, seconds: float) -> None:
    record(task="long", key=key, event="start")
    await asyncio.sleep(seconds)
    record(task="long", key=key, event="done")


_crowd = 0
_crowd_lock = threading.Lock()
_crowds: dict[int, threading.Barrier] = {}


@worker.task(queue="crowd", create_queue=True)
def crowd(key: str, limit: int) -> None:
    """A sync task (the thread pool): counts the runs at once, and waits for ``limit`` of them to run
    together (or ``WAIT_S``), so that a limit too high would show."""
    global _crowd
    with _crowd_lock:
        _crowd += 1
        record(task="crowd", key=key, running=_crowd)
        barrier = _crowds.setdefault(limit, threading.Barrier(limit))
    try:
        barrier.wait(WAIT_S)
    except threading.BrokenBarrierError:
        barrier.reset()
    finally:
        with _crowd_lock:
            _crowd -= 1


_pair = 0
_pairs = asyncio.Barrier(2)


@worker.task(queue="pair", concurrency=2, create_queue=True)
async def pair(key: str) -> None:
    """An async task limited to 2 runs at once: counts them, and waits for 2 to run together."""
    global _pair
    _pair += 1
    record(task="pair", key=key, running=_pair)
    try:
        async with asyncio.timeout(WAIT_S):
            await _pairs.wait()
    except TimeoutError:
        await _pairs.reset()
    finally:
        _pair -= 1


class Order(msgspec.Struct):
    number: int
    lines: list[str]


@worker.task(queue="traced", create_queue=True)
def traced(key: str, order: Order, due: datetime) -> None:
    record(
        task="traced",
        key=key,
        traceparent=current_traceparent(),
        types=[type(order).__name__, type(due).__name__],
        order=order.number,
    )


@worker.task(queue="proven", retry=backoff.fixed(0))
def proven(key: str, failures: int) -> None:
    """On a queue the test makes with lease tokens required: completing and retrying need them."""
    before = runs("proven", key)
    record(task="proven", key=key)
    if before < failures:
        raise RuntimeError(f"failure {before + 1} of {failures}")


@worker.periodic("* * * * * *", args=("eu",), schedule="every-second", max_attempts=1)
def ticking(region: str) -> None:
    item = current_item()
    assert item is not None
    record(task="ticking", key=region, reference=item.reference)


@worker.task(queue="argless", max_attempts=1, create_queue=True)
def argless() -> None:
    record(task="argless", key="")


@worker.task(queue="limited", rate_limit="1/h", rate_key=lambda customer, n: customer, create_queue=True)
def limited(customer: str, n: int) -> None:
    record(task="limited", key=f"{customer}-{n}")


@worker.task(queue="ranked", priority="normal", retry=backoff.fixed(0), create_queue=True)
def ranked(key: str, fail_once: bool = False) -> None:
    """Priority levels: ``fail_once`` fails its first attempt, to show a retry keeps its level."""
    record(task="ranked", key=key)
    if fail_once and current_attempt() == 1:
        raise RuntimeError("the first attempt fails")


@worker.task(queue="shared", rate_limit="1/h", rate_scope="cluster", create_queue=True)
def shared(n: int) -> None:
    """A cluster-wide limit: one start an hour among all the worker processes."""
    record(task="shared", key=str(n))
