"""What the Cassandra backend writes and reads for background work, counted by statement (a real node,
an emptied keyspace per test; docs/adr/0041): schedules' slots, API keys' last use, and the index of
running workflows, which a finish no longer deletes from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from msgspec.structs import replace

from querator.storage.cassandra import CassandraSettings, CassandraStore
from querator.storage.cassandra._session import Cql
from querator.storage.cassandra._statements import Statement
from querator.storage.cassandra._workflows import (
    BUCKETS,
    GENERATION_US,
    CassandraWorkflowRows,
    _bucket,
    generation,
)
from querator.storage.schedules import schedule_slot
from querator.storage.workflows import Workflow, encode_workflow
from querator.wire.workflows import COMPLETED, RUNNING
from tests.storage.schedule_contract import schedule
from tests.storage.test_cassandra import opened_store


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements every store's connection runs from now on: a prepared one by its name, a
    schedule's by its text."""
    names: list[str] = []
    inside = [0]

    def wrapped(method: Any, name: Any) -> Any:
        def run(self: Cql, statement: Any, *args: Any) -> Any:
            if not inside[0]:  # (``rows`` runs ``rows_statement``: counted once)
                names.append(name(statement))
            inside[0] += 1
            try:
                return method(self, statement, *args)
            finally:
                inside[0] -= 1

        return run

    def by_text(statement: Any) -> str:
        return str(statement.prepared_statement.query_string.split(" WHERE")[0])

    monkeypatch.setattr(Cql, "rows", wrapped(Cql.rows, lambda s: s.name))
    monkeypatch.setattr(Cql, "applied", wrapped(Cql.applied, lambda s: f"LWT {s.name}"))
    monkeypatch.setattr(Cql, "rows_statement", wrapped(Cql.rows_statement, by_text))
    monkeypatch.setattr(
        Cql, "applied_statement", wrapped(Cql.applied_statement, lambda s: f"LWT {by_text(s)}")
    )
    # Workflow records are sent from the event loop, not through Cql (issue 38).
    send = CassandraWorkflowRows._send

    async def sent(self: CassandraWorkflowRows, statement: Statement, *args: Any, **kw: Any) -> Any:
        conditional = statement in (Statement.ADD_WORKFLOW, Statement.PUT_WORKFLOW)
        names.append(f"LWT {statement.name}" if conditional else statement.name)
        return await send(self, statement, *args, **kw)

    monkeypatch.setattr(CassandraWorkflowRows, "_send", sent)
    yield names


# -- schedules ----------------------------------------------------------------------------------------------


async def test_a_member_checks_its_slots_in_one_statement(store: CassandraStore, ran: list[str]) -> None:
    """Each 5 s a member reads its slots' versions (a few dozen in a cluster of 80): one statement, and
    a changed slot is two (its names, then its schedules), whatever the number of schedules."""
    names = [f"s{n}" for n in range(200)]
    for name in names:
        await store.add_schedule(schedule(name))
    owned = sorted({schedule_slot(name) for name in names})[:13]
    ran.clear()
    versions = await store.slot_versions(owned)
    assert set(versions) == set(owned) and len(ran) == 1
    ran.clear()
    found = await store.list_slot_schedules(owned[0], "", 1000)
    assert [r.name for r in found] == sorted(n for n in names if schedule_slot(n) == owned[0])
    assert len(ran) == 2


async def test_a_keyspace_written_before_slots_is_filled_in(
    store: CassandraStore, cassandra_settings: CassandraSettings
) -> None:
    """Schedules a version without slots wrote are filed under their slots when a node opens the
    keyspace, once."""
    await store.add_schedule(schedule("old"))
    ks = cassandra_settings.keyspace
    slot = schedule_slot("old")
    await store._connection.call(
        lambda cql: [
            cql.rows_statement(f"DELETE FROM {ks}.schedule_names WHERE scope = 'slot:{slot}'"),
            cql.rows_statement(f"DELETE FROM {ks}.schema_version WHERE name = 'schedule_slots'"),
            cql.rows_statement(f"DELETE FROM {ks}.schedule_versions WHERE scope = 'all'"),
        ]
    )
    assert await store.list_slot_schedules(slot, "", 10) == []
    async with opened_store(cassandra_settings) as reopened:
        assert await reopened.list_slot_schedules(slot, "", 10) == [schedule("old")]
        assert list(await reopened.slot_versions([slot])) == [slot]  # (else read as empty)


