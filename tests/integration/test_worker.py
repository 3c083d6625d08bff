"""querator.worker with real processes: a ``querator serve`` node and ``querator worker`` processes
running tests/integration/worker_tasks.py, each run recorded in a file the test reads.

Nothing sleeps to synchronise: the test polls the records, the queues and the processes with deadlines.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from querator.client import AsyncClient
from querator.wire import messages as m
from querator.worker import use_traceparent
from tests.integration import worker_tasks as tasks

from .conftest import ServerProcess, Servers, WorkerProcesses, eventually, free_port, server_env, wait_until

pytestmark = pytest.mark.integration

DEADLINE = 30.0
WITHOUT_OPENTELEMETRY = (
    "import sys; sys.modules['opentelemetry'] = None; "  # makes importing it fail, as when it is missing
    "from querator.cli import main; sys.exit(main(sys.argv[1:]))"
)


class Workers(WorkerProcesses):
    """The worker processes of one test, running tests/integration/worker_tasks.py."""

    def __init__(self, server: ServerProcess, records: Path) -> None:
        super().__init__(server, records, "tests.integration.worker_tasks:worker", "WORKER_RECORDS")

    def start(
        self, *args: str, env: dict[str, str] | None = None, opentelemetry: bool = True
    ) -> subprocess.Popen[bytes]:
        """Without ``opentelemetry`` the worker runs as if the package were not installed."""
        return super().start(
            *args, env=env, main=["-m", "querator.cli"] if opentelemetry else ["-c", WITHOUT_OPENTELEMETRY]
        )

    def runs(self, task: str) -> list[dict[str, Any]]:
        return [r for r in self.records_of() if r["task"] == task]


@pytest.fixture
def server(servers: Servers) -> ServerProcess:
    return servers.start("--storage", "sqlite")


@pytest.fixture
def workers(server: ServerProcess, tmp_path: Path) -> Iterator[Workers]:
    with Workers(server, tmp_path / "records") as started:
        yield started


@pytest.fixture
async def client(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AsyncClient]:
    """A client of the node; the test's own ``enqueue`` calls go there too."""
    monkeypatch.setattr(tasks.worker, "endpoint", server.url)
    async with AsyncClient(server.url) as c:
        yield c
    await tasks.worker.close()
    tasks.worker.close_sync()


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
    workers.start("--queues", "doomed", "--log-format", "json")
    job_id = await tasks.doomed.enqueue("k")
    await eventually(lambda: _dead_soon(client, "doomed"), DEADLINE, "the item dead-lettered")
    # One job through three items: current_job_id() is what enqueue returned, on every attempt.
    assert [r["job_id"] for r in workers.runs("doomed")] == [job_id] * 3
    assert await empty(client, "doomed")
    [dead] = (await client.list_items("doomed-dead", 0)).items
    assert dead.job_id == job_id
    assert [f.attempt for f in dead.failures] == [1, 2, 3]
    for failure in dead.failures:  # the error and where it was raised, for whoever looks at dead letters
        assert failure.error.startswith("RuntimeError: never works\n")
        assert 'raise RuntimeError("never works")' in failure.error
    await eventually(lambda: _logged_runs(workers, 3), DEADLINE, "the three runs logged")
    runs = [e for e in map(json.loads, workers.log(0).splitlines()) if "outcome" in e]
    assert [r["outcome"] for r in runs] == ["retried", "retried", "dead_lettered"]
    # Only the run that ends the item carries the traceback: retries are expected, one line each.
    assert ["traceback" in r for r in runs] == [False, False, True]


@pytest.mark.parametrize("task", ["refused", "hopeless"])
async def test_a_permanent_error_dead_letters_at_once(
    workers: Workers, client: AsyncClient, task: str
) -> None:
    """A declared permanent error (``refused``) and ``Permanent`` itself (``hopeless``)."""
    workers.start("--queues", task)
    await getattr(tasks, task).enqueue("k")
    await eventually(lambda: _dead_soon(client, task), DEADLINE, "the item dead-lettered")
    assert len(workers.runs(task)) == 1


