"""``Context``: what a workflow calls to do durable things, answered from its journal on replay.

A workflow function runs from the top at every activation. Each durable call takes the next sequence
number; a call whose entry is recorded returns (or raises) what was recorded, after checking that the
entry is the same kind and name (``NonDeterminism`` otherwise). The first unrecorded call does its work
and records it. A call that must wait (a timer, a signal, dispatched steps, a child, a step's next
attempt) raises ``Suspend`` through the workflow's code, and the activation ends with the workflow
suspended; the next activation replays it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from msgspec.structs import replace

from querator.client import AsyncClient, ConnectionFailed, seconds_of
from querator.clock import SystemClock, from_datetime, micros, to_datetime
from querator.durable._errors import (
    Cancelled,
    ChildFailed,
    NonDeterminism,
    SignalTimeout,
    StepFailed,
    WorkflowTimeout,
    describe,
    worker_lost,
)
from querator.durable._step import Step, decode, step_attributes
from querator.errors import Conflict, RetryRequest
from querator.wire import messages as m
from querator.wire.search import SEARCH_ENTRY_NAME, SearchValue, encode_search_entry, search_texts
from querator.wire.workflows import (
    CHILD,
    DONE,
    ERROR,
    FINAL_STATES,
    PATCH,
    PENDING,
    RUNNING,
    SEARCH,
    SIGNAL,
    SLEEP,
    STEP,
    UPDATE,
    UPDATE_RESULT,
)
from querator.worker import current_traceparent

if TYPE_CHECKING:
    from querator.durable._app import Durable, WorkflowDef

T = TypeVar("T")

STEP_TASK = "querator.durable.step"
"""The worker task that runs a step dispatched by ``Context.gather``."""


class Suspend(BaseException):
    """The workflow waits: its activation ends here (a BaseException, so a workflow's ``except Exception``
    does not swallow it). ``wake_at``: when a timer must wake it (microseconds; 0: only an event will)."""

    def __init__(self, wake_at: int = 0) -> None:
        super().__init__(wake_at)
        self.wake_at = wake_at


class ContinueAsNew(BaseException):
    """The run ends and the workflow starts over with ``input`` (``Context.continue_as_new``): a
    BaseException, so that a workflow's ``except Exception`` does not swallow it."""

    def __init__(self, input_: bytes) -> None:
        super().__init__()
        self.input = input_


class Lost(BaseException):
    """Another worker claimed the workflow since this one did: this one stops at once."""


class Interrupted(BaseException):
    """The server did not answer, or asked to try again (a node restarting, a partition moving): no
    failure of the workflow's, so its code must not see it. The activation ends and comes back to replay."""


@contextlib.contextmanager
def server_call() -> Iterator[None]:
    """What the server's refusals mean to the workflow: ``Lost`` or ``Interrupted``; other errors (a
    journal full, say) are the workflow's own."""
    try:
        yield
    except Conflict as e:
        raise Lost(e.message) from e
    except (RetryRequest, ConnectionFailed) as e:
        raise Interrupted(e.message) from e


