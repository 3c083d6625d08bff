"""The workflow whose journals tests/unit/durable/journals/checkout.json records, as it was when they
were recorded, and how to record them again (``python -m tests.unit.durable.recorded``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from querator.client import AsyncClient
from querator.durable import Context, Durable, dump
from querator.testing import Node
from querator.wire.workflows import PENDING, SIGNAL, SLEEP

JOURNALS = Path(__file__).parent / "journals" / "checkout.json"
"""Two journals of ``checkout``: ``done`` (completed) and ``waiting`` (running, waiting for its signal)."""


def checkout_app() -> Durable:
    app = Durable("http://unused.invalid")

    @app.step(name="charge")
    async def charge(order: str) -> str:
        return f"receipt-{order}"

    @app.step(name="pack")
    async def pack(order: str, part: int) -> str:
        return f"{order}/{part}"

    @app.step(name="ship")
    async def ship(order: str) -> str:
        return f"label-{order}"

    @app.workflow(name="checkout")
    async def checkout(ctx: Context, order: str) -> list[str]:
        receipt = await ctx.run(charge, order)
        await ctx.sleep(timedelta(days=1))
        decision = await ctx.wait_for_signal("approval")
        parts = await ctx.gather(ctx.run(pack, order, 1), ctx.run(pack, order, 2))
        label = await ctx.run(ship, order)
        return [receipt, decision, *parts, label]

    return app


async def record() -> bytes:
    app = checkout_app()
    async with Node() as node, node.running(app), AsyncClient(node.url) as client:
        done = await app.start("checkout", "o-1", workflow_id="done")
        await app.start("checkout", "o-2", workflow_id="waiting")
        await _until(client, SLEEP)
        await node.skip(timedelta(days=1, seconds=1))
        await _until(client, SIGNAL)
        await app.signal("done", "approval", "yes")
        await done.result(timeout=timedelta(seconds=30))
        return dump([await client.workflow_info("done"), await client.workflow_info("waiting")])


async def _until(client: AsyncClient, kind: str) -> None:
    """Until both workflows wait in an entry of ``kind``."""
    while True:
        infos = [await client.workflow_info(w) for w in ("done", "waiting")]
        if all(any(e.kind == kind and e.state == PENDING for e in i.entries) for i in infos):
            return
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    JOURNALS.write_bytes(asyncio.run(record()))
