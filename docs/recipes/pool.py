"""A limited resource pool: a semaphore (docs/recipes/README.md, docs/locks.md).

Eight jobs share two GPUs. Each job holds one of the semaphore's two slots while it runs, so at most two
run at once whichever process they run in; the others wait for a slot (``timeout`` bounds the wait).
``held.slot`` names the slot, which can pick the device. A holder that crashes frees its slot when its
ttl runs out.

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/pool.py``.
"""

from __future__ import annotations

import asyncio
import os

from querator.client import AsyncClient

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")
GPUS = 2
running: set[int] = set()
most_at_once = 0


async def job(n: int) -> None:
    global most_at_once
    async with (
        AsyncClient(ENDPOINT) as client,
        client.semaphore("gpu", limit=GPUS, ttl="30s", timeout="5m") as held,
    ):
        running.add(n)
        most_at_once = max(most_at_once, len(running))
        print(f"job {n} runs on {held.slot}")
        await asyncio.sleep(0.2)  # the work
        running.discard(n)


async def main() -> None:
    await asyncio.gather(*(job(n) for n in range(8)))
    print(f"most jobs at once: {most_at_once} of {GPUS} slots")


if __name__ == "__main__":
    asyncio.run(main())