class StepCall:
    """``Context.run``'s answer: await it to run the step here, or hand several to ``Context.gather`` to
    have other workers run them in parallel. Its sequence number is taken when it is made."""

    kind = STEP

    def __init__(
        self, ctx: Context, step: Step[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.ctx, self.step, self.args, self.kwargs = ctx, step, args, kwargs
        self.seq = ctx.next_seq()
        self.name = step.name

    def __await__(self) -> Generator[Any, None, Any]:
        return self.ctx.run_here(self).__await__()

    def outcome(self, entry: m.WorkflowEntry) -> Any:
        if entry.state == ERROR:
            raise StepFailed(self.name, entry.error)
        return self.step.decode(entry.value)


class ChildCall:
    """``Context.child``'s answer: await it (or gather several) for the child workflow's result."""

    kind = CHILD

    def __init__(
        self, ctx: Context, workflow: WorkflowDef, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.ctx, self.workflow, self.args, self.kwargs = ctx, workflow, args, kwargs
        self.seq = ctx.next_seq()
        self.name = workflow.name

    def __await__(self) -> Generator[Any, None, Any]:
        return self.ctx.gather_one(self).__await__()

    def outcome(self, entry: m.WorkflowEntry) -> Any:
        if entry.state == ERROR:
            raise ChildFailed(self.name, entry.error)
        return self.workflow.decode(entry.value)


Call = StepCall | ChildCall


class Update(NamedTuple):
    """An update's handler and its validator (``Context.on_update``)."""

    handler: Callable[..., Any]
    validator: Callable[..., Any] | None


class Context:
    """A workflow run's view of its journal; the first argument of every workflow function.

    Everything a workflow does that must survive a crash goes through it: ``run`` (a recorded step),
    ``gather`` (steps or children in parallel), ``sleep``, ``wait_for_signal``, ``child`` and
    ``on_failure`` (saga compensations). Other code in a workflow runs again at every replay, so it must
    be deterministic: no clocks, random numbers or I/O outside steps.
    """

    replaying = False
    """True in a ``Replayer``'s check, which reports what a worker would log."""

    def __init__(self, app: Durable, client: AsyncClient, wf: m.WorkflowInfo, claim_timeout: str) -> None:
        self.app = app
        self.workflow_id = wf.workflow_id
        self.input = wf.input
        self._client = client
        self._wf = wf
        self._journal = {e.seq: e for e in wf.entries}
        self._signals = list(wf.signals)
        self._claim_timeout = claim_timeout
        self._seq = wf.seq_base  # a run that continued an earlier one numbers on from it
        self._timed_out = wf.timed_out
        """The server saw the workflow's deadline pass (at the claim, or in an append's reply)."""
        self._lapsed = wf.lapsed_claims
        """Workers lost mid-turn since the journal last grew: attempts of the first step this run runs."""
        self._unsent: list[m.WorkflowEntry] = []
        self.compensations: list[tuple[Step[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self.queries: dict[str, Callable[..., Any]] = {}
        """The query handlers the code registered so far (``on_query``)."""
        self.updates: dict[str, Update] = {}
        """The update handlers the code registered so far (``on_update``)."""
        self._asked = [u for u in wf.updates if not u.taken_by]
        """Updates sent and not taken yet, oldest first: the turn takes them when it suspends."""
        self.compensating = False
        self.activation: m.WorkflowActivation | None = None
        """The activation item this turn runs for: the turn's ending completes it (docs/adr/0070)."""
        # The server's time at the claim, moved on by this process's monotonic clock: timers compare
        # with the server's clock, which delivers them, not with this machine's.
        self._clock = SystemClock()
        self._base_us = _micros(wf.updated_at) or self._clock.now()
        self._base_mono_s = self._clock.monotonic()

    # -- what workflows call ----------------------------------------------------------------------------

    def run(self, step: Step[..., T], /, *args: Any, **kwargs: Any) -> StepCall:
        """The step ``step(*args, **kwargs)``: ``await`` it to run it in this worker, once; its result is
        recorded, and a replay returns the recorded result without running it. A failure is retried by
        the step's policy (the workflow sleeps between attempts); the last one raises ``StepFailed``."""
        return StepCall(self, step, args, kwargs)

    def child(self, workflow: Any, /, *args: Any, **kwargs: Any) -> ChildCall:
        """The child workflow ``workflow(*args, **kwargs)``: ``await`` it for its result (``ChildFailed``
        when it fails). Its id is this workflow's and the call's seq, so a replay finds the same child."""
        return ChildCall(self, self.app.workflow_of(workflow), args, kwargs)

    async def gather(self, *calls: Call) -> list[Any]:
        """The results of ``calls`` (from ``run`` or ``child``) in order. Steps not yet recorded become task
        items, run by any worker in parallel; the workflow sleeps until all are recorded. The first failed
        call's error is raised, as ``asyncio.gather`` does."""
        if not calls:
            return []
        entries = [self._entry(c.seq, c.kind, c.name) for c in calls]
        waiting = [c for c, e in zip(calls, entries, strict=True) if e is None or e.state == PENDING]
        if waiting:
            new = [c for c, e in zip(calls, entries, strict=True) if e is None]
            if new:
                await self._send_held()  # before the check: its reply may say the deadline passed
            self._check_cancelled()
            if new:
                await self._dispatch(new, group=calls[0].seq, size=len(calls))
            raise Suspend()
        return [c.outcome(e) for c, e in zip(calls, entries, strict=True) if e is not None]

    async def gather_one(self, call: Call) -> Any:
        [result] = await self.gather(call)
        return result

    async def sleep(self, duration: timedelta | float | str) -> None:
        """Sleeps durably: nothing is held meanwhile, and the sleep survives restarts of everything."""
        seq = self.next_seq()
        entry = self._entry(seq, SLEEP, "sleep")
        if entry is not None and entry.state == DONE:
            return
        self._check_cancelled()
        now = self.now_us()
        wake_at = _micros(entry.wake_at) if entry is not None else now + micros(seconds_of(duration))
        if wake_at <= now:
            await self._append([m.WorkflowEntry(seq=seq, kind=SLEEP, name="sleep", state=DONE)])
            return
        if entry is None:
            self._unsent.append(
                m.WorkflowEntry(
                    seq=seq, kind=SLEEP, name="sleep", state=PENDING, wake_at=to_datetime(wake_at)
                )
            )
        raise Suspend(wake_at)

    async def wait_for_signal(self, name: str, timeout: timedelta | float | str | None = None) -> Any:
        """The payload of the next signal ``name`` (one sent before the wait counts too); raises
        ``SignalTimeout`` when ``timeout`` passes first."""
        seq = self.next_seq()
        entry = self._entry(seq, SIGNAL, name)
        if entry is not None and entry.state == DONE:
            return decode(self.app.serializer, entry.value, Any)
        if entry is not None and entry.state == ERROR:
            raise SignalTimeout(f"no signal '{name}' within its timeout")
        self._check_cancelled()
        now = self.now_us()
        if entry is not None:
            deadline = _micros(entry.wake_at)
        else:
            deadline = now + micros(seconds_of(timeout)) if timeout is not None else 0
        for i, sent in enumerate(self._signals):
            if sent.name == name and not sent.taken_by:
                self._signals[i] = m.WorkflowSignal(id=sent.id, name=name, payload=sent.payload, taken_by=seq)
                await self._append([m.WorkflowEntry(seq=seq, kind=SIGNAL, name=name, state=DONE)])
                return decode(self.app.serializer, sent.payload, Any)
        if deadline and deadline <= now:
            error = f"SignalTimeout: no signal '{name}' within its timeout"
            await self._append([m.WorkflowEntry(seq=seq, kind=SIGNAL, name=name, state=ERROR, error=error)])
            raise SignalTimeout(f"no signal '{name}' within its timeout")
        if entry is None:
            pending = m.WorkflowEntry(seq=seq, kind=SIGNAL, name=name, state=PENDING)
            if deadline:
                pending.wake_at = to_datetime(deadline)
            self._unsent.append(pending)
        raise Suspend(deadline)

    def on_failure(self, step: Step[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Registers a compensation: if the workflow fails or is cancelled, the registered steps run as
        recorded steps, the last registered first (the saga pattern)."""
        self.compensations.append((step, args, kwargs))

    def on_query(self, name: str, handler: Callable[..., Any], /) -> None:
        """Answers the query ``name`` (``Durable.query``) with ``handler(*args, **kwargs)``, a function over
        the workflow's own state (a closure over its locals). A query replays the journal in the caller's
        process and calls the handler the replay registered last, so it must return at once and change
        nothing; registering costs a worker nothing."""
        self.queries[name] = handler

    def on_update(
        self, name: str, handler: Callable[..., Any], /, *, validator: Callable[..., Any] | None = None
    ) -> None:
        """Handles the update ``name`` (``Durable.update``) with ``handler(*args)``, a plain function over
        the workflow's own state that may change it and returns the caller's answer (docs/durable.md,
        "Updates"). ``validator(*args)`` runs first, in the caller's process on a replay of the journal
        (as a query does): an exception refuses the update, which is then recorded nowhere. An update
        accepted is recorded with its arguments where the workflow waits, and applied again at that
        point by every replay; the handler must not make durable calls."""
        if inspect.iscoroutinefunction(handler):
            raise TypeError("an update handler is a plain function: it runs again at every replay")
        self.updates[name] = Update(handler, validator)

    async def take_updates(self) -> None:
        """Where the workflow waits: the updates recorded here before are applied again, then each update
        sent since is taken, its handler run and its answer recorded with the suspend (an ``update``
        entry, whose value the server fills with the arguments, and its ``update_result``)."""
        self.reapply_updates()
        for asked in self._asked:
            taken = m.WorkflowEntry(
                seq=self.next_seq(), kind=UPDATE, name=asked.name, state=DONE, value=asked.payload
            )
            answer = m.WorkflowEntry(seq=self.next_seq(), kind=UPDATE_RESULT, name=asked.name, state=DONE)
            update = self.updates.get(asked.name)
            if update is None:  # the caller hears it; the workflow goes on
                known = ", ".join(sorted(self.updates)) or "none"
                answer.state = ERROR
                answer.error = f"UnknownUpdate: no update handler '{asked.name}' (it has: {known})"
            else:
                try:
                    answer.value = self.app.serializer.dumps(self._apply(update, taken))
                except Exception as e:
                    answer.state, answer.error = ERROR, describe(e)
            self._unsent += [replace(taken, value=b""), answer]  # the server records the arguments
            self._journal.update({taken.seq: taken, answer.seq: answer})
        self._asked = []

    def reapply_updates(self) -> None:
        """Applies again the updates recorded right after the seq last taken (each an ``update`` entry and
        its ``update_result``): they were taken while the workflow waited here. The handler's answer is
        recorded already, so what it returns or raises now is dropped.

        Raises:
            NonDeterminism: an update's answer is missing, or the code registered no handler of its name
                by then (one refused for want of a handler is skipped).
        """
        while (entry := self._journal.get(self._seq + 1)) is not None and entry.kind == UPDATE:
            self.next_seq()
            answer = self._journal.get(self.next_seq())
            if answer is None or (answer.kind, answer.name) != (UPDATE_RESULT, entry.name):
                raise NonDeterminism(
                    f"the journal records update '{entry.name}' at seq {entry.seq} without its answer"
                )
            update = self.updates.get(entry.name)
            if update is None and answer.state == ERROR:
                continue  # refused for want of a handler when taken: nothing of it to apply
            if update is None:
                raise NonDeterminism(
                    f"the journal records update '{entry.name}' at seq {entry.seq}, but the workflow's code "
                    "registered no handler of that name by then"
                )
            with contextlib.suppress(Exception):
                self._apply(update, entry)

    def _apply(self, update: Update, entry: m.WorkflowEntry) -> Any:
        """Runs ``update``'s handler with the arguments ``entry`` records."""
        args = decode(self.app.serializer, entry.value, list[Any]) if entry.value else []
        return update.handler(*args)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the changed code of the patch ``patch_id`` (docs/durable.md, "Changing
        a workflow's code"): ``if ctx.patched("id"): <new code> else: <old code>``.

        A run that reaches the call with nothing recorded there (a new run, or a run past the last call
        it recorded) records a marker at this seq and gets True; a replay finds the marker and gets True
        again. A run recorded before the patch holds another entry here, or none at all once it ended:
        it gets False and no seq is taken, so its recorded calls keep their positions."""
        if not patch_id:
            raise ValueError("a patch's id cannot be empty")
        entry = self._journal.get(self._seq + 1)
        if entry is not None and (entry.kind, entry.name) == (PATCH, patch_id):
            self.next_seq()
            return True
        if entry is not None or self._wf.status != RUNNING:
            return False
        # Recorded with the turn's next append, before whatever the new code records after it.
        self._unsent.append(m.WorkflowEntry(seq=self.next_seq(), kind=PATCH, name=patch_id, state=DONE))
        return True

    def deprecate_patch(self, patch_id: str) -> None:
        """The second step of removing a patch's old code: the code keeps only the new branch and says
        where ``patched(patch_id)`` was, so a run that recorded its marker there still replays (the seq
        of the marker is taken); a new run records nothing. Once no run that recorded the marker is
        left, the call can go too."""
        entry = self._journal.get(self._seq + 1)
        if entry is not None and (entry.kind, entry.name) == (PATCH, patch_id):
            self.next_seq()

    def set_search_attributes(self, attributes: Mapping[str, SearchValue], /) -> None:
        """Sets search attributes of this run (a key set again takes the new value): strings, ints or
        bools, kept as text, that ``Durable.list(search=...)`` and ``querator workflows list --where``
        find it by (docs/durable.md, "Search attributes"). Recorded as an entry at this seq, sent with
        the turn's next append, as Temporal records an upsert in its history: the server merges it into
        the run once, when it records the entry, and a replay finds the entry and sends nothing.

        Raises:
            InvalidOption: more than 32 attributes, a key or value outside the bounds, a value of
                another type (``search attributes are invalid; ...``).
        """
        texts = search_texts(attributes)
        seq = self.next_seq()
        if self._entry(seq, SEARCH, SEARCH_ENTRY_NAME) is None:
            value = encode_search_entry(texts)
            self._unsent.append(
                m.WorkflowEntry(seq=seq, kind=SEARCH, name=SEARCH_ENTRY_NAME, state=DONE, value=value)
            )

    def continue_as_new(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Ends this run and starts the workflow over under the same id with ``args`` and ``kwargs`` and
        an empty journal (Temporal's continue-as-new, docs/adr/0059), so that a workflow that loops for
        ever (a poller that sleeps and continues) keeps a journal of one run's length. The switch is one
        write on the server; signals no wait of this run took stay for the next one; ``result()`` waits
        for the last run. No compensation runs (the run did not fail). Refused (and the workflow failed
        for it) while a child or a dispatched step of this run has not finished: await them first.
        Call it without ``await``: it raises, ending the turn, as a return would."""
        definition = self.app.workflow_of(self._wf.name)
        raise ContinueAsNew(definition.next_input(self.input, args, kwargs))

    # -- the machinery -----------------------------------------------------------------------------------

    def now_us(self) -> int:
        return self._base_us + micros(self._clock.monotonic() - self._base_mono_s)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def app_version(self) -> str:
        """The app version of this run ("": any), recorded at its start."""
        return self._wf.app_version

    @property
    def queue(self) -> str:
        """The queue of this run's activations and dispatched steps: the app's, or its level queue for a
        run started with a priority (``<queue>.high``, ``<queue>.low``)."""
        return self._wf.queue_name

    @property
    def cancel_requested(self) -> bool:
        return self._wf.cancel_requested

    def unsent(self) -> list[m.WorkflowEntry]:
        """The pending entries not sent yet: they go with the suspend."""
        sent, self._unsent = self._unsent, []
        return sent

    async def run_here(self, call: StepCall) -> Any:
        """Runs a step in this worker, unless recorded; records the attempt's outcome."""
        entry = self._entry(call.seq, STEP, call.name)
        if entry is not None and entry.state in (DONE, ERROR):
            return call.outcome(entry)
        if entry is not None and entry.group:
            raise Suspend()  # dispatched by a gather of an earlier run of this code: not ours to run
        await self._send_held()  # before the check: its reply may say the deadline passed
        self._check_cancelled()
        if entry is not None and _micros(entry.wake_at) > self.now_us():
            raise Suspend(_micros(entry.wake_at))
        # A list finds the run by its search attributes while the step runs (a suspend, which dispatched
        # steps, timers, waits and children end in, sends them anyway).
        await self._send_held(SEARCH)
        crashed, self._lapsed = self._lapsed, 0
        attempts = (entry.attempts if entry is not None else 0) + crashed + 1
        step = call.step
        if crashed and step.options.max_attempts and attempts > step.options.max_attempts:
            # Its worker died running it (out of memory, a segfault) as often as it may be tried.
            lost = m.WorkflowEntry(
                seq=call.seq, kind=STEP, name=call.name, state=ERROR, error=worker_lost(attempts - 1),
                attempts=attempts - 1,
            )  # fmt: skip
            self._hold(lost)
            raise StepFailed(call.name, lost.error)
        try:
            if not await step.admitted(
                call.args, call.kwargs, self._client, self.app.queue, self.app.worker.stopped
            ):
                raise Suspend(self.now_us())  # this worker stops: the turn goes on in another one, now
            try:
                attributes = step_attributes(self.workflow_id, call.seq, attempts)
                value = await step.invoke(call.args, call.kwargs, attributes)
            finally:
                step.release()
        except Exception as e:
            if step.gives_up(e, attempts):
                done = m.WorkflowEntry(
                    seq=call.seq, kind=STEP, name=call.name, state=ERROR, error=describe(e), attempts=attempts
                )
                self._hold(done)
                raise StepFailed(call.name, done.error) from e
            wake_at = self.now_us() + micros(step.options.retry(attempts))
            self._unsent.append(
                m.WorkflowEntry(
                    seq=call.seq,
                    kind=STEP,
                    name=call.name,
                    state=PENDING,
                    attempts=attempts,
                    wake_at=to_datetime(wake_at),
                )
            )
            raise Suspend(wake_at) from e
        data = step.encode(value)
        self._hold(
            m.WorkflowEntry(
                seq=call.seq, kind=STEP, name=call.name, state=DONE, value=data, attempts=attempts
            )
        )
        return step.decode(data)

    async def append(self, then: str = "", **fields: Any) -> m.WorkflowsAppendResponse:
        """Sends the unsent entries with ``then`` (the end of this activation's turn), which completes
        the activation too."""
        return await self._send(self.unsent(), then, activation=self.activation, **fields)

    async def _append(self, entries: Sequence[m.WorkflowEntry]) -> None:
        await self._send([*self.unsent(), *entries], "")

    async def _send(
        self, entries: list[m.WorkflowEntry], then: str, **fields: Any
    ) -> m.WorkflowsAppendResponse:
        msg = m.WorkflowsAppendRequest(
            workflow_id=self.workflow_id,
            fence=self._wf.fence,
            entries=entries,
            then=then,
            claim_timeout=self._claim_timeout,
            namespace=self._wf.namespace,
            **fields,
        )
        with server_call():
            reply = await self._client.append_workflow(msg)
        self._timed_out = self._timed_out or reply.timed_out
        self._noted([e for e in entries if self._journal.get(e.seq) is not e])
        return reply

    def _noted(self, entries: Sequence[m.WorkflowEntry]) -> None:
        """``entries`` are the journal's now, as far as this turn's code can tell."""
        for entry in entries:
            self._journal[entry.seq] = entry
        if any(e.seq == self._seq and e.state in FINAL_STATES for e in entries):
            self.reapply_updates()  # the call that waited returns now: what was taken meanwhile first

    def _hold(self, entry: m.WorkflowEntry) -> None:
        """A step's outcome, recorded with the turn's next append rather than one of its own: a turn
        that ends (or suspends) right after the step records both in one request (docs/adr/0070). The
        code goes on as if it were recorded; nothing outside the journal happens before it is
        (``_send_held``), so a crash in between runs again only this step, which steps allow."""
        self._unsent.append(entry)
        self._noted([entry])

    async def _dispatch(self, calls: Sequence[Call], group: int, size: int) -> None:
        """Steps become task items of the workflow's queue and children are started; then their pending
        entries are recorded (with the suspend). A crash between the two leaves items whose results are
        recorded all the same (a result for an unrecorded seq is taken)."""
        steps = [c for c in calls if isinstance(c, StepCall)]
        if steps:
            digest = hashlib.blake2b(self.workflow_id.encode(), digest_size=16).hexdigest()
            traceparent = current_traceparent()  # the runs continue this turn's trace
            trace = {"trace": {"traceparent": traceparent}} if traceparent is not None else {}
            version = [self.app_version] if self.app_version else []  # for workers that know it
            payloads = [
                self.app.serializer.dumps(
                    {"args": [self.workflow_id, c.seq, c.name, list(c.args), c.kwargs, *version], **trace}
                )
                for c in steps
            ]
            with server_call():
                await self._client.produce(
                    self._wf.queue_name,
                    payloads,
                    kind=STEP_TASK,
                    encoding=self.app.serializer.content_type,
                    dedup_id=[f"step:{digest}:{c.seq}" for c in steps],
                )
        for c in calls:
            if isinstance(c, ChildCall):
                with server_call():
                    await self.app.start_child(self, c)
        self._unsent += [
            m.WorkflowEntry(seq=c.seq, kind=c.kind, name=c.name, state=PENDING, group=group, group_size=size)
            for c in calls
        ]

    async def _send_held(self, *kinds: str) -> None:
        """Before a step runs here, or steps are dispatched or children started: the outcome of a step
        held (``_hold``) is recorded first, so that a step never runs again once a later one has started
        (docs/durable.md, Guarantees); with it, the unsent entries of ``kinds``."""
        if any(e.kind in kinds or (e.kind == STEP and e.state in FINAL_STATES) for e in self._unsent):
            await self._append([])

    def _entry(self, seq: int, kind: str, name: str) -> m.WorkflowEntry | None:
        """The recorded entry at ``seq``, checked against what the code asks for there."""
        entry = self._journal.get(seq)
        if entry is not None and (entry.kind, entry.name) != (kind, name):
            raise NonDeterminism(
                f"the workflow's code asked for {kind} '{name}' at seq {seq}, but its journal records "
                f"{entry.kind} '{entry.name}' there"
            )
        if entry is not None and entry.state in FINAL_STATES and seq == self._seq:
            self.reapply_updates()  # taken while this call waited: applied before it returns
        return entry

    def _check_cancelled(self) -> None:
        """Before a durable call does anything new: a cancel or a timeout ends the workflow there (not
        during its compensations, which are how it ends)."""
        if self.compensating:
            return
        if self._wf.cancel_requested:
            raise Cancelled(f"workflow {self.workflow_id} was cancelled")
        if self._timed_out:
            raise WorkflowTimeout(f"workflow {self.workflow_id} passed its timeout of {self._wf.timeout}")


def _micros(value: datetime | None) -> int:
    """A wire time in microseconds since the epoch; 0 when unset."""
    return from_datetime(value) if value is not None else 0