async def test_a_periodic_task_is_scheduled_by_its_worker_and_runs_each_tick(
    workers: Workers, client: AsyncClient
) -> None:
    """``@worker.periodic`` puts its schedule at the worker's start (issue 45: there was no way to declare
    one in code); a second start replaces the definition instead of failing on the taken name."""
    queue = tasks.ticking.options.queue
    first = workers.start("--queues", queue)
    await eventually(lambda: _ran(workers, "ticking", 2), DEADLINE, "two ticks ran")
    info = await client.schedule_info("every-second")
    assert (info.cron, info.queue_name, info.kind) == ("* * * * * *", queue, tasks.ticking.name)
    first.terminate()
    first.wait(DEADLINE)
    workers.start("--queues", queue)
    ran = len(workers.runs("ticking"))
    await eventually(lambda: _ran(workers, "ticking", ran + 1), DEADLINE, "ticks ran after the restart")
    runs = workers.runs("ticking")
    assert {r["key"] for r in runs} == {"eu"}
    # Each run knows its tick: one item per tick, so no reference twice.
    assert all(r["reference"].startswith("every-second@") for r in runs)
    assert len({r["reference"] for r in runs}) == len(runs)
    await client.delete_schedule("every-second")


async def test_a_schedule_without_a_payload_runs_a_task_without_arguments(
    workers: Workers, client: AsyncClient
) -> None:
    """A schedule made as docs/schedules.md shows, with no payload, dead-lettered every tick (issue 45)."""
    workers.start("--queues", "argless")
    await client.create_schedule("argless-ticks", "* * * * * *", "argless", kind=tasks.argless.name)
    await eventually(lambda: _ran(workers, "argless", 2), DEADLINE, "two ticks ran")
    await client.delete_schedule("argless-ticks")
    assert await dead(client, "argless") == []


async def _ran(workers: Workers, task: str, n: int) -> bool:
    return len(workers.runs(task)) >= n


async def test_a_rate_limit_spaces_each_keys_starts_and_a_stop_gives_waiting_items_back(
    workers: Workers, client: AsyncClient
) -> None:
    """``rate_limit="1/h"`` per customer (issue 45: no rate limits): each customer's first call starts at
    once, a second of the same customer waits for its slot an hour on, another customer's does not. A
    warm stop does not wait that hour: the waiting item goes back to its queue."""
    worker = workers.start("--queues", "limited")
    for customer, n in (("a", 1), ("a", 2), ("b", 1)):
        await tasks.limited.enqueue(customer, n)
    await eventually(lambda: _ran(workers, "limited", 2), DEADLINE, "a-1 and b-1 ran")
    assert sorted(r["key"] for r in workers.runs("limited")) == ["a-1", "b-1"]  # a-2 waits for its slot
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(DEADLINE) == 0
    [back] = (await client.list_items("limited", 0)).items
    assert json.loads(back.payload)["args"] == ["a", 2]
    assert sorted(r["key"] for r in workers.runs("limited")) == ["a-1", "b-1"]  # it never ran


async def test_higher_priority_items_run_first_and_keep_their_level_when_retried(
    workers: Workers, client: AsyncClient
) -> None:
    """Issue 45 (priorities): a backlog enqueued low first, then normal, then high, runs high first,
    then normal, then low, on a worker of one slot; a high item that fails is retried within its level,
    before any normal or low item runs (docs/worker.md, "Priorities")."""
    await tasks.ranked.enqueue_many([((f"l{n}",), {}) for n in range(3)], priority="low")
    await tasks.ranked.enqueue_many([((f"n{n}",), {}) for n in range(3)])  # the task's default: normal
    await tasks.ranked.enqueue("h0", fail_once=True, priority="high")
    await tasks.ranked.enqueue_many([((f"h{n}",), {}) for n in (1, 2)], priority="high")
    workers.start("--queues", "ranked", "--concurrency", "1")
    await eventually(lambda: _ran(workers, "ranked", 10), DEADLINE, "every item ran")
    order = [r["key"] for r in workers.runs("ranked")]
    assert order == ["h0", "h1", "h2", "h0", "n0", "n1", "n2", "l0", "l1", "l2"]
    for queue in ("ranked.high", "ranked", "ranked.low"):
        await eventually(lambda q=queue: empty(client, q), DEADLINE, f"{queue} emptied")


