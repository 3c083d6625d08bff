"""The streaming sink: a rate source into a queue for several micro-batches, stopped and restarted.

``rate-micro-batch`` puts rows ``[k * N, (k + 1) * N)`` in micro-batch ``k``, so what the queue must hold
is known exactly. The query is stopped after a few micro-batches -- possibly in the middle of one, whose
items are then partly sent -- and restarted from its checkpoint: Spark replays the unfinished
micro-batch under the same batch id, and its dedup ids keep the items sent before the stop from being
enqueued twice. At the end every row of every finished micro-batch is in the queue exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ServerProcess, wait_until
from tests.spark.harness import drain, duplicates, read_report, write_options

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROWS_PER_BATCH = 2000
BATCHES_PER_RUN = 3
DEADLINE = 120.0


def run_until(spark: Any, options: dict[str, str], checkpoint: Path, last_batch: int) -> list[dict[str, Any]]:
    """Runs the query until micro-batch ``last_batch`` has finished, then stops it; returns its progress."""
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", ROWS_PER_BATCH)
        .option("numPartitions", 2)
        .load()
        .selectExpr("cast(value as string) as payload", "cast(value as string) as ref")
    )
    query = (
        stream.writeStream.format("querator")
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:

        def finished() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            progress = query.lastProgress
            return progress is not None and progress["batchId"] >= last_batch

        wait_until(finished, DEADLINE, f"micro-batch {last_batch} finished")
    finally:
        query.stop()
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_rate_stream_no_loss_no_duplicates_across_a_restart(
    spark: Any, server: ServerProcess, queue: str, tmp_path: Path, report: Path
) -> None:
    options = write_options(server.url, queue, referenceColumn="ref", reportFile=str(report))
    checkpoint = tmp_path / "checkpoint"
    first = run_until(spark, options, checkpoint, BATCHES_PER_RUN - 1)
    second = run_until(spark, options, checkpoint, 2 * BATCHES_PER_RUN - 1)

    finished = {p["batchId"] for p in first + second}
    assert len(finished) >= 2 * BATCHES_PER_RUN
    committed = max(finished) + 1
    values = [int(item.reference) for _, item in drain(server.url, queue)]
    assert duplicates(values) == {}
    # Every row of the finished micro-batches, once; beyond them only rows of one stopped mid-way.
    assert set(range(committed * ROWS_PER_BATCH)) <= set(values)
    assert max(values) < (committed + 1) * ROWS_PER_BATCH
    commits = [line for line in read_report(report) if line["outcome"] == "committed"]
    assert {line["write"] for line in commits} >= {f"micro-batch {b}" for b in range(committed)}
