"""The node's CPU per request, driven by several client processes, beside the stack's floor.

    python bench/load.py --storage memory --batch 1 --batch 10 --processes 4 --clients 8 --protobuf
    python bench/load.py --storage sqlite --rounds 3 --duration 5
    python bench/load.py --op cycle --partitions 8 --no-floor --server-arg=--processes=2

A Python client saturates before a node does (bench.py's single client process shows the client's limit,
not the node's), so here ``--processes`` client processes each run ``--clients`` concurrent loops of one
``--op``: a cycle (produce a batch of 1 KiB items, lease a batch, complete it), or produce, lease (of a
queue filled before the run) or complete (of items leased before the run) alone. The harness reads the
node's CPU time from /proc before and after each run and reports the node's CPU per request and per item,
which does not depend on how fast the clients are, and items/s.

The floor (bench/floor.py) is a bare aiohttp + uvloop app that decodes the same requests with the same
codec and answers replies of the same size, driven the same way: what the node spends beyond it is the
queue's own work. Rounds alternate the node and the floor. Numbers go in docs/benchmarks-log.md with the
command, the machine and the date.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from floor import ID

from bench import PAYLOAD, Child, Server, free_port, fresh_queue
from querator.client import AsyncClient

OPS = ("cycle", "produce", "lease", "complete")
"""What a client loops on: a cycle is a produce, a lease and a complete; the others are one request each,
leases of a queue filled before the run, completes of items leased before it."""
REQUESTS_PER_OP = {"cycle": 3, "produce": 1, "lease": 1, "complete": 1}
FILL_BATCH = 1000
"""Items per request when filling the queue and leasing it before a lease or complete run."""
FILL_ITEMS_PER_S = 40_000
"""Items filled per second of the run per batch size: more than a node leases or completes here, so the
queue never runs dry (a run that did says so)."""


@dataclass
class Run:
    target: str
    batch: int
    items: int
    requests: int
    seconds: float
    cpu_s: float
    client_cpu_s: float
    dry: int

    def line(self) -> str:
        per_request_us = self.cpu_s / max(self.requests, 1) * 1e6
        per_item_us = self.cpu_s / max(self.items, 1) * 1e6
        return (
            f"{self.target:15} batch {self.batch:4}: {self.items / self.seconds:9.0f} items/s, "
            f"{self.requests / self.seconds:7.0f} requests/s, server CPU {per_request_us:6.1f} us/request, "
            f"{per_item_us:6.1f} us/item, client CPU {self.client_cpu_s / max(self.requests, 1) * 1e6:5.1f} "
            f"us/request{f', RAN DRY {self.dry} times' if self.dry else ''}"
        )


class Floor(Child):
    """bench/floor.py as a child process."""

    def __init__(self, flags: list[str]) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        floor = Path(__file__).with_name("floor.py")
        self.proc = subprocess.Popen([sys.executable, str(floor), "--port", str(self.port), *flags])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def client_process(
    args: argparse.Namespace, batch: int, shares: list[list[tuple[int, list[str]]]]
) -> None:
    """One client process: ``clients`` loops of ``op`` at once for ``duration`` seconds; prints its counts.
    A complete run completes ``shares[n]`` in loop ``n``."""
    items = requests = dry = 0
    limit = args.clients * 2
    async with AsyncClient(args.client, protobuf=args.protobuf, limit=limit, retries=None) as client:

        async def lease(n: int) -> tuple[int, list[str]]:
            nonlocal dry
            reply = await client.lease("bench", batch, f"load-{os.getpid()}-{n}", request_timeout="5s")
            dry += not reply.items
            return reply.partition, [i.id for i in reply.items]

        async def loop(n: int, deadline: float) -> None:
            nonlocal items, requests, dry
            share = (itertools.cycle if args.repeat else iter)(shares[n]) if shares else None
            while time.perf_counter() < deadline:
                if args.op == "produce":
                    await client.produce("bench", [PAYLOAD] * batch)
                elif args.op == "lease":
                    await lease(n)
                elif args.op == "complete":
                    assert share is not None
                    partition, ids = next(share, (0, []))
                    if not ids:
                        dry += 1
                        break
                    await client.complete("bench", partition, ids)
                else:
                    await client.produce("bench", [PAYLOAD] * batch)
                    partition, ids = await lease(n)
                    await client.complete("bench", partition, ids)
                items += batch
                requests += REQUESTS_PER_OP[args.op]

        deadline = time.perf_counter() + args.duration
        await asyncio.gather(*(loop(n, deadline) for n in range(args.clients)))
    print(json.dumps({"items": items, "requests": requests, "dry": dry}))


Share = list[tuple[int, list[str]]]
"""What one client loop completes: (partition, ids) batches."""


async def fill(target: Child, args: argparse.Namespace, batch: int) -> list[Share]:
    """Before a lease or complete run of the node: fills its queue, and for a complete run leases it all
    and returns each client loop's share of the ids in batches of ``batch``."""
    total = int(FILL_ITEMS_PER_S * args.duration * max(1, min(batch, 10) // 2))
    loops = args.processes * args.clients
    async with AsyncClient(target.endpoint, protobuf=True) as client:
        for _ in range(0, total, FILL_BATCH):
            await client.produce("bench", [PAYLOAD] * FILL_BATCH)
        if args.op != "complete":
            return []
        batches: list[tuple[int, list[str]]] = []
        leased = 0
        while leased < total:  # a lease takes from one partition: several may end short
            reply = await client.lease("bench", FILL_BATCH, "fill", request_timeout="1s")
            ids = [i.id for i in reply.items]
            batches += [(reply.partition, ids[k : k + batch]) for k in range(0, len(ids), batch)]
            leased += len(ids)
    return [batches[k::loops] for k in range(loops)]


def write_shares(shares: list[Share], args: argparse.Namespace, ids_file: Path) -> None:
    """Writes the client loops' shares in the driver's form: per Python process, per loop; or per Go
    goroutine."""
    if args.driver == "go":
        ids_file.write_text(json.dumps([[{"partition": p, "ids": ids} for p, ids in s] for s in shares]))
    else:
        ids_file.write_text(json.dumps([shares[k :: args.processes] for k in range(args.processes)]))


def floor_shares(args: argparse.Namespace, batch: int) -> list[Share]:
    """The floor keeps no items: its complete run completes made-up ids of the node's length, the same
    request over and over (``--repeat``)."""
    return [[(0, [ID] * batch)]] * (args.processes * args.clients)


def children_cpu_seconds() -> float:
    """CPU time of the client processes this harness has waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def drive(target: Child, name: str, args: argparse.Namespace, batch: int) -> Run:
    """Runs the client processes against ``target`` and measures its CPU over the run."""
    async with AsyncClient(target.endpoint) as client:
        await target.wait_ready(client)
        if isinstance(target, Server):
            await fresh_queue(client, "bench", args.partitions)
    with tempfile.TemporaryDirectory() as tmp:
        ids_file = Path(tmp) / "ids.json"
        shares: list[Share] = []
        if isinstance(target, Server) and args.op in ("lease", "complete"):
            shares = await fill(target, args, batch)
        elif args.op == "complete":
            shares = floor_shares(args, batch)
        if shares:
            await asyncio.to_thread(write_shares, shares, args, ids_file)
        if args.driver == "go":
            # One Go process of every loop: it costs the shared cores a fraction of the Python clients.
            command = [args.loadgen, "-url", target.endpoint, "-op", args.op, "-batch", str(batch)]
            command += ["-workers", str(args.processes * args.clients), "-duration", f"{args.duration}s"]
            command += [] if args.protobuf else ["-json"]
            command += ["-ids", str(ids_file)] if ids_file.exists() else []
            command += ["-repeat"] if isinstance(target, Floor) else []
            commands = [command]
        else:
            command = [sys.executable, __file__, "--client", target.endpoint, "--op", args.op]
            command += ["--batch", str(batch), "--clients", str(args.clients)]
            command += ["--duration", str(args.duration)]
            command += ["--protobuf"] if args.protobuf else []
            command += ["--ids", str(ids_file)] if ids_file.exists() else []
            command += ["--repeat"] if isinstance(target, Floor) else []
            commands = [[*command, "--index", str(k)] for k in range(args.processes)]
        before_s, started = target.cpu_seconds(), time.perf_counter()
        clients_before_s = children_cpu_seconds()
        procs = [await asyncio.create_subprocess_exec(*c, stdout=subprocess.PIPE) for c in commands]
        outputs = [json.loads((await p.communicate())[0]) for p in procs]
        seconds, cpu_s = time.perf_counter() - started, target.cpu_seconds() - before_s
        client_cpu_s = children_cpu_seconds() - clients_before_s
    items = sum(o["items"] for o in outputs)
    requests = sum(o["requests"] for o in outputs)
    dry = sum(o["dry"] for o in outputs)
    return Run(f"{name} {args.op}", batch, items, requests, seconds, cpu_s, client_cpu_s, dry)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--storage", default="memory", choices=["memory", "sqlite"])
    parser.add_argument("--batch", type=int, action="append", help="repeatable; default 1 and 10")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--clients", type=int, default=8, help="concurrent loops per client process")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating node and floor runs")
    parser.add_argument("--protobuf", action="store_true", help="binary protobuf instead of JSON")
    parser.add_argument("--no-floor", action="store_true", help="measure the node alone")
    parser.add_argument(
        "--floor-direct",
        action="store_true",
        help="the floor dispatches its routes without aiohttp's router, as the node does",
    )
    parser.add_argument(
        "--floor-reply", action="store_true", help="the floor writes its replies as the node does"
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="of the queue; a node of N processes splits partitions"
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="repeatable: a flag for querator serve (--server-arg=--no-ui)",
    )
    parser.add_argument("--op", action="append", choices=OPS, help="repeatable; default cycle")
    parser.add_argument(
        "--driver",
        default="python",
        choices=["python", "go"],
        help="the clients: Python processes, or one Go process (bench/loadgen) of as many loops",
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: run as one client process
    parser.add_argument("--ids", help=argparse.SUPPRESS)  # internal: a complete run's ids
    parser.add_argument("--repeat", action="store_true", help=argparse.SUPPRESS)  # internal: floor's ids
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)  # internal: whose ids
    args = parser.parse_args()
    batches = args.batch or [1, 10]
    if args.driver == "go":
        build = Path(__file__).parent.parent / "scripts" / "loadgen.sh"
        built = await asyncio.create_subprocess_exec(str(build), stdout=subprocess.PIPE)
        args.loadgen = (await built.communicate())[0].decode().strip()
        if built.returncode:
            parser.error("--driver go needs Go to build bench/loadgen")
    if args.client:
        args.op = args.op[0]
        shares = json.loads(Path(args.ids).read_text())[args.index] if args.ids else []  # noqa: ASYNC240
        await client_process(args, batches[0], shares)
        return
    print(
        f"{os.cpu_count()} CPUs, {args.processes} client processes x {args.clients} loops, "
        f"{'protobuf' if args.protobuf else 'JSON'}, {args.storage}, {args.duration}s runs"
    )
    node = Server(args.storage, "FULL", args.server_arg)
    flags = ["--direct"] * args.floor_direct + ["--reply"] * args.floor_reply
    floor = None if args.no_floor else Floor(flags)
    try:
        for _ in range(args.rounds):
            for op, batch in itertools.product(args.op or ["cycle"], batches):
                run = argparse.Namespace(**{**vars(args), "op": op})
                print((await drive(node, "node", run, batch)).line(), flush=True)
                if floor is not None:
                    print((await drive(floor, "floor", run, batch)).line(), flush=True)
    finally:
        node.stop()
        if floor is not None:
            floor.stop()


if __name__ == "__main__":
    asyncio.run(main())
