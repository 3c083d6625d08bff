"""Updates (docs/durable.md, "Updates"; docs/adr/0060) with real processes: a ``querator serve`` node on
sqlite and ``querator worker`` processes running tests/integration/durable_updates_app.py."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from querator.client import AsyncClient
from tests.integration import durable_updates_app as wf

from .conftest import ServerProcess, Servers, WorkerProcesses, eventually

pytestmark = pytest.mark.integration

DEADLINE = 30.0


@pytest.fixture
def server(servers: Servers) -> ServerProcess:
    return servers.start("--storage", "sqlite")


@pytest.fixture
def workers(server: ServerProcess, tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(
        server, tmp_path / "records", "tests.integration.durable_updates_app:app", "DURABLE_RECORDS"
    ) as started:
        yield started


@pytest.fixture
async def client(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[AsyncClient]:
    monkeypatch.setattr(wf.app.worker, "endpoint", server.url)
    async with AsyncClient(server.url) as c:
        yield c
    await wf.app.close()


async def test_kill_9_of_the_worker_taking_an_update_answers_it_once_after_redelivery(
    workers: WorkerProcesses, client: AsyncClient
) -> None:
    """The server recorded the update; the worker running its handler is killed before the turn recorded
    the answer. The next worker to claim the workflow takes the update, and the caller, still waiting,
    gets its answer; the journal holds it once."""
    first = workers.start()
    handle = await wf.app.start(wf.cart, workflow_id="cart-1")

    async def suspended() -> bool:
        info = await client.workflow_info("cart-1")
        return bool(info.entries) and info.claim_deadline is None

    await eventually(suspended, DEADLINE, "the workflow waits")
    answer = asyncio.create_task(handle.update("add", "held", timeout="30s"))

    async def handling() -> bool:
        return len(workers.records_of()) == 1

    await eventually(handling, DEADLINE, "the handler runs")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(DEADLINE)
    assert not answer.done()
    (workers.records / "release").touch()
    workers.start()
    assert await answer == 1
    info = await client.workflow_info("cart-1")
    assert [(e.seq, e.kind) for e in info.entries] == [(1, "signal"), (2, "update"), (3, "update_result")]
    assert [(u.name, u.taken_by) for u in info.updates] == [("add", 2)]
    second = workers.started[1]
    # Run in the killed worker, then once more in the one that answered.
    assert sorted(r["pid"] for r in workers.records_of()) == sorted([first.pid, second.pid])
    await handle.signal("checkout")
    assert await handle.result(timeout=DEADLINE) == "held"
