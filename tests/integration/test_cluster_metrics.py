"""The cluster metrics of real ``querator serve --cluster`` processes on a real etcd (sqlite storage, each
node its own): every node counts the members it sees, the partitions it serves, the requests it forwards
to an owner (and how long they took), and the engines it hands off when a node joining moves partitions.
Every page parses as OpenMetrics and as the Prometheus text format."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import aiohttp
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from querator.client import AsyncClient

from .conftest import ServerProcess, Servers, eventually
from .etcd_server import EtcdServer

DEADLINE = 60.0
PARTITIONS = 16
OPENMETRICS = "application/openmetrics-text; version=1.0.0"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def node_args(etcd: EtcdServer, n: int, tmp_path: Path) -> tuple[str, ...]:
    # A lease TTL long enough that a busy machine never makes a node doubt its lease: the hand-offs
    # counted here must be the ring's alone.
    return (
        "--storage", "sqlite", "--data-dir", str(tmp_path / f"d{n}"),
        "--cluster", etcd.cluster_url("/metrics"), "--node-id", f"node-{n}",
        "--etcd-lease-ttl", "10s", "--cluster-grace-period", "0s",
    )  # fmt: skip


async def page(server: ServerProcess, accept: str = "") -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + "/metrics", headers={"Accept": accept} if accept else {}) as resp,
    ):
        assert resp.status == 200
        return await resp.text()


def samples(families: Iterable[Metric]) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}


async def scrape(server: ServerProcess) -> Samples:
    return samples(text_string_to_metric_families(await page(server)))


def value(found: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 for a labelled child that was never created (nothing counted yet)."""
    return found.get((name, frozenset(labels.items())), 0.0)


async def owners(server: ServerProcess) -> dict[int, str]:
    """The owner of each partition of ``q``, by the server's ring."""
    async with AsyncClient(server.url) as client:
        info = await client.cluster_info("q")
    return {p.partition: p.owner for p in info.partitions}


async def owned_by(server: ServerProcess) -> dict[str, int]:
    """How many partitions of ``q`` each node owns, by the server's ring."""
    counts: dict[str, int] = {}
    for owner in (await owners(server)).values():
        counts[owner] = counts.get(owner, 0) + 1
    return counts


async def members_are(nodes: list[ServerProcess], count: int) -> None:
    async def seen() -> bool:
        for node in nodes:
            found = await scrape(node)
            states = [
                value(found, "querator_cluster_members", state=s) for s in ("serving", "grace", "joining")
            ]
            if states != [count, 0, 0]:
                return False
        return True

    await eventually(seen, DEADLINE, f"every node's querator_cluster_members says {count} serving")


async def serve_q_everywhere(nodes: list[ServerProcess]) -> None:
    """Produces through every node: each owns partitions of ``q``, so each runs its engine."""
    for node in nodes:
        async with AsyncClient(node.url) as client:
            await client.produce("q", ["x"])


async def partitions_owned_match_the_ring(nodes: list[ServerProcess]) -> None:
    owners = await owned_by(nodes[0])
    for n, node in enumerate(nodes):
        found = await scrape(node)
        assert value(found, "querator_cluster_partitions_owned") == owners.get(f"node-{n}", 0), n
    assert sum(owners.values()) == PARTITIONS


async def test_cluster_metrics_of_real_nodes(servers: Servers, etcd: EtcdServer, tmp_path: Path) -> None:
    nodes = [await servers.astart(*node_args(etcd, n, tmp_path)) for n in range(2)]
    await members_are(nodes, 2)
    for node in nodes:  # each node's own sqlite keeps its own settings
        async with AsyncClient(node.url) as client:
            await client.create_queue("q", partitions=PARTITIONS, lease_timeout="1m")
    assert set(await owned_by(nodes[0])) == {"node-0", "node-1"}
    await serve_q_everywhere(nodes)
    await partitions_owned_match_the_ring(nodes)

    # A lease through node-1 gets an item of one of its own partitions; completing it through node-0
    # is forwarded to node-1.
    before = await scrape(nodes[0])
    async with AsyncClient(nodes[1].url) as leaser:
        lease = await leaser.lease("q", batch_size=1, client_id="c", request_timeout="5s")
    async with AsyncClient(nodes[0].url) as completer:
        await completer.complete("q", lease.partition, [i.id for i in lease.items])
    after = await scrape(nodes[0])
    route = "/v1/queue.complete"
    for name, labels in (
        ("querator_cluster_forwards_total", {"route": route, "code": "200"}),
        ("querator_cluster_forward_duration_seconds_count", {"route": route}),
    ):
        assert value(after, name, **labels) - value(before, name, **labels) == 1, name
    forwarded_by_1 = value(await scrape(nodes[1]), "querator_cluster_forwards_total", route=route, code="200")
    assert forwarded_by_1 == 0, "the owner served it and forwarded nothing"

    # A third node joins: the ring gives it some partitions, and each node whose share changed hands
    # its engine off (once).
    owners_before = await owners(nodes[0])
    ring_before = await owned_by(nodes[0])
    nodes.append(await servers.astart(*node_args(etcd, 2, tmp_path)))
    async with AsyncClient(nodes[2].url) as client:
        await client.create_queue("q", partitions=PARTITIONS, lease_timeout="1m")
    await members_are(nodes, 3)
    ring_after = await owned_by(nodes[0])
    assert ring_after.get("node-2", 0) > 0
    moved = {n: ring_after.get(f"node-{n}", 0) != ring_before[f"node-{n}"] for n in range(2)}
    assert any(moved.values())

    async def handed_off() -> bool:
        counts = [
            value(await scrape(node), "querator_cluster_hand_offs_total", reason="ring") for node in nodes
        ]
        return counts == [int(moved[0]), int(moved[1]), 0]

    await eventually(handed_off, DEADLINE, f"the nodes whose partitions moved count a hand-off ({moved})")
    # Each node's cluster.info lists, in JSON and in protobuf alike, the partitions it gave the new node.
    owners_after = await owners(nodes[0])
    for n in range(2):
        given = {p for p, o in owners_before.items() if o == f"node-{n}" and owners_after[p] == "node-2"}
        for protobuf in (False, True):
            async with AsyncClient(nodes[n].url, protobuf=protobuf) as client:
                logged = (await client.cluster_info("q")).hand_offs
            assert {(h.queue_name, h.partition) for h in logged} == {("q", p) for p in given}, (n, protobuf)
            assert {(h.direction, h.other_node, h.reason) for h in logged} <= {("given", "node-2", "ring")}
        async with AsyncClient(nodes[n].url) as client:  # only those of the queues asked about
            await client.create_queue("r", partitions=1)
            assert (await client.cluster_info("r")).hand_offs == []
    await serve_q_everywhere(nodes)
    await partitions_owned_match_the_ring(nodes)

    # Every family of a page with forwards, hand-offs and queues parses in both formats, alike.
    strict = samples(openmetrics_families(await page(nodes[0], OPENMETRICS)))
    plain = samples(text_string_to_metric_families(await page(nodes[0])))
    ours = {k for k in plain if k[0].startswith("querator_")}
    assert value(plain, "querator_cluster_forwards_total", route=route, code="200") == 1
    assert ours <= strict.keys()
    aging = "querator_oldest_item_age_seconds"  # the only value that moves between the two scrapes
    assert {k: plain[k] for k in ours if k[0] != aging} == {k: strict[k] for k in ours if k[0] != aging}
