"""What a node joining and leaving costs a cluster (docs/adr/0039): claims, 454s, time to converge.

    python bench/handoff.py --model                      # claims per join/leave, both designs (the ring)
    python bench/handoff.py --queues 20 --partitions 8   # real nodes on a local etcd (memory storage)

``--model`` counts, from the ring alone, the partitions claimed per join (N -> N+1 nodes) and per leave
(N+1 -> N) when a ring change hands off whole engines (every node whose share of a queue changed claims
all of its new share again) and when only moved partitions change hands.

The run starts ``--nodes`` nodes, creates the queues on each (each node keeps its own store), parks one
lease per queue on every node, then starts one more node and later stops it. For each it reports the
seconds from the change (the new node registered, the old one's SIGTERM) until every node's ring agrees,
the parked leases answered 454 by the change, and the claims and ring changes from /metrics (absent on
code before ADR 0039: "-"). Alternate runs of the old and new code with PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp

from bench import Server, start_cluster
from querator.client import AsyncClient
from querator.cluster.ring import Ring
from querator.errors import RetryRequest


def owned(ring: Ring, node: str, queue: str, partitions: int) -> frozenset[int]:
    return frozenset(p for p in range(partitions) if ring.owner(queue, p) == node)


def claims(before: Ring, after: Ring, queues: int, partitions: int) -> tuple[int, int]:
    """Claims of the change from ``before`` to ``after``: (whole engines handed off, moved partitions)."""
    whole = moved = 0
    for q in range(queues):
        name = f"q{q}"
        for node in after.node_ids:
            was, now = owned(before, node, name, partitions), owned(after, node, name, partitions)
            if was != now and now:
                whole += len(now)  # the engine is spawned again over its whole new share
                moved += len(now - was)
    return whole, moved


def model(nodes: int, queues: int, partitions: int) -> None:
    small = Ring([f"node-{n}" for n in range(nodes)], 1)
    big = Ring([f"node-{n}" for n in range(nodes + 1)], 2)
    total = queues * partitions
    for what, before, after in (("join", small, big), ("leave", big, small)):
        whole, moved = claims(before, after, queues, partitions)
        print(
            f"{what} ({len(before.node_ids)} -> {len(after.node_ids)} nodes, {queues} queues x {partitions} "
            f"partitions = {total}): claims {whole} handing off whole engines, {moved} moving partitions"
        )


async def counts(endpoints: list[str]) -> list[tuple[str, ...]]:
    """Each node's claims and ring changes ("-": not exported by this code)."""
    names = ("querator_cluster_partition_claims_total", "querator_cluster_ring_changes_total")
    found = []
    async with aiohttp.ClientSession() as session:
        for endpoint in endpoints:
            async with session.get(endpoint + "/metrics") as resp:
                values = dict(line.split()[:2] for line in (await resp.text()).splitlines() if " " in line)
            found.append(tuple(values.get(name, "-").removesuffix(".0") for name in names))
    return found


async def agreed(endpoints: list[str], members: int, queue: str | None) -> bool:
    """Whether every node sees ``members`` members and the same owners of ``queue``'s partitions."""
    owners = []
    for endpoint in endpoints:
        async with AsyncClient(endpoint) as client:
            info = await client.cluster_info(queue) if queue else await client.cluster_info()
        if len(info.members) != members:
            return False
        owners.append([p.owner for p in info.partitions])
    return all(o == owners[0] for o in owners)


async def park(endpoints: list[str], queues: int) -> tuple[list[asyncio.Task[None]], list[int]]:
    """One lease per queue through every node, waiting; ``refused[0]`` counts those answered 454."""
    refused = [0]

    async def one(endpoint: str, queue: str, n: int) -> None:
        async with AsyncClient(endpoint) as client:
            try:
                await client.lease(queue, client_id=f"parked-{n}", request_timeout="60s")
            except RetryRequest:
                refused[0] += 1

    tasks = [
        asyncio.ensure_future(one(e, f"q{q}", n)) for n, e in enumerate(endpoints) for q in range(queues)
    ]
    return tasks, refused


async def converge(endpoints: list[str], members: int, since: float, queue: str | None = "q0") -> float:
    """Seconds from ``since`` until the nodes' rings agree (polled every 20 ms)."""
    while not await agreed(endpoints, members, queue):  # noqa: ASYNC110 - other processes change it
        await asyncio.sleep(0.02)
    return time.monotonic() - since


async def run(nodes_count: int, queues: int, partitions: int) -> None:
    nodes, etcd = start_cluster(nodes_count, "memory", "normal", ["--cluster-grace-period", "0s"])
    old = [n.endpoint for n in nodes]
    try:
        for node in nodes:
            async with AsyncClient(node.endpoint) as client:
                await node.wait_ready(client)
        await converge(old, nodes_count, time.monotonic(), None)
        for endpoint in old:  # each node keeps its own store: each needs the queues
            async with AsyncClient(endpoint) as client:
                for q in range(queues):
                    await client.create_queue(f"q{q}", partitions=partitions, lease_timeout="1m")
        tasks, refused = await park(old, queues)
        await asyncio.sleep(1.0)  # the leases park; their engines claim their shares
        before = await counts(old)

        cluster = [
            "--cluster",
            etcd.cluster_url("/bench"),
            "--etcd-lease-ttl",
            "5s",
            "--cluster-grace-period",
            "0s",
        ]
        joined = Server("memory", "normal", [*cluster, "--node-id", f"node-{nodes_count}"])
        nodes.append(joined)
        async with AsyncClient(joined.endpoint) as client:
            await joined.wait_ready(client)
            since = time.monotonic()
            for q in range(queues):
                await client.create_queue(f"q{q}", partitions=partitions, lease_timeout="1m")
        join_s = await converge([*old, joined.endpoint], nodes_count + 1, since)
        await asyncio.sleep(1.0)  # what the change does to the parked leases has happened
        print(
            f"join: rings agree {join_s:.2f} s after the new node answered; parked leases refused 454: "
            f"{refused[0]} of {len(tasks)}; old nodes' (claims, ring changes) {before} -> {await counts(old)}"
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        tasks, refused = await park(old, queues)
        await asyncio.sleep(1.0)
        before = await counts(old)
        since = time.monotonic()
        joined.proc.terminate()
        leave_s = await converge(old, nodes_count, since)
        await asyncio.sleep(1.0)
        print(
            f"leave: rings agree {leave_s:.2f} s after SIGTERM; parked leases refused 454: {refused[0]} of "
            f"{len(tasks)}; staying nodes' (claims, ring changes) {before} -> {await counts(old)}"
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.stop()
        etcd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", action="store_true", help="count claims from the ring only")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    if args.model:
        model(args.nodes, args.queues, args.partitions)
    else:
        asyncio.run(run(args.nodes, args.queues, args.partitions))


if __name__ == "__main__":
    main()
