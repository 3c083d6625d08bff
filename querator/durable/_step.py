"""``Step``: a function whose result a workflow records, its retry policy, and how values become bytes."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

from querator.client import AsyncClient
from querator.worker import Permanent, RateLimit, Serializer, Signature, span, take_shared, typed
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
    concurrency: int = 0
    """Runs at once in each worker process (0: no limit of its own)."""
    rate_limit: RateLimit | None = None
    rate_key: Callable[..., str] | None = None
    rate_scope: str = "process"


class Step(Generic[P, R]):
    """A step function registered with a ``Durable`` app: call it to run it here and now, or pass it to
    ``Context.run`` in a workflow to have its result recorded."""

    def __init__(self, fn: Callable[P, R], options: StepOptions, serializer: Serializer) -> None:
        self.fn = fn
        self.options = options
        self.serializer = serializer
        self.signature = Signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self._slots = asyncio.Semaphore(options.concurrency) if options.concurrency else None
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.options.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Step {self.name}>"

    async def admitted(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        client: AsyncClient,
        queue: str,
        stopped: Callable[[], Awaitable[None]],
    ) -> bool:
        """Waits for the step's rate limit's next start, then for a free run of its concurrency, which the
        caller holds until ``release``; False, holding nothing, when ``stopped`` (the worker's warm stop)
        comes first, so that a wait never holds a stop up. Waiting holds what the caller holds: a
        workflow's claim or a dispatched step's lease, both renewed meanwhile. ``client`` and ``queue``:
        where a cluster-wide limit is kept.

        Raises:
            Exception: the ``rate_key``'s, or the server's refusal of the limit (the run fails).
        """
        if self.options.rate_limit is None and self._slots is None:
            return True
        admit = asyncio.ensure_future(self._admit(args, kwargs, client, queue))
        stop = asyncio.ensure_future(stopped())
        try:
            await asyncio.wait([admit, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            admit.cancel()
        await asyncio.gather(admit, return_exceptions=True)
        if admit.cancelled():
            return False
        admit.result()  # raises what the limit raised
        return True

    async def _admit(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], client: AsyncClient, queue: str
    ) -> None:
        limit = self.options.rate_limit
        if limit is not None:
            key = "" if self.options.rate_key is None else str(self.options.rate_key(*args, **kwargs))
            if self.options.rate_scope == "cluster":
                await take_shared(client, queue, limit, key, self.name)
            else:
                await limit.take(key)
        if self._slots is not None:
            await self._slots.acquire()

    def release(self) -> None:
        """Ends a run ``admitted`` let start."""
        if self._slots is not None:
            self._slots.release()

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
