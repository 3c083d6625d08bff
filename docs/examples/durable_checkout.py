"""The checkout workflow of docs/durable.md, runnable: a worker and a caller in one process.

Two orders go through it: one approved (every step runs, the parts are packed by dispatched steps, a
child workflow ships them) and one rejected (the workflow fails and its compensation refunds the charge).
Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/examples/durable_checkout.py``.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from querator.durable import Context, Durable, WorkflowFailed

app = Durable(os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319"), queue="checkout")


@app.step(max_attempts=5)
async def charge(order_id: str, cents: int) -> str:
    print(f"{order_id}: charged {cents} cents")
    return f"receipt-{order_id}"


@app.step()
async def refund(receipt: str) -> None:
    print(f"{receipt}: refunded")


@app.step()
async def pack(order_id: str, n: int) -> str:
    return f"{order_id}-part-{n}"


@app.step()
async def send(order_id: str) -> str:
    return f"{order_id}-parcel"


@app.workflow()
async def ship_order(ctx: Context, order_id: str) -> str:
    return await ctx.run(send, order_id)


@app.workflow()
async def checkout(ctx: Context, order_id: str, cents: int) -> dict[str, object]:
    receipt = await ctx.run(charge, order_id, cents)  # recorded; never run again once recorded
    ctx.on_failure(refund, receipt)  # saga: compensations run in reverse order
    await ctx.sleep(timedelta(seconds=1))  # a durable timer (hours or days work the same)
    decision = await ctx.wait_for_signal("approval", timeout=timedelta(days=2))
    if not decision["ok"]:
        raise ValueError(f"{order_id} was not approved")
    parts = await ctx.gather(*(ctx.run(pack, order_id, n) for n in range(3)))  # fan-out across workers
    shipped = await ctx.child(ship_order, order_id)  # a child workflow
    return {"receipt": receipt, "parts": parts, "shipped": shipped}


async def main() -> None:
    worker = asyncio.create_task(app.run())  # usually separate processes: querator worker checkout:app
    approved = await app.start(checkout, "o-1", 500, workflow_id="checkout-o-1")  # idempotent by id
    rejected = await app.start(checkout, "o-2", 700, workflow_id="checkout-o-2")
    await app.signal("checkout-o-1", "approval", {"ok": True})  # kept until the workflow waits for it
    await app.signal("checkout-o-2", "approval", {"ok": False})
    print(await approved.result(timeout=timedelta(minutes=1)))
    try:
        await rejected.result(timeout=timedelta(minutes=1))
    except WorkflowFailed as e:
        print(f"checkout-o-2 {e.status}: {e.error}")
    app.worker.stop()
    await worker


if __name__ == "__main__":
    asyncio.run(main())