async def test_a_cluster_rate_limit_holds_across_worker_processes(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 (cluster-wide rate limits): ``rate_limit="1/h", rate_scope="cluster"`` admits one start
    among two worker processes, on a node of two processes (the key's owner is one of them: a take that
    reaches the other is forwarded). Each worker is refused a start for the item it holds; a warm stop
    gives those back, and only one item ever ran (a per-process limit would have run one per worker)."""
    server = servers.start("--storage", "memory", "--processes", "2")
    records = tmp_path / "records"
    workers = Workers(server, records)
    monkeypatch.setattr(tasks.worker, "endpoint", server.url)
    try:
        await tasks.shared.enqueue_many([((n,), {}) for n in range(4)])
        # No lease ahead: a worker with room to lease keeps a long poll open, and one answered just as
        # the warm stop cancels it leaves its item leased until its lease ends (docs/adr/0005).
        started = [
            workers.start("--queues", "shared", "--concurrency", "1", "--prefetch", "0") for _ in range(2)
        ]
        refused = "task tests.integration.worker_tasks.shared: cluster rate limit 1/h: no start free"
        await eventually(lambda: _ran(workers, "shared", 1), DEADLINE, "one item ran")
        for n in range(2):
            wait_until(lambda n=n: refused in workers.log(n), DEADLINE, f"worker {n} refused a start")
        for proc in started:
            proc.send_signal(signal.SIGTERM)
        for proc in started:
            assert proc.wait(DEADLINE) == 0
        assert len(workers.runs("shared")) == 1
        async with AsyncClient(server.url) as client:
            items = (await client.list_items("shared", 0)).items
        assert len(items) == 3 and not any(i.is_leased for i in items)
    finally:
        workers.close()
        await tasks.worker.close()
        tasks.worker.close_sync()


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
    stopping = await _lease_deadlines(client, "held")
    assert len(stopping) == 3

    async def renewed() -> bool:
        deadlines = await _lease_deadlines(client, "held")
        return deadlines.keys() == stopping.keys() and all(deadlines[i] > stopping[i] for i in stopping)

    # While it stops, what runs keeps its leases (lease_timeout 2s): renewed, not left to expire.
    await eventually(renewed, DEADLINE, "the leases renewed while stopping")
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


async def test_a_second_signal_exits_at_once_and_the_item_runs_again(
    workers: Workers, client: AsyncClient
) -> None:
    first = workers.start("--queues", "held")
    await tasks.held.enqueue("k")
    await eventually(lambda: _started(workers, "held", first.pid), DEADLINE, "the first worker runs it")
    first.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping warmly" in workers.log(0), DEADLINE, "the worker heard the signal")
    first.send_signal(signal.SIGTERM)
    assert first.wait(DEADLINE) == 130, workers.log(0)  # without waiting for the run in flight
    assert "exiting at once" in workers.log(0)
    second = workers.start("--queues", "held")
    # Not completed: it comes back when the first worker's lease runs out (lease_timeout 2s).
    await eventually(lambda: _started(workers, "held", second.pid), DEADLINE, "the second worker runs it")
    (workers.records / "release").touch()
    await eventually(lambda: empty(client, "held"), DEADLINE, "the item completed")
    assert [r["pid"] for r in workers.runs("held") if r["event"] == "done"] == [second.pid]


async def test_items_held_ahead_are_given_back_unrun_at_a_warm_stop(
    workers: Workers, client: AsyncClient
) -> None:
    """docs/adr/0053: a worker of 2 slots and ``--prefetch 2`` leases 4 items and runs 2; the other 2 are
    held, renewed. A warm stop finishes the 2 running and gives the 2 held back at once, never run; a
    later worker runs all 6, each once."""
    proc = workers.start("--queues", "held", "--concurrency", "2", "--prefetch", "2")
    await tasks.held.enqueue_many([((f"k{n}",), {}) for n in range(6)])
    await eventually(lambda: _ran(workers, "held", 2), DEADLINE, "two runs started")
    await eventually(lambda: _leased(client, "held", 4), DEADLINE, "two more leased ahead")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping warmly" in workers.log(0), DEADLINE, "the worker heard the signal")
    # Given back while the two running still hold their slots (the release comes after).
    await eventually(lambda: _leased(client, "held", 2), DEADLINE, "the held items given back")
    (workers.records / "release").touch()
    assert proc.wait(DEADLINE) == 0, workers.log(0)
    assert [r["event"] for r in workers.runs("held")] == ["start", "start", "done", "done"]
    stats = (await client.stats("held")).logical_queues[0].partitions[0]
    assert (stats.total, stats.total_leased) == (4, 0)
    workers.start("--queues", "held")
    await eventually(lambda: empty(client, "held"), DEADLINE, "the rest completed")
    done = [r["key"] for r in workers.runs("held") if r["event"] == "done"]
    assert sorted(done) == [f"k{n}" for n in range(6)]  # each once


async def test_a_kill_9_strands_at_most_prefetch_items_unrun_until_their_leases_end(
    workers: Workers, client: AsyncClient
) -> None:
    """docs/adr/0053: killed, a worker of 2 slots and ``--prefetch 2`` leaves its 2 running items and
    at most 2 more that never started leased; all come back when the leases end (lease_timeout 2s) and
    run on another worker."""
    first = workers.start("--queues", "held", "--concurrency", "2", "--prefetch", "2")
    await tasks.held.enqueue_many([((f"k{n}",), {}) for n in range(8)])
    await eventually(lambda: _ran(workers, "held", 2), DEADLINE, "two runs started")
    await eventually(lambda: _leased(client, "held", 4), DEADLINE, "two more leased ahead")
    first.send_signal(signal.SIGKILL)
    first.wait(DEADLINE)
    stats = (await client.stats("held")).logical_queues[0].partitions[0]
    assert (stats.total, stats.total_leased) == (8, 4)  # 2 ran, 2 held: the bound, nothing more
    assert len(workers.runs("held")) == 2
    (workers.records / "release").touch()
    workers.start("--queues", "held", "--concurrency", "8")
    await eventually(lambda: empty(client, "held"), DEADLINE, "every item completed")
    done = [r["key"] for r in workers.runs("held") if r["event"] == "done"]
    assert sorted(done) == [f"k{n}" for n in range(8)]


async def test_an_item_held_ahead_past_its_lease_timeout_runs_once(
    workers: Workers, client: AsyncClient
) -> None:
    """docs/adr/0053: with 1 slot and ``--prefetch 2`` the third item waits about 2.4 s on a queue whose
    lease_timeout is 1s: renewed while held, it is never leased again, and each item runs once."""
    workers.start("--queues", "long", "--concurrency", "1", "--prefetch", "2")
    await tasks.long.enqueue_many([((f"k{n}", 1.2), {}) for n in range(3)])
    await eventually(lambda: empty(client, "long"), DEADLINE, "the items completed")
    runs = [(r["key"], r["event"]) for r in workers.runs("long")]
    assert runs == [(f"k{n}", event) for n in range(3) for event in ("start", "done")]
    assert "lost" not in workers.log(0)


async def _leased(client: AsyncClient, queue: str, n: int) -> bool:
    return len(await _lease_deadlines(client, queue)) == n


async def test_enqueue_schedules_and_deduplicates(client: AsyncClient) -> None:
    enqueued = datetime.now(UTC)
    first = await tasks.fails_later.enqueue("d", delay=timedelta(hours=1), dedup_id="d-1")
    again = await tasks.fails_later.enqueue("d", delay=3600, dedup_id="d-1")
    assert first and again == ""  # the queue's dedup window saw d-1: stored once
    [item] = (await client.list_scheduled("later", 0)).items
    assert item.kind == "tests.integration.worker_tasks.fails_later" and item.encoding == "application/json"
    assert item.enqueue_at is not None and item.enqueue_at >= enqueued + timedelta(minutes=59)


async def test_one_worker_runs_several_queues_and_tasks_sharing_one(
    workers: Workers, client: AsyncClient
) -> None:
    workers.start("--queues", "mixed,refused")
    await tasks.mixed_a.enqueue("a1")
    await tasks.mixed_b.enqueue("b1")
    await tasks.mixed_a.enqueue("a2")
    await tasks.refused.enqueue("r1")
    # An item whose kind no task of this worker has: offered again later, for a worker that knows it.
    await client.produce("mixed", [b'{"args": ["s1"]}'], kind="elsewhere.task")
    await eventually(lambda: _ran(workers, "mixed", 3), DEADLINE, "the mixed queue ran")
    await eventually(lambda: _dead_soon(client, "refused"), DEADLINE, "the other queue ran")
    ran = {r["key"]: r["ran"] for r in workers.runs("mixed")}
    assert ran == {"a1": "a", "a2": "a", "b1": "b"}
    await eventually(lambda: empty_but_scheduled(client, "mixed"), DEADLINE, "the stranger put off")
    [later] = (await client.list_scheduled("mixed", 0)).items
    assert later.kind == "elsewhere.task" and later.enqueue_at is not None
    assert later.enqueue_at > datetime.now(UTC) + timedelta(seconds=30)
    assert "no task named 'elsewhere.task' on queue mixed" in workers.log(0)


async def empty_but_scheduled(client: AsyncClient, queue: str) -> bool:
    [part] = (await client.stats(queue)).logical_queues[0].partitions
    return (part.total, part.scheduled) == (0, 1)


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
    """Without OpenTelemetry: the worker carries the W3C traceparent on by itself."""
    workers.start("--queues", "traced", opentelemetry=False)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with use_traceparent(parent):
        await tasks.traced.enqueue("k", tasks.Order(7, ["a"]), due=datetime(2030, 1, 1, tzinfo=UTC))
    await eventually(lambda: empty(client, "traced"), DEADLINE, "the item completed")
    [run] = workers.runs("traced")
    _, trace_id, span_id, flags = run["traceparent"].split("-")
    assert (trace_id, flags) == ("4bf92f3577b34da6a3ce929d0e0e4736", "01")  # the producer's trace
    assert span_id != "00f067aa0ba902b7"  # continued in a span of its own
    assert (run["types"], run["order"]) == (["Order", "datetime"], 7)


async def test_a_sync_caller_enqueues_without_an_event_loop(workers: Workers, client: AsyncClient) -> None:
    """As a Django view does: from a thread that runs no event loop, the trace context going along."""
    workers.start("--queues", "traced", opentelemetry=False)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    due = datetime(2030, 1, 1, tzinfo=UTC)

    def view() -> list[str]:
        with use_traceparent(parent):
            first = tasks.traced.enqueue_sync("s1", tasks.Order(1, []), due=due)
        calls = [((f"s{n}", tasks.Order(n, [])), {"due": due}) for n in (2, 3)]
        return [first, *tasks.traced.enqueue_many_sync(calls)]

    ids = await asyncio.to_thread(view)
    assert len(set(ids)) == 3 and all(ids)
    await eventually(lambda: empty(client, "traced"), DEADLINE, "the items completed")
    runs = {r["key"]: r for r in workers.runs("traced")}
    assert sorted(runs) == ["s1", "s2", "s3"] and runs["s3"]["order"] == 3
    assert runs["s1"]["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert runs["s2"]["traceparent"] is None
    with pytest.raises(RuntimeError, match=r"would block this event loop; await enqueue\(\) instead$"):
        tasks.traced.enqueue_sync("s4", tasks.Order(4, []), due=due)


async def _lease_deadlines(client: AsyncClient, queue: str) -> dict[str, datetime]:
    """The lease deadline of each leased item of the queue's partition 0."""
    items = (await client.list_items(queue, 0)).items
    return {i.id: i.lease_deadline for i in items if i.is_leased and i.lease_deadline is not None}


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


async def test_with_opentelemetry_the_run_is_a_span_of_the_producers_trace(
    workers: Workers, client: AsyncClient, tmp_path: Path
) -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.trace import format_span_id, format_trace_id

    spans = tmp_path / "spans.jsonl"
    workers.start("--queues", "traced", env={"WORKER_SPANS": str(spans)})
    # The producer's span, from a provider of the test's own (the global one is set once per process).
    with sdk.TracerProvider().get_tracer("shop").start_as_current_span("checkout") as checkout:
        await tasks.traced.enqueue("k", tasks.Order(7, ["a"]), due=datetime(2030, 1, 1, tzinfo=UTC))
    sent = checkout.get_span_context()
    wait_until(lambda: spans.exists() and spans.read_text().endswith("\n"), DEADLINE, "the span exported")
    [span] = [json.loads(line) for line in spans.read_text().splitlines()]
    assert span == {
        "name": "tests.integration.worker_tasks.traced process",
        "kind": "CONSUMER",
        "trace_id": format_trace_id(sent.trace_id),
        "span_id": span["span_id"],
        "parent_id": format_span_id(sent.span_id),  # a child of the producer's span
        "attributes": {"messaging.system": "querator", "messaging.destination.name": "traced"},
    }
    [run] = workers.runs("traced")
    # Inside the run, the current span is the run's: what the tasks it enqueues carry on.
    assert run["traceparent"] == f"00-{span['trace_id']}-{span['span_id']}-{sent.trace_flags:02x}"


@pytest.mark.parametrize("task", ["slow", "slow_sync"])
async def test_a_run_past_its_timeout_fails_and_is_retried(
    workers: Workers, client: AsyncClient, task: str
) -> None:
    """An async run is cancelled at its timeout; a sync run's thread cannot be: its outcome is dropped."""
    queue = task.replace("_", "-")
    workers.start("--queues", queue)
    await getattr(tasks, task).enqueue("k")
    await eventually(lambda: empty(client, queue), DEADLINE, "the item completed")
    assert [r["event"] for r in workers.runs(task)] == ["start", "start", "done"]
    assert "outcome=retried error=TimeoutError" in workers.log(0)
    assert await dead(client, queue) == []


async def test_the_metrics_port_counts_runs_failures_retries_and_durations(
    workers: Workers, client: AsyncClient
) -> None:
    port = free_port()
    workers.start("--queues", "flaky", "--metrics-port", str(port))
    flaky = {"task": "tests.integration.worker_tasks.flaky"}
    before = await scrape(port)
    assert before.get(("querator_worker_runs_total", _labels(flaky, outcome="completed")), 0) == 0
    assert before[("querator_worker_items_in_flight", _labels({}))] == 0
    await tasks.flaky.enqueue("m", 1)  # fails once, then succeeds

    async def counted() -> bool:
        runs = await scrape(port)
        return runs.get(("querator_worker_runs_total", _labels(flaky, outcome="completed"))) == 1

    await eventually(counted, DEADLINE, "the completed run counted")
    after = await scrape(port)
    assert after[("querator_worker_runs_total", _labels(flaky, outcome="retried"))] == 1
    assert after[("querator_worker_runs_total", _labels(flaky, outcome="dead_lettered"))] == 0
    assert after[("querator_worker_failures_total", _labels(flaky, reason="error"))] == 1
    assert after[("querator_worker_run_duration_seconds_count", _labels(flaky))] == 2
    assert after[("querator_worker_run_duration_seconds_sum", _labels(flaky))] > 0
    assert after[("querator_worker_items_in_flight", _labels({}))] == 0


async def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The samples a worker's metrics port serves, by name and labels."""
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as reply:
        assert reply.status == 200
        text = await reply.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(base: dict[str, str], **more: str) -> frozenset[tuple[str, str]]:
    return frozenset({**base, **more}.items())


async def test_json_logs_give_one_line_per_run(workers: Workers, client: AsyncClient) -> None:
    workers.start("--queues", "flaky", "--log-format", "json")
    item_id = await tasks.flaky.enqueue("j", 1)  # fails once, then succeeds
    await eventually(lambda: empty(client, "flaky"), DEADLINE, "the item completed")
    await eventually(lambda: _logged_runs(workers, 2), DEADLINE, "both runs logged")
    entries = [json.loads(line) for line in workers.log(0).splitlines()]  # every line is JSON
    failed, completed = [e for e in entries if "outcome" in e]
    for run, attempt in ((failed, 1), (completed, 2)):
        assert run["task"] == "tests.integration.worker_tasks.flaky" and run["queue"] == "flaky"
        assert run["attempt"] == attempt and isinstance(run["duration_s"], float)
        assert run["logger"] == "querator.worker" and run["msg"].startswith("task run ")
    assert failed["item_id"] == item_id  # retried now: the item comes back under a new id
    assert isinstance(completed["item_id"], str) and completed["item_id"] != item_id
    assert (failed["outcome"], failed["level"], failed["error"]) == (
        "retried",
        "warning",
        "RuntimeError: failure 1 of 1",
    )
    assert "traceback" not in failed  # an expected retry logs one line, its traceback only at debug
    assert (completed["outcome"], completed["level"]) == ("completed", "info")
    assert "error" not in completed and "traceback" not in completed


async def _logged_runs(workers: Workers, n: int) -> bool:
    return workers.log(0).count('"outcome"') >= n


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker_tasks"], "'worker_tasks' is not module:attribute, e.g. myapp.tasks:worker"),
        (["tests.integration.nowhere:worker"], "No module named 'tests.integration.nowhere'"),
        (["tests.integration.worker_tasks:RECORDS"], "is a PosixPath, not a querator.worker.Worker"),
        (["tests.integration.worker_tasks:worker", "-Q", "flaky,nope"], "no task uses the queue(s) nope"),
        (["tests.integration.worker_tasks:worker", "-c", "0"], "--concurrency must be at least 1"),
        (["tests.integration.worker_tasks:worker", "--prefetch", "-1"], "--prefetch cannot be negative"),
    ],
)
def test_the_worker_command_refuses_what_it_cannot_run(args: list[str], message: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "querator.cli", "worker", *args],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert run.returncode == 2 and run.stderr.startswith("querator: "), run.stderr
    assert message in run.stderr and run.stderr.count("\n") == 1  # one line, no traceback


async def test_enqueue_makes_its_queue_on_the_next_node_after_the_client_closed(
    servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker remembered the queues it had made by its client's id(): a client closed and freed, then
    # a new one at the same address (CPython reuses it at once), skipped making the queue on a new node.
    for node in (servers.start("--storage", "memory"), servers.start("--storage", "memory")):
        monkeypatch.setattr(tasks.worker, "endpoint", node.url)
        assert await tasks.flaky.enqueue("k", 0)
        await tasks.worker.close()
        assert not tasks.worker._ensured  # forgotten with the client, whatever address the next one gets
