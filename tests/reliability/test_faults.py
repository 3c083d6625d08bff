"""Faults on a real node (on sqlite, or on one Cassandra node) under a mixed workload: nothing
acknowledged is lost, nothing appears that was not produced, nothing is delivered again after it was
completed, nothing is stranded.

Each scenario runs the workload (producers, consumers that complete, retry, and abandon items so that
leases expire) for a bounded time while the fault happens, heals, stops the workload, drains the
queue through the same history, and runs the checker. Duplicates explained by a lease expiry are
reported, not failed: they are the "almost" of almost-exactly-once.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from querator.client import AsyncClient
from tests.integration.conftest import ServerProcess, Servers, kill9
from tests.integration.test_cassandra import cassandra_args

from .checker import check, trace
from .history import History, Workload, drain

RUN = 3.0
"""Seconds of workload before and after the fault."""
RUNS = int(os.environ.get("RELIABILITY_RUNS", "1"))
"""How many times each scenario runs (the full matrix of docs/reliability.md sets more)."""


Fault = Callable[[ServerProcess, Servers, tuple[str, ...]], Awaitable[ServerProcess]]


async def no_fault(server: ServerProcess, servers: Servers, args: tuple[str, ...]) -> ServerProcess:
    return server


async def sigkill_and_restart(
    server: ServerProcess, servers: Servers, args: tuple[str, ...]
) -> ServerProcess:
    kill9(server)
    return await servers.astart(*args, port=server.port)


async def pause_past_lease_timeout(
    server: ServerProcess, servers: Servers, args: tuple[str, ...]
) -> ServerProcess:
    os.kill(server.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(2.5)  # the fault itself: longer than the queue's 1s lease timeout
    finally:
        os.kill(server.pid, signal.SIGCONT)
    return server


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize("storage", ["sqlite", "cassandra"])
@pytest.mark.parametrize("fault", [no_fault, sigkill_and_restart, pause_past_lease_timeout])
async def test_no_loss_under_fault(
    servers: Servers, tmp_path: Path, request: pytest.FixtureRequest, storage: str, fault: Fault, run: int
) -> None:
    if storage == "sqlite":
        args: tuple[str, ...] = ("--storage", "sqlite", "--data-dir", str(tmp_path / "data"))
    else:
        node = request.getfixturevalue("cassandra_node")
        args = cassandra_args(node, request.getfixturevalue("keyspace"))
    server = await servers.astart(*args)
    async with AsyncClient(server.url) as client:
        await client.create_queue("work", lease_timeout="1s", expire_timeout="1h", partitions=4)
    history = History()
    workload = Workload([server.url], "work", history, producers=3, consumers=3, retry=0.05, abandon=0.05)
    running = asyncio.create_task(workload.run())
    await asyncio.sleep(RUN)  # workload time: the scenario is "run, fault, run"
    server = await fault(server, servers, args)
    await asyncio.sleep(RUN)
    workload.stop.set()
    await running
    stranded = await drain(server.url, "work", history)
    report = check(history, stranded)
    print(f"{storage} {fault.__name__}: {report.summary()}")
    assert report.acknowledged > 0 and report.deliveries > 0
    assert report.problems() == [], f"{report.summary()}\n{trace(history, report.lost + report.unexpected)}"
