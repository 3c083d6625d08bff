"""What idle consumers cost a cluster: lease probes sent to other owners and CPU, by number of members.

    python bench/lease_idle.py                         # 2 and 8 members, 20 idle consumers, 5 s
    python bench/lease_idle.py --members 2 4 8 --consumers 50 --seconds 10

Starts a node of ``--members`` members in this process (real HTTP between them, signed forwards, as
``--processes N`` runs them; a queue with a partition at each member), then ``--consumers`` consumers
lease from member 0 with a ``1s`` request_timeout, again and again, from an empty queue. Prints the
lease forwards (probes) and watches member 0 sent, and this process's CPU, per consumer and second.
Alternate runs of two checkouts to compare them (ADR 0042).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
import uuid

import uvloop
from aiohttp import web

from querator.auth import ApiKeys, ClusterAuth
from querator.clock import SystemClock
from querator.cluster.local_members import LocalMembers
from querator.cluster.node import ClusterNode
from querator.errors import LeaseTimedOut
from querator.http import create_app
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.storage.split import SplitStore
from querator.wire import messages as m

SECRET = b"a-bench-secret-of-at-least-32-characters"


def forwards(service: Service, route: str) -> float:
    return sum(
        s.value
        for metric in service.metrics.registry.collect()
        if metric.name == "querator_cluster_forwards"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels["route"] == route
    )


async def run(members: int, consumers: int, seconds: float, busy: int) -> dict[str, float]:
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(members)]
    addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    shared = MemoryStore()
    clock = SystemClock()
    services: list[Service] = []
    runners: list[web.AppRunner] = []
    for index, sock in enumerate(sockets):
        local_members = LocalMembers("bench", index, addresses)
        auth = ClusterAuth(SECRET, local_members.node_id)
        service = Service(
            SplitStore(shared, MemoryStore()),
            clock,
            cluster=ClusterNode(None, clock, "", local_members),
            cluster_auth=auth,
        )
        await service.start()
        runner = web.AppRunner(create_app(service, api_keys=ApiKeys([], auth)), handler_cancellation=True)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        services.append(service)
        runners.append(runner)
    here = services[0]
    ids = {s.cluster.node_id for s in services}
    name = next(
        n
        for n in ("q-" + uuid.uuid4().hex[:8] for _ in range(10_000))
        if {here.cluster.owner(n, p) for p in range(members)} == ids
    )
    await here.create_queue(
        m.QueueInfo(queue_name=name, lease_timeout="1m", expire_timeout="1h", requested_partitions=members)
    )
    if busy:
        return await _busy(services, runners, name, consumers, busy)
    stop_at = time.monotonic() + seconds

    async def consumer(n: int) -> None:
        while time.monotonic() < stop_at:
            request = m.QueueLeaseRequest(
                queue_name=name, batch_size=1, client_id=f"c{n}", request_timeout="1s"
            )
            try:
                await here.lease(request)
            except LeaseTimedOut:
                pass

    cpu = time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(consumer(n) for n in range(consumers)))
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu
    result = {
        "probes": forwards(here, "/v1/queue.lease"),
        # Sent, not ended: a watch is counted by the forwards metric only when it ends (after 60 s).
        "watches": here.watches.counters.watches if hasattr(here, "watches") else 0,
        "cpu_ms_per_consumer_s": 1000 * cpu / consumers / elapsed,
    }
    await _close(services, runners)
    return result


async def _close(services: list[Service], runners: list[web.AppRunner]) -> None:
    for service in services:
        await service.shutdown()
    for runner in runners:
        await runner.cleanup()


async def _busy(
    services: list[Service], runners: list[web.AppRunner], name: str, consumers: int, items: int
) -> dict[str, float]:
    """CPU per item of leasing and completing ``items`` produced at member 0 (the hot path of a lease
    that finds items where it waits)."""
    here = services[0]
    for _ in range(0, items, 100):
        batch = [m.QueueProduceItem(utf8="x") for _ in range(100)]
        await here.produce(m.QueueProduceRequest(queue_name=name, request_timeout="5s", items=batch))
    left = [items]

    async def consumer(n: int) -> None:
        request = m.QueueLeaseRequest(queue_name=name, batch_size=1, client_id=f"c{n}", request_timeout="1s")
        while left[0] > 0:
            try:
                reply = await here.lease(request)
            except LeaseTimedOut:
                continue
            left[0] -= len(reply.items)
            ids = [i.id for i in reply.items]
            complete = m.QueueCompleteRequest(
                queue_name=name, partition=reply.partition, request_timeout="5s", ids=ids
            )
            await here.complete(complete)

    cpu = time.process_time()
    await asyncio.gather(*(consumer(n) for n in range(consumers)))
    cpu = time.process_time() - cpu
    await _close(services, runners)
    return {"cpu_us_per_item": 1e6 * cpu / items}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="instead: produce this many items at member 0, then time leasing them",
    )
    args = parser.parse_args()
    for members in args.members:
        result = uvloop.run(run(members, args.consumers, args.seconds, args.busy))
        if args.busy:
            print(f"members={members} busy={args.busy} cpu_us_per_item={result['cpu_us_per_item']:.1f}")
            continue
        print(
            f"members={members} consumers={args.consumers} probes={result['probes']:.0f} "
            f"watches={result['watches']:.0f} cpu_ms_per_consumer_s={result['cpu_ms_per_consumer_s']:.3f}"
        )


if __name__ == "__main__":
    main()
