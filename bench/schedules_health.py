"""/health latency of a node holding many sparse schedules (docs/schedules.md; recorded in
docs/benchmarks-log.md, "Sparse schedules").

Starts `querator serve` (memory storage), creates `--schedules` schedules whose calendars have nothing
due for hours (yearly, daily; `--leap` adds leap-day ones, which stopped the scheduler before ADR
0028), then asks `/health` every 100 ms for `--seconds` and prints its latency percentiles and the
server's CPU use meanwhile. The scheduler looks at its schedules every second on the node's event loop,
so what it does shows in the latency of every request.

    python bench/schedules_health.py --schedules 10000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Server
from querator.client import AsyncClient

CRONS = ("0 0 1 7 *", "30 6 1 1 *", "15 3 * * *")
LEAP = "0 0 29 2 *"
HEALTH_TIMEOUT_S = 60.0


async def _create(server: Server, schedules: int, leap: bool) -> None:
    crons = (*CRONS, LEAP) if leap else CRONS
    async with AsyncClient(server.endpoint, limit=16) as client:
        await server.wait_ready(client)
        await client.create_queue("bench", partitions=1)
        names = iter(range(schedules))

        async def work() -> None:
            for n in names:
                await client.create_schedule(f"s{n:06}", crons[n % len(crons)], "bench")

        await asyncio.gather(*(work() for _ in range(16)))


async def _health(server: Server, seconds: float) -> list[float]:
    """Milliseconds per /health, asked every 100 ms for ``seconds``."""
    found: list[float] = []
    timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            started = time.monotonic()
            async with session.get(server.endpoint + "/health") as resp:
                await resp.read()
            found.append((time.monotonic() - started) * 1000)
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--leap", action="store_true")
    args = parser.parse_args()
    server = Server("memory", "FULL", [])
    try:
        started = time.monotonic()
        await _create(server, args.schedules, args.leap)
        print(f"created {args.schedules} schedules in {time.monotonic() - started:.1f}s", flush=True)
        cpu = server.cpu_seconds()
        latencies = sorted(await _health(server, args.seconds))
        used = server.cpu_seconds() - cpu
    finally:
        server.stop()
    q = statistics.quantiles(latencies, n=100)
    print(
        f"/health over {args.seconds:.0f}s ({len(latencies)} asks): p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, "
        f"max {latencies[-1]:.1f} ms; server CPU {used / args.seconds * 100:.0f}%"
    )


if __name__ == "__main__":
    asyncio.run(main())
