"""Durable workflows over HTTP: start, info, list, signal, cancel and result for callers; claim and append
for the workers that run them (docs/durable.md).

Every write reads the record's head (or takes the one this node wrote last: ``Heads``), applies a rule
of ``storage.journal`` and stores the result by compare-and-set, again on the head that won when another
write came first; a claimant's append stores the entries its rule moved out of the head as journal rows
in the same write (docs/adr/0046). A workflow moves by
*activations*: items of its task queue, produced here, that tell a worker to claim the workflow and replay
it. What a rule asks for besides the write (``Effects``) is done after it, except a timer's activation,
which is produced before the suspend that relies on it is stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, TypeVar

import msgspec
from msgspec.structs import replace

from querator.clock import MICROS, Clock, from_datetime, to_datetime
from querator.errors import InvalidOption, QueratorError, no_such_queue, try_again
from querator.service._batcher import KeyedBatcher
from querator.service._conversion import workflow_entry, workflow_info
from querator.service._heads import Heads
from querator.service._result_waits import ResultWaits
from querator.service._update_waits import UpdateWaits
from querator.service._validation import (
    SYSTEM_NAMESPACE,
    check_app_version,
    check_fork,
    check_list_workflows,
    check_signal,
    check_start,
    check_terminate,
    check_update,
    check_workflow_append,
    check_workflow_id,
    check_workflow_info,
    check_workflows_lease,
    claim_timeout,
    namespace,
    request_timeout,
    workflow_timeout,
)
from querator.storage import journal
from querator.storage.journal import Effects, Ending
from querator.storage.workflows import Entry, Signal, Workflow, WorkflowRows, split_stored_id, stored_id
from querator.tenancy import RequestContext
from querator.tenancy import permissions as perm
from querator.wire import messages as m
from querator.wire.search import matches_search
from querator.wire.workflows import CLAIMED, FINISHED, RUNNING, child_id

log = logging.getLogger(__name__)

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
SWEEP_GRACE_US: Final = 5 * 60 * MICROS
"""How long a workflow with something to do stays untouched before a sweep wakes it: longer than any
activation's way from its record's write to a worker's claim under load."""
SWEEP_PAGE: Final = 1000
LEASE_CLAIM_BYTES: Final = journal.MAX_RECORD_BYTES
"""The most bytes of workflows (heads and journals) the claims of one ``workflows.lease`` reply carry:
a claim past them is let go, and its item goes without (docs/adr/0071)."""

Recorded = tuple[str, list[Entry], int]
"""Results recorded from outside a workflow's claim: its id in messages, the entries, the time."""
Batch = list[Recorded]
Outcomes = list[BaseException | None]
LeaseClaims = list[m.WorkflowsLeaseClaim]
Produce = Callable[[m.QueueProduceRequest], Awaitable[m.QueueProduceResponse]]
Complete = Callable[[RequestContext, m.QueueCompleteRequest], Awaitable[None]]
"""``queue.complete`` for a caller."""
Lease = Callable[[RequestContext, m.QueueLeaseRequest], Awaitable[tuple[m.QueueLeaseResponse, str]]]
"""``queue.lease`` for a caller: the reply, and the namespace of the queue."""
Release = Callable[[m.QueueLeaseResponse], None]
"""Gives back the items of a lease whose reply never reached its client."""
QueueNamespace = Callable[[str], Awaitable[str | None]]
"""The namespace of a queue, None when there is no such queue."""
Authorize = Callable[[RequestContext, str, str], Awaitable[None]]
"""With tenancy (docs/tenancy.md): raises 403 unless the caller of a context holds a permission (third
argument) in a namespace (second argument)."""
Rule = Callable[[Workflow | None, Mapping[int, Entry]], tuple[T, Workflow | None]]
"""A rule of ``storage.journal`` on the stored head and the journal rows it asked for."""
Before = Callable[[T, Workflow | None], Awaitable[None]]


