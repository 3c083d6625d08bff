"""A cluster node of several processes (``querator serve --cluster ... --processes 2``), with real
processes on a real etcd and Cassandra: each process is a cluster member of its own (docs/processes.md,
"In a cluster").

- Bad ``--process-ports`` (missing, too few, not a port, given twice, the API's port, without a cluster)
  and other storage than Cassandra are refused with one line and status 2 before anything starts.
- Beside a node of one process, the node of two processes joins as two members at the ports it was given;
  with API keys on (forwards signed with the cluster secret), every partition of a queue spread over the
  three members is produced to, leased and completed through either node, each item delivered once.
- With HTTPS and mutual TLS, the same through either node: the processes' ports serve HTTPS too, and a
  forward to one of them without a client certificate of the cluster's CA is refused although signed.
- kill -9 of one of the two processes while producers and consumers work through both nodes loses no
  acknowledged item; the supervisor restarts it, it registers again in etcd under its id, and the
  partitions it owns are served again (listed, produced to and leased from through either node).
"""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
from pathlib import Path

import aiohttp
import pytest

from querator.auth import FORWARDED_HEADER, SIGNATURE_HEADER, ClusterAuth, generate_key, key_hash
from querator.client import AsyncClient
from querator.errors import RetryRequest
from tests.cassandra_node import CassandraNode

from .certs import Authority
from .conftest import (
    ServerProcess,
    Servers,
    eventually,
    free_port,
    keyed_cluster,
    spread_queue,
    start_refused,
    terminate,
)
from .etcd_server import EtcdServer
from .test_cluster_routing import drain, node_args, produce_everywhere, retried
from .test_cluster_security import secret_file, start_tls_node
from .test_processes import Load, all_listening, children

pytestmark = pytest.mark.integration

PARTITIONS = 6
DEADLINE = 60.0
PROCESS_MEMBERS = ["node-0-0", "node-0-1"]
MEMBERS = [*PROCESS_MEMBERS, "node-1"]


def member_queue(prefix: str) -> str:
    """A queue name whose partitions the ring gives to every member, both processes included."""
    return spread_queue(MEMBERS, PARTITIONS, prefix)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--storage", "cassandra"),
            "process-ports is invalid; --cluster with --processes 2 needs 2 ports, one per process, for the "
            "other nodes to forward to",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001"),
            "process-ports is invalid; '7001' gives 1 port(s) for 2 processes",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001,http"),
            "process-ports is invalid; 'http' in '7001,http' is not a port from 0 to 65535",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001,70000"),
            "process-ports is invalid; '70000' in '7001,70000' is not a port from 0 to 65535",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001,7001"),
            "process-ports is invalid; port 7001 is given twice",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001,2319", "--address", "127.0.0.1:2319"),
            "process-ports is invalid; port 2319 is --address's",
        ),
        (
            ("--storage", "memory", "--process-ports", "7001,7002"),
            "processes is invalid; more than one process per cluster node needs --storage cassandra or "
            "postgres, which every process of every node shares (docs/processes.md)",
        ),
        (
            ("--storage", "cassandra", "--process-ports", "7001,7002", "--node-id", "n" * 252),
            f"node-id is invalid; '{'n' * 252}' must be 1 to 253 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit ('-1' included: a process's member id)",
        ),
    ],
    ids=["missing", "too-few", "not-a-number", "too-high", "twice", "api-port", "memory", "long-node-id"],
)
def test_bad_process_ports_are_refused(servers: Servers, args: tuple[str, ...], message: str) -> None:
    # An etcd nobody runs: the settings are refused before anything is contacted.
    cluster = ("--cluster", f"etcd://127.0.0.1:{free_port()}", "--node-id", "n", "--processes", "2")
    server = start_refused(servers, *cluster, *args)
    assert server.stderr() == f"querator: {message}\n"


def test_process_ports_without_a_cluster_are_refused(servers: Servers) -> None:
    server = start_refused(servers, "--processes", "2", "--storage", "memory", "--process-ports", "7001,7002")
    assert server.stderr() == (
        "querator: process-ports is invalid; it gives the ports of a cluster node's processes (--cluster "
        "with --processes above 1)\n"
    )


async def start_nodes(
    servers: Servers, etcd: EtcdServer, node: CassandraNode, keyspace: str, prefix: str, *extra: str
) -> tuple[ServerProcess, ServerProcess, list[int]]:
    """node-0 of two processes at two free ports, and node-1 of one; returns them once each sees all
    three members, and the ports of node-0's processes."""
    ports = [free_port(), free_port()]
    two = await servers.astart(
        *node_args(etcd, node, keyspace, prefix, 0),
        "--processes", "2", "--process-ports", ",".join(map(str, ports)), *extra,
    )  # fmt: skip
    await all_listening(two)
    one = await servers.astart(*node_args(etcd, node, keyspace, prefix, 1), *extra)
    return two, one, ports


