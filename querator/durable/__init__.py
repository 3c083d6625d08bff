"""Durable execution on Querator: workflows of recorded steps that survive any crash.

::

    from querator.durable import Durable, Context

    app = Durable("http://localhost:2319")

    @app.step(max_attempts=5)
    async def charge(order_id: str, cents: int) -> str: ...

    @app.workflow()
    async def checkout(ctx: Context, order_id: str, cents: int) -> dict:
        receipt = await ctx.run(charge, order_id, cents)      # recorded; never run again once recorded
        ctx.on_failure(refund, receipt)                       # saga: compensations run in reverse order
        await ctx.sleep(timedelta(hours=1))                   # a durable timer
        decision = await ctx.wait_for_signal("approval", timeout=timedelta(days=2))
        parts = await ctx.gather(*(ctx.run(pack, order_id, n) for n in range(10)))   # other workers
        shipped = await ctx.child(ship_order, order_id)      # a child workflow
        return {"receipt": receipt, "parts": parts, "shipped": shipped}

    handle = await app.start(checkout, "o-1", 500, workflow_id="checkout-o-1")   # idempotent by id
    await app.signal("checkout-o-1", "approval", {"ok": True})
    print(await handle.result(timeout=timedelta(minutes=5)))

and ``querator worker myapp:app`` runs the workers. The server keeps each workflow's journal; a worker
claims a workflow, replays its function against the journal (recorded calls return what they recorded)
and appends what it does next, fenced by its claim. docs/durable.md has the model and the guarantees,
docs/adr/0016 why it is built so.

Modules: ``_app`` (``Durable``, ``WorkflowHandle``), ``_context`` (``Context``: the durable calls and
replay), ``_activation`` (the worker's two tasks: an activation's turn and a dispatched step),
``_replayer`` (``Replayer``: recorded journals replayed against changed code, before a deploy; ``load``
and ``dump`` read and write them as JSON), ``_step`` (``Step``) and ``_errors``.
"""

from __future__ import annotations

from querator.durable._app import Durable, WorkflowDef, WorkflowHandle
from querator.durable._context import Context
from querator.durable._errors import (
    Cancelled,
    ChildFailed,
    DurableError,
    NonDeterminism,
    SignalTimeout,
    StepFailed,
    UnknownQuery,
    UnknownUpdate,
    UpdateFailed,
    UpdateRejected,
    UpdateTimeout,
    WorkflowFailed,
    WorkflowTimeout,
)
from querator.durable._replayer import Replayed, Replayer, dump, load
from querator.durable._step import Step

__all__ = [
    "Cancelled",
    "ChildFailed",
    "Context",
    "Durable",
    "DurableError",
    "NonDeterminism",
    "Replayed",
    "Replayer",
    "SignalTimeout",
    "Step",
    "StepFailed",
    "UnknownQuery",
    "UnknownUpdate",
    "UpdateFailed",
    "UpdateRejected",
    "UpdateTimeout",
    "WorkflowDef",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowTimeout",
    "dump",
    "load",
]
