"""querator.durable under real faults, with real processes (see tests/integration/test_durable.py for the
harness): a worker paused past its claim, whose late append must be refused; the node killed while a
step runs, which must not fail the workflow; and a three-node cluster on Cassandra that loses the owner of
the durable queue's partition while workflows run.

Nothing sleeps to synchronise: the tests poll the records, the logs and the workflows with deadlines.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from querator.client import AsyncClient
from tests.cassandra_node import CassandraNode
from tests.integration import durable_app as wf

from .conftest import ServerProcess, Servers, kill9, wait_until
from .etcd_server import EtcdServer
from .test_cluster_routing import members_are, owners, start_cluster
from .test_durable import DEADLINE, Workers, client, server, workers

__all__ = ["client", "server", "workers"]  # the fixtures of test_durable.py, used here too

pytestmark = pytest.mark.integration

CLUSTER_DEADLINE = 60.0
"""Seconds a workflow may take when its queue's partition moves to another node on the way."""


def pids(workers: Workers, step: str, key: str, phase: str = "started") -> list[int]:
    """The processes that reached ``phase`` of ``step`` for ``key``, once per run, in pid order."""
    return sorted(r["pid"] for r in workers.runs(step, key) if r["phase"] == phase)


async def test_a_worker_paused_past_its_claim_has_its_late_append_refused(
    workers: Workers, client: AsyncClient
) -> None:
    paused = workers.start()
    handle = await wf.app.start(wf.taken_over, "p", workflow_id="taken")
    wait_until(lambda: pids(workers, "hold_for_pid", "p-a") == [paused.pid], DEADLINE, "first step started")
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        # Its claim and its activation's lease (3 s each) run out; the other worker claims the workflow,
        # replays it and runs the step that was in flight again.
        other = workers.start()
        wait_until(
            lambda: pids(workers, "hold_for_pid", "p-a") == sorted([paused.pid, other.pid]),
            DEADLINE,
            "taken over",
        )
        (workers.records / "release-p-a").touch()
        wait_until(lambda: pids(workers, "hold_for_pid", "p-b") == [other.pid], DEADLINE, "second step")
        info = await client.workflow_info("taken")
        assert [(e.seq, e.state, json.loads(e.value)) for e in info.entries] == [(1, "done", other.pid)]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    # The paused run ends now and its append, fenced by the old claim, is refused (409): it stops there.
    wait_until(
        lambda: pids(workers, "hold_for_pid", "p-a", "ended") == sorted([paused.pid, other.pid]),
        DEADLINE,
        "late",
    )
    wait_until(
        lambda: "workflow taken was claimed by another worker" in workers.log(paused), DEADLINE, "refused"
    )
    assert "workflow claimed elsewhere; fence 1 is not the workflow's current claim" in workers.log(paused)
    info = await client.workflow_info("taken")
    assert [(e.seq, e.state, json.loads(e.value)) for e in info.entries] == [(1, "done", other.pid)]
    (workers.records / "release-p-b").touch()
    assert await handle.result(timeout=DEADLINE) == [other.pid, other.pid]
    info = await client.workflow_info("taken")
    assert [(e.seq, e.state, json.loads(e.value)) for e in info.entries] == [
        (1, "done", other.pid),
        (2, "done", other.pid),
    ]
    assert pids(workers, "hold_for_pid", "p-b") == [other.pid]  # the paused worker stopped the workflow
    assert paused.poll() is None  # and only the workflow: the process runs on


async def test_a_node_down_while_a_step_runs_is_no_failure_of_the_workflow(
    servers: Servers, server: ServerProcess, workers: Workers, client: AsyncClient
) -> None:
    worker = workers.start()
    handle = await wf.app.start(wf.undone_on_failure, "n", workflow_id="node-down")
    wait_until(lambda: len(workers.runs("hold", "n")) == 1, DEADLINE, "the second step started")
    kill9(server)
    (workers.records / "release-n").touch()
    # The step ends while the node is down: its result cannot be recorded, and the activation ends.
    wait_until(
        lambda: "workflow node-down: the server failed during its turn" in workers.log(worker),
        DEADLINE,
        "the activation ended",
    )
    restarted = servers.start("--storage", "sqlite", port=server.port, cwd=server.cwd)
    assert restarted.port == server.port
    assert await handle.result(timeout=DEADLINE) == [2, "held"]
    assert workers.runs("undo", "n") == []  # not a failure: nothing to compensate
    assert [r["phase"] for r in workers.runs("hold", "n")] == ["started", "ended", "started", "ended"]


@pytest.mark.timeout(600)  # a Cassandra node and a three-node cluster: the slow-test convention
async def test_workflows_complete_on_a_cassandra_cluster_that_loses_their_queues_owner(
    servers: Servers,
    etcd: EtcdServer,
    cassandra_node: CassandraNode,
    keyspace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/durable")
    async with AsyncClient(nodes[0].url) as admin:
        # The queue the workers would make, with one partition: one owner to lose.
        await admin.create_queue(wf.app.queue, lease_timeout=wf.app.claim_timeout, partitions=1)
    owner = (await owners(nodes[0], wf.app.queue))[0]
    victim = nodes[int(owner.removeprefix("node-"))]
    entry = next(n for n in nodes if n is not victim)  # the workers' and the callers' node
    records = tmp_path / "records"
    started = Workers(entry, records)
    monkeypatch.setattr(wf.app.worker, "endpoint", entry.url)
    try:
        for _ in range(2):
            started.start()
        before = [await wf.app.start(wf.held_in_the_middle, f"c{n}", workflow_id=f"c{n}") for n in range(4)]
        wait_until(
            lambda: {r["key"] for r in started.runs("hold")} == {f"c{n}" for n in range(4)},
            CLUSTER_DEADLINE,
            "every workflow is in its middle step",
        )
        kill9(victim)
        await members_are([n for n in nodes if n is not victim], 2)
        after = [await wf.app.start(wf.three_steps, f"a{n}", workflow_id=f"a{n}") for n in range(2)]
        for n in range(4):
            (records / f"release-c{n}").touch()
        for handle in before:
            assert await handle.result(timeout=CLUSTER_DEADLINE) == [2, "held", 4]
        for handle in after:
            assert await handle.result(timeout=CLUSTER_DEADLINE) == [3, 13, 113]
        expected = [f"c{n}-{s}" for n in range(4) for s in (1, 3)] + [
            f"a{n}-{s}" for n in range(2) for s in (1, 2, 3)
        ]
        # Every recorded step ran once; only the step in flight at the kill may have run again.
        assert sorted(r["key"] for r in started.runs("add")) == sorted(expected)
        async with AsyncClient(entry.url) as client:
            for n in range(4):
                runs = [r["phase"] for r in started.runs("hold", f"c{n}")]
                assert runs.count("started") in (1, 2) and "ended" in runs, runs
                info = await client.workflow_info(f"c{n}")
                assert [(e.seq, e.state) for e in info.entries] == [(s, "done") for s in (1, 2, 3)]
    finally:
        started.close()
        await wf.app.close()