class Workflows:
    """The workflow routes of one node, over the store's workflow rows."""

    def __init__(
        self,
        rows: WorkflowRows,
        clock: Clock,
        produce: Produce,
        complete: Complete,
        queue_namespace: QueueNamespace,
        lease: Lease,
        release: Release,
        retention_us: int = DEFAULT_RETENTION_US,
        authorize: Authorize | None = None,
    ) -> None:
        self._rows = rows
        self._lease = lease
        self._release = release
        self._releasing: set[asyncio.Task[None]] = set()
        """Claims of undelivered ``workflows.lease`` replies being let go."""
        self._authorize = authorize
        self._clock = clock
        self._produce = produce
        self._complete = complete
        self._queue_namespace = queue_namespace
        self._retention_us = retention_us
        self._results = ResultWaits(rows, clock)
        """The ``result`` calls waiting on this node (by stored id, as every key here)."""
        self._updates = UpdateWaits(rows, clock)
        self._fan_in: KeyedBatcher[Recorded] = KeyedBatcher(self._record_together)
        """Results from outside the claim (dispatched steps, children), written together per workflow."""
        self._heads = Heads()

    # -- callers ---------------------------------------------------------------------------------------

    async def start(self, ctx: RequestContext, req: m.WorkflowsStartRequest) -> m.WorkflowsStartResponse:
        """Starts a workflow in its queue's namespace, or returns the one of that id there (idempotent by
        ``workflow_id``, to a caller who may read it). A child's parent is in the same namespace, and its
        id is the one its parent gives it (``<parent id>/<parent seq>``)."""
        check_start(req)
        timeout_us = workflow_timeout(req.timeout)
        owner = await self._queue_namespace(req.queue_name)
        # A queue that does not exist is checked in _system, so that a caller refused in a namespace
        # gets the same 403 whether the queue is there or nowhere (docs/tenancy.md).
        await self._check(ctx, owner or SYSTEM_NAMESPACE, perm.QUEUE_PRODUCE)
        if owner is None:
            raise no_such_queue(req.queue_name)
        key = stored_id(owner, req.workflow_id)
        parent_key = stored_id(owner, req.parent_id) if req.parent_id else ""
        if req.parent_id:
            await self._check_parent(req, parent_key)
        now = self._clock.now()
        new = Workflow(
            id=key,
            name=req.name,
            queue=req.queue_name,
            input=req.input,
            encoding=req.encoding,
            parent_id=parent_key,
            parent_seq=req.parent_seq,
            timeout_us=timeout_us,
            deadline=now + timeout_us if timeout_us else 0,
            app_version=req.app_version,
            search_attributes=req.search_attributes,
        )
        return await self._store_new(ctx, owner, new, now)

    async def fork(self, ctx: RequestContext, req: m.WorkflowsForkRequest) -> m.WorkflowsStartResponse:
        """Starts a new run of a workflow with its input and the journal entries before ``from_step``
        (``journal.fork``; DBOS's fork, docs/adr/0048): the caller reads the original and starts a
        workflow in its namespace. The original is left as it is."""
        check_fork(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_STATS)
        owner = namespace(req.namespace)
        await self._check(ctx, owner, perm.QUEUE_PRODUCE)
        original = await self._rows.get_workflow(key)
        if original is None:
            raise journal.not_found(req.workflow_id)
        # The fork copies the journal before from_step, and checks the gather it may cut: all of it.
        rows = await self._rows.get_entries(key, 1, original.length) if original.length else []
        original = replace(original, entries=journal.entries_of(original, rows))
        new_id = req.new_workflow_id or secrets.token_hex(16)
        new = journal.fork(original, stored_id(owner, new_id), req.from_step, self._clock.now())
        return await self._store_new(ctx, owner, new, self._clock.now())

    async def _store_new(
        self, ctx: RequestContext, owner: str, new: Workflow, now: int
    ) -> m.WorkflowsStartResponse:
        """Stores a started (or forked) workflow unless its id exists, and activates it: now, and at its
        deadline if it has one. An existing run of that id is returned to a caller who may read it."""
        # A new id is the rule: guess there is no head, and read only when the insert is refused.
        created, wf = await self._write(
            new.id, lambda current, _: journal.start(current, new, now), absent=True
        )
        assert wf is not None
        if created:
            # Only the start that created the record produces these, once: no dedup id, whose marker
            # would cost every workflow a write and a check (on Cassandra two Paxos rounds) to guard
            # against repeats that never make them (docs/adr/0072). The deadline's goes first, so that
            # a crash between the two leaves the sweep a workflow never claimed, which it wakes (and
            # its deadline is checked at every claim).
            if wf.deadline:
                await self._activate(wf, enqueue_at=wf.deadline)
            await self._activate(wf)
        else:  # an existing run is what a read returns: the caller must be allowed one
            await self._check(ctx, owner, perm.QUEUE_STATS)
            journal.check_same_run(wf, new)
            if journal.stranded(wf, now, 0):
                # Never claimed (its first activation may be the one a crash lost), or with nothing left
                # to move it on (its activation expired or deleted by hand, its last claim run out): a
                # start wakes it, as a sweep would. The dedup id makes repeated starts produce one until
                # the workflow moves (a claimed one's stored version has changed since it was made): a
                # start retried at once makes one activation besides the first, which a claim finds busy
                # or finished, or replays with nothing new.
                moved = f":{wf.version}" if wf.fence else ""
                await self._activate(wf, dedup_id=f"start:{_digest(wf.id)}{moved}")
        return m.WorkflowsStartResponse(created=created, workflow=workflow_info(wf, journal=False))

    async def _check_parent(self, req: m.WorkflowsStartRequest, parent_key: str) -> None:
        """A child names a parent of its namespace, at the id its parent gives it: nobody records a
        result in a workflow by naming it the parent of another, or takes a child's id before it."""
        if req.workflow_id != child_id(req.parent_id, req.parent_seq):
            raise InvalidOption(
                f"parent id is invalid; a child's workflow id is '<parent id>/<parent seq>',"
                f" '{child_id(req.parent_id, req.parent_seq)}', not '{req.workflow_id}'"
            )
        if await self._rows.get_workflow(parent_key) is None:
            raise InvalidOption(f"workflow does not exist; no parent workflow '{req.parent_id}'")

    async def info(self, ctx: RequestContext, req: m.WorkflowsInfoRequest) -> m.WorkflowInfo:
        limit = check_workflow_info(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_STATS)
        wf = await self._rows.get_workflow(key)
        if wf is None:
            raise journal.not_found(req.workflow_id)
        # A page (after seq ``after``) of a journal that may be far longer than a reply should hold.
        first, last = journal.info_span(wf, req.after, limit)
        rows = await self._rows.get_entries(key, first, last) if last >= first else []
        found = [e for e in journal.entries_of(wf, rows) if e.seq >= first]
        return workflow_info(replace(wf, entries=journal.info_page(found, limit)), journal=True)

    async def list(self, ctx: RequestContext, req: m.WorkflowsListRequest) -> m.WorkflowsListResponse:
        limit = check_list_workflows(req)
        listed = namespace(req.namespace)
        await self._check(ctx, listed, perm.QUEUE_LIST)
        found = await _namespace_page(
            self._rows, listed, req.status, req.pivot, limit, req.app_version, req.search
        )
        return m.WorkflowsListResponse(workflows=[workflow_info(wf, journal=False) for wf in found])

    async def signal(self, ctx: RequestContext, req: m.WorkflowsSignalRequest) -> m.Reply:
        check_signal(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_PRODUCE)
        sent = Signal(id=req.signal_id or secrets.token_hex(12), name=req.name, payload=req.payload)
        now = self._clock.now()
        # A send repeated with its id (a lost reply, or a caller replaying) wakes the workflow once: the
        # repeat's produce is a duplicate, and still produces the wake-up if a crash lost the first's.
        await self._apply(
            key,
            lambda wf, _: journal.signal(wf, req.workflow_id, sent, now),
            dedup_id=f"signal:{_digest(key + chr(0) + sent.id)}",
        )
        return m.OK_REPLY

    async def update(self, ctx: RequestContext, req: m.WorkflowsUpdateRequest) -> m.WorkflowsUpdateResponse:
        """Records an update for the workflow to take (``journal.request_update``), then waits for the
        answer its turn records, until ``request_timeout`` (docs/adr/0060). The caller validated it;
        the request is checked whole, and authorized, before anything is recorded or waited for."""
        timeout_us = check_update(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_PRODUCE)
        now = self._clock.now()
        deadline = now + ctx.within_us(timeout_us, now)
        self._updates.check_room()
        sent = Signal(id=req.update_id, name=req.name, payload=req.payload)
        # Shielded: a caller that leaves mid-write must not leave the update kept with no wake-up.
        await asyncio.shield(
            self._apply(
                key,
                lambda wf, _: journal.request_update(wf, req.workflow_id, sent, now),
                dedup_id=f"update:{_digest(key + chr(0) + sent.id)}",
            )
        )
        return await self._updates.wait(key, req.workflow_id, req.update_id, deadline)

    async def cancel(self, ctx: RequestContext, req: m.WorkflowsCancelRequest) -> m.Reply:
        check_workflow_id(req.workflow_id)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_PRODUCE)
        await self._cancel_one(key, req.workflow_id)
        return m.OK_REPLY

    async def resume(self, ctx: RequestContext, req: m.WorkflowsResumeRequest) -> m.Reply:
        check_workflow_id(req.workflow_id)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_UPDATE)
        now = self._clock.now()
        await self._apply(
            key,
            lambda wf, _: journal.resume(wf, req.workflow_id, now),
            dedup_id=f"resume:{_digest(key)}:{now}",
        )
        return m.OK_REPLY

    async def terminate(self, ctx: RequestContext, req: m.WorkflowsTerminateRequest) -> m.Reply:
        check_terminate(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_UPDATE)
        await self._terminate_one(key, req.workflow_id, req.reason)
        return m.OK_REPLY

    async def _terminate_one(self, key: str, workflow_id: str, reason: str) -> None:
        """Terminates the workflow stored as ``key``, then its unfinished children, with no worker."""
        now = self._clock.now()
        effects, wf = await self._write(
            key, lambda current, _: journal.terminate(current, workflow_id, reason, now, self._retention_us)
        )
        children, effects.cancel_children = effects.cancel_children, []
        await self._carry_out(key, effects, wf)
        for child in children:
            try:
                await self._terminate_one(child, split_stored_id(child)[1], f"its parent {workflow_id} was")
            except InvalidOption:
                pass  # never started (its parent ended between recording it and starting it)

    async def _cancel_one(self, key: str, workflow_id: str) -> None:
        """Cancels the workflow stored as ``key`` (``workflow_id`` in messages)."""
        now = self._clock.now()
        # Asked again, it wakes the workflow once (as a repeated signal): a workflow is cancelled once.
        await self._apply(
            key, lambda wf, _: journal.cancel(wf, workflow_id, now), dedup_id=f"cancel:{_digest(key)}"
        )

    async def result(self, ctx: RequestContext, req: m.WorkflowsResultRequest) -> m.WorkflowInfo:
        """The workflow once it finished, or as it is when ``request_timeout`` passed."""
        check_workflow_id(req.workflow_id)
        now = self._clock.now()
        deadline = now + ctx.within_us(request_timeout(req.request_timeout), now)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_STATS)
        return await self._results.wait(key, req.workflow_id, deadline)

    async def _key(self, ctx: RequestContext, namespace_name: str, workflow_id: str, permission: str) -> str:
        """The stored id of ``workflow_id`` in the namespace a request names ("": ``_system``), once the
        caller may use ``permission`` there (403 otherwise, whether the workflow exists or not)."""
        owner = namespace(namespace_name)
        await self._check(ctx, owner, permission)
        return stored_id(owner, workflow_id)

    async def _check(self, ctx: RequestContext, owner: str, permission: str) -> None:
        """With tenancy, 403 unless the caller holds ``permission`` in the namespace ``owner``."""
        if self._authorize is not None:
            await self._authorize(ctx, owner, permission)

    # -- workers ---------------------------------------------------------------------------------------

    async def claim(self, ctx: RequestContext, req: m.WorkflowsClaimRequest) -> m.WorkflowsClaimResponse:
        check_workflow_id(req.workflow_id)
        check_app_version(req.app_version)
        until = self._clock.now() + claim_timeout(req.claim_timeout)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_LEASE)
        claimed = await self._claim(key, req.workflow_id, until, req.app_version)
        return await self._claim_reply(key, claimed)

    async def _claim(
        self, key: str, workflow_id: str, until: int, app_version: str, claimant: str = ""
    ) -> journal.Claim:
        now = self._clock.now()
        outcome, _ = await self._write(
            key, lambda wf, _: journal.claim(wf, workflow_id, now, until, app_version, claimant)
        )
        if outcome.outcome == FINISHED and outcome.workflow.parent_id:
            # Its parent may not have heard (a crash between the two writes): telling it again is harmless.
            await self._tell_parent(outcome.workflow)
        return outcome

    async def _claim_reply(self, key: str, claimed: journal.Claim) -> m.WorkflowsClaimResponse:
        wf = claimed.workflow
        if claimed.outcome != CLAIMED:
            return m.WorkflowsClaimResponse(outcome=claimed.outcome, workflow=workflow_info(wf, False))
        # The claimant replays all of the run: its rows up to the head's length.
        rows = (
            await self._rows.get_entries(key, wf.seq_base + 1, wf.length) if wf.length > wf.seq_base else []
        )
        full = replace(wf, entries=journal.entries_of(wf, rows))
        return m.WorkflowsClaimResponse(outcome=claimed.outcome, workflow=workflow_info(full, True))

    async def lease(self, ctx: RequestContext, req: m.WorkflowsLeaseRequest) -> m.WorkflowsLeaseResponse:
        """``queue.lease`` of a durable app's task queue, and the claims of the workflows of up to
        ``claims`` of the activations leased, made for the caller as ``claim`` would (docs/adr/0071): the
        lease's permission (``queue.lease`` in the queue's namespace) is the claim's, and a workflow is
        in its queue's namespace. An activation claimed elsewhere, or whose claim failed or had no room
        in the reply, goes without one: its worker claims it itself."""
        check_workflows_lease(req)
        timeout_us = claim_timeout(req.claim_timeout)
        queue_lease = m.QueueLeaseRequest(
            queue_name=req.queue_name,
            batch_size=req.batch_size,
            client_id=req.client_id,
            request_timeout=req.request_timeout,
        )
        leased, owner = await self._lease(ctx, queue_lease)
        reply = m.WorkflowsLeaseResponse(
            queue_name=leased.queue_name, partition=leased.partition, items=leased.items
        )
        # Only among the first ``claims`` items, which the worker starts first: a claim made for an item
        # that waits behind others for a slot could run out before its turn, and count a worker lost.
        activations = [i for i in leased.items[: req.claims] if is_activation(i)]
        if activations:
            # Shielded: a caller gone mid-claims gets what it leased given back, and its claims let go.
            claiming = asyncio.ensure_future(self._claims(owner, activations, timeout_us, req))
            try:
                reply.claims = await asyncio.shield(claiming)
            except asyncio.CancelledError:
                claiming.add_done_callback(lambda done: self._lost(reply, done))
                raise
        return reply

    async def _claims(
        self, owner: str, items: Sequence[m.QueueLeaseItem], timeout_us: int, req: m.WorkflowsLeaseRequest
    ) -> LeaseClaims:
        """The claims of the workflows ``items`` name, in namespace ``owner``, with their journals within
        ``LEASE_CLAIM_BYTES`` in all: one past it is let go, and its item goes without."""
        until = self._clock.now() + timeout_us
        keys = [stored_id(owner, i.reference) for i in items]
        made = await asyncio.gather(
            *(
                self._claim(key, i.reference, until, req.app_version, req.claimant)
                for key, i in zip(keys, items, strict=True)
            ),
            return_exceptions=True,
        )
        room, kept, let_go = LEASE_CLAIM_BYTES, [], []
        for key, item, claimed in zip(keys, items, made, strict=True):
            if not isinstance(claimed, journal.Claim):
                continue  # its worker's own claim meets the failure again
            # Any outcome counts: a finished run's reply carries its result.
            size = journal.head_bytes(claimed.workflow) + claimed.workflow.journal_bytes
            if size > room:
                if claimed.outcome == CLAIMED:
                    let_go.append(self._let_go(key, claimed.workflow.fence))
                continue
            room -= size
            kept.append((key, item, claimed))
        replies = await asyncio.gather(
            *(self._claim_reply(key, claimed) for key, _, claimed in kept), return_exceptions=True
        )
        claims: LeaseClaims = []
        for (key, item, claimed), r in zip(kept, replies, strict=True):
            if isinstance(r, m.WorkflowsClaimResponse):
                claims.append(m.WorkflowsLeaseClaim(id=item.id, outcome=r.outcome, workflow=r.workflow))
            elif not isinstance(r, Exception):
                raise r
            elif claimed.outcome == CLAIMED:  # its journal could not be read: its worker claims it again
                let_go.append(self._let_go(key, claimed.workflow.fence))
        await asyncio.gather(*let_go)
        return claims

    async def _let_go(self, key: str, fence: int) -> None:
        """Releases the claim of ``fence`` (``journal.release``), best effort: one left runs out."""
        workflow_id = split_stored_id(key)[1]
        try:
            await self._write(key, lambda current, _: journal.release(current, workflow_id, fence))
        except QueratorError as e:
            log.info("claim %d of %s not let go, left to run out: %s", fence, workflow_id, e.message)

    def _lost(self, reply: m.WorkflowsLeaseResponse, claiming: asyncio.Future[LeaseClaims]) -> None:
        """The claims of a ``workflows.lease`` whose caller went away while they were made are done."""
        if not claiming.cancelled() and claiming.exception() is None:
            reply.claims = claiming.result()
        self.lease_undelivered(reply)

    def lease_undelivered(self, reply: m.WorkflowsLeaseResponse) -> None:
        """A ``workflows.lease`` reply that never reached its client: its claims are let go (not counted
        as workers lost), then its items given back as a lease's are."""
        task = asyncio.create_task(self._undeliver(reply))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _undeliver(self, reply: m.WorkflowsLeaseResponse) -> None:
        # Claims first: an item given back first may be leased at once by a worker whose own claim
        # would then find the workflow busy, and wait.
        await asyncio.gather(
            *(
                self._let_go(
                    stored_id(namespace(c.workflow.namespace), c.workflow.workflow_id), c.workflow.fence
                )
                for c in reply.claims
                if c.outcome == CLAIMED and c.workflow is not None
            )
        )
        self._release(
            m.QueueLeaseResponse(queue_name=reply.queue_name, partition=reply.partition, items=reply.items)
        )

    async def append(self, ctx: RequestContext, req: m.WorkflowsAppendRequest) -> m.WorkflowsAppendResponse:
        check_workflow_append(req)
        key = await self._key(ctx, req.namespace, req.workflow_id, perm.QUEUE_LEASE)
        now = self._clock.now()
        entries = [workflow_entry(e) for e in req.entries]
        if req.fence == 0:
            await self._fan_in.submit(key, (req.workflow_id, entries, now))
            return m.WorkflowsAppendResponse()
        until = now + claim_timeout(req.claim_timeout) if req.claim_timeout else 0
        wake_at = from_datetime(req.wake_at) if req.wake_at is not None else 0
        ending = Ending(req.then, wake_at, req.result, req.error, req.resumable)
        timers: set[int] = set()
        wrote = False

        def rule(wf: Workflow | None, recorded: Mapping[int, Entry]) -> tuple[Effects, Workflow | None]:
            nonlocal wrote
            effects, write = journal.append(
                wf, req.workflow_id, req.fence, entries, ending, now, until, self._retention_us, recorded
            )
            wrote = write is not None
            return effects, write

        async def schedule(effects: Effects, current: Workflow | None) -> None:
            """A timer's activation is produced before the suspend that relies on it is stored."""
            if effects.timer_at and effects.timer_at not in timers and current is not None:
                await self._activate(current, enqueue_at=effects.timer_at)
                timers.add(effects.timer_at)

        effects, write = await self._write(key, rule, entries, schedule)
        await self._carry_out(key, effects, write if wrote else None)
        if effects.drop_through and wrote:
            await self._drop_earlier_runs(key, effects.drop_through)
        timed_out = write is not None and write.timed_out  # ``write``: the head as it is now
        settled = not effects.resume and await self._settle(ctx, req.activation, write)
        return m.WorkflowsAppendResponse(resume=effects.resume, timed_out=timed_out, settled=settled)

    async def _settle(
        self, ctx: RequestContext, activation: m.WorkflowActivation | None, wf: Workflow | None
    ) -> bool:
        """Completes the activation a turn ran for, with the turn's ending stored (docs/adr/0070): as the
        worker's own ``queue.complete`` would, for the same caller, in the workflow's queue (where its
        activations are). False when it is not completed (its lease lost, say): the worker then
        completes it itself, or it comes back and its claim finds nothing new, as before."""
        if activation is None or wf is None:
            return False
        tokens = [activation.lease_token] if activation.lease_token else []
        done = m.QueueCompleteRequest(
            queue_name=wf.queue,
            partition=activation.partition,
            request_timeout="30s",  # as an activation's produce: within the caller's own deadline
            ids=[activation.id],
            lease_tokens=tokens,
        )
        try:
            await self._complete(ctx, done)
        except QueratorError as e:
            workflow_id = split_stored_id(wf.id)[1]
            log.info("activation %s of %s left to its worker: %s", activation.id, workflow_id, e.message)
            return False
        return True

    # -- writes and their effects -----------------------------------------------------------------------

    async def _apply(self, key: str, rule: Rule[Effects], dedup_id: str = "") -> None:
        """``dedup_id``: of the activation the write may produce."""
        effects, wf = await self._write(key, rule)
        await self._carry_out(key, effects, wf, dedup_id)

    async def _write(
        self,
        key: str,
        rule: Rule[T],
        wanted: Sequence[Entry] = (),
        before: Before[T] | None = None,
        absent: bool = False,
    ) -> tuple[T, Workflow | None]:
        """Runs ``rule`` on the head stored as ``key`` (with the journal rows at the seqs of ``wanted``
        that it needs) and stores what it returns, by compare-and-set, with the rows it moved out
        (``Effects.rows``), after ``before``; the rule's outcome and the head as it is now.

        The first attempt guesses the head and reads nothing: the one this node wrote last, if it kept
        it, else none at all when ``absent`` (a start's new id). Its compare-and-set fails if the store
        holds another. A rule that writes nothing or refuses on a guess is run again on the head read
        from the store."""
        kept = self._heads.get(key)
        guessed = kept is not None or absent
        for _ in range(WRITE_ATTEMPTS):
            current = kept if guessed else await self._rows.get_workflow(key)
            span = journal.rows_to_read(current, wanted)
            found = await self._rows.get_entries(key, *span) if span and current is not None else []
            try:
                outcome, write = rule(current, journal.recorded_rows(current, found) if current else {})
            except QueratorError:
                if not guessed:
                    raise
                guessed = False
                continue
            if write is None and guessed:
                guessed = False
                continue
            if before is not None:
                await before(outcome, current)
            rows = outcome.rows if isinstance(outcome, Effects) else []
            if write is None:
                return outcome, current
            stored = await self._put(key, write, current, rows)
            if stored is not None:
                return outcome, stored
            guessed = False
        raise try_again("workflow is written by others too often")

    async def _put(
        self, key: str, write: Workflow, current: Workflow | None, rows: Sequence[Entry]
    ) -> Workflow | None:
        """Stores ``write`` in place of ``current`` (and ``rows``); the head stored, None if another write
        came first."""
        version = current.version if current is not None else 0
        stored = replace(write, version=journal.next_version(current, self._clock.now()))
        if await self._rows.put_workflow(stored, version, rows):
            self._heads.wrote(key, stored)
            return stored
        self._heads.forget(key)
        return None

    async def _carry_out(self, key: str, effects: Effects, wf: Workflow | None, dedup_id: str = "") -> None:
        if wf is not None:
            self._updates.changed(key)  # an update's answer, or its workflow's end
        if wf is not None and wf.status != RUNNING:
            self._results.finished(key, wf)
        if effects.wake and wf is not None:
            await self._activate(wf, dedup_id=dedup_id)
        if effects.parent is not None and wf is not None:
            await self._tell_parent(wf)
        for child in effects.cancel_children:
            try:
                await self._cancel_one(child, split_stored_id(child)[1])
            except InvalidOption:
                pass  # never started (its parent ended between recording it and starting it)

    async def _drop_earlier_runs(self, key: str, last_seq: int) -> None:
        """Drops the rows of the runs before the one a continue-as-new started. They are never read again
        (``journal.recorded_rows``), so a failure, or a crash before this, only leaves them until a
        later continue or the record's purge drops them: the append has succeeded all the same."""
        try:
            await self._rows.drop_entries(key, last_seq)
        except QueratorError as e:
            log.warning("the rows of %s's earlier runs stay for now: %s", split_stored_id(key)[1], e.message)

    async def _record_together(self, key: str, batch: Batch) -> Outcomes:
        """Records the results of ``batch`` in the workflow stored as ``key`` in one write (``journal.record``
        for each, in turn, on the record as the ones before left it); for each, None or the error it
        alone got. The workflow is woken once, if any of them wakes it."""
        outcomes: Outcomes = []

        def rule(current: Workflow | None, recorded: Mapping[int, Entry]) -> tuple[bool, Workflow | None]:
            outcomes.clear()
            wf, written, wake = current, None, False
            for workflow_id, entries, now in batch:
                try:
                    effects, updated = journal.record(wf, workflow_id, entries, now, recorded)
                except QueratorError as e:
                    outcomes.append(e)
                    continue
                outcomes.append(None)
                wake = wake or effects.wake
                if updated is not None:
                    wf = written = updated
            return wake, written

        wake, wf = await self._write(key, rule, [e for _, entries, _ in batch for e in entries])
        if wake:
            await self._carry_out(key, Effects(wake=True), wf)
        return outcomes[:]

    async def _tell_parent(self, wf: Workflow) -> None:
        now = self._clock.now()
        entry = journal.child_result(wf)  # (its parent_seq is the entry's seq)
        parent_id = split_stored_id(wf.parent_id)[1]
        try:
            await self._fan_in.submit(wf.parent_id, (parent_id, [entry], now))
        except InvalidOption:
            pass  # the parent is gone (dropped after its retention): nobody is left to tell

    async def end_of_queue(self, queue: str, owner: str) -> int:
        """Terminates the running workflows of ``queue`` (in namespace ``owner``), which was deleted: no
        activation can reach them any more. Finished ones stay until their retention ends, readable in
        their namespace only. How many."""
        ended = 0
        pivot = ""
        while True:
            page = await _namespace_page(self._rows, owner, RUNNING, pivot, SWEEP_PAGE)
            for wf in page:
                if wf.queue == queue and wf.status == RUNNING:
                    workflow_id = split_stored_id(wf.id)[1]
                    await self._terminate_one(wf.id, workflow_id, f"its queue {queue} was deleted")
                    ended += 1
            if not page:
                return ended
            pivot = split_stored_id(page[-1].id)[1] + "\x01"  # past the last one read

    async def sweep(self, grace_us: int = SWEEP_GRACE_US) -> int:
        """Wakes every running workflow that may have no activation left (``journal.stranded``): one
        more is harmless (a claim finds the workflow busy or with nothing new), none leaves it running
        for ever. Pages through the running ones; how many it woke. One node of a cluster runs it."""
        woken = 0
        pivot = ""
        while True:
            page = await self._rows.list_workflows(RUNNING, pivot, SWEEP_PAGE)
            now = self._clock.now()
            for wf in page:
                if wf.id == pivot or not journal.stranded(wf, now, grace_us):
                    continue
                try:  # once per version of the record: sweeps before it changes produce it once
                    await self._activate(wf, dedup_id=f"sweep:{_digest(wf.id)}:{wf.version}")
                except QueratorError as e:  # its queue deleted, say: the others are still swept
                    log.warning("workflow %s could not be woken: %s", split_stored_id(wf.id)[1], e.message)
                else:
                    woken += 1
            if not page or page[-1].id == pivot:
                return woken
            pivot = page[-1].id

    async def _activate(self, wf: Workflow, enqueue_at: int = 0, dedup_id: str = "") -> None:
        """Produces an activation of ``wf``: a worker will claim it and replay it (by its id in its
        namespace, which the worker knows: docs/durable.md, "Namespaces")."""
        workflow_id = split_stored_id(wf.id)[1]
        item = m.QueueProduceItem(
            kind=ACTIVATION_KIND,
            reference=workflow_id,
            encoding=ACTIVATION_ENCODING,
            bytes=activation_payload(workflow_id),
            dedup_id=dedup_id,
        )
        if enqueue_at:
            item.enqueue_at = to_datetime(enqueue_at)
        await self._produce(m.QueueProduceRequest(queue_name=wf.queue, request_timeout="30s", items=[item]))


