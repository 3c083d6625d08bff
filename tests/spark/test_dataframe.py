"""Batch writes of a DataFrame (``df.write.format("querator")``, ``write_to_queue``): real Spark and server.

- 200,000 rows into a 16-partition queue: every row leasable exactly once, payload and mapped columns
  intact, items spread over every partition, totals reported to the driver.
- The other column mappings: whole row as JSON, ``enqueueAtColumn`` (scheduled items), ``dedupIdColumn``
  (re-running the same write enqueues nothing new).
- ``write_to_queue`` (the Spark 3.5 ``foreachPartition`` helper) with the same guarantees.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from querator.client import Client
from querator.wire import messages as m
from tests.integration.conftest import ServerProcess
from tests.spark.harness import drain, duplicates, read_report, write_options

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROWS = 200_000
PARTITIONS = 16
SPARK_PARTITIONS = 8


def create_queue(server: ServerProcess, name: str, partitions: int) -> None:
    with Client(server.url) as client:
        client.create_queue(
            m.QueueInfo(
                queue_name=name, lease_timeout="5m", expire_timeout="1h", requested_partitions=partitions
            )
        )


def test_200k_rows_exactly_once_over_all_partitions(spark: Any, server: ServerProcess, report: Path) -> None:
    from pyspark.sql import functions as F

    create_queue(server, "spark-200k", PARTITIONS)
    df = spark.range(ROWS, numPartitions=SPARK_PARTITIONS).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).cast("binary").alias("payload"),
        F.col("id").cast("string").alias("ref"),
        F.when(F.col("id") % 2 == 0, F.lit("even")).otherwise(F.lit("odd")).alias("kind"),
        F.lit("text/plain").alias("enc"),
    )
    options = write_options(
        server.url,
        "spark-200k",
        referenceColumn="ref",
        kindColumn="kind",
        encodingColumn="enc",
        reportFile=str(report),
    )
    df.write.format("querator").options(**options).mode("append").save()

    delivered = drain(server.url, "spark-200k")
    refs = [item.reference for _, item in delivered]
    assert duplicates(refs) == {}
    assert len(delivered) == ROWS
    assert set(refs) == {str(i) for i in range(ROWS)}
    for _, item in delivered:
        n = int(item.reference)
        assert item.bytes == f"row-{n}".encode()
        assert item.kind == ("even" if n % 2 == 0 else "odd")
        assert item.encoding == "text/plain"
    per_partition = dict.fromkeys(range(PARTITIONS), 0)
    for partition, _ in delivered:
        per_partition[partition] += 1
    assert all(per_partition.values()), f"partitions without items: {per_partition}"

    [line] = read_report(report)
    assert line["outcome"] == "committed"
    assert line["items"] == ROWS
    assert line["tasks"] == SPARK_PARTITIONS
    assert line["requests"] >= ROWS // 1000
    assert line["skipped"] == 0


def test_whole_row_json_and_scheduled_items(spark: Any, server: ServerProcess, queue: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    rows = [(1, "a", None), (2, "b", later), (3, "c", None)]
    df = spark.createDataFrame(rows, "n int, name string, at timestamp")
    options = write_options(server.url, queue, payloadColumn="*", enqueueAtColumn="at")
    df.write.format("querator").options(**options).mode("append").save()

    delivered = drain(server.url, queue)  # only the ones due now: the scheduled one waits
    decoded = [(msgspec.json.decode(item.bytes), item.encoding) for _, item in delivered]
    assert sorted((d["n"], d["name"], enc) for d, enc in decoded) == [
        (1, "a", "application/json"),
        (3, "c", "application/json"),
    ]
    with Client(server.url) as client:
        scheduled = [i for p in range(4) for i in client.list_scheduled(queue, p).items]
    assert len(scheduled) == 1
    assert msgspec.json.decode(scheduled[0].payload)["n"] == 2
    assert scheduled[0].enqueue_at is not None
    assert abs(scheduled[0].enqueue_at - later) < timedelta(seconds=1)


def test_dedup_id_column_makes_a_rerun_idempotent(spark: Any, server: ServerProcess, queue: str) -> None:
    from pyspark.sql import functions as F

    df = spark.range(5000, numPartitions=3).select(
        F.col("id").cast("string").alias("payload"), F.concat(F.lit("order-"), F.col("id")).alias("key")
    )
    options = write_options(server.url, queue, dedupIdColumn="key", referenceColumn="key")
    for _ in range(2):  # two separate writes: the derived ids would differ, the column's do not
        df.write.format("querator").options(**options).mode("append").save()

    refs = [item.reference for _, item in drain(server.url, queue)]
    assert duplicates(refs) == {}
    assert len(refs) == 5000


def test_write_to_queue_helper(spark: Any, server: ServerProcess, queue: str) -> None:
    from pyspark.sql import functions as F

    from querator.spark import write_to_queue

    df = spark.range(20_000, numPartitions=4).select(
        F.col("id").cast("string").alias("body"), F.col("id").cast("string").alias("ref")
    )
    totals = write_to_queue(df, server.url, queue, payloadColumn="body", referenceColumn="ref", batchSize=500)
    assert (totals.items, totals.tasks, totals.skipped) == (20_000, 4, 0)
    assert totals.requests >= 40

    delivered = drain(server.url, queue)
    refs = [item.reference for _, item in delivered]
    assert duplicates(refs) == {}
    assert sorted(map(int, refs)) == list(range(20_000))
    assert all(item.bytes == item.reference.encode() for _, item in delivered)