async def members(server: ServerProcess, api_key: str | None = None) -> dict[str, str]:
    """The members ``server`` (whichever of its processes answers) sees serving, with their addresses."""
    async with AsyncClient(server.url, api_key=api_key) as client:
        listed = (await retried(client.cluster_info)).members
    return {m.node_id: m.address for m in listed if m.state == "serving"}


async def all_members(nodes: list[ServerProcess], api_key: str | None = None) -> bool:
    # Fresh connections: on node-0 they reach either process, each with its own view.
    views = [await members(node, api_key) for node in nodes for _ in range(4)]
    return all(sorted(v) == MEMBERS for v in views)


async def test_every_partition_is_served_through_either_node(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str, tmp_path: Path
) -> None:
    key, auth = keyed_cluster(tmp_path)
    two, one, ports = await start_nodes(servers, etcd, cassandra_node, keyspace, "/procs", *auth)
    nodes = [two, one]
    await eventually(lambda: all_members(nodes, key), DEADLINE, "both nodes see the three members")
    seen = await members(one, key)
    assert [seen[m] for m in PROCESS_MEMBERS] == [f"127.0.0.1:{p}" for p in ports]

    queue = member_queue("spread")
    async with AsyncClient(one.url, api_key=key) as client:
        await client.create_queue(queue, partitions=PARTITIONS, lease_timeout="30s")
        owners = {p.partition: p.owner for p in (await client.cluster_info(queue)).partitions}
    assert set(owners.values()) == set(MEMBERS)
    produced = await produce_everywhere(nodes, queue, 240, api_key=key)
    # Leased through node-0 and completed through node-1 until about half is delivered, then the other way.
    delivered = await drain(two, one, queue, len(produced) // 2, api_key=key)
    rest = len(produced) - sum(map(len, delivered.values()))
    delivered_too = await drain(one, two, queue, rest, api_key=key)
    everything = [p for d in (delivered, delivered_too) for items in d.values() for p in items]
    assert sorted(everything) == produced, "each acknowledged item delivered exactly once"
    # Produced through fresh connections (spread over node-0's processes): every member's partitions
    # held items, both processes' included.
    assert {owners[p] for p in [*delivered, *delivered_too]} == set(MEMBERS)
    for node in nodes:
        assert terminate(node) == 0, node.describe()


async def test_forwards_between_processes_and_nodes_use_mutual_tls(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str, tmp_path: Path
) -> None:
    key = generate_key()
    secret_path, secret = secret_file(tmp_path)
    auth = ("--api-keys", key_hash(key), "--cluster-secret-file", str(secret_path))
    ca = Authority(tmp_path / "ca", "cluster")
    trusted = ca.client_context()
    ports = [free_port(), free_port()]
    processes = ("--processes", "2", "--process-ports", ",".join(map(str, ports)))
    two, two_url = await start_tls_node(
        servers,
        (*node_args(etcd, cassandra_node, keyspace, "/procs-tls", 0), *auth, *processes),
        ca,
        "node-0",
    )
    await all_listening(two)
    _, one_url = await start_tls_node(
        servers, (*node_args(etcd, cassandra_node, keyspace, "/procs-tls", 1), *auth), ca, "node-1"
    )
    urls = [two_url, one_url]

    async def all_see_three() -> bool:
        for url in urls * 4:  # fresh connections: on node-0 they reach either process
            async with AsyncClient(url, api_key=key, ssl=trusted) as client:
                listed = (await retried(client.cluster_info)).members
            if sorted(m.node_id for m in listed if m.state == "serving") != MEMBERS:
                return False
        return True

    await eventually(all_see_three, DEADLINE, "both nodes see the three members")
    queue = member_queue("tls")
    async with AsyncClient(one_url, api_key=key, ssl=trusted) as client:
        await client.create_queue(queue, partitions=PARTITIONS, lease_timeout="30s")
        owners = {p.partition: p.owner for p in (await client.cluster_info(queue)).partitions}
    produced = [f"tls-{n:03d}" for n in range(60)]
    for n, payload in enumerate(produced):
        async with AsyncClient(urls[n % 2], api_key=key, ssl=trusted) as client:
            await retried(lambda c=client, p=payload: c.produce(queue, [p]))
    delivered = await drain(two_url, one_url, queue, len(produced), api_key=key, tls=trusted)
    assert sorted(p for items in delivered.values() for p in items) == produced
    assert {owners[p] for p in delivered} == set(MEMBERS)

    # Process 1's own port serves HTTPS, and a forward signed for it still needs a client certificate.
    path, body = "/v1/queues.list", b"{}"

    async def forward(context: ssl.SSLContext) -> int:
        signature, _ = ClusterAuth(secret, "node-1").sign("node-0-1", "POST", path, body)
        headers = {
            "Content-Type": "application/json",
            FORWARDED_HEADER: "node-1",
            SIGNATURE_HEADER: signature,
        }
        url = f"https://127.0.0.1:{ports[1]}{path}"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=body, headers=headers, ssl=context) as r,
        ):
            return r.status

    assert await forward(trusted) == 401
    assert await forward(ca.client_context(ca.issue("node-9"))) == 200


