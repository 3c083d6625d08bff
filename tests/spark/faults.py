"""Fault-injecting variants of the ``querator`` data source, registered next to it by the Spark fixture.

They run inside Spark's Python workers, which import this module by name (the fixture puts the repository
on ``PYTHONPATH``), so it imports nothing from the test harness. Each injects its fault only in the first
attempt of a task: Spark retries the task, and the retry must not enqueue any item twice.

- ``querator_failing``: a task fails after ``FAIL_AFTER`` produce requests were acknowledged, i.e.
  after sending part of its rows.
- ``querator_speculative``: a task writes its rows twice *at the same time* (two copies of one attempt,
  as speculation runs them). Local mode never launches speculative copies -- and Spark never puts one on
  the host already running the task -- so this is how a one-machine test gets two concurrent copies.
- ``querator_lossy``: every third produce reaches the server but its reply is "lost" (the client raises
  ``ConnectionFailed`` after the server applied it), so the sink retries requests that were applied.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark import TaskContext

from querator.client import AsyncClient, ConnectionFailed, ProduceItem
from querator.spark import QueratorDataSource, QueratorWriter, SinkConfig, TaskReport, WriteTotals
from querator.spark._producer import new_client
from querator.spark._task import current_task, write_arrow

FAIL_AFTER = 3
"""Acknowledged produce requests after which a first attempt fails."""


class InjectedFailure(RuntimeError):
    """The failure a test injected; its message appears in Spark's task-failure log."""


def first_attempt() -> bool:
    context = TaskContext.get()
    return context is not None and context.attemptNumber() == 0


class FailingClient(AsyncClient):
    """Raises once ``FAIL_AFTER`` produces were acknowledged, in a task's first attempt only."""

    acknowledged = 0

    async def produce(
        self, queue_name: str, items: Sequence[ProduceItem], request_timeout: str = "1m"
    ) -> None:
        if first_attempt() and self.acknowledged >= FAIL_AFTER:
            raise InjectedFailure(f"injected failure after {self.acknowledged} acknowledged produces")
        await super().produce(queue_name, items, request_timeout)
        self.acknowledged += 1


class LossyClient(AsyncClient):
    """Every third produce is applied by the server, then reported as having had no reply."""

    calls = 0

    async def produce(
        self, queue_name: str, items: Sequence[ProduceItem], request_timeout: str = "1m"
    ) -> None:
        self.calls += 1
        await super().produce(queue_name, items, request_timeout)
        if self.calls % 3 == 0:
            raise ConnectionFailed("injected: the reply was lost after the server applied the produce")


class FailingWriter(QueratorWriter):
    def new_client(self, endpoint: str, config: SinkConfig) -> AsyncClient:
        return FailingClient(endpoint, limit=config.max_in_flight)


class LossyWriter(QueratorWriter):
    def new_client(self, endpoint: str, config: SinkConfig) -> AsyncClient:
        return LossyClient(endpoint, limit=config.max_in_flight)


class SpeculativeWriter(QueratorWriter):
    """Runs two concurrent copies of each task's write on its first attempt, as speculation would."""

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        task = current_task(self.write_id, streaming=False)
        if not first_attempt():
            return super().write(iterator)
        batches = list(iterator)
        results: list[WriteTotals] = []
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def copy() -> None:
            start.wait()
            try:
                results.append(write_arrow(self.config, task, batches, new_client))
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=copy) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return TaskReport(task.partition, task.attempt, results[0])


class FailingSource(QueratorDataSource):
    writer_class = FailingWriter

    @classmethod
    def name(cls) -> str:
        return "querator_failing"


class SpeculativeSource(QueratorDataSource):
    writer_class = SpeculativeWriter

    @classmethod
    def name(cls) -> str:
        return "querator_speculative"


class LossySource(QueratorDataSource):
    writer_class = LossyWriter

    @classmethod
    def name(cls) -> str:
        return "querator_lossy"


SOURCES = (FailingSource, SpeculativeSource, LossySource)