FILTERED_PAGE: Final = 100
"""Records a list filtered by app version or search attributes reads from the store at least per call
(docs/adr/0061): a rare match costs a call per hundred records scanned, not one per record."""


async def _namespace_page(
    rows: WorkflowRows,
    listed: str,
    status: str,
    pivot: str,
    limit: int,
    app_version: str = "",
    search: Mapping[str, str] | None = None,
) -> list[Workflow]:
    """The workflows of one namespace (and of ``app_version``, "" for any, holding every attribute of
    ``search``: ``matches_search``) from ``pivot``, in id order.
    Another namespace's stored ids sort among ``_system``'s (which have no prefix), so a page of the
    store may hold none of the ones asked for: read on past them until one is found or the store ends
    (as the store reads past other statuses). A backend's page ends early at LIST_PAGE_RECORD_BYTES of
    records (storage.workflows); so does this one, then."""
    found: list[Workflow] = []
    start = stored_id(listed, pivot)
    filtered = bool(app_version or search)
    while len(found) < limit:
        asked = limit - len(found)
        if filtered:  # a filter may skip most records: a page of one record would be a call per record
            asked = max(asked, FILTERED_PAGE)
        page = await rows.list_workflows(status, start, asked)
        for wf in page:
            owner, _ = split_stored_id(wf.id)
            if owner == listed:
                if (not app_version or wf.app_version == app_version) and matches_search(
                    wf.search_attributes, search or {}
                ):
                    found.append(wf)
                    if len(found) == limit:
                        return found  # the caller pages on from this one's id
            elif listed != SYSTEM_NAMESPACE:
                return found  # past the namespace's prefix: none of its ids follow
        if not page or (len(page) < asked and found):
            return found  # the end, or a page ended early by its bytes
        # Past the last one read: no stored id holds a control character but the separator, so none
        # sorts between it and this.
        start = page[-1].id + "\x01"
    return found


def is_activation(item: m.QueueLeaseItem) -> bool:
    """Whether ``item`` is an activation of the workflow its reference names, as ``_activate`` makes them
    (a producer's item of that kind with another payload is not claimed by a lease: its worker claims
    what the payload names)."""
    if item.kind != ACTIVATION_KIND or item.bytes != activation_payload(item.reference):
        return False
    try:  # a reference no workflow id can be (a separator in it) would name another namespace's
        check_workflow_id(item.reference)
    except InvalidOption:
        return False
    return True


def activation_payload(workflow_id: str) -> bytes:
    """The task call ``querator.durable.run(workflow_id)`` in the worker runtime's envelope."""
    return msgspec.json.encode({"args": [workflow_id]})


def _digest(text: str) -> str:
    """A short fixed-length stand-in for an id, within a dedup id's 128 characters."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