async def test_kill9_of_one_process_loses_nothing_and_its_partitions_come_back(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    two, one, _ = await start_nodes(servers, etcd, cassandra_node, keyspace, "/procs-kill")
    nodes = [two, one]
    await eventually(lambda: all_members(nodes), DEADLINE, "both nodes see the three members")
    queue = member_queue("kill")
    async with AsyncClient(one.url) as client:
        await client.create_queue(queue, lease_timeout="2s", expire_timeout="1h", partitions=PARTITIONS)
    async with AsyncClient(two.url) as through_two, AsyncClient(one.url) as through_one:
        loads = [Load(through_two, queue), Load(through_one, queue)]
        workers = [asyncio.create_task(load.produce(i)) for i, load in enumerate(loads)]
        workers += [asyncio.create_task(load.consume()) for load in loads]

        async def acked(count: int) -> bool:
            return sum(len(load.acked) for load in loads) >= count

        await eventually(lambda: acked(200), DEADLINE, "200 items acknowledged")
        victim = children(two)[1]
        os.kill(victim, signal.SIGKILL)
        await eventually(
            lambda: _true(two.stderr().count("querator listening on") > 2), DEADLINE, "restarted"
        )
        assert victim not in children(two)
        # Its key outlived it until its etcd lease expired; it then registered again under its id.
        await eventually(lambda: all_members(nodes), DEADLINE, "the restarted process a member again")
        more = sum(len(load.acked) for load in loads) + 100
        await eventually(lambda: acked(more), DEADLINE, "producing after the restart")
        for load in loads:
            load.stop.set()
        await asyncio.gather(*workers)
        acknowledged = set().union(*(load.acked for load in loads))
        delivered: set[str] = set()

        async def drained() -> bool:
            for load in loads:
                await load.drained()
                delivered.update(load.delivered)
            return acknowledged <= delivered

        try:
            await eventually(drained, DEADLINE, "every acknowledged item leased")
        except AssertionError as e:
            missing = sorted(acknowledged - delivered)
            raise AssertionError(f"{e}: {len(missing)} never leased, {missing[:5]}\n{two.describe()}") from e

        await every_partition_served(nodes, queue, loads[0])
    # Both processes joined, then the restarted one again, under the same member id.
    assert two.stderr().count("joined the cluster as node-0-") == 3, two.describe()
    for node in nodes:
        assert terminate(node) == 0, node.describe()


async def _true(value: bool) -> bool:
    return value


async def every_partition_served(nodes: list[ServerProcess], queue: str, load: Load) -> None:
    """Every partition is served, a restarted process's included: produced to through fresh connections
    (spread over a node's processes), listed through ``load``'s node and leased from."""

    async def every_partition_holds() -> bool:
        for node in nodes:
            async with AsyncClient(node.url) as fresh:
                await retried(lambda f=fresh: f.produce(queue, ["more"]))
        stats = await retried(lambda: load.client.stats(queue))
        totals = {p.partition: p.total for lq in stats.logical_queues for p in lq.partitions}
        return sorted(totals) == list(range(PARTITIONS)) and all(totals.values())

    await eventually(every_partition_holds, DEADLINE, "items in every partition")
    for partition in range(PARTITIONS):
        assert (await retried(lambda p=partition: load.client.list_items(queue, p))).items
    leased_from: set[int | None] = set()

    async def every_partition_leased() -> bool:
        try:
            leased_from.add(await load.lease_once(1, "1s"))
        except RetryRequest:
            return False
        return set(range(PARTITIONS)) <= leased_from

    await eventually(every_partition_leased, DEADLINE, "a lease from every partition")
