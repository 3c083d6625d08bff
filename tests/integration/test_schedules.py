"""Schedules on real ``querator serve`` processes (docs/schedules.md), checked by the tick time each
item's reference carries: every second from the first tick to the last once, none twice.

- A node on sqlite or PostgreSQL killed with SIGKILL and started again keeps its schedule and fires the
  ticks of its downtime (catch-up ``all``).
- A cluster of three nodes on etcd and Cassandra or PostgreSQL: the schedule's owner is killed, its ticks
  move to another node, and back when it returns; a tick fired by both is stored once (its dedup id).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from querator.client import AsyncClient
from querator.errors import RetryRequest
from tests.conftest import POSTGRES

from .conftest import ServerProcess, Servers, eventually, kill9
from .etcd_server import EtcdServer
from .test_cluster_routing import member_args, members_are, start_members
from .test_crash import sqlite_args
from .test_postgres import postgres_args

pytestmark = pytest.mark.integration

DEADLINE = 60.0
SCHEDULE = "every-second"


async def references(server: ServerProcess, queue: str = "ticks") -> list[str]:
    """The reference of every item in the queue's one partition (one tick each), in id order."""
    found: list[str] = []
    pivot = ""
    async with AsyncClient(server.url) as client:
        while True:
            page = (await client.list_items(queue, 0, pivot=pivot, limit=1000)).items
            fresh = [i for i in page if i.id != pivot]
            found.extend(i.reference for i in fresh)
            if not fresh:
                return found
            pivot = page[-1].id


def tick_of(reference: str) -> datetime:
    name, _, tick = reference.partition("@")
    assert name == SCHEDULE, reference
    return datetime.fromisoformat(tick)


def assert_each_tick_once(refs: list[str]) -> list[datetime]:
    """Every second from the first tick to the last is there, and none twice; returns the ticks."""
    ticks = sorted(tick_of(r) for r in refs)
    twice = sorted({t for t in ticks if ticks.count(t) > 1})
    assert not twice, f"ticks fired twice: {twice}"
    seconds = int((ticks[-1] - ticks[0]).total_seconds())
    missing = sorted({ticks[0] + timedelta(seconds=n) for n in range(seconds + 1)} - set(ticks))
    assert not missing, f"ticks never fired: {missing}"
    return ticks


async def last_tick(server: ServerProcess) -> datetime | None:
    async with AsyncClient(server.url) as client:
        try:
            return (await client.schedule_info(SCHEDULE)).last_tick
        except RetryRequest:
            return None


async def fired_past(server: ServerProcess, when: datetime) -> None:
    async def passed() -> bool:
        tick = await last_tick(server)
        return tick is not None and tick >= when

    await eventually(passed, DEADLINE, f"the schedule fired past {when}")


@pytest.mark.parametrize("store", ["sqlite", POSTGRES])
async def test_a_killed_node_keeps_its_schedule_and_fires_each_tick_once(
    servers: Servers, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    if store == "sqlite":
        args = sqlite_args(tmp_path / "data")
    else:
        args = postgres_args(request.getfixturevalue("postgres_settings"))
    server = await servers.astart(*args)
    async with AsyncClient(server.url) as client:
        await client.create_queue("ticks", lease_timeout="1m")
        created = await client.create_schedule(SCHEDULE, "* * * * * *", "ticks", catch_up="all")
    assert created.next_tick is not None
    await fired_past(server, created.next_tick + timedelta(seconds=3))
    before = await references(server)
    kill9(server)

    restarted = await servers.astart(*args)
    async with AsyncClient(restarted.url) as client:
        info = await client.schedule_info(SCHEDULE)
    assert (info.cron, info.catch_up, info.queue_name) == ("* * * * * *", "all", "ticks")
    assert info.last_tick is not None and info.last_tick >= tick_of(before[-1])
    await fired_past(restarted, info.last_tick + timedelta(seconds=3))
    async with AsyncClient(restarted.url) as client:
        await client.pause_schedule(SCHEDULE)
    after = await references(restarted)
    assert after[: len(before)] == before
    ticks = assert_each_tick_once(after)
    assert ticks[0] == created.next_tick


async def test_an_owner_change_in_a_cluster_fires_each_tick_once(
    servers: Servers, etcd: EtcdServer, shared_storage: tuple[str, ...]
) -> None:
    """Three nodes on one keyspace or schema: the owner of the schedule is killed (its ticks move to
    another node once its etcd lease is gone), then started again (they move back)."""
    nodes = await start_members(servers, etcd, shared_storage, "/schedules")
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("ticks", lease_timeout="1m")
        created = await client.create_schedule(SCHEDULE, "* * * * * *", "ticks", catch_up="all")
    assert created.next_tick is not None
    by_id = {f"node-{n}": n for n in range(len(nodes))}
    owner = by_id[created.owner]
    await fired_past(nodes[owner], created.next_tick + timedelta(seconds=2))
    kill9(nodes[owner])
    survivors = [node for n, node in enumerate(nodes) if n != owner]
    await members_are(survivors, len(survivors))
    async with AsyncClient(survivors[0].url) as client:
        moved = await client.schedule_info(SCHEDULE)
    assert moved.owner != created.owner and moved.last_tick is not None
    await fired_past(survivors[0], moved.last_tick + timedelta(seconds=3))

    nodes[owner] = await servers.astart(*member_args(etcd, shared_storage, "/schedules", owner))
    await members_are(nodes, len(nodes))
    async with AsyncClient(nodes[owner].url) as client:
        back = await client.schedule_info(SCHEDULE)
    assert back.owner == created.owner and back.last_tick is not None
    await fired_past(nodes[owner], back.last_tick + timedelta(seconds=3))
    async with AsyncClient(nodes[owner].url) as client:
        await client.pause_schedule(SCHEDULE)
    ticks = assert_each_tick_once(await references(nodes[owner]))
    assert ticks[0] == created.next_tick
