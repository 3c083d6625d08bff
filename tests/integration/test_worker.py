"""querator.worker with real processes: a ``querator serve`` node and ``querator worker`` processes
running tests/integration/worker_tasks.py, each run recorded in a file the test reads.

Nothing sleeps to synchronise: the test polls the records, the queues and the processes with deadlines.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from querator.client import AsyncClient
from querator.wire import messages as m
from querator.worker import use_traceparent
from tests.integration import worker_tasks as tasks

from .conftest import ServerProcess, Servers, eventually, server_env, wait_until

pytestmark = pytest.mark.integration

DEADLINE = 30.0


class Workers:
    """``querator worker`` processes of one test, killed at teardown if still running."""

    def __init__(self, server: ServerProcess, records: Path) -> None:
        self.server = server
        self.records = records
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """A worker running the tasks of ``args`` (``--queues ...``), once it has started leasing."""
        n = len(self.started)
        log = self.records.parent / f"worker-{n}.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "querator.cli",
                    "worker",
                    "tests.integration.worker_tasks:worker",
                    *args,
                ],
                env=server_env({"QUERATOR_ENDPOINT": self.server.url, "WORKER_RECORDS": str(self.records)}),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.started.append(proc)
        wait_until(
            lambda: "worker started" in log.read_text() or proc.poll() is not None, DEADLINE, "worker up"
        )
        assert proc.poll() is None, log.read_text()
        return proc

    def log(self, n: int) -> str:
        return (self.records.parent / f"worker-{n}.log").read_text()

    def runs(self, task: str) -> list[dict[str, Any]]:
        return [
            r
            for path in sorted(self.records.glob("*.jsonl"))
            for r in map(json.loads, path.read_text().splitlines())
            if r["task"] == task
        ]

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(DEADLINE)


@pytest.fixture
def server(servers: Servers) -> ServerProcess:
    return servers.start("--storage", "sqlite")


@pytest.fixture
def workers(server: ServerProcess, tmp_path: Path) -> Iterator[Workers]:
    records = tmp_path / "records"
    records.mkdir()
    started = Workers(server, records)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
async def client(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AsyncClient]:
    """A client of the node; the test's own ``enqueue`` calls go there too."""
    monkeypatch.setattr(tasks.worker, "endpoint", server.url)
    async with AsyncClient(server.url) as c:
        yield c
    await tasks.worker.close()


async def empty(client: AsyncClient, queue: str) -> bool:
    stats = await client.stats(queue)
    return all(p.total == 0 and p.scheduled == 0 for q in stats.logical_queues for p in q.partitions)


async def dead(client: AsyncClient, queue: str) -> list[bytes]:
    return [i.payload for i in (await client.list_items(f"{queue}-dead", 0)).items]


async def test_a_task_that_fails_twice_then_succeeds(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "flaky")
    await tasks.flaky.enqueue("k", 2)
    await eventually(lambda: _ran(workers, "flaky", 3), DEADLINE, "three runs")
    await eventually(lambda: empty(client, "flaky"), DEADLINE, "the item completed")
    assert await dead(client, "flaky") == []
    assert len(workers.runs("flaky")) == 3
    assert "outcome=retried" in workers.log(0) and "outcome=completed" in workers.log(0)


async def test_a_failure_comes_back_at_its_backoff(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "later")
    enqueued = datetime.now(UTC)
    await tasks.fails_later.enqueue("k")

    async def scheduled() -> bool:
        return bool((await client.list_scheduled("later", 0)).items)

    await eventually(scheduled, DEADLINE, "the failed item scheduled")
    [item] = (await client.list_scheduled("later", 0)).items
    assert item.enqueue_at is not None and item.enqueue_at >= enqueued + timedelta(minutes=59)
    assert len(workers.runs("fails_later")) == 1


async def test_max_attempts_ends_in_the_dead_letter_queue(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "doomed")
    await tasks.doomed.enqueue("k")
    await eventually(lambda: _dead_soon(client, "doomed"), DEADLINE, "the item dead-lettered")
    assert len(workers.runs("doomed")) == 3
    assert await empty(client, "doomed")


async def test_a_permanent_error_dead_letters_at_once(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "refused")
    await tasks.refused.enqueue("k")
    await eventually(lambda: _dead_soon(client, "refused"), DEADLINE, "the item dead-lettered")
    assert len(workers.runs("refused")) == 1


