"""A cron job: a server-side schedule produces one item per tick, a worker runs each (docs/recipes/README.md).

The schedule lives in the server (docs/schedules.md): it fires whether or not a worker is up, exactly one
item per tick even across node restarts and in a cluster, and a tick's item waits in the queue, with the
task's retries, until a worker runs it. ``@worker.periodic`` declares the schedule beside the task, and
the worker puts it on the server at its start. Each item's reference names its tick
(``<schedule>@<time>``), which makes a good idempotency key for what the job writes. Here the schedule
fires every second; a real one would say ``"30 2 * * *"`` with ``time_zone="Europe/Berlin"``.

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/cron.py``.
"""

from __future__ import annotations

import asyncio
import os

from querator.client import AsyncClient
from querator.worker import Worker, current_item

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")
worker = Worker(ENDPOINT, concurrency=2)
runs: list[str] = []
three_ran = asyncio.Event()


# The worker puts the schedule on the server when it starts (made, or its definition replaced).
@worker.periodic("* * * * * *", args=("eu",), schedule="nightly-report", queue="reports", max_attempts=3)
async def nightly_report(region: str) -> None:
    item = current_item()
    assert item is not None
    schedule, _, tick = item.reference.rpartition("@")
    runs.append(f"{schedule}: report for {region}, tick {tick}")
    if len(runs) >= 3:
        three_ran.set()


async def main() -> None:
    running = asyncio.create_task(worker.run(handle_signals=False))
    await three_ran.wait()
    async with AsyncClient(ENDPOINT) as client:
        await client.delete_schedule("nightly-report")
    worker.stop()
    await running
    for line in runs[:3]:
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
