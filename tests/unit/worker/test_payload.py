"""The worker's pure parts: back-off policies, the envelope, typed arguments, the trace context."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import pydantic
import pytest

from querator.worker import (
    EnvelopeError,
    JsonSerializer,
    _trace,
    backoff,
    current_traceparent,
    use_traceparent,
)
from querator.worker._envelope import pack, unpack
from querator.worker._serializer import Signature, typed
from querator.worker._trace import outgoing, span

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_exponential_backoff_grows_to_its_cap() -> None:
    policy = backoff.exponential(first="1s", cap=10, jitter=False)
    assert [policy(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    jittered = backoff.exponential(first=4, cap=100)
    assert all(2 <= jittered(1) <= 4 for _ in range(50))  # never less than half its wait
    assert backoff.fixed("1m")(5) == 60
    with pytest.raises(ValueError):
        backoff.exponential(first=-1)


class Order(msgspec.Struct):
    number: int


@dataclass
class Line:
    sku: str


def task(order: Order, lines: list[Line], due: datetime, *rest: int, note: str = "") -> None: ...


def test_arguments_round_trip_typed() -> None:
    json = JsonSerializer()
    due = datetime(2030, 1, 1, tzinfo=UTC)
    data = pack(json, [Order(7), [Line("a")], due, 1, 2], {"note": "n"}, {"traceparent": PARENT})
    args, kwargs, trace = unpack(json, data)
    call = Signature(task).convert(args, kwargs)
    assert call.args == (Order(7), [Line("a")], due, 1, 2) and call.kwargs == {"note": "n"}
    assert trace == {"traceparent": PARENT}


class Msgpack:
    """A ``Serializer`` of the user's own."""

    content_type = "application/msgpack"

    def dumps(self, value: Any) -> bytes:
        return msgspec.msgpack.encode(value)

    def loads(self, data: bytes) -> Any:
        return msgspec.msgpack.decode(data)


def test_a_serializer_of_ones_own_carries_the_call() -> None:
    due = datetime(2030, 1, 1, tzinfo=UTC)
    data = pack(Msgpack(), [Order(7), [Line("a")], due], {}, {"traceparent": PARENT})
    with pytest.raises(EnvelopeError):
        unpack(JsonSerializer(), data)  # not JSON: each task decodes with its own serializer
    args, kwargs, trace = unpack(Msgpack(), data)
    assert Signature(task).convert(args, kwargs).args == (Order(7), [Line("a")], due)
    assert trace == {"traceparent": PARENT}


class Address(pydantic.BaseModel):
    city: str
    since: datetime


def move(to: Address, *, notes: list[Address]) -> None: ...


def test_pydantic_models_round_trip_typed() -> None:
    json = JsonSerializer()
    home = Address(city="Oslo", since=datetime(2020, 5, 1, tzinfo=UTC))
    args, kwargs, _ = unpack(json, pack(json, [home], {"notes": [home]}, {}))
    call = Signature(move).convert(args, kwargs)
    assert call.args == (home,) and call.kwargs == {"notes": [home]}
    assert type(call.args[0]) is Address and type(call.kwargs["notes"][0]) is Address
    # pydantic's refusal comes as msgspec's, which makes a run undecodable.
    with pytest.raises(msgspec.ValidationError, match="city"):
        Signature(move).convert([{"since": "2020-05-01T00:00:00Z"}], {"notes": []})


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b'{"args": {}}'])
def test_a_payload_that_is_not_an_envelope_is_refused(payload: bytes) -> None:
    with pytest.raises(EnvelopeError):
        unpack(JsonSerializer(), payload)


@pytest.mark.parametrize("serializer", [JsonSerializer(), Msgpack()])
def test_an_empty_payload_is_a_call_without_arguments(serializer: Any) -> None:
    """What a schedule made without a payload (``querator schedules create``) produces: it was refused as
    not an envelope, and every tick dead-lettered (issue 45)."""
    assert unpack(serializer, b"") == ([], {}, {})


def test_arguments_that_do_not_fit_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        Signature(task).convert([{"number": "x"}, [], "2030-01-01T00:00:00Z"], {})
    with pytest.raises(TypeError):
        Signature(task).convert([], {"unknown": 1})


@pytest.fixture
def without_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace context as in a process without OpenTelemetry (the tests' venv has it)."""
    for name in ("propagate", "trace", "_tracer"):
        monkeypatch.setattr(_trace, name, None)


@pytest.mark.usefixtures("without_opentelemetry")
def test_a_run_continues_the_producers_trace() -> None:
    assert outgoing() == {} and current_traceparent() is None
    with use_traceparent(PARENT):
        assert outgoing() == {"traceparent": PARENT}
    with span("run", {}, {"traceparent": PARENT}):
        child = current_traceparent()
        assert child is not None and child.split("-")[1] == PARENT.split("-")[1] and child != PARENT
    with span("run", {}, {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}):
        assert current_traceparent() is None  # an invalid parent starts no trace
    with pytest.raises(ValueError):
        use_traceparent("nonsense").__enter__()


def test_with_opentelemetry_a_run_is_a_consumer_span_of_the_producers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, format_span_id, format_trace_id

    spans = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    # This provider, not the process's global one (set once per process, and shared by every test).
    monkeypatch.setattr(_trace, "_tracer", provider.get_tracer("querator.worker"))
    with provider.get_tracer("producer").start_as_current_span("checkout") as producer:
        carrier = outgoing()
    sent = producer.get_span_context()
    trace_id, flags = format_trace_id(sent.trace_id), f"{sent.trace_flags:02x}"
    assert carrier == {"traceparent": f"00-{trace_id}-{format_span_id(sent.span_id)}-{flags}"}
    with span("send process", {"messaging.destination.name": "emails"}, carrier):
        inside = current_traceparent()
    [_, run] = spans.get_finished_spans()
    assert (run.name, run.kind, run.attributes) == (
        "send process",
        SpanKind.CONSUMER,
        {"messaging.destination.name": "emails"},
    )
    assert run.parent is not None and (run.parent.trace_id, run.parent.span_id) == (
        sent.trace_id,
        sent.span_id,
    )
    assert run.context.trace_id == sent.trace_id
    assert inside == f"00-{trace_id}-{format_span_id(run.context.span_id)}-{flags}"  # what its tasks carry on


def test_values_annotated_object_arrive_as_they_came() -> None:
    """A result annotated ``dict[str, object]`` (docs/examples/durable_checkout.py) failed to convert
    before: msgspec asked the hook for ``object``, which it refused."""
    value = {"receipt": "r-1", "parts": ["a", "b"], "n": 3}
    assert typed(value, dict[str, object]) == value