async def test_a_killed_workers_task_runs_again_on_another(workers: Workers, client: AsyncClient) -> None:
    first = workers.start("--queues", "held")
    await tasks.held.enqueue("k")
    await eventually(lambda: _started(workers, "held", first.pid), DEADLINE, "the first worker runs it")
    first.send_signal(signal.SIGKILL)
    first.wait(DEADLINE)
    second = workers.start("--queues", "held")
    # The item comes back when the lease the killed worker renewed runs out (lease_timeout 2s).
    await eventually(lambda: _started(workers, "held", second.pid), DEADLINE, "the second worker runs it")
    (workers.records / "release").touch()
    await eventually(lambda: empty(client, "held"), DEADLINE, "the item completed")
    assert [r["pid"] for r in workers.runs("held") if r["event"] == "done"] == [second.pid]


async def test_sigterm_finishes_and_completes_what_is_in_flight(
    workers: Workers, client: AsyncClient
) -> None:
    proc = workers.start("--queues", "held", "--concurrency", "3")
    await tasks.held.enqueue_many([((f"k{n}",), {}) for n in range(6)])
    await eventually(lambda: _ran(workers, "held", 3), DEADLINE, "three runs started")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping warmly" in workers.log(0), DEADLINE, "the worker heard the signal")
    (workers.records / "release").touch()
    assert proc.wait(DEADLINE) == 0, workers.log(0)
    done = [r["key"] for r in workers.runs("held") if r["event"] == "done"]
    assert len(done) == 3 and len(set(done)) == 3
    stats = (await client.stats("held")).logical_queues[0].partitions[0]
    assert (stats.total, stats.total_leased) == (3, 0)  # the three not leased, nothing left leased
    workers.start("--queues", "held")
    await eventually(lambda: empty(client, "held"), DEADLINE, "the rest completed")
    done = [r["key"] for r in workers.runs("held") if r["event"] == "done"]
    assert sorted(done) == [f"k{n}" for n in range(6)]  # each once: none lost, none run twice


async def test_renewal_keeps_a_task_longer_than_its_lease(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "long")
    await tasks.long.enqueue("k", 3.5)  # the queue's lease_timeout is 1s
    await eventually(lambda: empty(client, "long"), DEADLINE, "the item completed")
    assert [r["event"] for r in workers.runs("long")] == ["start", "done"]  # run once: never expired


async def test_the_process_concurrency_limit_holds(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "crowd", "--concurrency", "3")
    await tasks.crowd.enqueue_many([((f"c{n}", 3), {}) for n in range(9)])
    await eventually(lambda: empty(client, "crowd"), DEADLINE, "the crowd ran")
    crowd = [r["running"] for r in workers.runs("crowd")]
    assert len(crowd) == 9 and max(crowd) == 3  # reached (they wait for each other) and never passed


async def test_a_tasks_own_concurrency_limit_holds(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "pair", "--concurrency", "8")
    await tasks.pair.enqueue_many([((f"p{n}",), {}) for n in range(6)])
    await eventually(lambda: empty(client, "pair"), DEADLINE, "the pairs ran")
    pairs = [r["running"] for r in workers.runs("pair")]
    assert len(pairs) == 6 and max(pairs) == 2  # the task's limit, below the worker's 8


async def test_trace_context_and_typed_arguments_arrive(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "traced")
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with use_traceparent(parent):
        await tasks.traced.enqueue("k", tasks.Order(7, ["a"]), due=datetime(2030, 1, 1, tzinfo=UTC))
    await eventually(lambda: empty(client, "traced"), DEADLINE, "the item completed")
    [run] = workers.runs("traced")
    _, trace_id, span_id, flags = run["traceparent"].split("-")
    assert (trace_id, flags) == ("4bf92f3577b34da6a3ce929d0e0e4736", "01")  # the producer's trace
    assert span_id != "00f067aa0ba902b7"  # continued in a span of its own
    assert (run["types"], run["order"]) == (["Order", "datetime"], 7)


async def _ran(workers: Workers, task: str, n: int) -> bool:
    return len(workers.runs(task)) >= n


async def _started(workers: Workers, task: str, pid: int) -> bool:
    return any(r["pid"] == pid and r.get("event") == "start" for r in workers.runs(task))


async def _dead_soon(client: AsyncClient, queue: str) -> bool:
    return len(await dead(client, queue)) == 1


async def test_a_queue_that_requires_lease_tokens_is_served(workers: Workers, client: AsyncClient) -> None:
    info = m.QueueInfo(
        queue_name="proven",
        lease_timeout="1m",
        expire_timeout="1h",
        requested_partitions=2,
        lease_token="required",
    )
    await client.call("/v1/queues.create", info, m.Reply)
    workers.start("--queues", "proven")
    await tasks.proven.enqueue("a", 0)
    await tasks.proven.enqueue("b", 1)
    await eventually(lambda: _ran(workers, "proven", 3), DEADLINE, "three runs")
    await eventually(lambda: empty(client, "proven"), DEADLINE, "both items completed")
    assert "needs its lease token" not in workers.log(0)
