"""Declaring durable workflows and steps: what ``Durable`` refuses before anything runs."""

from __future__ import annotations

import pytest

from querator.durable import Context, Durable


def test_a_workflow_must_be_async_and_names_are_unique() -> None:
    app = Durable("http://localhost:1")

    def sync_workflow(ctx: Context) -> None: ...

    with pytest.raises(TypeError, match=r"workflow .*sync_workflow must be an async function"):
        app.workflow()(sync_workflow)

    @app.workflow(name="w")
    async def first(ctx: Context) -> None: ...

    with pytest.raises(ValueError, match="a workflow named 'w' is registered already"):

        @app.workflow(name="w")
        async def second(ctx: Context) -> None: ...

    @app.step(name="s")
    def step() -> None: ...

    with pytest.raises(ValueError, match="a step named 's' is registered already"):
        app.step(name="s")(step)
    with pytest.raises(ValueError, match="max_attempts cannot be negative"):
        app.step(name="t", max_attempts=-1)(step)


def test_start_refuses_arguments_the_workflow_does_not_take() -> None:
    app = Durable("http://localhost:1")

    @app.workflow()
    async def two(ctx: Context, a: int, b: int) -> int:
        return a + b

    assert two.input((1, 2), {}) == b'{"args":[1,2],"kwargs":{}}'
    with pytest.raises(TypeError, match="missing a required argument: 'b'"):
        two.input((1,), {})


def test_a_workflow_registers_with_or_without_parentheses() -> None:
    """A bare ``@app.workflow`` registered nothing and left the name bound to the decorator (issue 45)."""
    app = Durable("http://localhost:1")

    @app.workflow
    async def bare(ctx: Context) -> None: ...

    @app.workflow("named")
    async def positional(ctx: Context) -> None: ...

    assert app.workflow_of(bare).name == bare.name == f"{__name__}.{bare.fn.__qualname__}"
    assert app.workflow_of("named") is positional
    with pytest.raises(TypeError, match="give a workflow's name once"):
        app.workflow("a", name="b")
