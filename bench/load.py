"""The node's CPU per request, driven by several client processes, beside the stack's floor.

    python bench/load.py --storage memory --batch 1 --batch 10 --processes 4 --clients 8 --protobuf
    python bench/load.py --storage sqlite --rounds 3 --duration 5

A Python client saturates before a node does (bench.py's single client process shows the client's limit,
not the node's), so here ``--processes`` client processes each run ``--clients`` concurrent cycles
(produce a batch of 1 KiB items, lease a batch, complete it). The harness reads the node's CPU time from
/proc before and after each run and reports the node's CPU per request and per item, which does not
depend on how fast the clients are, and items/s.

The floor (bench/floor.py) is a bare aiohttp + uvloop app that decodes the same requests with the same
codec and answers replies of the same size, driven the same way: what the node spends beyond it is the
queue's own work. Rounds alternate the node and the floor. Numbers go in docs/benchmarks.md with the
command, the machine and the date.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import PAYLOAD, Child, Server, free_port, fresh_queue
from querator.client import AsyncClient

REQUESTS_PER_CYCLE = 3
"""A cycle is a produce, a lease and a complete."""


@dataclass
class Run:
    target: str
    batch: int
    items: int
    requests: int
    seconds: float
    cpu_s: float

    def line(self) -> str:
        per_request_us = self.cpu_s / max(self.requests, 1) * 1e6
        per_item_us = self.cpu_s / max(self.items, 1) * 1e6
        return (
            f"{self.target:6} batch {self.batch:4}: {self.items / self.seconds:9.0f} items/s, "
            f"{self.requests / self.seconds:7.0f} requests/s, server CPU {per_request_us:6.1f} us/request, "
            f"{per_item_us:6.1f} us/item"
        )


class Floor(Child):
    """bench/floor.py as a child process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        floor = Path(__file__).with_name("floor.py")
        self.proc = subprocess.Popen([sys.executable, str(floor), "--port", str(self.port)])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def client_process(endpoint: str, batch: int, clients: int, duration: float, protobuf: bool) -> None:
    """One client process: ``clients`` cycles at once for ``duration`` seconds; prints its counts."""
    items = cycles = 0
    async with AsyncClient(endpoint, protobuf=protobuf, limit=clients * 2, retries=None) as client:

        async def loop(n: int, deadline: float) -> None:
            nonlocal items, cycles
            while time.perf_counter() < deadline:
                await client.produce("bench", [PAYLOAD] * batch)
                reply = await client.lease("bench", batch, f"load-{os.getpid()}-{n}", request_timeout="5s")
                await client.complete("bench", reply.partition, [i.id for i in reply.items])
                items += len(reply.items)
                cycles += 1

        deadline = time.perf_counter() + duration
        await asyncio.gather(*(loop(n, deadline) for n in range(clients)))
    print(json.dumps({"items": items, "requests": cycles * REQUESTS_PER_CYCLE}))


async def drive(target: Child, name: str, args: argparse.Namespace, batch: int) -> Run:
    """Runs the client processes against ``target`` and measures its CPU over the run."""
    async with AsyncClient(target.endpoint) as client:
        await target.wait_ready(client)
        if isinstance(target, Server):
            await fresh_queue(client, "bench", 1)
    command = [sys.executable, __file__, "--client", target.endpoint, "--batch", str(batch)]
    command += ["--clients", str(args.clients), "--duration", str(args.duration)]
    command += ["--protobuf"] if args.protobuf else []
    before_s, started = target.cpu_seconds(), time.perf_counter()
    procs = [
        await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE) for _ in range(args.processes)
    ]
    outputs = [json.loads((await p.communicate())[0]) for p in procs]
    seconds, cpu_s = time.perf_counter() - started, target.cpu_seconds() - before_s
    items = sum(o["items"] for o in outputs)
    requests = sum(o["requests"] for o in outputs)
    return Run(name, batch, items, requests, seconds, cpu_s)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--storage", default="memory", choices=["memory", "sqlite"])
    parser.add_argument("--batch", type=int, action="append", help="repeatable; default 1 and 10")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--clients", type=int, default=8, help="concurrent cycles per client process")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating node and floor runs")
    parser.add_argument("--protobuf", action="store_true", help="binary protobuf instead of JSON")
    parser.add_argument("--no-floor", action="store_true", help="measure the node alone")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="repeatable: a flag for querator serve (--server-arg=--no-ui)",
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: run as one client process
    args = parser.parse_args()
    batches = args.batch or [1, 10]
    if args.client:
        await client_process(args.client, batches[0], args.clients, args.duration, args.protobuf)
        return
    print(
        f"{os.cpu_count()} CPUs, {args.processes} client processes x {args.clients} cycles, "
        f"{'protobuf' if args.protobuf else 'JSON'}, {args.storage}, {args.duration}s runs"
    )
    node = Server(args.storage, "FULL", args.server_arg)
    floor = None if args.no_floor else Floor()
    try:
        for _ in range(args.rounds):
            for batch in batches:
                print((await drive(node, "node", args, batch)).line(), flush=True)
                if floor is not None:
                    print((await drive(floor, "floor", args, batch)).line(), flush=True)
    finally:
        node.stop()
        if floor is not None:
            floor.stop()


if __name__ == "__main__":
    asyncio.run(main())
