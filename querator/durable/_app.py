"""``Durable``: the registry of workflows and steps, how callers start and reach workflows, and the
worker that runs them."""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from querator.client import AsyncClient, Duration, go_duration, seconds_of
from querator.clock import SystemClock
from querator.durable._activation import activate, run_step
from querator.durable._errors import UpdateFailed, UpdateTimeout, WorkflowFailed
from querator.durable._lease import Claims
from querator.durable._replayer import Replayer
from querator.durable._step import Step, StepOptions, decode
from querator.wire import messages as m
from querator.wire.search import SearchValue
from querator.wire.workflows import CANCELLED, COMPLETED, DONE, ERROR, FAILED, child_id
from querator.worker import (
    JsonSerializer,
    Serializer,
    Signature,
    Worker,
    backoff,
    check_level,
    current_item,
    current_traceparent,
    level_queue,
    rate_limit_of,
)

if TYPE_CHECKING:
    from querator.durable._context import ChildCall, Context

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "durable"
DEFAULT_STEP_ATTEMPTS = 3
DEFAULT_STEP_RETRY = backoff.exponential(first="1s", cap="1m")
SCHEDULED_START = "querator.durable.start"
"""The worker task a schedule's tick runs to start a workflow (``Durable.schedule``)."""
QUEUE_EXPIRE_TIMEOUT = "2562047h"
"""The expire timeout of the queue the app makes: the longest a queue takes (Go's longest duration in
whole hours, 292 years), so that no activation, a workflow's only way forward, is dropped while its
workers are away (issue 46; docs/durable.md, "The task queue")."""
RESULT_POLL = 15 * 60.0
"""Seconds one ``workflows.result`` call may wait (the server's longest request_timeout)."""
QUEUE_PARTITIONS = 4
"""The partitions of the task queue the app makes (docs/durable.md, "The task queue")."""


