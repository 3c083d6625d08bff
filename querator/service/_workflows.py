"""Durable workflows over HTTP: start, info, list, signal, cancel and result for callers; claim and append
for the workers that run them (docs/durable.md).

Every write reads the record, applies a rule of ``storage.journal`` and stores the result by
compare-and-set, again on the record that won when another write came first. A workflow moves by
*activations*: items of its task queue, produced here, that tell a worker to claim the workflow and replay
it. What a rule asks for besides the write (``Effects``) is done after it, except a timer's activation,
which is produced before the suspend that relies on it is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import msgspec
from msgspec.structs import replace

from querator.clock import MICROS, Clock, from_datetime, sleep_until, to_datetime
from querator.errors import InvalidOption, try_again
from querator.service._conversion import workflow_entry, workflow_info
from querator.service._validation import (
    check_list_workflows,
    check_signal,
    check_start,
    check_workflow_append,
    check_workflow_id,
    claim_timeout,
    request_timeout,
)
from querator.storage import journal
from querator.storage.journal import CLAIMED, FINISHED, Effects, Ending
from querator.storage.workflows import Signal, Workflow, WorkflowRows
from querator.tenancy import permissions as perm
from querator.wire import messages as m
from querator.wire.workflows import RUNNING

T = TypeVar("T")

ACTIVATION_KIND: Final = "querator.durable.run"
"""The ``kind`` of an activation item: a call of the workers' task of that name with the workflow's id
(docs/durable.md, "Activations")."""
ACTIVATION_ENCODING: Final = "application/json"
DEFAULT_RETENTION_US: Final = 7 * 24 * 3600 * MICROS
"""How long a finished workflow is kept (its result, its journal)."""
WRITE_ATTEMPTS: Final = 20
"""Compare-and-set rounds one write tries before it answers 454: each lost round means another write
to the same workflow succeeded."""
RESULT_POLL_US: Final = MICROS
"""Microseconds between reads of a workflow a ``result`` waits for, when another node may finish it."""

Produce = Callable[[m.QueueProduceRequest], Awaitable[m.QueueProduceResponse]]
QueueExists = Callable[[str], Awaitable[bool]]
Authorize = Callable[[str, str], Awaitable[None]]
"""With tenancy (docs/tenancy.md): raises 403 unless the caller holds a permission (second argument) in
the namespace of a queue (first argument; "" for ``_system``)."""
Rule = Callable[[Workflow | None], tuple[T, Workflow | None]]


class Workflows:
    """The workflow routes of one node, over the store's workflow rows."""

    def __init__(
        self,
        rows: WorkflowRows,
        clock: Clock,
        produce: Produce,
        queue_exists: QueueExists,
        retention_us: int = DEFAULT_RETENTION_US,
        authorize: Authorize | None = None,
    ) -> None:
        self._rows = rows
        self._authorize = authorize
        self._clock = clock
        self._produce = produce
        self._queue_exists = queue_exists
        self._retention_us = retention_us
        self._finished: dict[str, asyncio.Event] = {}
        """Events of the workflows a ``result`` on this node waits for, set when this node finishes one."""
        self._waiting: Counter[str] = Counter()
        """How many ``result`` calls wait for each workflow: its event goes when the last one does."""

    # -- callers ---------------------------------------------------------------------------------------

    async def start(self, req: m.WorkflowsStartRequest) -> m.WorkflowsStartResponse:
        """Starts a workflow, or returns the one of that id (idempotent by ``workflow_id``)."""
        check_start(req)
        if not await self._queue_exists(req.queue_name):
            raise InvalidOption(f"queue does not exist; no such queue named '{req.queue_name}'")
        if self._authorize is not None:
            await self._authorize(req.queue_name, perm.QUEUE_PRODUCE)
        now = self._clock.now()
        new = Workflow(
            id=req.workflow_id,
            name=req.name,
            queue=req.queue_name,
            input=req.input,
            encoding=req.encoding,
            parent_id=req.parent_id,
            parent_seq=req.parent_seq,
        )
        created, wf = await self._write(req.workflow_id, lambda current: journal.start(current, new, now))
        assert wf is not None
        if wf.status == RUNNING and wf.fence == 0:
            # Never claimed: its first activation may be the one a crash lost, and the produce's dedup
            # id makes a repeated start produce it once.
            await self._activate(wf, dedup_id=f"start:{_digest(wf.id)}")
        return m.WorkflowsStartResponse(created=created, workflow=workflow_info(wf, journal=False))

    async def info(self, req: m.WorkflowsInfoRequest) -> m.WorkflowInfo:
        check_workflow_id(req.workflow_id)
        wf = await self._rows.get_workflow(req.workflow_id)
        if wf is None:
            raise journal.not_found(req.workflow_id)
        if self._authorize is not None:
            await self._authorize(wf.queue, perm.QUEUE_STATS)
        return workflow_info(wf, journal=True)

    async def list(self, req: m.WorkflowsListRequest) -> m.WorkflowsListResponse:
        limit = check_list_workflows(req)
        if self._authorize is not None:  # workflows of every queue: a _system matter
            await self._authorize("", perm.QUEUE_LIST)
        # A backend's page ends early at LIST_PAGE_RECORD_BYTES of records (storage.workflows).
        found = await self._rows.list_workflows(req.status, req.pivot, limit)
        return m.WorkflowsListResponse(workflows=[workflow_info(wf, journal=False) for wf in found])

    async def signal(self, req: m.WorkflowsSignalRequest) -> m.Reply:
        check_signal(req)
        await self._check(req.workflow_id, perm.QUEUE_PRODUCE)
        sent = Signal(id=req.signal_id or secrets.token_hex(12), name=req.name, payload=req.payload)
        now = self._clock.now()
        # A send repeated with its id (a lost reply, or a caller replaying) wakes the workflow once: the
        # repeat's produce is a duplicate, and still produces the wake-up if a crash lost the first's.
        await self._apply(
            req.workflow_id,
            lambda wf: journal.signal(wf, req.workflow_id, sent, now),
            dedup_id=f"signal:{_digest(req.workflow_id + chr(0) + sent.id)}",
        )
        return m.OK_REPLY

    async def cancel(self, req: m.WorkflowsCancelRequest) -> m.Reply:
        check_workflow_id(req.workflow_id)
        await self._check(req.workflow_id, perm.QUEUE_PRODUCE)
        await self.cancel_one(req.workflow_id)
        return m.OK_REPLY

    async def cancel_one(self, workflow_id: str) -> None:
        now = self._clock.now()
        # Asked again, it wakes the workflow once (as a repeated signal): a workflow is cancelled once.
        await self._apply(
            workflow_id,
            lambda wf: journal.cancel(wf, workflow_id, now),
            dedup_id=f"cancel:{_digest(workflow_id)}",
        )

    async def result(self, req: m.WorkflowsResultRequest) -> m.WorkflowInfo:
        """The workflow once it finished, or as it is when ``request_timeout`` passed."""
        check_workflow_id(req.workflow_id)
        deadline = self._clock.now() + request_timeout(req.request_timeout)
        await self._check(req.workflow_id, perm.QUEUE_STATS)
        event = self._finished.setdefault(req.workflow_id, asyncio.Event())
        self._waiting[req.workflow_id] += 1
        try:
            while True:
                wf = await self._rows.get_workflow(req.workflow_id)
                if wf is None:
                    raise journal.not_found(req.workflow_id)
                now = self._clock.now()
                if wf.status != RUNNING or now >= deadline:
                    return workflow_info(wf, journal=False)
                # Woken by a finish on this node; another node's is seen by reading again.
                await _first(event.wait(), sleep_until(self._clock, min(deadline, now + RESULT_POLL_US)))
        finally:
            # Not before the last wait ends (a client may leave mid-wait): another may share the event.
            self._waiting[req.workflow_id] -= 1
            if not self._waiting[req.workflow_id]:
                del self._waiting[req.workflow_id]
                self._finished.pop(req.workflow_id, None)

    async def _check(self, workflow_id: str, permission: str) -> None:
        """With tenancy, 403 unless the caller holds ``permission`` in the namespace of the workflow's
        queue (a workflow not found is left to the route's own answer)."""
        if self._authorize is not None:
            wf = await self._rows.get_workflow(workflow_id)
            if wf is not None:
                await self._authorize(wf.queue, permission)

    # -- workers ---------------------------------------------------------------------------------------

    async def claim(self, req: m.WorkflowsClaimRequest) -> m.WorkflowsClaimResponse:
        check_workflow_id(req.workflow_id)
        until = self._clock.now() + claim_timeout(req.claim_timeout)
        await self._check(req.workflow_id, perm.QUEUE_LEASE)
        now = self._clock.now()
        outcome, _ = await self._write(
            req.workflow_id, lambda wf: journal.claim(wf, req.workflow_id, now, until)
        )
        if outcome.outcome == FINISHED and outcome.workflow.parent_id:
            # Its parent may not have heard (a crash between the two writes): telling it again is harmless.
            await self._tell_parent(outcome.workflow)
        full = outcome.outcome == CLAIMED
        return m.WorkflowsClaimResponse(
            outcome=outcome.outcome, workflow=workflow_info(outcome.workflow, full)
        )

    async def append(self, req: m.WorkflowsAppendRequest) -> m.WorkflowsAppendResponse:
        check_workflow_append(req)
        await self._check(req.workflow_id, perm.QUEUE_LEASE)
        now = self._clock.now()
        entries = [workflow_entry(e) for e in req.entries]
        if req.fence == 0:
            await self._apply(req.workflow_id, lambda wf: journal.record(wf, req.workflow_id, entries, now))
            return m.WorkflowsAppendResponse()
        until = now + claim_timeout(req.claim_timeout) if req.claim_timeout else 0
        wake_at = from_datetime(req.wake_at) if req.wake_at is not None else 0
        ending = Ending(req.then, wake_at, req.result, req.error)
        timers: set[int] = set()

        def rule(wf: Workflow | None) -> tuple[Effects, Workflow | None]:
            return journal.append(
                wf, req.workflow_id, req.fence, entries, ending, now, until, self._retention_us
            )

        for _ in range(WRITE_ATTEMPTS):
            current = await self._rows.get_workflow(req.workflow_id)
            effects, write = rule(current)
            if effects.timer_at and effects.timer_at not in timers and current is not None:
                await self._activate(current, enqueue_at=effects.timer_at)
                timers.add(effects.timer_at)
            if write is None or await self._put(write, current):
                await self._carry_out(req.workflow_id, effects, write)
                return m.WorkflowsAppendResponse(resume=effects.resume)
        raise try_again("workflow is written by others too often")

    # -- writes and their effects -----------------------------------------------------------------------

    async def _apply(self, workflow_id: str, rule: Rule[Effects], dedup_id: str = "") -> None:
        """``dedup_id``: of the activation the write may produce."""
        effects, wf = await self._write(workflow_id, rule)
        await self._carry_out(workflow_id, effects, wf, dedup_id)

    async def _write(self, workflow_id: str, rule: Rule[T]) -> tuple[T, Workflow | None]:
        """Runs ``rule`` on the stored record and stores what it returns, by compare-and-set; the rule's
        outcome and the record as it is now."""
        for _ in range(WRITE_ATTEMPTS):
            current = await self._rows.get_workflow(workflow_id)
            outcome, write = rule(current)
            if write is None or await self._put(write, current):
                return outcome, write or current
        raise try_again("workflow is written by others too often")

    async def _put(self, write: Workflow, current: Workflow | None) -> bool:
        version = current.version if current is not None else 0
        return await self._rows.put_workflow(replace(write, version=version + 1), version)

    async def _carry_out(
        self, workflow_id: str, effects: Effects, wf: Workflow | None, dedup_id: str = ""
    ) -> None:
        if wf is not None and wf.status != RUNNING:
            event = self._finished.pop(workflow_id, None)
            if event is not None:
                event.set()
        if effects.wake and wf is not None:
            await self._activate(wf, dedup_id=dedup_id)
        if effects.parent is not None and wf is not None:
            await self._tell_parent(wf)
        for child in effects.cancel_children:
            try:
                await self.cancel_one(child)
            except InvalidOption:
                pass  # never started (its parent ended between recording it and starting it)

    async def _tell_parent(self, wf: Workflow) -> None:
        now = self._clock.now()
        entry = journal.child_result(wf)  # (its parent_seq is the entry's seq)
        try:
            await self._apply(wf.parent_id, lambda parent: journal.record(parent, wf.parent_id, [entry], now))
        except InvalidOption:
            pass  # the parent is gone (dropped after its retention): nobody is left to tell

    async def _activate(self, wf: Workflow, enqueue_at: int = 0, dedup_id: str = "") -> None:
        """Produces an activation of ``wf``: a worker will claim it and replay it."""
        item = m.QueueProduceItem(
            kind=ACTIVATION_KIND,
            reference=wf.id,
            encoding=ACTIVATION_ENCODING,
            bytes=activation_payload(wf.id),
            dedup_id=dedup_id,
        )
        if enqueue_at:
            item.enqueue_at = to_datetime(enqueue_at)
        await self._produce(m.QueueProduceRequest(queue_name=wf.queue, request_timeout="30s", items=[item]))


def activation_payload(workflow_id: str) -> bytes:
    """The task call ``querator.durable.run(workflow_id)`` in the worker runtime's envelope."""
    return msgspec.json.encode({"args": [workflow_id]})


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Waits until the first of ``waits`` ends; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _digest(text: str) -> str:
    """A short fixed-length stand-in for an id, within a dedup id's 128 characters."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
