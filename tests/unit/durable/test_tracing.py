"""A workflow's turns and steps are OpenTelemetry spans of the trace it was started in (docs/durable.md,
"Tracing"), on a node in the test's process (querator.testing)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from querator.durable import Context, Durable
from querator.testing import Node
from querator.worker import _trace, use_traceparent


async def test_turns_and_steps_are_spans_of_the_trace_the_workflow_was_started_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    # This provider, not the process's global one (set once per process, and shared by every test).
    monkeypatch.setattr(_trace, "_tracer", provider.get_tracer("querator.worker"))
    app = Durable("http://unused.invalid")
    inner: list[str | None] = []

    @app.step()
    async def add(x: int, y: int) -> int:
        return x + y

    @app.step()
    def double(x: int) -> int:  # a thread of the pool: the step's span is its context there too
        inner.append(_trace.current_traceparent())
        return 2 * x

    @app.workflow()
    async def flow(ctx: Context, x: int) -> list[int]:
        a = await ctx.run(add, x, 1)
        b = await ctx.run(double, a)
        c, d = await ctx.gather(ctx.run(add, b, 1), ctx.run(add, b, 2))  # dispatched as task items
        return [a, b, c, d]

    async with Node() as node, node.running(app):
        with provider.get_tracer("caller").start_as_current_span("checkout") as caller:
            handle = await app.start(flow, 1, workflow_id="traced")
        assert await handle.result(timeout=timedelta(seconds=30)) == [2, 4, 5, 6]
    started = caller.get_span_context()
    spans = exported.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def named(name: str) -> list[Any]:
        return [s for s in spans if s.name == name]

    turns = named(f"{flow.name} workflow")
    assert turns, [s.name for s in spans]
    for turn in turns:
        assert turn.context.trace_id == started.trace_id
        assert turn.parent is not None and turn.parent.span_id == started.span_id
        assert turn.attributes["querator.workflow.id"] == "traced"
    steps = named(f"{add.name} step") + named(f"{double.name} step")
    assert sorted((s.name == f"{add.name} step", s.attributes["querator.step.seq"]) for s in steps) == [
        (False, 2),
        (True, 1),
        (True, 3),
        (True, 4),
    ]
    for step in steps:
        assert step.context.trace_id == started.trace_id
        ancestors = []
        parent = step.parent
        while parent is not None and parent.span_id in by_id:
            ancestors.append(by_id[parent.span_id].name)
            parent = by_id[parent.span_id].parent
        # Run in the turn (seq 1, 2), or by the task item the turn dispatched (seq 3, 4).
        assert f"{flow.name} workflow" in ancestors, (step.name, ancestors)
    [double_step] = named(f"{double.name} step")
    ctx = double_step.context
    assert inner == [f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"]


def test_an_input_carries_the_trace_it_was_made_in_and_a_foreign_one_none() -> None:
    app = Durable("http://unused.invalid")

    @app.workflow()
    async def flow(ctx: Context, x: int) -> int:
        return x

    definition = app.workflow_of(flow)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with use_traceparent(parent):
        data = definition.input((1,), {})
    assert definition.trace(data) == {"traceparent": parent}
    assert definition.trace(definition.input((1,), {})) == {}  # started outside a trace
    # Runs started by other code: no trace, or no envelope at all (the turn reports the bad input).
    for foreign in (b'{"args": [1]}', b'{"args": [1], "trace": "x"}', b"not json", b"[1]", b""):
        assert definition.trace(foreign) == {}, foreign
