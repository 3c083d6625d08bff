"""``Replayer``: recorded journals replayed against the workflows' code as it is now, with no server and
no step run, so that a change that would break running workflows is found before it is deployed
(docs/durable.md, "Checking a change against recorded journals").

A replay runs the workflow function as an activation does (``_activation._turn``), over a ``Context``
whose journal is the recorded one; where the code reaches past what is recorded (a step to run, an
entry to append, steps to dispatch or children to start), the replay ends there as a suspended turn
would, and nothing leaves the process. It reports, as ``NonDeterminism``:

- a call at a seq whose entry is of another kind or name (what a worker would raise there);
- recorded entries the code no longer reaches (a call removed, or the code ending sooner);
- a completed workflow whose code now ends otherwise, or asks for a call its journal does not hold;
- a journal of a workflow the app does not define.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec

from querator.client import AsyncClient
from querator.durable._activation import _turn
from querator.durable._context import Call, Context, StepCall, Suspend
from querator.durable._errors import NonDeterminism, UnknownQuery, UnknownUpdate, UpdateRejected, describe
from querator.wire import decode_json, encode_json
from querator.wire import messages as m
from querator.wire.workflows import COMPLETE, COMPLETED, FINAL_STATES, RUNNING, STEP

if TYPE_CHECKING:
    from querator.durable._app import Durable


@dataclass(frozen=True, slots=True)
class Replayed:
    """How one journal replayed: ``error`` is None when the code agrees with it. ``then`` is how the
    replayed turn ended, as an append would end it (``suspend``, ``complete``, ``fail``, ``cancel``; ""
    when it did not run)."""

    workflow_id: str
    name: str
    then: str
    error: NonDeterminism | None = None


class Replayer:
    """Replays recorded journals against the workflows of ``app`` (a ``Durable``) as its code is now.

    ::

        replayer = Replayer(app)
        replayer.replay(workflow)                       # raises NonDeterminism; workflow: m.WorkflowInfo
        for r in await replayer.replay_node(client):    # every running workflow of app's namespace
            print(r.workflow_id, r.error or "ok")
        results = replayer.replay_all(load("journals.json"))
    """

    def __init__(self, app: Durable) -> None:
        self.app = app

    async def replay(self, workflow: m.WorkflowInfo) -> Replayed:
        """Replays one journal (``WorkflowInfo`` with its entries, as ``workflows.info`` returns it).

        Raises:
            NonDeterminism: the code does not agree with the journal.
        """
        replayed = await self.check(workflow)
        if replayed.error is not None:
            raise replayed.error
        return replayed

    async def replay_all(self, workflows: Iterable[m.WorkflowInfo]) -> list[Replayed]:
        """Replays each journal; the disagreements are in the results' ``error``, none is raised."""
        return [await self.check(wf) for wf in workflows]

    async def replay_node(
        self, client: AsyncClient, workflow_ids: Iterable[str] = (), *, status: str = RUNNING
    ) -> list[Replayed]:
        """Replays journals read from a node: ``workflow_ids``, else every workflow of ``status`` ("":
        any) in the app's namespace. It only reads (``workflows.list``, ``workflows.info``)."""
        ids = list(workflow_ids) or [
            wf.workflow_id for wf in await _listed(client, status, self.app.namespace)
        ]
        return [
            await self.check(await client.workflow_journal(workflow_id, namespace=self.app.namespace))
            for workflow_id in ids
        ]

    async def query(self, wf: m.WorkflowInfo, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """The answer of the query ``name`` of the workflow ``wf`` (as ``workflows.info`` returns it): its
        journal replayed to its end, then the handler the code registered last (``Context.on_query``)
        called with ``args`` and ``kwargs``. No step runs and nothing is sent.

        Raises:
            NonDeterminism: the code does not agree with the journal.
            UnknownQuery: the replay registered no handler ``name``.
            Exception: what the handler raised.
        """
        ctx = await self._replayed(wf)
        handler = ctx.queries.get(name)
        if handler is None:
            known = ", ".join(sorted(ctx.queries)) or "none"
            raise UnknownQuery(f"workflow {wf.workflow_id} answers no query '{name}' (it answers: {known})")
        return handler(*args, **kwargs)

    async def validate_update(self, wf: m.WorkflowInfo, name: str, /, *args: Any) -> None:
        """Checks the update ``name`` with ``args`` as the workflow ``wf`` stands: its journal replayed to
        its end (as ``query``), then the validator the code registered last with the handler
        (``Context.on_update``), if any, called with ``args`` (docs/adr/0060).

        Raises:
            NonDeterminism: the code does not agree with the journal.
            UnknownUpdate: the replay registered no handler ``name``.
            UpdateRejected: the validator raised.
        """
        ctx = await self._replayed(wf)
        update = ctx.updates.get(name)
        if update is None:
            known = ", ".join(sorted(ctx.updates)) or "none"
            raise UnknownUpdate(f"workflow {wf.workflow_id} takes no update '{name}' (it takes: {known})")
        if update.validator is None:
            return
        try:
            update.validator(*args)
        except Exception as e:
            raise UpdateRejected(name, describe(e)) from e

    async def _replayed(self, wf: m.WorkflowInfo) -> _ReplayContext:
        """The context of the workflow ``wf`` replayed to the end of its journal, with what it registered.

        Raises:
            NonDeterminism: the code does not agree with the journal.
        """
        definition = self.app.workflows.get(wf.name)
        if definition is None:
            raise _undefined(wf)
        ctx = _ReplayContext(self.app, wf)
        await _turn(ctx, definition)
        if ctx.mismatch is not None:
            raise ctx.mismatch
        return ctx

    async def check(self, wf: m.WorkflowInfo) -> Replayed:
        """``replay`` without raising."""
        definition = self.app.workflows.get(wf.name)
        if definition is None:
            return Replayed(wf.workflow_id, wf.name, "", _undefined(wf))
        ctx = _ReplayContext(self.app, wf)
        try:
            await _turn(ctx, definition)
        except Exception as e:  # an outcome that cannot be recorded (a result that does not serialize)
            return Replayed(wf.workflow_id, wf.name, "", NonDeterminism(f"the replay raised {describe(e)}"))
        return Replayed(wf.workflow_id, wf.name, ctx.then, ctx.mismatch or _disagreement(wf, ctx))


def load(path: str | Path) -> list[m.WorkflowInfo]:
    """Journals from a file: one workflow as ``querator workflows show ID`` prints it, or a JSON array of
    them (``dump``).

    Raises:
        OSError: the file cannot be read.
        msgspec.DecodeError: it is not such JSON.
    """
    data = Path(path).read_bytes()
    if data.lstrip().startswith(b"["):
        return [decode_json(raw, m.WorkflowInfo) for raw in msgspec.json.decode(data, type=list[msgspec.Raw])]
    return [decode_json(data, m.WorkflowInfo)]


def dump(workflows: Iterable[m.WorkflowInfo]) -> bytes:
    """Journals as a JSON array that ``load`` reads: a set of recorded journals to keep beside the code."""
    return msgspec.json.format(b"[" + b",".join(encode_json(wf) for wf in workflows) + b"]", indent=2)


class _ReplayContext(Context):
    """A ``Context`` that answers from the journal only: where a worker would call the server or run a
    step, the turn suspends; it notes the first call past the journal and the first mismatch."""

    replaying = True

    def __init__(self, app: Durable, wf: m.WorkflowInfo) -> None:
        # No client: every method that would use one is overridden below.
        super().__init__(app, cast(AsyncClient, None), wf, app.claim_timeout)
        self.mismatch: NonDeterminism | None = None
        self.asked: m.WorkflowEntry | None = None
        """The first call the code made that its journal does not hold."""
        self.then = ""

    def _entry(self, seq: int, kind: str, name: str) -> m.WorkflowEntry | None:
        try:
            entry = super()._entry(seq, kind, name)
        except NonDeterminism as e:
            self.mismatch = self.mismatch or e
            raise
        if entry is None and self.asked is None:
            self.asked = m.WorkflowEntry(seq=seq, kind=kind, name=name)
        return entry

    @property
    def calls(self) -> int:
        """Durable calls the code made (the last seq it took)."""
        return self._seq

    async def run_here(self, call: StepCall) -> Any:
        entry = self._entry(call.seq, STEP, call.name)
        if entry is not None and entry.state in FINAL_STATES:
            return call.outcome(entry)
        raise Suspend()  # a worker would run the step here

    async def _send(
        self, entries: list[m.WorkflowEntry], then: str, **fields: Any
    ) -> m.WorkflowsAppendResponse:
        raise Suspend()  # a worker would record something new here

    async def _dispatch(self, calls: Sequence[Call], group: int, size: int) -> None:
        raise Suspend()  # a worker would dispatch steps or start children here

    async def take_updates(self) -> None:
        """Those recorded where it waits are applied again; none is taken."""
        self.reapply_updates()

    async def append(self, then: str = "", **fields: Any) -> m.WorkflowsAppendResponse:
        """How the turn ends: kept, not sent."""
        self.then = then
        return m.WorkflowsAppendResponse()


def _undefined(wf: m.WorkflowInfo) -> NonDeterminism:
    return NonDeterminism(f"workflow {wf.workflow_id} runs '{wf.name}', which the app does not define")


def _disagreement(wf: m.WorkflowInfo, ctx: _ReplayContext) -> NonDeterminism | None:
    unreached = sorted((e for e in wf.entries if e.seq > ctx.calls), key=lambda e: e.seq)
    if unreached:
        e = unreached[0]
        return NonDeterminism(
            f"the journal records {e.kind} '{e.name}' at seq {e.seq}, which the workflow's code no longer "
            f"reaches (it made {ctx.calls} durable calls)"
        )
    if wf.status == COMPLETED and ctx.then != COMPLETE:
        asked = ctx.asked
        if asked is not None:
            return NonDeterminism(
                f"the workflow completed, but its code now asks for {asked.kind} '{asked.name}' at seq "
                f"{asked.seq}, which its journal does not hold"
            )
        return NonDeterminism(f"the workflow completed, but its code now ends with '{ctx.then}'")
    return None


async def _listed(client: AsyncClient, status: str, namespace: str) -> list[m.WorkflowInfo]:
    """Every workflow of ``status``, page by page (``workflows.list`` pages by id from a pivot)."""
    found: list[m.WorkflowInfo] = []
    pivot = ""
    while True:
        page = await client.list_workflows(status, pivot=pivot, namespace=namespace)
        page = [wf for wf in page if wf.workflow_id != pivot]
        if not page:
            return found
        found += page
        pivot = page[-1].workflow_id
