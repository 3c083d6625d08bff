"""Real ``querator serve --cluster`` processes on a real etcd: they join, see each other, agree on
the owner of every partition (``cluster.info``), and a node that leaves is gone from the others' view."""

from __future__ import annotations

import signal
from pathlib import Path

from querator.client import AsyncClient
from querator.wire import messages as m

from .conftest import ServerProcess, Servers, eventually, free_port
from .etcd_server import EtcdServer

DEADLINE = 30.0


def cluster_args(etcd: EtcdServer, node_id: str, data: Path, prefix: str = "/it") -> tuple[str, ...]:
    return (
        "--storage", "sqlite", "--data-dir", str(data), "--cluster", etcd.cluster_url(prefix),
        "--node-id", node_id, "--etcd-lease-ttl", "2s", "--cluster-grace-period", "0s",
    )  # fmt: skip


async def info(server: ServerProcess, queue: str = "") -> m.ClusterInfoResponse:
    async with AsyncClient(server.url) as client:
        return await client.cluster_info(queue)


async def test_nodes_join_agree_on_owners_and_see_a_leave(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    nodes = [await servers.astart(*cluster_args(etcd, f"node-{n}", tmp_path / f"d{n}")) for n in range(3)]

    async def all_see_three() -> bool:
        return all([len((await info(node)).members) == 3 for node in nodes])

    await eventually(all_see_three, DEADLINE, "every node sees 3 members")
    first = await info(nodes[0])
    assert [(mm.node_id, mm.state) for mm in first.members] == [(f"node-{n}", "serving") for n in range(3)]
    assert {mm.address for mm in first.members} == {f"127.0.0.1:{n.port}" for n in nodes}
    assert first.node_id == "node-0" and first.revision > 0

    # Every node computes the same owner for every partition, and owners are spread over the nodes.
    for node in nodes:
        async with AsyncClient(node.url) as client:
            await client.create_queue("q", partitions=32)
    owners = [
        {(p.queue_name, p.partition): p.owner for p in (await info(node, "q")).partitions} for node in nodes
    ]
    assert owners[0] == owners[1] == owners[2]
    assert len(owners[0]) == 32 and set(owners[0].values()) == {"node-0", "node-1", "node-2"}

    nodes[2].proc.send_signal(signal.SIGTERM)  # a graceful leave revokes the lease at once
    assert nodes[2].wait() == 0, nodes[2].describe()

    async def two_left() -> bool:
        views = [[mm.node_id for mm in (await info(node)).members] for node in nodes[:2]]
        return views == [["node-0", "node-1"]] * 2

    await eventually(two_left, DEADLINE, "the others see node-2 leave")
    after = {(p.queue_name, p.partition): p.owner for p in (await info(nodes[0], "q")).partitions}
    assert set(after.values()) == {"node-0", "node-1"}
    # Only node-2's partitions moved.
    assert {k for k in after if after[k] != owners[0][k]} == {
        k for k, v in owners[0].items() if v == "node-2"
    }


async def test_a_duplicate_node_id_is_refused(servers: Servers, etcd: EtcdServer, tmp_path: Path) -> None:
    await servers.astart(*cluster_args(etcd, "twin", tmp_path / "a", "/twins"))
    port = free_port()
    twin = servers.spawn(
        *cluster_args(etcd, "twin", tmp_path / "b", "/twins"), "--address", f"127.0.0.1:{port}"
    )
    assert twin.wait(DEADLINE) == 2
    assert "node id 'twin' is already registered" in twin.stderr()


async def test_a_node_alone_is_a_one_member_ring(servers: Servers, tmp_path: Path) -> None:
    server = await servers.astart("--storage", "sqlite", "--data-dir", str(tmp_path / "d"))
    async with AsyncClient(server.url) as client:
        await client.create_queue("q", partitions=3)
        reply = await client.cluster_info()
    assert [(mm.node_id, mm.state) for mm in reply.members] == [("local", "serving")]
    assert [(p.queue_name, p.partition, p.owner) for p in reply.partitions] == [
        ("q", n, "local") for n in range(3)
    ]
