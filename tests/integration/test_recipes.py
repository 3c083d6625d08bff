"""The recipes of docs/recipes/ run as a reader runs them: ``python docs/recipes/<name>.py`` with
``QUERATOR_ENDPOINT`` naming a fresh ``querator serve`` node; each test checks what the recipe printed
and what it left in the node."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from querator.client import AsyncClient

from .conftest import ROOT, ServerProcess, Servers, server_env

pytestmark = pytest.mark.integration

DEADLINE = 60.0


@pytest.fixture
def server(servers: Servers) -> ServerProcess:
    return servers.start()


def run(recipe: str, server: ServerProcess) -> list[str]:
    """The lines the recipe printed; it must exit 0 within the deadline."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "recipes" / recipe)],
        env=server_env({"QUERATOR_ENDPOINT": server.url}),
        capture_output=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


async def totals(server: ServerProcess, queue: str) -> list[tuple[int, int]]:
    """(items, scheduled) of each partition of ``queue``."""
    async with AsyncClient(server.url) as client:
        stats = await client.stats(queue)
    return [(p.total, p.scheduled) for q in stats.logical_queues for p in q.partitions]


async def test_webhooks_retry_with_backoff_and_dead_letter(server: ServerProcess) -> None:
    assert run("webhooks.py", server) == [
        "flaky: delivered after 3 attempts, under 1 idempotency key",
        "down: dead-lettered after 4 attempts",
        "gone: dead-lettered after 1 attempt",
        "in webhooks-dead: down (ClientResponseError), gone (Permanent)",
    ]
    assert await totals(server, "webhooks") == [(0, 0)]
    assert await totals(server, "webhooks-dead") == [(2, 0)]


async def test_the_lock_loses_no_deposit_and_fences_each_write(server: ServerProcess) -> None:
    assert run("lock.py", server) == ["balance: 200 (5 clients x 4 deposits of 10)", "last fencing token: 20"]
    assert await totals(server, "lock.account-7") == [(1, 0)]


async def test_the_pool_runs_every_job_and_never_more_than_its_slots(server: ServerProcess) -> None:
    lines = run("pool.py", server)
    jobs = [re.fullmatch(r"job (\d) runs on (token-0-[01])", line) for line in lines[:-1]]
    assert sorted(int(j[1]) for j in jobs if j) == list(range(8))
    most = re.fullmatch(r"most jobs at once: ([12]) of 2 slots", lines[-1])
    assert most, lines
    assert await totals(server, "lock.gpu") == [(2, 0)]


async def test_fifo_keeps_order_with_one_consumer_and_loses_it_with_two(server: ServerProcess) -> None:
    one = " ".join(f"{n:02}" for n in range(20))
    assert run("fifo.py", server) == [f"one consumer:  {one}", "two consumers: 05 06 07 08 09 00 01 02 03 04"]
    assert await totals(server, "ledger") == [(0, 0)]


async def test_fan_out_and_fan_in_collect_every_chunk_once(server: ServerProcess) -> None:
    assert run("fanout.py", server) == ["chunks: 6, words: 45"]
    assert await totals(server, "chunks") == [(0, 0)]
    assert await totals(server, "results") == [(0, 0)]


async def test_the_cron_job_runs_once_per_tick(server: ServerProcess) -> None:
    printed = run("cron.py", server)
    assert len(printed) == 3 and len(set(printed)) == 3  # three ticks, each once
    for line in printed:  # the tick's own time, not the schedule's name again (issue 45)
        assert re.fullmatch(r"nightly-report: report for eu, tick \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line)
    async with AsyncClient(server.url) as client:
        assert (await client.list_schedules()).items == []
