"""What each member of a cluster costs as the cluster grows (issue 39 item 5): per-member figures, not
throughput.

    python bench/scale.py                          # 1, 2, 4, 8 members, a few minutes on 2 cores
    python bench/scale.py --members 1 2 4 8 12     # the full run
    python bench/scale.py --storage sqlite --rate 30 --seconds 20
    python bench/scale.py --storage cassandra --members 1 2 4   # one local Cassandra node, shared

For each cluster size M it starts a local etcd and M ``querator serve --cluster`` processes (memory
storage by default: each member keeps its own store, so every queue is created on every member; with
``--storage cassandra`` they share a keyspace of their own on one local Cassandra node, the tests'), and
``--queues-per-member`` one-partition queues per member. One driver per member sends ``--rate`` requests
per second to that member (batch-1 produce, lease and complete of one queue after another, in that
order), first through a plain client, then through one that reaches owners (``reach_owners=True``,
docs/adr/0040). It records, first with no requests for ``--seconds``, the CPU each member uses for
its cluster and background work alone (quiet), then per phase:

- node CPU per request: the user + system CPU of every member process (/proc) over the phase, divided
  by the requests the drivers sent, in all and above the quiet CPU: it should stay flat as M grows;
- forwards per request: forwards the members made (``querator_cluster_forwards_total``, queue routes;
  every forward counts, a lease's probes of other owners too) over the requests sent;

then, with the cluster idle, ``--idle-consumers`` consumers lease (``1s`` request_timeout) again and again
from an empty queue with a partition at every member, through member 0, for ``--idle-seconds``: lease
probes and watches sent per consumer-second (``querator_cluster_lease_probes_total``, ``_watches_total``);
and finally one more member joins: the partitions claimed by every member once every queue has
served a request (on Cassandra a Paxos round each, docs/adr/0039; there the Paxos rounds of the join
are counted too, ``querator_storage_statements_total{kind="paxos"}``), the partitions the old members
gave up, and the seconds from the new member answering until every
member's ring agrees on one queue's owners. Numbers go in docs/benchmarks-log.md with the command.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import shutil
import time

import aiohttp
from handoff import converge
from prometheus_client.parser import text_string_to_metric_families

from bench import PAYLOAD, Server, start_cassandra, start_cluster
from querator.client import AsyncClient
from querator.errors import RetryRequest

QUEUE_ROUTES = ("/v1/queue.produce", "/v1/queue.lease", "/v1/queue.complete")
COUNTERS = (
    "querator_cluster_partition_claims_total",
    "querator_cluster_partitions_moved_total",
    "querator_cluster_lease_probes_total",
    "querator_cluster_lease_watches_total",
)


async def totals(endpoints: list[str]) -> dict[str, float]:
    """The members' counters that this benchmark reads, summed over members (``forwards``: those of the
    queue routes; ``partitions_moved``: those given)."""
    found = dict.fromkeys((*COUNTERS, "forwards", "paxos"), 0.0)
    async with aiohttp.ClientSession() as session:
        for endpoint in endpoints:
            async with session.get(f"{endpoint}/metrics") as reply:
                text = await reply.text()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    # A move counted once: where it left (a member's fresh engine logs no "taken").
                    if sample.labels.get("direction") == "taken":
                        continue
                    if sample.name in COUNTERS:
                        found[sample.name] += sample.value
                    elif (
                        sample.name == "querator_cluster_forwards_total"
                        and sample.labels.get("route") in QUEUE_ROUTES
                    ):
                        found["forwards"] += sample.value
                    elif (
                        sample.name == "querator_storage_statements_total"
                        and sample.labels.get("kind") == "paxos"
                    ):
                        found["paxos"] += sample.value
    return found


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


async def drive(endpoint: str, queues: list[str], rate: float, seconds: float, reach: bool) -> int:
    """Requests per second to ``endpoint`` at ``rate`` (one cycle of three requests every 3 / rate s,
    caught up if late): the number of requests sent."""
    sent = 0
    period = 3 / rate
    async with AsyncClient(endpoint, reach_owners=reach) as client:
        start = time.perf_counter()
        for tick, queue in enumerate(itertools.cycle(queues)):
            due = start + tick * period
            if due > start + seconds:
                return sent
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            sent += await cycle(client, queue)
    return sent


async def cycle(client: AsyncClient, queue: str) -> int:
    """Produces, leases and completes one item: the requests sent."""
    await client.produce(queue, [PAYLOAD])
    reply = await client.lease(queue, 1, "scale", request_timeout="5s")
    if not reply.items:  # timed out (454): nothing to complete
        return 2
    await client.complete(queue, reply.partition, [i.id for i in reply.items])
    return 3


async def quiet(nodes: list[Server], seconds: float) -> float:
    """CPU seconds per second each member uses with no requests (its cluster and background work)."""
    cpu, started = sum(n.cpu_seconds() for n in nodes), time.perf_counter()
    await asyncio.sleep(seconds)
    return (sum(n.cpu_seconds() for n in nodes) - cpu) / (time.perf_counter() - started) / len(nodes)


async def load(
    nodes: list[Server], queues: list[list[str]], args: argparse.Namespace, reach: bool, idle_cpu: float
) -> str:
    """Requests per second per member, node CPU per request above ``idle_cpu`` (CPU s/s per member with
    no requests), and forwards per request."""
    endpoints = [n.endpoint for n in nodes]
    # Warm the clients' owner tables and the members' engines, unrecorded.
    pairs = list(zip(endpoints, queues, strict=True))
    await asyncio.gather(*(drive(e, q, args.rate, 1.0, reach) for e, q in pairs))
    before, cpu = await totals(endpoints), sum(n.cpu_seconds() for n in nodes)
    started = time.perf_counter()
    sent = await asyncio.gather(*(drive(e, q, args.rate, args.seconds, reach) for e, q in pairs))
    elapsed = time.perf_counter() - started
    cpu = sum(n.cpu_seconds() for n in nodes) - cpu
    counted = delta(before, await totals(endpoints))
    requests = sum(sent)
    above = cpu - idle_cpu * elapsed * len(nodes)
    return (
        f"{requests / elapsed / len(nodes):.0f} | {cpu * 1e6 / requests:.0f} | {above * 1e6 / requests:.0f} "
        f"| {counted['forwards'] / requests:.2f}"
    )


async def idle(endpoints: list[str], consumers: int, seconds: float, shared: bool) -> str:
    """Probes and watches per consumer-second of idle consumers leasing through member 0 (``shared``:
    the members share one store, where the queue is created once)."""
    async with AsyncClient(endpoints[0]) as client:
        for endpoint in endpoints[:1] if shared else endpoints:
            async with AsyncClient(endpoint) as member:
                await member.create_queue("idle", partitions=len(endpoints), lease_timeout="1m")
        before = await totals(endpoints)
        stop_at = time.perf_counter() + seconds

        async def consumer(n: int) -> None:
            while time.perf_counter() < stop_at:
                try:
                    await client.lease("idle", 1, f"idle-{n}", request_timeout="1s")
                except RetryRequest:
                    pass

        await asyncio.gather(*(consumer(n) for n in range(consumers)))
    counted = delta(before, await totals(endpoints))
    per = consumers * seconds
    return (
        f"{counted['querator_cluster_lease_probes_total'] / per:.2f} | "
        f"{counted['querator_cluster_lease_watches_total'] / per:.3f}"
    )


async def join(nodes: list[Server], etcd_url: str, queues: list[str], storage: str, store: list[str]) -> str:
    """One more member: claims and moves over every member, and seconds until the rings agree."""
    endpoints = [n.endpoint for n in nodes]
    members = len(nodes)
    before = await totals(endpoints)
    cluster = ["--cluster", etcd_url, "--etcd-lease-ttl", "5s", "--cluster-grace-period", "0s"]
    joined = Server(storage, "normal", [*store, *cluster, "--node-id", f"node-{members}"])
    nodes.append(joined)
    async with AsyncClient(joined.endpoint) as client:
        await joined.wait_ready(client)
        since = time.monotonic()
        if storage != "cassandra":  # a store of its own: it needs the queues too
            for queue in queues:
                await client.create_queue(queue, partitions=1, lease_timeout="1m")
    converge_s = await converge([*endpoints, joined.endpoint], members + 1, since, queues[0])
    # A member claims a partition when its engine of the queue runs: one cycle of every queue (the ones
    # the load used are running on their old owners) makes the new owners claim what moved to them.
    async with AsyncClient(joined.endpoint, reach_owners=True) as client:
        for queue in queues[:-1]:
            await cycle(client, queue)
    counted = delta(before, await totals([*endpoints, joined.endpoint]))
    return (
        f"{counted['querator_cluster_partition_claims_total']:.0f} | {counted['paxos']:.0f} | "
        f"{counted['querator_cluster_partitions_moved_total']:.0f} | {converge_s:.2f}"
    )


def store_flags(args: argparse.Namespace, members: int) -> list[str]:
    """The flags of a member's store: on Cassandra, a keyspace of this cluster size's own."""
    if args.storage != "cassandra":
        return []
    return [
        "--cassandra-hosts",
        "127.0.0.1",
        "--cassandra-port",
        str(args.cassandra_port),
        "--cassandra-keyspace",
        f"scale_{members}_{os.getpid()}",
    ]


async def one_size(members: int, args: argparse.Namespace) -> str:
    store = store_flags(args, members)
    extra = ["--cluster-grace-period", "0s", *store]
    nodes, etcd = start_cluster(members, args.storage, "normal", extra)
    try:
        endpoints = [n.endpoint for n in nodes]
        for node in nodes:
            async with AsyncClient(node.endpoint) as client:
                await node.wait_ready(client)
        await converge(endpoints, members, time.monotonic(), None)
        names = [f"m{m}-q{q}" for m in range(members) for q in range(args.queues_per_member)]
        # Each member keeps its own store and needs every queue; on Cassandra they share them.
        for endpoint in endpoints if args.storage != "cassandra" else endpoints[:1]:
            async with AsyncClient(endpoint) as client:
                for name in names:
                    await client.create_queue(name, partitions=1, lease_timeout="1m")
        per_member = [
            names[m * args.queues_per_member : (m + 1) * args.queues_per_member] for m in range(members)
        ]
        idle_cpu = await quiet(nodes, args.seconds)
        plain = await load(nodes, per_member, args, False, idle_cpu)
        owners = await load(nodes, per_member, args, True, idle_cpu)
        idled = await idle(endpoints, args.idle_consumers, args.idle_seconds, args.storage == "cassandra")
        joined = await join(nodes, etcd.cluster_url("/bench"), [*names, "idle"], args.storage, store)
        return f"| {members} | {100 * idle_cpu:.2f} | {plain} | {owners} | {idled} | {joined} |"
    finally:
        for node in nodes:
            node.stop()
        etcd.stop()
        shutil.rmtree(etcd.data_dir.parent, ignore_errors=True)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--storage", default="memory", choices=["memory", "sqlite", "cassandra"])
    parser.add_argument("--cassandra-port", type=int, help="a running Cassandra node (default: start one)")
    parser.add_argument("--rate", type=float, default=30.0, help="requests per second per member")
    parser.add_argument("--seconds", type=float, default=10.0, help="per load phase")
    parser.add_argument("--queues-per-member", type=int, default=4)
    parser.add_argument("--idle-consumers", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, storage {args.storage}, {args.rate:.0f} requests/s per member, "
        f"{args.seconds:.0f} s per phase, {args.queues_per_member} queues per member, "
        f"{args.idle_consumers} idle consumers for {args.idle_seconds:.0f} s"
    )
    print(
        "| members | quiet: CPU % per member "
        "| plain: req/s per member | node CPU us/request | above quiet | forwards/request "
        "| reach owners: req/s per member | node CPU us/request | above quiet | forwards/request "
        "| idle: probes per consumer-s | watches per consumer-s "
        "| join: claims | Paxos rounds | partitions moved | rings agree s |\n" + "|---" * 16 + "|"
    )
    cassandra = None
    if args.storage == "cassandra" and args.cassandra_port is None:
        cassandra = start_cassandra("group")
        args.cassandra_port = cassandra.cql_port
    try:
        for members in args.members:
            print(await one_size(members, args), flush=True)
    finally:
        if cassandra is not None:
            cassandra.stop()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
