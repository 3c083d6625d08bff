"""``Step``: a function whose result a workflow records, its retry policy, and how values become bytes."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

from querator.worker import Permanent, Serializer, Signature, span, typed
from querator.worker.backoff import Policy

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class StepOptions:
    """What ``Durable.step`` was told; see its documentation."""

    name: str
    max_attempts: int
    retry: Policy
    permanent: tuple[type[BaseException], ...]
    timeout_s: float | None


class Step(Generic[P, R]):
    """A step function registered with a ``Durable`` app: call it to run it here and now, or pass it to
    ``Context.run`` in a workflow to have its result recorded."""

    def __init__(self, fn: Callable[P, R], options: StepOptions, serializer: Serializer) -> None:
        self.fn = fn
        self.options = options
        self.serializer = serializer
        self.signature = Signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.options.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Step {self.name}>"

    async def invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any], attributes: dict[str, Any]) -> Any:
        """Runs the function once, in a span ``<name> step`` with ``attributes`` (a child of the workflow's
        turn): a coroutine here, a plain function in the default thread pool (in this context, so that
        its own spans and enqueues join the trace); within the step's timeout."""
        call: Awaitable[Any]
        with span(f"{self.name} step", attributes):
            if self.is_async:
                call = cast("Awaitable[Any]", self.fn(*args, **kwargs))
            else:
                run = functools.partial(contextvars.copy_context().run, self.fn, *args, **kwargs)
                call = asyncio.get_running_loop().run_in_executor(None, run)
            return await asyncio.wait_for(call, self.options.timeout_s)

    def gives_up(self, error: BaseException, attempts: int) -> bool:
        """Whether ``error`` on attempt ``attempts`` is the step's last: permanent, or out of attempts."""
        if isinstance(error, (Permanent, *self.options.permanent)):
            return True
        return bool(self.options.max_attempts) and attempts >= self.options.max_attempts

    def encode(self, value: Any) -> bytes:
        return self.serializer.dumps(value)

    def decode(self, data: bytes) -> Any:
        """A recorded result as the step's return annotation says (a replay gets what the run got)."""
        return decode(self.serializer, data, self.signature.returns)


def step_attributes(workflow_id: str, seq: int, attempt: int) -> dict[str, Any]:
    """The attributes of a step run's span."""
    return {"querator.workflow.id": workflow_id, "querator.step.seq": seq, "querator.step.attempt": attempt}


def decode(serializer: Serializer, data: bytes, annotation: Any) -> Any:
    return typed(serializer.loads(data), annotation) if data else None
