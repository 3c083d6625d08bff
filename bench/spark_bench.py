"""Spark -> Querator throughput: a DataFrame of 1 KiB rows written with ``df.write.format("querator")``.

    python bench/spark_bench.py --rows 1000000                   # one sqlite node
    python bench/spark_bench.py --rows 1000000 --nodes 3         # 3 nodes in cluster mode (local etcd),
                                                                 # each keeping its partitions in sqlite

Starts the node(s) like ``bench.py`` does (sqlite, ``synchronous=FULL``), then, on a fresh queue each
time, measures:

1. the harness's own producers (``bench.py``'s loop: 8 clients, batches of 1000 items of 1 KiB, spread
   over the nodes), without and with a unique ``dedup_id`` per item, for ``--duration`` seconds;
2. Spark in ``local[N]`` writing ``--rows`` rows (binary 1 KiB payload, the derived dedup ids on, as by
   default), timed from ``save()`` to its return; with ``--nodes 3`` the tasks address the nodes from
   ``cluster.info`` (``addressNodes``).

The target (issue 7): Spark reaches at least 80% of the harness's dedup rate against the same server.
Needs the ``spark`` extra (pyspark, pyarrow, pandas) and Java 17.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import shutil
import sys
import time
from typing import Any

from bench import PAYLOAD, Result, Server, measure, start_cluster
from querator.client import AsyncClient
from querator.wire import messages as m

QUEUE = "spark-bench"


async def fresh_queue(endpoints: list[str], partitions: int) -> None:
    """Deletes and re-creates the queue on every node (in cluster mode each keeps its own storage)."""
    for endpoint in endpoints:
        async with AsyncClient(endpoint) as client:
            try:
                await client.delete_queue(QUEUE, force=True)
            except Exception:
                pass
            info = m.QueueInfo(
                queue_name=QUEUE, lease_timeout="5m", expire_timeout="24h", requested_partitions=partitions
            )
            await client.create_queue(info)


async def queued(endpoint: str) -> int:
    """Items in the queue (in cluster mode a node's stats cover every partition, wherever it is owned)."""
    async with AsyncClient(endpoint) as client:
        stats = await client.stats(QUEUE)
    return sum(p.total for lq in stats.logical_queues for p in lq.partitions)


async def harness(endpoints: list[str], clients: int, duration: float, dedup: bool) -> Result:
    """``bench.py``'s produce loop at batch 1000, its clients spread round-robin over the nodes."""
    sequence = itertools.count()
    conns = [AsyncClient(e, limit=clients * 2) for e in endpoints]
    plain = [PAYLOAD] * 1000

    async def produce(n: int) -> int:
        if dedup:
            first = next(sequence) * 1000
            items: list[Any] = [
                m.QueueProduceItem(bytes=PAYLOAD, dedup_id=f"h-{first + i}") for i in range(1000)
            ]
        else:
            items = plain
        await conns[n % len(conns)].produce(QUEUE, items)
        return 1000

    try:
        name = "harness produce + dedup_id" if dedup else "harness produce"
        return await measure(Result(name, 1000, clients), clients, duration, produce)
    finally:
        for conn in conns:
            await conn.close()


def spark_write(
    spark: Any, endpoints: list[str], rows: int, partitions: int, options: dict[str, str]
) -> float:
    """Seconds one ``save()`` of ``rows`` 1 KiB rows took."""
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=partitions).select(
        F.lpad(F.col("id").cast("string"), len(PAYLOAD), "x").cast("binary").alias("payload")
    )
    writer = df.write.format("querator").option("endpoint", ",".join(endpoints)).option("queue", QUEUE)
    start = time.perf_counter()
    writer.options(**options).mode("append").save()
    return time.perf_counter() - start


def start_nodes(count: int) -> tuple[list[Server], Any]:
    """``count`` sqlite nodes; with more than one, in cluster mode on a fresh local etcd."""
    if count == 1:
        return [Server("sqlite", "FULL", [])], None
    return start_cluster(count, "sqlite", "FULL", [])


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=1, choices=[1, 3])
    parser.add_argument("--partitions", type=int, default=16, help="queue partitions")
    parser.add_argument("--spark-partitions", type=int, default=8, help="DataFrame partitions (tasks)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--max-in-flight", default="4")
    parser.add_argument("--clients", type=int, default=8, help="harness producers")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per harness measurement")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from querator.spark import register

    nodes, etcd = start_nodes(args.nodes)
    endpoints = [n.endpoint for n in nodes]
    spark = None
    try:
        for node in nodes:
            async with AsyncClient(node.endpoint) as client:
                await node.wait_ready(client)
        print(
            f"# {time.strftime('%Y-%m-%d')} {platform.node()} {os.cpu_count()} cpus, python "
            f"{platform.python_version()}, {args.nodes} sqlite node(s), {args.partitions} queue partitions, "
            f"Spark {args.master}, {args.spark_partitions} tasks, {args.rows:,} rows of {len(PAYLOAD)} B"
        )
        print("| writer | items/s |\n|---|---|")
        for dedup in (False, True):
            await fresh_queue(endpoints, args.partitions)
            result = await harness(endpoints, args.clients, args.duration, dedup)
            rate = result.items / result.seconds
            print(f"| {result.scenario}, {args.clients} clients, batch 1000 | {rate:,.0f} |")

        spark = (
            SparkSession.builder.master(args.master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        options = {"maxInFlight": args.max_in_flight}
        if args.nodes > 1:
            options["addressNodes"] = "true"
        # A first, small write starts the Python workers, so the timed one measures steady throughput.
        await fresh_queue(endpoints, args.partitions)
        spark_write(spark, endpoints, args.spark_partitions * 100, args.spark_partitions, options)
        await fresh_queue(endpoints, args.partitions)
        seconds = spark_write(spark, endpoints, args.rows, args.spark_partitions, options)
        settings = ", ".join(f"{k}={v}" for k, v in options.items())
        print(f"| Spark df.write.format('querator') ({settings}) | {args.rows / seconds:,.0f} |")
        print(f"\nitems in the queue after the Spark write: {await queued(endpoints[0]):,}")
    finally:
        if spark is not None:
            spark.stop()
        for node in nodes:
            node.stop()
        if etcd is not None:
            etcd.stop()
            shutil.rmtree(etcd.data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
