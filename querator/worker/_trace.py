"""W3C trace context across the queue: ``enqueue`` carries the caller's ``traceparent`` in the item, and
the run continues that trace.

With OpenTelemetry installed (``opentelemetry-api``), its propagator reads and writes the context and
each run is a span (kind CONSUMER) whose parent is the producer's span; ``span`` makes the spans of
durable workflows' turns and steps too. Without it, the worker keeps the
``traceparent`` itself: a run's is the producer's trace id with a new span id, so tasks enqueued by a
run carry the same trace on (``current_traceparent``, ``use_traceparent``). No hard dependency.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import re
import secrets
from collections.abc import Iterator, Mapping
from typing import Any


def _optional(name: str) -> Any:
    """The module ``name`` if it is installed, else None (imported by name: no hard dependency, and no
    type stubs needed where it is missing)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


propagate = _optional("opentelemetry.propagate")
trace = _optional("opentelemetry.trace")
_tracer = trace.get_tracer("querator.worker") if trace is not None and propagate is not None else None

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("querator_traceparent", default=None)


def valid(traceparent: str) -> bool:
    """Whether ``traceparent`` is a version-00 W3C traceparent with non-zero ids."""
    found = _TRACEPARENT.match(traceparent)
    return found is not None and set(found[1]) != {"0"} and set(found[2]) != {"0"}


def current_traceparent() -> str | None:
    """The trace context this code runs in: OpenTelemetry's current span, else the worker's own."""
    if propagate is not None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if "traceparent" in carrier:
            return carrier["traceparent"]
    return _current.get()


@contextlib.contextmanager
def use_traceparent(traceparent: str) -> Iterator[None]:
    """Makes ``traceparent`` the trace context of tasks enqueued in the block (without OpenTelemetry).

    Raises:
        ValueError: not a W3C traceparent.
    """
    if not valid(traceparent):
        raise ValueError(f"not a W3C traceparent: {traceparent!r}")
    token = _current.set(traceparent)
    try:
        yield
    finally:
        _current.reset(token)


def outgoing() -> dict[str, str]:
    """The trace context to store with an item enqueued now (``traceparent``, and ``tracestate`` if any)."""
    carrier: dict[str, str] = {}
    if propagate is not None:
        propagate.inject(carrier)
    if "traceparent" not in carrier and (own := _current.get()) is not None:
        carrier["traceparent"] = own
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}


@contextlib.contextmanager
def span(name: str, attributes: dict[str, Any], carrier: Mapping[str, str] | None = None) -> Iterator[None]:
    """Runs the block in a span named ``name``: with ``carrier``, in the trace it came with (an
    OpenTelemetry span of kind CONSUMER, whose parent is the carrier's; a carrier without a valid
    traceparent starts none without OpenTelemetry); without, as a child of the current context (kind
    INTERNAL). Without OpenTelemetry, the worker's own context: the same trace, a new span id."""
    if _tracer is not None:
        if carrier is None:
            with _tracer.start_as_current_span(name, attributes=attributes):
                yield
            return
        with _tracer.start_as_current_span(
            name, context=propagate.extract(carrier), kind=trace.SpanKind.CONSUMER, attributes=attributes
        ):
            yield
        return
    incoming = carrier.get("traceparent", "") if carrier is not None else _current.get() or ""
    found = _TRACEPARENT.match(incoming) if valid(incoming) else None
    child = f"00-{found[1]}-{secrets.token_hex(8)}-{found[3]}" if found else None
    token = _current.set(child)
    try:
        yield
    finally:
        _current.reset(token)
