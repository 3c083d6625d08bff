"""Fan-out/fan-in: split a job into chunks, process them in parallel, combine the results
(docs/recipes/README.md).

Fan-out: the job enqueues one task call per chunk; any number of workers run them. Each run produces its
result to the ``results`` queue with the dedup id ``<job>-<chunk>``, so a chunk that runs twice (at least
once delivery) still yields one result. Fan-in: a collector leases results until it has every chunk, and
combines them. It completes each batch of results once read; a collector that must survive its own
restart stores what it has read (or holds every lease until it has them all).

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/fanout.py``.
"""

from __future__ import annotations

import asyncio
import os

import msgspec

from querator.client import AsyncClient
from querator.worker import Worker

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")
worker = Worker(ENDPOINT, concurrency=4)
TEXT = """the seeds promise more than a queue
schedule jobs to run later and retry if failed
use it as a lock to gain exclusive access
deliver webhooks reliably
keep the order of a ledger
split big work into small parts and put it back together"""


@worker.task(queue="chunks", create_queue=True)
async def count_words(job: str, chunk: int, text: str) -> None:
    result = {"chunk": chunk, "words": len(text.split())}
    async with AsyncClient(ENDPOINT) as client:
        await client.produce(
            "results", [msgspec.json.encode(result)], dedup_id=f"{job}-{chunk}", reference=job
        )


async def fan_in(client: AsyncClient, chunks: int) -> dict[int, int]:
    words: dict[int, int] = {}
    while len(words) < chunks:
        async with client.leased("results", batch_size=100, request_timeout="5s") as lease:
            for item in lease.items:
                result = msgspec.json.decode(item.bytes)
                words[result["chunk"]] = result["words"]
    return words


async def main() -> None:
    lines = TEXT.splitlines()
    async with AsyncClient(ENDPOINT) as client:
        await client.create_queue("results")
        for n, line in enumerate(lines):  # fan out
            await count_words.enqueue("job-1", n, line)
        running = asyncio.create_task(worker.run(handle_signals=False))
        words = await fan_in(client, len(lines))
    worker.stop()
    await running
    print(f"chunks: {len(words)}, words: {sum(words.values())}")


if __name__ == "__main__":
    asyncio.run(main())
