"""Exactly once across task retries: faults injected into real Spark tasks (see ``faults.py``).

- A task fails after part of its rows were acknowledged; Spark retries it: no item twice.
- Two copies of each task write at the same time (what speculation does): no item twice.
- Replies lost after the server applied a produce: the sink retries them, no item twice, and the
  retries are counted in the totals the driver reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ServerProcess
from tests.spark.harness import drain, duplicates, read_report, write_options

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROWS = 40_000
SPARK_PARTITIONS = 4
BATCH = 500


def frame(spark: Any) -> Any:
    from pyspark.sql import functions as F

    return spark.range(ROWS, numPartitions=SPARK_PARTITIONS).select(
        F.concat(F.lit("item-"), F.col("id").cast("string")).alias("payload"),
        F.col("id").cast("string").alias("ref"),
    )


def assert_exactly_once(server: ServerProcess, queue: str) -> None:
    delivered = drain(server.url, queue)
    refs = [item.reference for _, item in delivered]
    assert duplicates(refs) == {}
    assert sorted(map(int, refs)) == list(range(ROWS))
    assert all(item.bytes == f"item-{item.reference}".encode() for _, item in delivered)


@pytest.mark.parametrize("fmt", ["querator_failing", "querator_speculative"])
def test_retried_and_speculative_tasks_enqueue_nothing_twice(
    spark: Any, server: ServerProcess, queue: str, report: Path, fmt: str
) -> None:
    options = write_options(
        server.url, queue, referenceColumn="ref", batchSize=str(BATCH), reportFile=str(report)
    )
    frame(spark).write.format(fmt).options(**options).mode("append").save()

    assert_exactly_once(server, queue)
    [line] = read_report(report)
    assert line["outcome"] == "committed"
    # The committed attempts between them acknowledged every row once.
    assert line["items"] == ROWS
    assert line["tasks"] == SPARK_PARTITIONS


def test_failed_first_attempts_had_sent_part_of_their_rows(
    spark: Any, server: ServerProcess, queue: str
) -> None:
    """The failure really comes after a partial send: with dedup off, the retries duplicate those rows."""
    from tests.spark.faults import FAIL_AFTER

    options = write_options(server.url, queue, referenceColumn="ref", batchSize=str(BATCH), dedup="false")
    frame(spark).write.format("querator_failing").options(**options).mode("append").save()

    refs = [item.reference for _, item in drain(server.url, queue)]
    assert set(map(int, refs)) == set(range(ROWS))
    # Each task's first attempt got at least FAIL_AFTER requests acknowledged before it failed.
    assert len(refs) - ROWS >= SPARK_PARTITIONS * FAIL_AFTER * BATCH


def test_lost_replies_are_retried_without_duplicates(
    spark: Any, server: ServerProcess, queue: str, report: Path
) -> None:
    options = write_options(
        server.url,
        queue,
        referenceColumn="ref",
        batchSize=str(BATCH),
        retryBackoff="1ms",
        reportFile=str(report),
    )
    frame(spark).write.format("querator_lossy").options(**options).mode("append").save()

    assert_exactly_once(server, queue)
    [line] = read_report(report)
    assert line["items"] == ROWS
    assert line["retries"] >= ROWS // BATCH // 3
