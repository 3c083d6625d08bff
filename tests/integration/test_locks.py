"""Locks and semaphores (docs/locks.md) against real ``querator serve`` processes.

Holders that must not share anything run in processes of their own (tests/integration/lock_holders.py);
the rest use separate clients in this process. Nothing sleeps to synchronise: waits poll with deadlines.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from querator.client import AcquireTimedOut, AsyncClient, Client, LockMismatch
from querator.errors import InvalidOption

from .conftest import Servers, kill9
from .lock_holders import Counters, hold_forever, hold_rounds

pytestmark = pytest.mark.integration

SPAWN = multiprocessing.get_context("spawn")
HOLDERS = 20
LIMIT = 4
DEADLINE = 60.0


def sqlite_args(data_dir: Path) -> tuple[str, ...]:
    return ("--storage", "sqlite", "--data-dir", str(data_dir))


async def joined(process: multiprocessing.process.BaseProcess) -> int | None:
    await asyncio.to_thread(process.join, DEADLINE)
    return process.exitcode


async def test_twenty_holders_in_their_own_processes_never_exceed_the_limit(servers: Servers) -> None:
    server = await servers.astart()
    counters = Counters(SPAWN.Value("i", 0), SPAWN.Value("i", 0), SPAWN.Value("i", 0))
    holders = [
        SPAWN.Process(target=hold_rounds, args=(server.url, "gpu", LIMIT, 2, counters))
        for _ in range(HOLDERS)
    ]
    for holder in holders:
        holder.start()
    try:
        codes = await asyncio.gather(*(joined(h) for h in holders))
    finally:
        for holder in holders:
            holder.kill()
    assert codes == [0] * HOLDERS
    # Every entry was counted, at most LIMIT were ever inside at once, and LIMIT were at some point.
    assert (counters.entries.value, counters.peak.value, counters.inside.value) == (2 * HOLDERS, LIMIT, 0)
    async with AsyncClient(server.url) as client:
        stats = await client.stats("lock.gpu")
    assert [(p.total, p.total_leased) for q in stats.logical_queues for p in q.partitions] == [(LIMIT, 0)]


async def test_a_killed_holder_frees_the_lock_after_its_own_ttl(servers: Servers) -> None:
    server = await servers.astart()
    async with AsyncClient(server.url) as creator, creator.lock("invoice-42", ttl="5m"):
        pass  # the queue's lease timeout is now 5m; the holder below asks for a ttl of 2s
    fencing, held = SPAWN.Value("i", 0), SPAWN.Event()
    holder = SPAWN.Process(target=hold_forever, args=(server.url, "invoice-42", fencing, held))
    holder.start()
    try:
        assert await asyncio.to_thread(held.wait, DEADLINE)
        async with AsyncClient(server.url) as client:
            with pytest.raises(AcquireTimedOut, match=r"^acquire timed out; no token of 'lock.invoice-42'"):
                async with client.lock("invoice-42", ttl="2s", timeout=0):
                    pass
            os.kill(holder.pid or 0, signal.SIGKILL)
            assert await joined(holder) == -signal.SIGKILL
            # Nobody renews the lease any more: the token comes back once the holder's 2s ttl has run
            # out, long before the queue's 5m (the wait is bounded well below it).
            async with client.lock("invoice-42", ttl="2s", timeout=30) as lock:
                assert lock.fencing_token == fencing.value + 1
    finally:
        holder.kill()


async def test_fencing_tokens_increase_with_every_acquisition_across_clients(servers: Servers) -> None:
    server = await servers.astart()
    seen: list[int] = []

    async def take_turns(client: AsyncClient) -> None:
        for _ in range(5):
            async with client.lock("ledger", timeout=DEADLINE) as lock:
                seen.append(lock.fencing_token)

    clients = [AsyncClient(server.url) for _ in range(3)]
    try:
        await asyncio.gather(*(take_turns(c) for c in clients))
    finally:
        for client in clients:
            await client.close()
    # In the order the holders got the lock: one per acquisition, each greater than the one before.
    assert len(seen) == 15 and seen == sorted(set(seen)), seen
    assert seen[0] == 1


async def test_a_held_lock_survives_a_sqlite_server_restart(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    async with AsyncClient(server.url) as holder, AsyncClient(server.url) as other:
        async with holder.lock("report", ttl="20s") as lock:
            kill9(server)
            restarted = await servers.astart(*sqlite_args(data), port=server.port)
            assert restarted.url == server.url
            with pytest.raises(AcquireTimedOut):
                async with other.lock("report", ttl="20s", timeout=0.5):
                    pass
            first = lock.fencing_token
        assert not lock.lost  # the holder's renewals reached the restarted server: no LockLost either
        async with other.lock("report", ttl="20s", timeout=0) as after:
            assert after.fencing_token == first + 1


async def test_a_client_makes_the_lock_again_when_a_memory_node_lost_it(servers: Servers) -> None:
    server = await servers.astart()
    async with AsyncClient(server.url) as client:
        async with client.lock("scratch") as lock:
            assert lock.fencing_token == 1
        kill9(server)
        await servers.astart(port=server.port)
        # The client made sure of the queue before; its first acquire now finds none and makes it again.
        async with client.lock("scratch", timeout=0) as lock:
            assert (lock.slot, lock.fencing_token) == ("token-0-0", 1)


async def test_set_limit_adds_tokens_at_once_and_removes_them_as_holders_release(servers: Servers) -> None:
    server = await servers.astart()
    async with AsyncClient(server.url) as client:
        async with client.semaphore("pool", 2), client.semaphore("pool", 2):
            with pytest.raises(AcquireTimedOut, match=r"^set limit timed out; 1 tokens of 'lock.pool'"):
                await client.set_limit("pool", 1, timeout=0.2)
        await client.set_limit("pool", 1, timeout=DEADLINE)  # the two holders are gone
        assert (await client.queue_info("lock.pool")).reference == "querator.semaphore; limit=1; generation=1"
        with pytest.raises(LockMismatch, match=r"^limit mismatch; 'pool' has limit 1, not 2"):
            async with AsyncClient(server.url) as fresh, fresh.semaphore("pool", 2):
                pass
        await client.set_limit("pool", 3)
        async with (
            client.semaphore("pool", 3, timeout=0) as a,
            client.semaphore("pool", 3, timeout=0) as b,
            client.semaphore("pool", 3, timeout=0) as c,
        ):
            assert len({a.slot, b.slot, c.slot}) == 3
            with pytest.raises(AcquireTimedOut):
                async with client.semaphore("pool", 3, timeout=0):
                    pass


async def test_first_use_racing_in_many_clients_makes_exactly_limit_tokens(servers: Servers) -> None:
    server = await servers.astart()
    clients = [AsyncClient(server.url) for _ in range(HOLDERS)]

    async def first_use(client: AsyncClient) -> str:
        async with client.semaphore("race", LIMIT, timeout=DEADLINE) as held:
            return held.slot

    try:
        slots = await asyncio.gather(*(first_use(c) for c in clients))
        stats = await clients[0].stats("lock.race")
    finally:
        for client in clients:
            await client.close()
    assert set(slots) == {f"token-0-{n}" for n in range(LIMIT)}
    assert [p.total for q in stats.logical_queues for p in q.partitions] == [LIMIT]


async def test_a_limit_above_one_produce_makes_its_tokens_in_several(servers: Servers) -> None:
    server = await servers.astart()
    async with AsyncClient(server.url) as client:
        async with client.semaphore("wide", 2500, timeout=DEADLINE) as held:
            assert held.slot == "token-0-0"
        stats = await client.stats("lock.wide")
    assert [p.total for q in stats.logical_queues for p in q.partitions] == [2500]


async def test_bad_input_is_refused_before_and_by_the_server(servers: Servers) -> None:
    server = await servers.astart()
    refusals = {
        (0, "30s"): r"^limit is invalid; must be an integer of at least 1, but 0 was given$",
        (-3, "30s"): r"^limit is invalid; must be an integer of at least 1, but -3 was given$",
        (2, "soon"): r'^ttl is invalid; time: invalid duration "soon"$',
        (2, "100ms"): r"^ttl is invalid; must be at least 1s, but '100ms' was given$",
    }
    async with AsyncClient(server.url) as client:
        for (limit, ttl), message in refusals.items():
            with pytest.raises(ValueError, match=message):
                async with client.semaphore("bad", limit, ttl):
                    pass
        with pytest.raises(ValueError, match=r"^timeout is invalid; cannot be negative, but -1 was given$"):
            async with client.lock("bad", timeout=-1):
                pass
        with pytest.raises(ValueError, match=r"^lock name is invalid; cannot be empty$"):
            async with client.lock(""):
                pass
        with pytest.raises(
            InvalidOption, match=r"^queue name is invalid; 'lock.a b' cannot contain whitespace$"
        ):
            async with client.lock("a b"):
                pass
        await client.create_queue("lock.taken")
        with pytest.raises(LockMismatch, match=r"^not a lock queue; 'lock.taken' has reference ''$"):
            async with client.lock("taken"):
                pass
        assert [q.queue_name for q in (await client.list_queues()).items] == ["lock.taken"]


def test_the_blocking_client_holds_a_lock_too(servers: Servers) -> None:
    server = servers.start()
    with Client(server.url) as client:
        with client.lock("sync", ttl="5s") as lock:
            assert (lock.slot, lock.fencing_token) == ("token-0-0", 1)
        with client.lock("sync", ttl="5s", timeout=0) as lock:
            assert lock.fencing_token == 2
