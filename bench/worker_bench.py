"""No-op tasks through querator.worker against the raw cycle, at one batch size, on one sqlite node.

    python bench/worker_bench.py --batch 100 --rounds 3 --duration 5

Both move each item through produce, lease and complete with ``--clients`` producers:

- ``cycle``: bench.py's cycle scenario (each client: produce a batch, lease a batch, complete it);
- ``worker``: the producers ``enqueue_many`` batches of a no-op task (kept at most 4 batches ahead of the
  worker) while a ``Worker.run`` in the same process, concurrency = the batch size, leases, runs and
  completes them.

Rounds alternate the two, on one node started for the run. Reports items/s and the CPU time per item of
this process (client and worker) and of the node, since the machine may be shared: docs/benchmarks-log.md.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from bench import Result, Server, cycle_scenario, fresh_queue
from querator.client import AsyncClient
from querator.worker import Worker


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100)


async def worker_round(endpoint: str, batch: int, clients: int, duration: float) -> Result:
    worker = Worker(endpoint, concurrency=batch)

    @worker.task(queue="bench-worker", max_attempts=0)
    async def noop() -> None:
        pass

    async with AsyncClient(endpoint) as admin:
        await fresh_queue(admin, "bench-worker", 1)

    def done() -> float:
        labels = {"task": noop.name, "outcome": "completed"}
        return worker.metrics.registry.get_sample_value("querator_worker_runs_total", labels) or 0.0

    produced = 0
    stop = asyncio.Event()

    async def producer() -> None:
        nonlocal produced
        while not stop.is_set():
            if produced - done() > 4 * batch * clients:
                await asyncio.sleep(0.001)
                continue
            produced += batch
            await noop.enqueue_many([((), {})] * batch)

    running = asyncio.create_task(worker.run(handle_signals=False))
    producers = [asyncio.create_task(producer()) for _ in range(clients)]
    await asyncio.sleep(1.0)  # warm up: leases waiting, settling under way
    start, first = time.perf_counter(), done()
    await asyncio.sleep(duration)
    result = Result("worker", batch, clients, int(done() - first), time.perf_counter() - start)
    stop.set()
    await asyncio.gather(*producers)
    worker.stop()
    await running
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = Server("sqlite", "FULL", [])
    try:
        async with AsyncClient(server.endpoint) as client:
            await server.wait_ready(client)
            for n in range(args.rounds):
                for name in ("cycle", "worker"):
                    own, node = time.process_time(), cpu_s(server.proc.pid)
                    if name == "cycle":
                        result = await cycle_scenario(client, args.batch, args.clients, args.duration, 1)
                    else:
                        result = await worker_round(server.endpoint, args.batch, args.clients, args.duration)
                    own, node = time.process_time() - own, cpu_s(server.proc.pid) - node
                    items = max(result.items, 1)
                    rate = result.items / result.seconds
                    print(
                        f"round {n + 1} {name:6} batch {args.batch}: {rate:8.0f} items/s, CPU per item: "
                        f"client {own / items * 1e6:6.1f} us, node {node / items * 1e6:6.1f} us",
                        flush=True,
                    )
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
