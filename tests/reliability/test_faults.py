"""Faults on a real sqlite node under a mixed workload: nothing acknowledged is lost, nothing appears
that was not produced, nothing is delivered again after it was completed, nothing is stranded.

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

from .checker import check
from .history import History, Op, Workload

RUN = 3.0
"""Seconds of workload before and after the fault."""
DRAIN_DEADLINE = 60.0


def sqlite_args(data: Path) -> tuple[str, ...]:
    return ("--storage", "sqlite", "--data-dir", str(data))


async def drain(endpoint: str, queue: str, history: History) -> int:
    """Leases and completes until the queue is empty; returns what the server still holds after."""
    async with AsyncClient(endpoint) as client:
        deadline = asyncio.get_running_loop().time() + DRAIN_DEADLINE
        while asyncio.get_running_loop().time() < deadline:
            stats = await client.stats(queue)
            parts = [p for lq in stats.logical_queues for p in lq.partitions]
            if sum(p.total for p in parts) + sum(p.scheduled for p in parts) == 0:
                return 0
            lease = Op("lease", "drain", asyncio.get_running_loop().time())

            async def take(op: Op = lease) -> None:
                reply = await client.lease(queue, 100, "drain", "2s")
                op.partition = reply.partition
                op.ids = tuple(i.id for i in reply.items)
                op.payloads = tuple(i.bytes.decode() for i in reply.items)

            await history.record(lease, take)
            if lease.outcome == "ok":
                done = Op("complete", "drain", 0.0, payloads=lease.payloads, ids=lease.ids)
                await history.record(
                    done, lambda op=lease: client.complete(queue, op.partition, list(op.ids))
                )
        stats = await client.stats(queue)
        return sum(p.total + p.scheduled for lq in stats.logical_queues for p in lq.partitions)


Fault = Callable[[ServerProcess, Servers, Path], Awaitable[ServerProcess]]


async def no_fault(server: ServerProcess, servers: Servers, data: Path) -> ServerProcess:
    return server


async def sigkill_and_restart(server: ServerProcess, servers: Servers, data: Path) -> ServerProcess:
    kill9(server)
    return await servers.astart(*sqlite_args(data), port=server.port)


async def pause_past_lease_timeout(server: ServerProcess, servers: Servers, data: Path) -> ServerProcess:
    os.kill(server.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(2.5)  # the fault itself: longer than the queue's 1s lease timeout
    finally:
        os.kill(server.pid, signal.SIGCONT)
    return server


@pytest.mark.parametrize("fault", [no_fault, sigkill_and_restart, pause_past_lease_timeout])
async def test_no_loss_under_fault(servers: Servers, tmp_path: Path, fault: Fault) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    async with AsyncClient(server.url) as client:
        await client.create_queue("work", lease_timeout="1s", expire_timeout="1h", partitions=4)
    history = History()
    workload = Workload([server.url], "work", history, producers=3, consumers=3, retry=0.05, abandon=0.05)
    running = asyncio.create_task(workload.run())
    await asyncio.sleep(RUN)  # workload time: the scenario is "run, fault, run"
    server = await fault(server, servers, data)
    await asyncio.sleep(RUN)
    workload.stop.set()
    await running
    stranded = await drain(server.url, "work", history)
    report = check(history, stranded)
    print(f"{fault.__name__}: {report.summary()}")
    assert report.acknowledged > 0 and report.deliveries > 0
    assert report.problems() == [], report.summary()