# -- API keys' last use -------------------------------------------------------------------------------------


async def test_key_uses_are_plain_writes(store: CassandraStore, ran: list[str]) -> None:
    """A flush of three keys' last use: three plain writes, each to its key's partition; no read and no
    lightweight transaction (it was a read and two of them per key, into the one partition of keys)."""
    await store.raise_stamps("apikey.use", {"k1": 30, "k2": 20, "k3": 10})
    assert ran == ["RAISE_STAMP"] * 3
    await store.raise_stamps("apikey.use", {"k1": 5})  # an older use, written later by another member
    assert await store.get_stamps("apikey.use", ["k1", "k2"]) == {"k1": 30, "k2": 20}


# -- workflows ----------------------------------------------------------------------------------------------


async def started(store: CassandraStore, workflow_id: str) -> Workflow:
    wf = Workflow(id=workflow_id, name="n", queue="q", version=1)
    assert await store.workflows.put_workflow(wf, 0)
    return wf


async def running_rows(store: CassandraStore, gen: int) -> list[tuple[str, bool]]:
    """The rows of one generation of the running index."""
    found: list[tuple[str, bool]] = []
    for bucket in range(BUCKETS):
        rows = await store._connection.call(
            lambda cql, bucket=bucket: cql.rows(Statement.LIST_RUNNING, (bucket, gen, "", 1000))
        )
        found += ((r["id"], bool(r["done"])) for r in rows)
    return sorted(found)


async def test_finishing_a_workflow_deletes_no_index_row(store: CassandraStore, ran: list[str]) -> None:
    """A finish deleted its row from the running index: a tombstone per finish in the partitions every
    list of running workflows (and each minute's sweep) reads, until reads failed. Now it marks it."""
    wf = await started(store, "w")
    ran.clear()
    assert await store.workflows.put_workflow(replace(wf, status=COMPLETED, version=2), 1)
    assert ran == ["LWT PUT_WORKFLOW", "MARK_DONE", "INDEX_WORKFLOW"]
    assert await running_rows(store, generation(store.clock_now())) == [("w", True)]
    assert await store.workflows.list_workflows(RUNNING, "", 10) == []


async def test_running_workflows_are_carried_and_old_generations_dropped(
    store: CassandraStore, ran: list[str]
) -> None:
    """Once a generation, one member carries the running workflows into the new one and drops the old
    ones whole; every other call is one read."""
    now = store.clock_now()
    gen = generation(now)
    a = await started(store, "a")
    b = await started(store, "b")
    assert await store.workflows.put_workflow(replace(b, status=COMPLETED, version=2), 1)
    await store.workflows.purge_workflows(now + GENERATION_US)
    assert await running_rows(store, gen + 1) == [("a", False)]
    ran.clear()
    await store.workflows.purge_workflows(now + GENERATION_US)  # the same generation: done
    assert ran == ["GET_CARRIED"]
    await store.workflows.purge_workflows(now + 3 * GENERATION_US)
    assert await running_rows(store, gen + 3) == [("a", False)]
    assert await running_rows(store, gen) == []  # dropped: no list reads it again
    assert await running_rows(store, gen + 1) == []
    assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 10)] == [a.id]


async def test_running_rows_of_a_keyspace_before_generations_are_carried(store: CassandraStore) -> None:
    """A keyspace written before generations indexed running workflows in ``workflows_by_status``:
    they are listed until the first carry moves them into a generation, which drops those partitions."""
    old = Workflow(id="old", name="n", queue="q", version=1)
    legacy_row = (RUNNING, _bucket("old"), "old", 0)
    await store._connection.call(
        lambda cql: [
            cql.applied(Statement.ADD_WORKFLOW, (0, 1, encode_workflow(old), "old")),
            cql.rows(Statement.INDEX_WORKFLOW, legacy_row),
        ]
    )
    await started(store, "new")
    assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 10)] == ["new", "old"]
    await store.workflows.purge_workflows(store.clock_now())
    assert await running_rows(store, generation(store.clock_now())) == [("new", False), ("old", False)]
    legacy = await store._connection.call(
        lambda cql: cql.rows(Statement.LIST_WORKFLOWS, (RUNNING, _bucket("old"), "", 10))
    )
    assert legacy == []
    assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 10)] == ["new", "old"]
