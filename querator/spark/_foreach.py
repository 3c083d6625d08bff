"""``write_to_queue``: the ``foreachPartition`` producer, for Spark 3.5 (no Python Data Source API).

The same column mapping, request batching, retries and dedup ids as the ``querator`` data source, driven
by ``df.foreachPartition``: each task produces its rows through one pooled session, and the totals come
back through Spark accumulators, which count each successful task once (a failed or speculative copy's
counts are dropped). A DataFrame whose tasks fail raises Spark's error, which quotes the task's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from querator.spark._config import SinkConfig
from querator.spark._schema import check_schema
from querator.spark._task import current_task, write_rows
from querator.spark._totals import WriteTotals, report

__all__ = ["write_to_queue"]


def _option(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_to_queue(df: Any, endpoint: str, queue: str, **options: object) -> WriteTotals:
    """Produces every row of ``df`` as an item of ``queue``, exactly once across task retries.

    Example::

        totals = write_to_queue(df, "http://localhost:2319", "jobs", payloadColumn="body", batchSize=500)

    Args:
        df: the DataFrame (Spark 3.5 or later).
        endpoint: base URL, or several comma-separated.
        queue: the queue, which must exist.
        **options: the data source's options by the same names (``payloadColumn``, ``dedupIdColumn``,
            ``batchSize``, ``onBadRow``, ...; see ``SinkConfig``), with values of any type.

    Returns:
        The totals of the write (also logged on the ``querator.spark`` logger).

    Raises:
        SinkConfigError: bad options, or columns missing or mistyped (before any task runs).
        Exception: Spark's job failure, quoting the task's ``BadRowError`` or ``ProduceFailed``.
    """
    given = {k: _option(v) for k, v in options.items()}
    config = SinkConfig.from_options({**given, "endpoint": endpoint, "queue": queue})
    check_schema(config, df.schema)
    write_id = uuid.uuid4().hex
    context = df.sparkSession.sparkContext
    names = ("items", "requests", "retries", "skipped", "bytes", "tasks")
    counters = {name: context.accumulator(0) for name in names}

    def produce(rows: Iterable[Any]) -> None:
        task = current_task(write_id, streaming=False)
        totals = write_rows(config, task, rows)
        for name, value in totals.as_dict().items():
            counters[name].add(value)

    try:
        df.foreachPartition(produce)
    except Exception:
        report(config, f"write {write_id}", "failed", _totals(counters))
        raise
    totals = _totals(counters)
    report(config, f"write {write_id}", "committed", totals)
    return totals


def _totals(counters: dict[str, Any]) -> WriteTotals:
    return WriteTotals(**{name: int(acc.value) for name, acc in counters.items()})
