"""A cron job: a server-side schedule produces one item per tick, a worker runs each (docs/recipes/README.md).

The schedule lives in the server (docs/schedules.md): it fires whether or not a worker is up, exactly one
item per tick even across node restarts and in a cluster, and a tick's item waits in the queue, with the
task's retries, until a worker runs it. Each item's reference names its tick (``<schedule>@<time>``),
which makes a good idempotency key for what the job writes. Here the schedule fires every second; a
real one would say ``"30 2 * * *"`` with ``time_zone="Europe/Berlin"``.

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


@worker.task(queue="reports", max_attempts=3, create_queue=True)
async def nightly_report(region: str) -> None:
    item = current_item()
    assert item is not None
    runs.append(f"report for {region}, tick {item.reference.split('@')[0]}")
    if len(runs) >= 3:
        three_ran.set()


async def main() -> None:
    running = asyncio.create_task(worker.run(handle_signals=False))
    async with AsyncClient(ENDPOINT) as client:
        await worker.client_for(nightly_report)  # creates the queue before the schedule names it
        await client.create_schedule(
            "nightly-report", "* * * * * *", "reports", payload=b'{"args": ["eu"]}', kind=nightly_report.name
        )
        await three_ran.wait()
        await client.delete_schedule("nightly-report")
    worker.stop()
    await running
    for line in runs[:3]:
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