class WorkflowDef:
    """A workflow function registered with a ``Durable`` app (what ``@app.workflow()`` returns); pass it
    to ``Durable.start`` or ``Context.child``."""

    def __init__(self, app: Durable, fn: Callable[..., Any], name: str) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.signature = Signature(fn, skip=1)
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"<Workflow {self.name}>"

    def input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """The run's input: its arguments, and the trace context it is started in (its turns and steps
        are spans of that trace)."""
        traceparent = current_traceparent()
        return self._envelope(args, kwargs, {"traceparent": traceparent} if traceparent else {})

    def next_input(self, before: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        """The input of the run a continue-as-new starts: its arguments, in the trace of the run
        ``before`` (whose input it was), so every run of the workflow is one trace."""
        return self._envelope(args, kwargs, self.trace(before))

    def _envelope(self, args: tuple[Any, ...], kwargs: dict[str, Any], trace: dict[str, str]) -> bytes:
        self.signature.convert(list(args), kwargs)  # a call that cannot bind fails here, not in a worker
        envelope: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
        if trace:
            envelope["trace"] = trace
        return self.app.serializer.dumps(envelope)

    def trace(self, data: bytes) -> dict[str, str]:
        """The trace context of the run whose input is ``data``: empty if it was started outside a trace,
        or by code that does not write one."""
        try:
            envelope = self.app.serializer.loads(data) if data else {}
        except Exception:
            return {}  # the turn fails the run for it, with the reason
        trace = envelope.get("trace") if isinstance(envelope, dict) else None
        return {str(k): str(v) for k, v in trace.items()} if isinstance(trace, dict) else {}

    def arguments(self, ctx: Context) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The workflow's own arguments, typed by its annotations."""
        envelope = self.app.serializer.loads(ctx.input) if ctx.input else {}
        bound = self.signature.convert(envelope.get("args", []), envelope.get("kwargs", {}))
        return bound.args, bound.kwargs

    def encode(self, value: Any) -> bytes:
        return self.app.serializer.dumps(value)

    def decode(self, data: bytes) -> Any:
        return decode(self.app.serializer, data, self.signature.returns)


class WorkflowHandle:
    """A started workflow, by id: its result, its state, and how to signal or cancel it."""

    def __init__(self, app: Durable, workflow_id: str, definition: WorkflowDef | None = None) -> None:
        self.app = app
        self.workflow_id = workflow_id
        self._definition = definition

    async def result(self, timeout: Duration | None = None) -> Any:
        """The workflow's result once it completed (typed by its return annotation).

        Raises:
            WorkflowFailed: it failed or was cancelled.
            TimeoutError: ``timeout`` passed first.
        """
        client = await self.app.client()
        clock = SystemClock()
        deadline_s = None if timeout is None else clock.monotonic() + seconds_of(timeout)
        while True:
            wait_s = (
                RESULT_POLL
                if deadline_s is None
                else max(0.01, min(RESULT_POLL, deadline_s - clock.monotonic()))
            )
            info = await client.workflow_result(
                self.workflow_id, timedelta(seconds=wait_s), namespace=self.app.namespace
            )
            if info.status == COMPLETED:
                definition = self._definition or self.app.workflows.get(info.name)
                return (
                    definition.decode(info.result)
                    if definition
                    else decode(self.app.serializer, info.result, Any)
                )
            if info.status in (FAILED, CANCELLED):
                raise WorkflowFailed(self.workflow_id, info.status, info.error)
            if deadline_s is not None and clock.monotonic() >= deadline_s:
                raise TimeoutError(f"workflow {self.workflow_id} is still running")

    async def info(self) -> m.WorkflowInfo:
        client = await self.app.client()
        return await client.workflow_info(self.workflow_id, namespace=self.app.namespace)

    async def query(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """``Durable.query`` of this workflow."""
        return await self.app.query(self.workflow_id, name, *args, **kwargs)

    async def signal(self, name: str, value: Any = None, *, signal_id: str | None = None) -> None:
        await self.app.signal(self.workflow_id, name, value, signal_id=signal_id)

    async def update(
        self, name: str, /, *args: Any, update_id: str | None = None, timeout: Duration = "30s"
    ) -> Any:
        """``Durable.update`` of this workflow."""
        return await self.app.update(self.workflow_id, name, *args, update_id=update_id, timeout=timeout)

    async def cancel(self) -> None:
        await self.app.cancel(self.workflow_id)


class Durable:
    """Durable workflows on a Querator server: declare steps and workflows, start them, run workers.

    Args:
        endpoint: the server (default: ``QUERATOR_ENDPOINT``, else ``http://localhost:2319``).
        queue: the task queue of activations and dispatched steps (made when missing).
        api_key: the server's API key, if it needs one (default: ``QUERATOR_API_KEY``).
        serializer: how arguments and results become bytes (JSON by default).
        concurrency: activations and steps run at once by this process's worker.
        claim_timeout: how long a worker's claim on a workflow holds without renewal (it is renewed while
            the worker runs it): how soon another worker takes over from a crashed one.
        namespace: the namespace of ``queue``, where the app's workflow ids are ("": ``_system``; with
            tenancy, docs/durable.md "Namespaces").
        reach_owners: as ``Worker``'s.
        partitions: the task queue's partitions when the worker makes it (a queue that exists keeps
            its own): how many of its leases and completes run at once (docs/durable.md).
        version: this code's version, recorded on each run it starts: its workers claim only runs of
            that version (and runs of none), leaving the others to workers of theirs; "" (the default)
            starts runs any worker claims and claims runs of every version (docs/durable.md, "App
            versions").
        priorities: give runs priority levels (``start(..., priority=)``): the queue of each level,
            ``<queue>.high`` and ``<queue>.low`` beside ``queue``, is made with it, and the workers lease
            the higher levels first (docs/durable.md, "Priorities"). Off by default: each level is a
            queue the workers also poll.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        api_key: str | None = None,
        serializer: Serializer | None = None,
        concurrency: int = 16,
        claim_timeout: Duration = "30s",
        namespace: str = "",
        reach_owners: bool = False,
        partitions: int = QUEUE_PARTITIONS,
        version: str = "",
        priorities: bool = False,
    ) -> None:
        self.serializer = serializer or JsonSerializer()
        self.version = version
        self.priorities = priorities
        self.queue = queue
        self.namespace = namespace
        self.claim_timeout = go_duration(claim_timeout)
        self.steps: dict[str, Step[..., Any]] = {}
        self.workflows: dict[str, WorkflowDef] = {}
        self.worker = Worker(
            endpoint,
            api_key=api_key,
            concurrency=concurrency,
            serializer=self.serializer,
            reach_owners=reach_owners,
        )
        task = functools.partial(
            self.worker.task,
            queue=queue,
            max_attempts=0,
            create_queue=True,
            dead_queue="",
            expire_timeout=QUEUE_EXPIRE_TIMEOUT,
            partitions=partitions,
            priority="normal" if priorities else None,  # the level queues, leased highest first
        )
        self.claims = Claims(self.claim_timeout, version)
        """The claims its worker's leases got with their activations (docs/adr/0071)."""
        self.worker.leasers[queue] = self.claims
        self._activation = task(name="querator.durable.run", lease_timeout=self.claim_timeout)(self._activate)
        task(name="querator.durable.step", lease_timeout=self.claim_timeout)(self._run_step)
        task(name=SCHEDULED_START, lease_timeout=self.claim_timeout)(self._start_scheduled)

    async def _activate(self, workflow_id: str) -> None:
        await activate(self, workflow_id)

    async def _run_step(
        self,
        workflow_id: str,
        seq: int,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        app_version: str = "",
    ) -> None:
        await run_step(self, workflow_id, seq, name, args, kwargs, app_version)

    async def _start_scheduled(self, workflow: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        """A schedule's tick (``schedule``): starts the workflow with the tick's item reference as its id,
        ``<schedule>@<tick time>``, so a tick whose item runs twice starts one workflow."""
        item = current_item()
        assert item is not None
        definition = self.workflow_of(workflow)
        client = await self.client()
        await client.start_workflow(
            item.reference or item.id,
            definition.name,
            self.queue,
            definition.input(tuple(args), kwargs),
            encoding=self.serializer.content_type,
            app_version=self.version,
        )

    async def client(self) -> AsyncClient:
        """The client of the running loop, with the task queue made."""
        return await self.worker.client_for(self._activation)

    # -- declaring -------------------------------------------------------------------------------------

    @overload
    def step(self, fn: Callable[P, R], /) -> Step[P, R]: ...

    @overload
    def step(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        max_attempts: int = DEFAULT_STEP_ATTEMPTS,
        retry: backoff.Policy = DEFAULT_STEP_RETRY,
        permanent: Collection[type[BaseException]] = (),
        timeout: Duration | None = None,
        concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_key: Callable[..., str] | None = None,
        rate_scope: str = "process",
    ) -> Callable[[Callable[P, R]], Step[P, R]]: ...

    def step(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        max_attempts: int = DEFAULT_STEP_ATTEMPTS,
        retry: backoff.Policy = DEFAULT_STEP_RETRY,
        permanent: Collection[type[BaseException]] = (),
        timeout: Duration | None = None,
        concurrency: int | None = None,
        rate_limit: str | None = None,
        rate_key: Callable[..., str] | None = None,
        rate_scope: str = "process",
    ) -> Step[P, R] | Callable[[Callable[P, R]], Step[P, R]]:
        """Registers a function (sync or async) as a step, as a decorator.

        Args:
            name: the step's name in journals (default: the function's qualified name). Renaming a step
                makes running workflows that recorded it fail with ``NonDeterminism``.
            max_attempts: runs before the step fails for good (0: no limit).
            retry: the wait between attempts (``querator.worker.backoff``); the workflow sleeps durably
                meanwhile.
            permanent: exceptions that fail the step at once, as ``querator.worker.Permanent`` does.
            timeout: an attempt that takes longer fails.
            concurrency: runs of the step at once in each worker process (a workflow's run waits for a
                free one holding its claim).
            rate_limit: at most this many starts of the step, ``"<n>/s"``, ``"<n>/m"`` or ``"<n>/h"``,
                evenly spaced, in each worker process, or across the cluster with ``rate_scope="cluster"``
                (kept by the server for the app's queue), as a worker task's (docs/worker.md, "Rate
                limits"); ``rate_key``: a function of the step's arguments whose result is the key the
                limit applies to on its own (a customer, an API host).

        Raises:
            ValueError: a negative ``max_attempts``, a ``concurrency`` below 1, a bad rate limit.
        """
        rate = rate_limit_of(rate_limit, rate_key, rate_scope, "durable")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"durable: concurrency must be at least 1, not {concurrency}")

        def register(function: Callable[P, R]) -> Step[P, R]:
            step_name = name or f"{function.__module__}.{function.__qualname__}"
            if step_name in self.steps:
                raise ValueError(f"durable: a step named {step_name!r} is registered already")
            if max_attempts < 0:
                raise ValueError("durable: max_attempts cannot be negative")
            options = StepOptions(
                step_name,
                max_attempts,
                retry,
                tuple(permanent),
                None if timeout is None else seconds_of(timeout),
                concurrency or 0,
                rate,
                rate_key,
                rate_scope,
            )
            step = Step(function, options, self.serializer)
            self.steps[step_name] = step
            return step

        return register if fn is None else register(fn)

    @overload
    def workflow(self, fn: Callable[..., Any], /) -> WorkflowDef: ...

    @overload
    def workflow(
        self, fn: str | None = None, /, *, name: str | None = None
    ) -> Callable[[Callable[..., Any]], WorkflowDef]: ...

    def workflow(
        self, fn: Callable[..., Any] | str | None = None, /, *, name: str | None = None
    ) -> WorkflowDef | Callable[[Callable[..., Any]], WorkflowDef]:
        """Registers an async function taking a ``Context`` first as a workflow, as a decorator:
        ``@app.workflow``, ``@app.workflow()`` or ``@app.workflow(name="...")`` (also positionally).

        ``name``: its name in records (default: the function's qualified name); workers find its code by it.
        """
        if isinstance(fn, str):
            if name is not None:
                raise TypeError("durable: give a workflow's name once, positionally or as name=")
            name, fn = fn, None

        def register(function: Callable[..., Any]) -> WorkflowDef:
            if not inspect.iscoroutinefunction(function):
                raise TypeError(f"durable: workflow {function.__qualname__} must be an async function")
            workflow_name = name or f"{function.__module__}.{function.__qualname__}"
            if workflow_name in self.workflows:
                raise ValueError(f"durable: a workflow named {workflow_name!r} is registered already")
            definition = self.workflows[workflow_name] = WorkflowDef(self, function, workflow_name)
            return definition

        return register if fn is None else register(fn)

    def workflow_of(self, workflow: Any) -> WorkflowDef:
        if isinstance(workflow, WorkflowDef):
            return workflow
        found = self.workflows.get(str(workflow))
        if found is None:
            raise ValueError(f"durable: {workflow!r} is not a workflow of this app")
        return found

    # -- callers ---------------------------------------------------------------------------------------

    async def start(
        self,
        workflow: Any,
        /,
        *args: Any,
        workflow_id: str | None = None,
        timeout: Duration | None = None,
        priority: str | None = None,
        search_attributes: Mapping[str, SearchValue] | None = None,
        **kwargs: Any,
    ) -> WorkflowHandle:
        """Starts ``workflow(*args, **kwargs)``; returns its handle at once. Starting an id that exists
        returns the existing run (start is idempotent by ``workflow_id``; default: a new id).

        ``timeout`` (at least 1s): past it, counted by the server from the start, the workflow raises
        ``WorkflowTimeout`` at its next durable call (a sleep or wait ends then), its compensations run,
        its children are cancelled and it ends failed. ``priority`` (an app made with
        ``priorities=True``): ``"high"``, ``"normal"`` or ``"low"``, the level of every activation and
        dispatched step of the run, and of its children; workers take higher levels first.
        ``search_attributes``: the run's first ones (docs/durable.md, "Search attributes"); ``list``
        finds runs by them. ``workflow_id``, ``timeout``, ``priority`` and ``search_attributes`` are the
        app's: a workflow's own arguments of those names cannot be passed by keyword here.

        Raises:
            ValueError: a priority on an app without priorities, or not one of the levels.
        """
        definition = self.workflow_of(workflow)
        workflow_id = workflow_id or str(uuid.uuid4())
        if priority is not None and not self.priorities:
            raise ValueError("durable: a run's priority needs an app made with priorities=True")
        queue = self.queue if priority is None else level_queue(self.queue, check_level(priority, "durable"))
        client = await self.client()
        await client.start_workflow(
            workflow_id,
            definition.name,
            queue,
            definition.input(args, kwargs),
            encoding=self.serializer.content_type,
            timeout=timeout,
            app_version=self.version,
            search_attributes=search_attributes,
        )
        return WorkflowHandle(self, workflow_id, definition)

    async def fork(
        self, workflow_id: str, from_step: int, *, new_workflow_id: str | None = None
    ) -> WorkflowHandle:
        """Starts a new workflow (``new_workflow_id``, default a new id) with the input of
        ``workflow_id`` and its journal before seq ``from_step`` (DBOS's fork): the steps recorded there
        are not run again, the ones from ``from_step`` run with the code the workers have now. The
        original is left as it is.

        Raises:
            InvalidOption: ``from_step`` cannot start a run (``from step is invalid; ...``).
        """
        new_id = new_workflow_id or str(uuid.uuid4())
        client = await self.client()
        await client.fork_workflow(workflow_id, from_step, new_workflow_id=new_id, namespace=self.namespace)
        return WorkflowHandle(self, new_id)

    async def start_child(self, ctx: Context, call: ChildCall) -> None:
        client = await self.client()
        await client.start_workflow(
            child_id(ctx.workflow_id, call.seq),
            call.workflow.name,
            ctx.queue,  # the parent's level
            call.workflow.input(call.args, call.kwargs),
            encoding=self.serializer.content_type,
            parent_id=ctx.workflow_id,
            parent_seq=call.seq,
            app_version=ctx.app_version,  # the parent's, run by a worker of no version too
        )

    async def schedule(
        self,
        name: str,
        workflow: Any,
        cron: str,
        /,
        *args: Any,
        time_zone: str = "",
        catch_up: str = "",
        jitter: Duration | None = None,
        **kwargs: Any,
    ) -> m.ScheduleInfo:
        """Creates the cron schedule ``name`` (docs/schedules.md) that starts ``workflow(*args, **kwargs)``
        at each tick, once per tick, or replaces the definition of the schedule of that name (its paused
        state and last tick stay), so code can declare it at each start: the tick's item (in this app's
        queue) is run by this app's workers, which start the workflow with the id ``<name>@<tick time>``.

        Raises:
            InvalidOption: as ``AsyncClient.create_schedule`` (a bad expression or zone).
        """
        definition = self.workflow_of(workflow)
        definition.input(args, kwargs)  # a call that cannot bind fails now, not at every tick
        client = await self.client()
        payload = self.serializer.dumps({"args": [definition.name, list(args), kwargs]})
        return await client.put_schedule(
            m.ScheduleInfo(
                name=name,
                cron=cron,
                queue_name=self.queue,
                time_zone=time_zone,
                catch_up=catch_up,
                jitter="" if jitter is None else go_duration(jitter),
                payload=payload,
                kind=SCHEDULED_START,
                encoding=self.serializer.content_type,
            )
        )

    async def list(
        self,
        status: str = "",
        *,
        search: Mapping[str, SearchValue] | None = None,
        pivot: str = "",
        limit: int = 0,
    ) -> list[m.WorkflowInfo]:
        """The runs of this app's namespace (of ``status``, "" any) holding every search attribute of
        ``search`` (equal as text: ``{"amount": 30}`` finds ``"30"``), by id from ``pivot``; page on from
        the last id returned."""
        client = await self.client()
        return await client.list_workflows(
            status, pivot=pivot, limit=limit, namespace=self.namespace, search=search
        )

    def handle(self, workflow_id: str) -> WorkflowHandle:
        """The handle of a workflow started elsewhere."""
        return WorkflowHandle(self, workflow_id)

    async def signal(
        self, workflow_id: str, name: str, value: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Sends the signal ``name`` with ``value`` to a workflow: kept until it waits for one."""
        client = await self.client()
        await client.signal_workflow(
            workflow_id, name, self.serializer.dumps(value), signal_id=signal_id, namespace=self.namespace
        )

    async def query(self, workflow_id: str, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """The answer of the query ``name`` of a workflow, running or ended: its journal is read from the
        server and replayed here with this app's code, without running a step or writing anything, and the
        handler its code registered (``Context.on_query``) is called with ``args`` and ``kwargs``
        (docs/durable.md, "Queries"). It costs the caller a replay, and the server one read.

        Raises:
            UnknownQuery: the workflow registers no handler ``name``.
            NonDeterminism: this code does not agree with the workflow's journal.
        """
        client = await self.client()
        info = await client.workflow_journal(workflow_id, namespace=self.namespace)
        return await Replayer(self).query(info, name, *args, **kwargs)

    async def update(
        self,
        workflow_id: str,
        name: str,
        /,
        *args: Any,
        update_id: str | None = None,
        timeout: Duration = "30s",
    ) -> Any:
        """The answer of the update ``name`` of a running workflow: what its handler
        (``Context.on_update``) returned for ``args``, once the workflow took it where it waits and
        recorded it (docs/durable.md, "Updates"; docs/adr/0060). The journal is first replayed here, as
        for a query, and the handler's validator called with ``args``: a refusal raises here, and nothing
        is sent or recorded. ``update_id`` (made here unless given) makes the update count once: called
        again with it (after ``UpdateTimeout``, say), this waits for the same answer without validating
        again.

        Raises:
            UnknownUpdate: the workflow registers no handler ``name``.
            UpdateRejected: the validator raised (nothing recorded).
            UpdateFailed: the handler raised (recorded; the workflow goes on).
            UpdateTimeout: no answer within ``timeout``; the update stays recorded.
            InvalidOption: the workflow is finished, or ended before it took the update.
            NonDeterminism: this code does not agree with the workflow's journal.
        """
        client = await self.client()
        info = await client.workflow_info(workflow_id, namespace=self.namespace)
        if not any(u.id == update_id for u in info.updates):  # a repeat was validated when sent
            await Replayer(self).validate_update(info, name, *args)
        update_id = update_id or uuid.uuid4().hex
        reply = await client.update_workflow(
            workflow_id,
            name,
            self.serializer.dumps(list(args)),
            update_id=update_id,
            timeout=timeout,
            namespace=self.namespace,
        )
        if reply.state == ERROR:
            raise UpdateFailed(name, reply.error)
        if reply.state != DONE:
            raise UpdateTimeout(
                f"update {name} of {workflow_id} is not answered yet; it stays recorded as {update_id}"
            )
        return decode(self.serializer, reply.value, Any)

    async def cancel(self, workflow_id: str) -> None:
        """Cancels a workflow: its compensations run, its children are cancelled, it ends cancelled."""
        await (await self.client()).cancel_workflow(workflow_id, namespace=self.namespace)

    async def resume(self, workflow_id: str) -> None:
        """Runs a workflow that failed on ``NonDeterminism`` again, once its code is fixed: it replays
        its journal with the code the workers have now.

        Raises:
            Conflict: it did not fail that way, or is a child workflow.
        """
        await (await self.client()).resume_workflow(workflow_id, namespace=self.namespace)

    async def terminate(self, workflow_id: str, reason: str = "") -> None:
        """Ends a workflow now, failed with ``Terminated: <reason>``, without a worker: its code and its
        compensations do not run, its unfinished children are terminated too."""
        await (await self.client()).terminate_workflow(workflow_id, reason, namespace=self.namespace)

    async def run(
        self, *, concurrency: int | None = None, metrics_port: int | None = None, handle_signals: bool = True
    ) -> None:
        """Runs this app's worker until ``worker.stop()`` or SIGTERM/SIGINT (as ``querator worker
        module:app`` does)."""
        await self.worker.run(
            concurrency=concurrency, metrics_port=metrics_port, handle_signals=handle_signals
        )

    async def close(self) -> None:
        await self.worker.close()
