"""A node joining a cluster of real ``querator serve --cluster`` processes on a real etcd (sqlite storage,
each node its own) moves only the partitions whose owner changed (docs/adr/0039): the nodes that give
some claim nothing again, the new node claims only what it was given, each node changes its ring once,
and a lease parked on a partition that stays is served across the change rather than answered 454."""

from __future__ import annotations

import asyncio
from pathlib import Path

from querator.client import AsyncClient
from querator.cluster.ring import Ring

from .conftest import ServerProcess, Servers, eventually
from .etcd_server import EtcdServer
from .test_cluster_metrics import DEADLINE, PARTITIONS, Samples, members_are, node_args, scrape, value

NODES = [f"node-{n}" for n in range(3)]


def owned(ring: Ring, node: str) -> set[int]:
    return {p for p in range(PARTITIONS) if ring.owner("q", p) == node}


async def counts(node: ServerProcess) -> tuple[float, float, float]:
    """Its claims, the partitions it gave, and its ring changes."""
    found: Samples = await scrape(node)
    return (
        value(found, "querator_cluster_partition_claims_total"),
        value(found, "querator_cluster_partitions_moved_total", direction="given"),
        value(found, "querator_cluster_ring_changes_total"),
    )


async def test_a_join_claims_only_the_partitions_that_moved(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    before, after = Ring(NODES[:2], 1), Ring(NODES, 2)
    # The node that gives the new one some of its partitions and keeps others (the ring is the same on
    # every node: md5 points of the node ids).
    gave = {n: owned(before, NODES[n]) - owned(after, NODES[n]) for n in range(2)}
    giver = next(n for n in range(2) if gave[n] and owned(after, NODES[n]))
    moved = {n: len(gave[n]) for n in range(2)}
    assert owned(after, NODES[2]) == gave[0] | gave[1], "a join moves partitions to the new node only"

    nodes = [await servers.astart(*node_args(etcd, n, tmp_path)) for n in range(2)]
    await members_are(nodes, 2)
    for node in nodes:  # each node's own sqlite keeps its own settings
        async with AsyncClient(node.url) as client:
            await client.create_queue("q", partitions=PARTITIONS, lease_timeout="1m")
    async with AsyncClient(nodes[giver].url) as client:
        async with AsyncClient(nodes[1 - giver].url) as other:  # starts the other node's engine
            await other.produce("q", ["x"])
            taken = await other.lease("q", client_id="drain")
            await other.complete("q", taken.partition, [i.id for i in taken.items])
        # A lease through the giver waits in its engine (the queue is empty) and must outlive the join.
        parked = asyncio.create_task(client.lease("q", client_id="parked", request_timeout="50s"))

        async def engines_run() -> bool:
            return [(await counts(node))[0] for node in nodes] == [len(owned(before, m)) for m in NODES[:2]]

        await eventually(engines_run, DEADLINE, "both engines claimed their partitions")
        started = [await counts(node) for node in nodes]

        nodes.append(await servers.astart(*node_args(etcd, 2, tmp_path)))
        async with AsyncClient(nodes[2].url) as joined:
            await joined.create_queue("q", partitions=PARTITIONS, lease_timeout="1m")
        await members_are(nodes, 3)

        async def given() -> bool:
            return [(await counts(node))[1] - started[n][1] for n, node in enumerate(nodes[:2])] == [
                moved[0],
                moved[1],
            ]

        await eventually(given, DEADLINE, f"the two nodes gave {moved} partitions")
        assert not parked.done(), "the parked lease waits on"
        await client.produce("q", ["y"])  # through the giver: onto a partition it kept
        lease = await parked
        assert len(lease.items) == 1 and lease.partition in owned(after, NODES[giver])

    async with AsyncClient(nodes[2].url) as joined:
        await joined.produce("q", ["z"])  # starts the new node's engine
    ended = [await counts(node) for node in nodes]
    assert [e[0] - s[0] for e, s in zip(ended, started, strict=False)] == [0, 0], "nothing claimed again"
    assert ended[2][0] == sum(moved.values()) == len(owned(after, NODES[2])), "only the moved partitions"
    assert [e[2] - s[2] for e, s in zip(ended, started, strict=False)] == [1, 1], "one ring change each"
