"""One Spark task's write: who the task is, where it sends, and the loop from input rows to requests.

**Dedup ids.** A task's derived dedup ids are ``<scope>-<partition>-<row position>``, where the scope is

- for a batch write: the write id, a random id drawn once on the driver when Spark plans the write, so
  every attempt of a task (a retry after a failure, a speculative copy, a stage re-run) produces the same
  ids, while two different writes never collide;
- for a streaming micro-batch: ``<query id>-<batch id>``, both read from the task's local properties
  (Spark keeps the query id in the checkpoint and replays a batch under the same batch id after a
  restart), so even a micro-batch replayed by a restarted query is not enqueued twice. Without them
  (an engine that does not set them) the scope falls back to the write id and the stage id.

Row positions repeat only if the task's input order does: a partition computed from a source read or a
narrow transformation is, the output of a shuffle without a sort may not be. Use ``dedupIdColumn`` where
that matters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from querator.client import ConnectionFailed
from querator.errors import QueratorError
from querator.spark._config import SinkConfig
from querator.spark._items import ItemMapper, MappedItem
from querator.spark._producer import ClientFactory, TaskProducer, new_client
from querator.spark._totals import WriteTotals

__all__ = ["TaskIdentity", "current_task", "write_arrow", "write_rows"]

log = logging.getLogger("querator.spark")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
_ROWS_PER_CHUNK = 10_000
"""Rows gathered from a ``Row`` iterator before they are mapped (the Arrow path uses Spark's batches)."""


@dataclass(frozen=True)
class TaskIdentity:
    """The Spark task a write runs in."""

    partition: int
    stage: int
    attempt: int
    dedup_prefix: str

    @property
    def where(self) -> str:
        return f"partition {self.partition} (stage {self.stage}, attempt {self.attempt})"


def current_task(write_id: str, streaming: bool) -> TaskIdentity:
    """The running task's identity and dedup prefix (see the module docstring).

    Outside a Spark task (no ``TaskContext``) partition, stage and attempt are 0.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return TaskIdentity(0, 0, 0, f"{write_id}-0-")
    partition, stage, attempt = context.partitionId(), context.stageId(), context.attemptNumber()
    scope = write_id
    if streaming:
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        scope = f"{query}-{batch}" if query and batch else f"{write_id}-s{stage}"
    return TaskIdentity(partition, stage, attempt, f"{scope}-{partition}-")


def _discover_nodes(config: SinkConfig, factory: ClientFactory) -> list[str]:
    """The URLs of the serving members owning a partition of the queue (each serves a produce itself,
    where another member would forward it: docs/adr/0040-clients-reach-partition-owners.md), from
    ``cluster.info`` at the first endpoint that answers; every serving member's when none is known."""

    async def ask() -> list[str]:
        errors: list[str] = []
        for endpoint in config.endpoints:
            client = factory(endpoint, config)
            try:
                info = await client.cluster_info(config.queue)
            except (ConnectionFailed, QueratorError) as e:
                errors.append(f"{endpoint}: {e}")
                continue
            finally:
                await client.close()
            scheme = endpoint.split("://", 1)[0]
            serving = {m.node_id: m.address for m in info.members if m.state == "serving" and m.address}
            owners = {p.owner for p in info.partitions if p.queue_name == config.queue} & serving.keys()
            nodes = sorted(f"{scheme}://{serving[n]}" for n in owners or serving)
            # A node alone answers without a reachable address: keep the endpoint that answered.
            return nodes or [endpoint]
        raise ConnectionFailed(f"cluster.info failed at every endpoint; {'; '.join(errors)}")

    return asyncio.run(ask())


def task_endpoints(config: SinkConfig, partition: int, factory: ClientFactory = new_client) -> list[str]:
    """The endpoints of a task, rotated by partition so that tasks spread over the nodes."""
    endpoints = _discover_nodes(config, factory) if config.address_nodes else list(config.endpoints)
    start = partition % len(endpoints)
    return endpoints[start:] + endpoints[:start]


async def _send_all(
    config: SinkConfig,
    producer: TaskProducer,
    mapper: ItemMapper,
    chunks: Iterator[tuple[list[Any], dict[str, list[Any]]]],
) -> WriteTotals:
    """Maps each chunk of rows and submits requests of at most ``batchSize`` items / ``batchBytes``."""
    row = 0
    items: list[MappedItem] = []
    size = 0

    async def submit() -> None:
        nonlocal items, size
        await producer.submit([i.item for i in items], size)
        items, size = [], 0

    while True:
        # Reading the next chunk may block on Spark: do it off the loop so requests keep moving.
        chunk = await asyncio.to_thread(next, chunks, None)
        if chunk is None:
            break
        payloads, fields = chunk
        for mapped in mapper.map(payloads, fields, row):
            if items and (len(items) >= config.batch_size or size + mapped.size > config.batch_bytes):
                await submit()
            items.append(mapped)
            size += mapped.size
        row += len(payloads)
    if items:
        await submit()
    totals = await producer.flush()
    totals.skipped = mapper.skipped
    if mapper.first_skip is not None:
        log.warning(
            "skipped %d bad row(s) of %s; the first: %s", mapper.skipped, mapper.where, mapper.first_skip
        )
    return totals


def _run(
    config: SinkConfig,
    task: TaskIdentity,
    chunks: Iterator[tuple[list[Any], dict[str, list[Any]]]],
    factory: ClientFactory,
) -> WriteTotals:
    mapper = ItemMapper(config, task.dedup_prefix, task.where)
    endpoints = task_endpoints(config, task.partition, factory)

    async def main() -> WriteTotals:
        async with TaskProducer(config, endpoints, factory) as producer:
            return await _send_all(config, producer, mapper, chunks)

    return asyncio.run(main())


def write_arrow(
    config: SinkConfig, task: TaskIdentity, batches: Iterable[Any], factory: ClientFactory = new_client
) -> WriteTotals:
    """Produces the rows of ``pyarrow.RecordBatch``es (the Arrow writers' input) as items.

    Raises:
        BadRowError: a bad row (unless skipped).
        ProduceFailed: a request failed for good, with the server's message.
    """
    mapper_columns = ItemMapper(config, None, "").needed_columns()
    fields = config.columns()
    whole_row = config.payload_column == "*"

    def chunks() -> Iterator[tuple[list[Any], dict[str, list[Any]]]]:
        for batch in batches:
            names = batch.schema.names
            missing = [c for c in mapper_columns if c not in names]
            if missing:
                raise KeyError(f"column(s) not in the DataFrame: {', '.join(missing)}")
            payloads = batch.to_pylist() if whole_row else batch.column(config.payload_column).to_pylist()
            yield payloads, {name: batch.column(column).to_pylist() for name, column in fields.items()}

    return _run(config, task, chunks(), factory)


def write_rows(
    config: SinkConfig, task: TaskIdentity, rows: Iterable[Any], factory: ClientFactory = new_client
) -> WriteTotals:
    """Produces ``pyspark.sql.Row``s (the ``foreachPartition`` helper's input) as items.

    Raises:
        BadRowError: a bad row (unless skipped).
        ProduceFailed: a request failed for good, with the server's message.
    """
    fields = config.columns()
    whole_row = config.payload_column == "*"

    def chunks() -> Iterator[tuple[list[Any], dict[str, list[Any]]]]:
        iterator = iter(rows)
        while True:
            block = [r for _, r in zip(range(_ROWS_PER_CHUNK), iterator, strict=False)]
            if not block:
                return
            if whole_row:
                payloads = [r.asDict(recursive=True) for r in block]
            else:
                payloads = [r[config.payload_column] for r in block]
            yield payloads, {name: [r[column] for r in block] for name, column in fields.items()}

    return _run(config, task, chunks(), factory)
