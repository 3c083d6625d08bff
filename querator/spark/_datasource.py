"""The Python Data Source (Spark >= 4.0): ``df.write.format("querator")`` and ``df.writeStream.format(...)``.

Spark calls ``QueratorDataSource.writer`` (or ``streamWriter``) once on the driver when it plans a write;
the writer it returns is pickled to every task, whose ``write`` receives the partition as Arrow record
batches (the fast path: no per-row Python ``Row`` objects) and returns a ``TaskReport``. The driver then
calls ``commit`` with every task's report -- or ``abort`` if a task failed for good -- and those log the
totals (items, requests, retries, skipped rows) and append them to ``reportFile`` when it is set.

Nothing is undone on abort: items a task produced before the job failed stay in the queue. Their dedup
ids make a retried task (or a replayed micro-batch) skip them, but a *new* write draws a new write id;
give rows a ``dedupIdColumn`` to make re-running a whole job idempotent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from querator.client import AsyncClient
from querator.spark._config import SinkConfig, SinkConfigError
from querator.spark._producer import new_client
from querator.spark._schema import check_schema
from querator.spark._task import current_task, write_arrow, write_rows
from querator.spark._totals import WriteTotals, report

try:  # Spark >= 4.1: the streaming sink gets Arrow batches too.
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_ARROW = True
except ImportError:  # pragma: no cover - Spark 4.0
    _StreamWriterBase = DataSourceStreamWriter
    _STREAM_ARROW = False

__all__ = ["QueratorDataSource", "QueratorStreamWriter", "QueratorWriter", "TaskReport", "register"]


@dataclass
class TaskReport(WriterCommitMessage):
    """What one task sends back to the driver: its partition, attempt and totals."""

    partition: int
    attempt: int
    totals: WriteTotals = field(default_factory=WriteTotals)


def _report(config: SinkConfig, what: str, outcome: str, messages: list[Any]) -> None:
    """Sums the task reports and hands them to ``report``."""
    totals = WriteTotals(tasks=0)
    failed = 0
    for message in messages:
        if isinstance(message, TaskReport):
            totals.add(message.totals)
        else:
            failed += 1
    report(config, what, outcome, totals, failed)


class _TaskWriter:
    """What the batch and the streaming writer share: the options, the dedup scope, the client seam.

    Args:
        config: the parsed options.
        write_id: the write's (or query run's) random id, the scope of its derived dedup ids.
    """

    def __init__(self, config: SinkConfig, write_id: str) -> None:
        self.config = config
        self.write_id = write_id

    def new_client(self, endpoint: str, config: SinkConfig) -> AsyncClient:
        """The client a task uses for ``endpoint``; override in a subclass to wrap or replace it."""
        return new_client(endpoint, config)

    def _write(self, iterator: Iterator[Any], streaming: bool, arrow: bool) -> TaskReport:
        """Produces one partition (on an executor).

        Raises:
            BadRowError: a bad row, unless ``onBadRow=skip``.
            ProduceFailed: a request failed for good, with the server's message.
        """
        task = current_task(self.write_id, streaming=streaming)
        write = write_arrow if arrow else write_rows
        return TaskReport(task.partition, task.attempt, write(self.config, task, iterator, self.new_client))


class QueratorWriter(_TaskWriter, DataSourceArrowWriter):
    """The batch writer: one instance per write, pickled to every task."""

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        """Produces one partition (see ``_TaskWriter._write``)."""
        return self._write(iterator, streaming=False, arrow=True)

    def commit(self, messages: list[Any]) -> None:
        """Logs the write's totals on the driver (and appends them to ``reportFile``)."""
        _report(self.config, f"write {self.write_id}", "committed", messages)

    def abort(self, messages: list[Any]) -> None:
        """Logs what the tasks that succeeded had produced before the write failed."""
        _report(self.config, f"write {self.write_id}", "aborted", messages)


class QueratorStreamWriter(_TaskWriter, _StreamWriterBase):
    """The streaming sink: one instance per query run, pickled to every task of every micro-batch; its
    write id is the dedup scope only if Spark gives no query id."""

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        """Produces one partition of a micro-batch (see ``_TaskWriter._write``)."""
        return self._write(iterator, streaming=True, arrow=_STREAM_ARROW)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Logs the micro-batch's totals on the driver (and appends them to ``reportFile``)."""
        _report(self.config, f"micro-batch {batchId}", "committed", messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Logs what the tasks that succeeded had produced before the micro-batch failed."""
        _report(self.config, f"micro-batch {batchId}", "aborted", messages)


class QueratorDataSource(DataSource):
    """The ``querator`` data source: a sink only (batch and streaming). Options: see ``SinkConfig``."""

    writer_class: type[QueratorWriter] = QueratorWriter
    """The batch writer built by ``writer``; a subclass may substitute its own."""
    stream_writer_class: type[QueratorStreamWriter] = QueratorStreamWriter
    """The streaming writer built by ``streamWriter``."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``df.write.format("querator")``."""
        return "querator"

    def _config(self, schema: StructType, overwrite: bool) -> SinkConfig:
        if overwrite:
            raise SinkConfigError("a querator queue can only be appended to: use mode('append')")
        config = SinkConfig.from_options(self.options)
        check_schema(config, schema)
        return config

    def writer(self, schema: StructType, overwrite: bool) -> QueratorWriter:
        """The batch writer of one ``save()``, with a fresh write id (on the driver).

        Raises:
            SinkConfigError: bad options, missing or mistyped columns, or ``overwrite`` mode.
        """
        return self.writer_class(self._config(schema, overwrite), uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> QueratorStreamWriter:
        """The streaming writer of one query run (on the driver).

        Raises:
            SinkConfigError: bad options, missing or mistyped columns.
        """
        # Streaming "complete" mode asks to overwrite; a queue cannot be rewritten, only appended to.
        return self.stream_writer_class(self._config(schema, overwrite), uuid.uuid4().hex)


def register(spark: Any, source: type[QueratorDataSource] = QueratorDataSource) -> None:
    """Registers the ``querator`` format with ``spark`` (a ``SparkSession``; Spark >= 4.0).

    Raises:
        RuntimeError: this Spark has no Python Data Source API (Spark 3.5: use ``write_to_queue``).
    """
    registration = getattr(spark, "dataSource", None)
    if registration is None:
        raise RuntimeError(
            "this Spark has no Python Data Source API (Spark >= 4.0 needed); "
            "use querator.spark.write_to_queue(df, ...) instead"
        )
    registration.register(source)
