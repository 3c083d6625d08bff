"""Crash safety of a sqlite node, with real ``querator serve`` processes killed by real signals.

- SIGKILL while producers are mid-flight: every produce answered 200 survives the restart and is
  delivered exactly once; an item nobody was told about may appear only if its produce was in flight.
- SIGKILL with leased and scheduled items: the leases still expire (real clock) and the scheduled items
  still come due after the restart.
- SIGTERM while a lease long-polls: the waiting client is told 453 "shutting down" and the process
  exits 0.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from querator.client import AsyncClient, ConnectionFailed
from querator.errors import QueratorError, RetryRequest
from querator.wire import messages as m

from .conftest import Held, ServerProcess, Servers, eventually, held, kill9, sigterm_while_a_lease_waits

PRODUCERS = 8
PARTITIONS = 4
ACKED_BEFORE_KILL = 400
"""Acknowledged items to wait for before the kill (the producers keep going)."""
DEADLINE = 60.0
REDRIVEN = 30_000
"""Items in the dead queue when a redrive is killed: enough that the kill lands part-way."""


def sqlite_args(data_dir: Path) -> tuple[str, ...]:
    return ("--storage", "sqlite", "--data-dir", str(data_dir))


async def drain(
    client: AsyncClient, server: ServerProcess, queue: str, until: int | None = None
) -> list[tuple[int, m.QueueLeaseItem]]:
    """Leases and completes items until the queue holds none (or ``until`` items were delivered); a
    failing partition holds what it cannot count, so the drain waits for it.

    Returns every delivered item with its partition, in delivery order. An unexpected error reply, or a
    queue not drained by the deadline, fails the test with what the queue holds and the server's log.
    """
    delivered: list[tuple[int, m.QueueLeaseItem]] = []

    async def done() -> bool:
        if until is not None:
            if len(delivered) >= until:
                return True
        elif await held(client, queue) == Held():
            return True
        try:
            reply = await client.lease(queue, batch_size=500, client_id="drain", request_timeout="2s")
        except RetryRequest:
            return False
        if not reply.items:  # nothing available yet (a lease or a schedule not yet due)
            return False
        await client.complete(queue, reply.partition, [item.id for item in reply.items])
        delivered.extend((reply.partition, item) for item in reply.items)
        return False

    try:
        await eventually(done, DEADLINE, f"draining {queue!r}")
    except (AssertionError, QueratorError) as e:
        why = f"{e.code} {e.message}" if isinstance(e, QueratorError) else str(e)
        try:
            left = str(await held(client, queue))
        except QueratorError as unknown:  # the server's log says more than this error would
            left = f"what its stats could not say ({unknown.code} {unknown.message})"
        raise AssertionError(f"draining {queue!r} failed: {why}; it holds {left}\n{server.describe()}") from e
    return delivered


async def test_sigkill_while_producing_loses_no_acknowledged_item(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    acked: set[str] = set()
    unknown: set[str] = set()  # in flight at the kill: stored or not, nobody was told
    refused: list[tuple[list[str], QueratorError]] = []  # answered, but not 200: must not be stored

    async with AsyncClient(server.url) as client:
        await client.create_queue("crash", lease_timeout="1m", expire_timeout="1h", partitions=PARTITIONS)

        async def produce(producer: int) -> None:
            seq = 0
            while True:
                batch = [f"p{producer}-{seq + i:06d}" for i in range(1 + seq % 5)]
                seq += len(batch)
                try:
                    await client.produce("crash", batch, request_timeout="10s")
                except ConnectionFailed:
                    unknown.update(batch)
                    return
                except QueratorError as e:
                    refused.append((batch, e))
                    return
                acked.update(batch)

        producers = [asyncio.create_task(produce(i)) for i in range(PRODUCERS)]

        async def enough_acked() -> bool:
            assert not any(t.done() for t in producers), f"a producer stopped early: {refused}"
            return len(acked) >= ACKED_BEFORE_KILL

        await eventually(enough_acked, DEADLINE, f"{ACKED_BEFORE_KILL} items acknowledged")
        kill9(server)  # the producers are still running: some requests are in flight right now
        await asyncio.wait_for(asyncio.gather(*producers), DEADLINE)

    assert refused == [], "a produce got a reply other than 200 before the kill"
    assert not acked & unknown

    restarted = await servers.astart(*sqlite_args(data))
    async with AsyncClient(restarted.url) as client:
        delivered = await drain(client, restarted, "crash")
        assert await held(client, "crash") == Held()
        assert (await client.lease("crash", batch_size=1, request_timeout="100ms")).items == []

    payloads = [item.bytes.decode() for _, item in delivered]
    duplicates = {p: n for p, n in Counter(payloads).items() if n > 1}
    assert duplicates == {}, "delivered more than once without any lease expiring"
    missing = acked - set(payloads)
    assert missing == set(), f"{len(missing)} acknowledged items lost by the kill: {sorted(missing)[:10]}"
    unknown_outcome = set(payloads) - acked
    assert unknown_outcome <= unknown, (
        f"delivered items that were never produced in flight: {sorted(unknown_outcome - unknown)[:10]}"
    )
    assert all(item.attempts == 1 for _, item in delivered)
    # Each producer's requests were sequential, so within a partition its items keep their order (FIFO).
    for partition in range(PARTITIONS):
        for producer in range(PRODUCERS):
            prefix = f"p{producer}-"
            mine = [p for (part, _), p in zip(delivered, payloads, strict=True) if part == partition]
            mine = [p for p in mine if p.startswith(prefix)]
            assert mine == sorted(mine), f"partition {partition}: producer {producer} out of order"
    print(
        f"acknowledged {len(acked)}, in flight at the kill {len(unknown)}, "
        f"of which delivered (unknown-outcome) {len(unknown_outcome)}"
    )


async def test_sigkill_keeps_leased_and_scheduled_items(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    queued = [f"queued-{i}" for i in range(10)]
    scheduled = ["scheduled-0", "scheduled-1"]
    async with AsyncClient(server.url) as client:
        await client.create_queue("work", lease_timeout="1s", expire_timeout="1h", partitions=1)
        await client.produce("work", queued)
        lease = await client.lease("work", batch_size=4, client_id="doomed", request_timeout="5s")
        leased = [item.bytes.decode() for item in lease.items]
        assert leased == queued[:4]
        enqueue_at = datetime.now(UTC) + timedelta(seconds=3)
        await client.produce("work", [m.QueueProduceItem(utf8=p, enqueue_at=enqueue_at) for p in scheduled])
        listed = await client.list_scheduled("work", 0)
        assert sorted(item.payload.decode() for item in listed.items) == scheduled
    kill9(server)  # the 4 leases are neither completed nor expired (yet) in the store

    restarted = await servers.astart(*sqlite_args(data))
    async with AsyncClient(restarted.url) as client:
        delivered = await drain(client, restarted, "work", until=len(queued) + len(scheduled))
        assert await held(client, "work") == Held()

    payloads = [item.bytes.decode() for _, item in delivered]
    assert Counter(payloads) == Counter(queued + scheduled)
    attempts = {item.bytes.decode(): item.attempts for _, item in delivered}
    # The items leased before the kill came back through lease expiry: this is their second lease.
    assert attempts == {p: 2 if p in leased else 1 for p in queued + scheduled}


async def test_sigterm_answers_a_waiting_lease_and_exits_0(servers: Servers, tmp_path: Path) -> None:
    server = await servers.astart("--storage", "sqlite", "--data-dir", str(tmp_path / "data"))
    async with AsyncClient(server.url) as client:
        await client.create_queue("idle", lease_timeout="1m", expire_timeout="1h", partitions=2)
        await sigterm_while_a_lease_waits(server, client, "idle")
    status = await asyncio.to_thread(server.wait)
    assert status == 0, server.describe()
    assert "stopped" in server.stderr()


async def test_sigkill_during_a_redrive_loses_and_duplicates_nothing(
    servers: Servers, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = await servers.astart(*sqlite_args(data))
    sent = [f"dead-{i:06d}" for i in range(REDRIVEN)]
    async with AsyncClient(server.url) as client:
        await client.create_queue("dead", lease_timeout="1m", expire_timeout="1h", partitions=2)
        await client.create_queue("work", lease_timeout="1m", expire_timeout="1h", partitions=4)
        for start in range(0, REDRIVEN, 1000):
            await client.produce("dead", sent[start : start + 1000])
        redriving = asyncio.create_task(client.redrive("dead", "work"))

        async def started() -> bool:
            assert not redriving.done(), f"the redrive ended before the kill: {redriving}"
            return (await held(client, "work")).items > 0

        await eventually(started, DEADLINE, "the redrive has moved items")
        kill9(server)
        with pytest.raises(ConnectionFailed):
            await redriving

    restarted = await servers.astart(*sqlite_args(data))
    async with AsyncClient(restarted.url) as client:
        left = (await held(client, "dead")).items
        copied = (await held(client, "work")).items
        # Interrupted: some copies are stored, some originals are not deleted yet (maybe the same ones).
        assert left > 0 and copied > 0 and left + copied >= REDRIVEN
        assert await client.redrive("dead", "work") == left
        assert await held(client, "dead") == Held()
        delivered = await drain(client, restarted, "work")
    payloads = Counter(item.bytes.decode() for _, item in delivered)
    assert payloads == Counter(sent)
