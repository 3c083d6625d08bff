"""Durable workflows while worker processes are killed: a ``querator serve`` node on sqlite, three
``querator worker`` processes running tests/integration/durable_app.py, and ``RELIABILITY_WORKFLOWS``
workflows (100 in CI; the issue's 1,000 with ``RELIABILITY_WORKFLOWS=1000``) of five steps each. While any
workflow runs, a random worker is killed with SIGKILL now and then and another one started. At the end
``durable_checker`` reads every step run that every process recorded and every workflow as the server
tells it: each finished once with results its steps made, and a step ran again only when it was in flight
at a kill (or when its worker's turn on the workflow ended early, which it logs).

The kills' times and victims come from a seeded random generator; the seed is printed with the summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
from pathlib import Path

import pytest

from querator.client import AsyncClient
from tests.integration import durable_app as wf
from tests.integration.conftest import Servers, eventually
from tests.integration.test_durable import Workers

from .durable_checker import Finished, Run, check_workflows

WORKFLOWS = int(os.environ.get("RELIABILITY_WORKFLOWS", "100"))
"""How many workflows run (docs/reliability.md's full run sets 1,000)."""
STEPS = 5
WORKERS = 3
KILL_EVERY_S = (0.5, 2.0)
"""Seconds between kills: drawn between these."""
DEADLINE = 60.0 + WORKFLOWS * 0.3
"""Seconds the workflows may take in all."""
LOST_TURN = re.compile(
    r"workflow (\S+)(?: was claimed by another worker|: the server failed during its turn)"
)
"""What a worker logs when its turn on a workflow ends early (tests/integration/test_durable_faults.py)."""


@pytest.mark.timeout(600)  # RELIABILITY_WORKFLOWS=1000 runs for minutes
async def test_workflows_finish_once_while_workers_are_killed(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    server = await servers.astart("--storage", "sqlite", "--data-dir", str(tmp_path / "data"))
    records = tmp_path / "records"
    workers = Workers(server, records)
    monkeypatch.setattr(wf.app.worker, "endpoint", server.url)
    killed: set[int] = set()
    try:
        live = [workers.start() for _ in range(WORKERS)]  # the first one makes the queue
        ids = [f"w{n:04d}" for n in range(WORKFLOWS)]
        for workflow_id in ids:
            await wf.app.start(wf.five_ticks, workflow_id, workflow_id=workflow_id)
        async with AsyncClient(server.url) as client:

            async def none_running() -> bool:
                return not await client.list_workflows("running", limit=1)

            deadline = asyncio.get_running_loop().time() + DEADLINE
            while not await none_running():
                assert asyncio.get_running_loop().time() < deadline, "the workflows did not finish"
                await asyncio.sleep(rng.uniform(*KILL_EVERY_S))  # the fault schedule, not a wait for state
                victim = live.pop(rng.randrange(len(live)))
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait()
                killed.add(victim.pid)
                live.append(await asyncio.to_thread(workers.start))
            await eventually(none_running, DEADLINE, "every workflow finished")
            finished = {workflow_id: await _finished(client, workflow_id) for workflow_id in ids}
        lost_turns = {
            (proc.pid, workflow_id)
            for proc in workers.started
            for workflow_id in LOST_TURN.findall(workers.log(proc))
        }
    finally:
        workers.close()
        await wf.app.close()
    report = check_workflows(STEPS, finished, _runs(records), killed, lost_turns)
    print(f"durable, {len(killed)} worker kills, seed {seed}: {report.summary()}")
    assert killed and report.runs >= WORKFLOWS * STEPS
    assert report.problems() == [], f"seed {seed}: {report.summary()}"


async def _finished(client: AsyncClient, workflow_id: str) -> Finished:
    info = await client.workflow_info(workflow_id)
    journal = tuple((e.seq, e.kind, e.state, json.loads(e.value) if e.value else None) for e in info.entries)
    return Finished(info.status, json.loads(info.result) if info.result else None, journal, info.error)


def _runs(records: Path) -> list[Run]:
    """Every ``tick`` run every process recorded. A kill may cut a process's last line short: such a line
    was not written, and neither was any work done after it (the step records before it works)."""
    found = []
    for path in records.glob("*.jsonl"):
        text = path.read_text()
        lines = text.split("\n")[:-1]  # what follows the last newline is a line cut short, if anything
        for order, line in enumerate(lines):
            r = json.loads(line)
            if r["step"] == "tick":
                found.append(Run(r["pid"], order, r["key"], r["i"], r["run"], r["at"]))
    return found
