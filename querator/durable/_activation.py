"""The two worker tasks of a ``Durable`` app: an activation (claim a workflow, replay it, end its turn)
and a step dispatched by ``Context.gather``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from querator.client import AsyncClient, seconds_of
from querator.clock import SystemClock, from_datetime, to_datetime
from querator.durable._context import Context, ContinueAsNew, Interrupted, Lost, Suspend, server_call
from querator.durable._errors import Cancelled, NonDeterminism, StepFailed, describe, worker_lost
from querator.durable._lease import release
from querator.durable._step import step_attributes
from querator.errors import Conflict, QueratorError
from querator.wire import messages as m
from querator.wire.workflows import (
    BUSY,
    CANCEL,
    CLAIMED,
    COMPLETE,
    CONTINUE_AS_NEW,
    DONE,
    ERROR,
    FAIL,
    FINISHED,
    OTHER_VERSION,
    STEP,
    SUSPEND,
)
from querator.worker import Lease, RetryLater, current_attempt, current_lease, span

if TYPE_CHECKING:
    from querator.durable._app import Durable

log = logging.getLogger("querator.durable")

BUSY_WAIT_S = (0.2, 5.0)
"""Seconds an activation of a workflow another worker holds waits before it is tried again: at least,
and at most (else until that claim's deadline)."""
INTERRUPTED_WAIT_S = 1.0
"""Seconds before an activation the server's failure interrupted is tried again."""
MAX_FAILURE_CHARS = 4096
"""The longest reason ``_fail_unrecorded`` records: a failure must itself fit the record."""
OTHER_VERSION_WAIT_S = 5.0
"""Seconds before an activation (or a dispatched step) of a run of another app version is offered again:
a worker of its version leases it meanwhile, or it comes back (docs/adr/0049)."""
UNKNOWN_WAIT_S = 60.0
"""Seconds before an activation of a workflow this worker has no code for is offered again."""


async def activate(app: Durable, workflow_id: str) -> None:
    """One activation: claims the workflow, replays it until it suspends or ends, and records that."""
    lease = current_lease()
    held = app.claims.take(lease, workflow_id)  # first: a claim left held would lower those asked for
    client = await app.client()
    claim = held[0] if held is not None and await _fresh(client, *held, app.claim_timeout) else None
    if claim is None:
        claim = await client.claim_workflow(
            workflow_id, app.claim_timeout, namespace=app.namespace, app_version=app.version
        )
    wf = claim.workflow
    assert wf is not None
    if claim.outcome == FINISHED:
        return
    if claim.outcome == OTHER_VERSION:
        log.debug("workflow %s is a run of version %r: offered again later", workflow_id, wf.app_version)
        raise RetryLater(OTHER_VERSION_WAIT_S)
    if claim.outcome == BUSY:
        left_s = (from_datetime(wf.claim_deadline) - SystemClock().now()) / 1e6 if wf.claim_deadline else 0.0
        raise RetryLater(min(max(left_s, BUSY_WAIT_S[0]), BUSY_WAIT_S[1]))
    definition = app.workflows.get(wf.name)
    if definition is None:
        log.error("no workflow named %r in this worker: %s offered again later", wf.name, workflow_id)
        # Let the claim go now: one left to run out would count as a worker lost in the workflow's turn.
        await release(client, wf)
        raise RetryLater(UNKNOWN_WAIT_S)
    activation = _activation(lease, wf)
    renewal = asyncio.create_task(_keep_claimed(client, wf, app.claim_timeout))
    attributes = {"querator.workflow.id": workflow_id, "querator.workflow.fence": wf.fence}
    try:
        # Every turn of a run is a span in the trace the run was started in, whichever worker takes it.
        with span(f"{wf.name} workflow", attributes, definition.trace(wf.input)):
            reply = await _turns(app, client, wf, definition, activation)
        if reply.settled and lease is not None:
            lease.settled = True  # the ending completed the activation: no complete of ours
    except Lost as e:
        log.warning("workflow %s was claimed by another worker; this one stops: %s", workflow_id, e)
    except Interrupted as e:
        log.warning(
            "workflow %s: the server failed during its turn, replayed again later: %s", workflow_id, e
        )
        raise RetryLater(INTERRUPTED_WAIT_S) from e
    finally:
        renewal.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewal


async def _turns(
    app: Durable,
    client: AsyncClient,
    wf: m.WorkflowInfo,
    definition: Any,
    activation: m.WorkflowActivation | None,
) -> m.WorkflowsAppendResponse:
    """Replays the claimed workflow until a turn's ending is stored; that ending's reply."""
    while True:
        ctx = Context(app, client, wf, app.claim_timeout)
        ctx.activation = activation
        try:
            reply = await _turn(ctx, definition)
        except Exception as e:
            reply = await _fail_unrecorded(client, wf, e, activation)
        if not reply.resume:
            return reply
        # Something arrived meanwhile: replay again.
        wf = await client.workflow_journal(wf.workflow_id, namespace=app.namespace)


async def _turn(ctx: Context, definition: Any) -> m.WorkflowsAppendResponse:
    """Runs the workflow function once over the journal; ends the turn as the run ended."""
    try:
        args, kwargs = definition.arguments(ctx)
        try:
            value = await definition.fn(ctx, *args, **kwargs)
        except Suspend:
            await ctx.take_updates()  # where it waits (docs/adr/0060); a handler missing is NonDeterminism
            raise
    except Suspend as s:
        wake_at = to_datetime(s.wake_at) if s.wake_at else None
        return await ctx.append(SUSPEND, wake_at=wake_at)
    except ContinueAsNew as c:
        return await ctx.append(CONTINUE_AS_NEW, result=c.input)
    except NonDeterminism as e:
        # The code's failure, not the workflow's: once the code is fixed, workflows.resume runs it again.
        if not ctx.replaying:
            log.error("workflow %s failed (resume it once its code is fixed): %s", ctx.workflow_id, e)
        return await ctx.append(FAIL, error=describe(e), resumable=True)
    except Exception as e:
        return await _compensate(ctx, e)
    return await ctx.append(COMPLETE, result=definition.encode(value))


def _activation(lease: Lease | None, wf: m.WorkflowInfo) -> m.WorkflowActivation | None:
    """The activation item this turn runs for, which its ending completes (docs/adr/0070): the leased
    item, when it is one of the workflow's own queue (where its activations are)."""
    if lease is None or lease.queue != wf.queue_name:
        return None
    item = lease.item
    return m.WorkflowActivation(partition=lease.partition, id=item.id, lease_token=item.lease_token)


async def _fail_unrecorded(
    client: AsyncClient, wf: m.WorkflowInfo, error: Exception, activation: m.WorkflowActivation | None
) -> m.WorkflowsAppendResponse:
    """Ends a workflow whose turn's outcome could not be recorded (a result that does not serialize, a
    journal the server refuses as too large): trying the same turn again would fail the same way, for
    ever. Its unsent entries are dropped; the failure says why."""
    reason = f"the workflow's outcome could not be recorded: {describe(error)}"[:MAX_FAILURE_CHARS]
    log.error("workflow %s failed: %s", wf.workflow_id, reason)
    ending = m.WorkflowsAppendRequest(
        workflow_id=wf.workflow_id,
        fence=wf.fence,
        then=FAIL,
        error=reason,
        namespace=wf.namespace,
        activation=activation,
    )
    with server_call():
        return await client.append_workflow(ending)


async def _compensate(ctx: Context, error: Exception) -> m.WorkflowsAppendResponse:
    """The saga's undo: the compensations registered so far run as recorded steps, the last first; a
    compensation that fails for good is logged and the others still run. A suspend in between (a
    compensation's retry) resumes here at the next activation, by replay."""
    ending = CANCEL if isinstance(error, Cancelled) else FAIL
    ctx.compensating = True
    try:
        for step, args, kwargs in reversed(ctx.compensations):
            try:
                await ctx.run(step, *args, **kwargs)
            except StepFailed as e:
                if not ctx.replaying:
                    log.error("workflow %s: compensation %s failed: %s", ctx.workflow_id, step.name, e)
    except Suspend as s:
        return await ctx.append(SUSPEND, wake_at=to_datetime(s.wake_at) if s.wake_at else None)
    except NonDeterminism as e:
        return await ctx.append(FAIL, error=describe(e))
    return await ctx.append(ending, error=describe(error))


def _renewal(wf: m.WorkflowInfo, claim_timeout: str) -> m.WorkflowsAppendRequest:
    """The append of nothing that renews the claim ``wf`` holds."""
    return m.WorkflowsAppendRequest(
        workflow_id=wf.workflow_id, fence=wf.fence, claim_timeout=claim_timeout, namespace=wf.namespace
    )


async def _fresh(
    client: AsyncClient, claim: m.WorkflowsClaimResponse, age_s: float, claim_timeout: str
) -> bool:
    """Whether the claim the activation's lease made (docs/adr/0071), which came ``age_s`` ago, can be
    run on: its journal is the workflow's as long as no other worker claimed it since. One that waited a
    third of its timeout or more is renewed first, which the fence refuses once another worker claimed
    it: then the worker claims afresh, rather than replay a journal that may lack steps recorded since
    (and run them again). Both clocks tell the wait: this process's (an item held ahead of the slots,
    whatever the wall clock says) and the server's deadline (a worker paused while its leases claimed:
    their replies are read when it wakes, so they look new)."""
    wf = claim.workflow
    if claim.outcome != CLAIMED or wf is None:
        return True
    timeout_s = seconds_of(claim_timeout)
    left_s = (
        (from_datetime(wf.claim_deadline) - SystemClock().now()) / 1e6 if wf.claim_deadline else timeout_s
    )
    if age_s < timeout_s / 3 and left_s >= timeout_s * 2 / 3:
        return True
    try:
        await client.append_workflow(_renewal(wf, claim_timeout))
    except Conflict as e:
        log.info("workflow %s: the claim its lease made is gone, claimed again: %s", wf.workflow_id, e)
        return False
    except QueratorError as e:
        # Not known to be lost: replaying now could run a step recorded since, so the turn waits.
        log.warning("workflow %s: renewing the claim its lease made failed: %s", wf.workflow_id, e)
        raise RetryLater(INTERRUPTED_WAIT_S) from e
    return True


async def _keep_claimed(client: AsyncClient, wf: m.WorkflowInfo, claim_timeout: str) -> None:
    """Renews the claim (an append of nothing) a few times per claim timeout while the turn runs."""
    every_s = seconds_of(claim_timeout) / 3
    renew = _renewal(wf, claim_timeout)
    while True:
        await asyncio.sleep(every_s)
        try:
            await client.append_workflow(renew)
        except Conflict:
            return  # lost: the turn's next append finds out and stops
        except QueratorError as e:
            log.warning("renewing the claim of workflow %s failed: %s", wf.workflow_id, e)


async def run_step(
    app: Durable,
    workflow_id: str,
    seq: int,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    app_version: str = "",
) -> None:
    """Runs a step dispatched by ``Context.gather`` and records its result; a failure that is not its
    last is retried by the step's policy (the item comes back then). A step of a run of another app
    version is left to a worker of that version, as its activations are."""
    if app.version and app_version and app_version != app.version:
        raise RetryLater(OTHER_VERSION_WAIT_S)
    step = app.steps.get(name)
    if step is None:
        log.error("no step named %r in this worker: offered again later", name)
        raise RetryLater(UNKNOWN_WAIT_S)
    attempts = current_attempt()
    entry = m.WorkflowEntry(seq=seq, kind=STEP, name=name, attempts=attempts)
    limit = step.options.max_attempts
    client = await app.client()
    if limit and attempts > limit:
        # Failures stop at the limit (gives_up), so only leases lost with their worker (killed, out of
        # memory) lease it again past it: those were its attempts.
        entry.state, entry.error, entry.attempts = ERROR, worker_lost(attempts - 1), limit
    else:
        try:
            call = step.signature.convert(args, kwargs)
            admitted = await step.admitted(call.args, call.kwargs, client, app.queue, app.worker.stopped)
            if admitted:
                try:
                    attributes = step_attributes(workflow_id, seq, attempts)
                    value = await step.invoke(call.args, call.kwargs, attributes)
                finally:
                    step.release()
        except Exception as e:
            if not step.gives_up(e, attempts):
                raise RetryLater(step.options.retry(attempts)) from e
            entry.state, entry.error = ERROR, describe(e)
        else:
            if not admitted:
                raise RetryLater(0)  # this worker stops: another one runs it, now
            entry.state, entry.value = DONE, step.encode(value)
    try:
        recorded = m.WorkflowsAppendRequest(workflow_id=workflow_id, entries=[entry], namespace=app.namespace)
        await client.append_workflow(recorded)
    except Conflict as e:
        # The first result recorded wins: another run of this step (its item delivered twice) came first.
        log.warning("workflow %s: step %s's result was not recorded: %s", workflow_id, name, e)
