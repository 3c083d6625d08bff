"""Webhook delivery with back-off and a dead-letter queue (docs/recipes/README.md).

Each webhook is a task call; a failed POST is retried later with exponential back-off (the wait is a
scheduled item in the server, not a sleeping worker); a receiver that answers 4xx will never accept it,
so that delivery is dead-lettered at once; after ``max_attempts`` failures the item goes to
``webhooks-dead``, with the error of each attempt, where an operator can look at it and redrive it.
Every attempt sends the job's id as its idempotency key: the same on each retry, though the retried
item has a new id, so the receiver can drop a delivery it has seen.

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/webhooks.py``.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
import msgspec
from aiohttp import web

from querator.client import AsyncClient
from querator.worker import Permanent, Worker, backoff, current_job_id

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")
worker = Worker(ENDPOINT, concurrency=8)


@worker.task(
    queue="webhooks",
    max_attempts=4,
    retry=backoff.exponential(first="200ms", cap="2s"),
    dead_queue="webhooks-dead",
    create_queue=True,
)
async def deliver(url: str, event: dict[str, str]) -> None:
    headers = {"Idempotency-Key": current_job_id()}  # one per delivery, whatever the attempt
    async with aiohttp.ClientSession() as http, http.post(url, json=event, headers=headers) as reply:
        if 400 <= reply.status < 500:
            raise Permanent(f"{url} refused the webhook: {reply.status}")  # no point trying again
        reply.raise_for_status()  # 5xx: raise, and the worker retries after its back-off


async def settled(client: AsyncClient) -> bool:
    """Nothing left to deliver: no item queued, leased or waiting for its retry."""
    stats = await client.stats("webhooks")
    return all(p.total == 0 and p.scheduled == 0 for q in stats.logical_queues for p in q.partitions)


async def main() -> None:
    # A receiver to deliver to: "flaky" fails twice then accepts, "down" always fails, "gone" is 410.
    calls: dict[str, int] = {}
    keys: dict[str, set[str]] = {}

    async def receive(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        calls[name] = calls.get(name, 0) + 1
        keys.setdefault(name, set()).add(request.headers["Idempotency-Key"])
        if name == "gone":
            return web.Response(status=410)
        if name == "down" or calls[name] <= 2:
            return web.Response(status=503)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{name}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"

    for name in ("flaky", "down", "gone"):
        await deliver.enqueue(f"{base}/{name}", {"event": "order.paid", "receiver": name})
    running = asyncio.create_task(worker.run(handle_signals=False))
    async with AsyncClient(ENDPOINT) as client:
        while not await settled(client):  # noqa: ASYNC110 - the state is in the server: poll it
            await asyncio.sleep(0.2)
        dead = [  # each dead letter with the error type of its last attempt
            f"{msgspec.json.decode(i.payload)['args'][1]['receiver']} ({i.failures[-1].error.split(':')[0]})"
            for i in (await client.list_items("webhooks-dead", 0)).items
        ]
    worker.stop()
    await running
    await runner.cleanup()
    print(f"flaky: delivered after {calls['flaky']} attempts, under {len(keys['flaky'])} idempotency key")
    print(f"down: dead-lettered after {calls['down']} attempts")
    print(f"gone: dead-lettered after {calls['gone']} attempt")
    print(f"in webhooks-dead: {', '.join(sorted(dead))}")


if __name__ == "__main__":
    asyncio.run(main())
