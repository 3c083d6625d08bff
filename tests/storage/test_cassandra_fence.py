"""A plain commit acknowledged by a read of the owner epoch after it (docs/adr/0038): two stores on one
partition, the stale one writing at each moment of the new owner's takeover. No acknowledged write is
lost, nothing a stale owner wrote without an acknowledgement is read as committed unless the new owner
loaded it, and dedup ids are stored once, never lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from cassandra import ConsistencyLevel

from querator.errors import StaleOwnerError, StorageError
from querator.ksuid import KsuidGenerator
from querator.storage.cassandra import (
    CassandraPartition,
    CassandraSettings,
    CassandraStore,
    Segments,
    SendHook,
    Step,
)
from querator.storage.cassandra._partition import Rows, Send
from querator.storage.cassandra._statements import Statement
from tests.storage.contract import NOW, SECOND, Part, item, payloads
from tests.storage.test_cassandra import EPOCH, opened_store, segments
from tests.storage.test_cassandra_orphans import Fault, check

WINDOW = 3600 * SECOND


class Hook:
    """The new owner's send hook: hands every step to ``wrap`` when set."""

    def __init__(self) -> None:
        self.wrap: SendHook | None = None

    async def send(self, partition: CassandraPartition, step: Step, send: Send) -> Rows:
        if self.wrap is None:
            return await send(step)
        return await self.wrap(partition, step, send)


@pytest.fixture
def hook() -> Hook:
    return Hook()


@pytest.fixture
async def old(cassandra_settings: CassandraSettings, sizes: Segments) -> AsyncIterator[CassandraStore]:
    """The owner that becomes stale."""
    async with opened_store(cassandra_settings, segments=sizes) as store:
        yield store


@pytest.fixture
async def new(
    cassandra_settings: CassandraSettings, sizes: Segments, hook: Hook
) -> AsyncIterator[CassandraStore]:
    """The owner that takes the partition over (its steps go through ``hook``)."""
    async with opened_store(cassandra_settings, EPOCH + 1, segments=sizes, send=hook.send) as store:
        yield store


def part_of(store: CassandraStore, after: str = "") -> Part:
    """Partition 0 of the store; ``after`` seeds its ids above a committed last id."""
    part = Part(store.partition("queue", 0))
    if after:
        part.new_id = KsuidGenerator(NOW // SECOND, after=after).next
    return part


async def stale_produce(part: Part, *names: str, dedup: bool = False) -> StaleOwnerError:
    """A produce of the stale owner, which finds the newer epoch; returns its error."""
    items = [item(n, dedup_id=f"d-{n}" if dedup else "") for n in names]
    with pytest.raises(StaleOwnerError) as stale:
        await part.produce(*items, dedup_window=WINDOW if dedup else 0)
    return stale.value


async def test_a_stale_commit_before_the_new_owner_loads_is_loaded(
    old: CassandraStore, new: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments
) -> None:
    """The takeover's claim lands, then the old owner's plain commit, then the new owner's load: the
    read after the commit finds the newer epoch (outcome unknown), and the new owner serves the items."""
    stale = part_of(old)
    await stale.produce(item("first"))
    await new.claim("queue", 0, EPOCH + 1)
    error = await stale_produce(stale, "late")
    assert error.maybe_applied
    owner = part_of(new)
    owner.new_id = KsuidGenerator(NOW // SECOND, after=await owner.last_id()).next
    await owner.produce(item("after"))
    assert payloads(await owner.list()) == ["first", "late", "after"]
    await check(cassandra_settings, sizes, EPOCH + 10, ["first", "late", "after"], [], applied=True)


async def test_a_stale_commit_after_the_new_owner_rolled_is_never_read(
    old: CassandraStore, new: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments
) -> None:
    """The new owner claimed, loaded, sealed the old tail and opened its own: the old owner's plain
    commit lands in the sealed tail above the bound the new owner recorded, and nobody reads it."""
    stale = part_of(old)
    (first,) = await stale.produce(item("first"))
    await new.claim("queue", 0, EPOCH + 1)
    owner = part_of(new, after=first.id)
    await owner.produce(item("new"))
    assert await segments(new) == [0, 1]
    stale.new_id = KsuidGenerator(NOW // SECOND + 3600, after=first.id).next
    error = await stale_produce(stale, "late-1", "late-2")
    assert error.maybe_applied
    assert payloads(await owner.list()) == ["first", "new"]
    await owner.produce(item("after"))
    await check(cassandra_settings, sizes, EPOCH + 10, ["first", "new", "after"], [], applied=False)


async def test_a_stale_commit_between_the_new_owners_load_and_its_seal_is_loaded_again(
    old: CassandraStore,
    new: CassandraStore,
    cassandra_settings: CassandraSettings,
    sizes: Segments,
    hook: Hook,
) -> None:
    """The old owner's plain commit lands after the new owner loaded, before its seal: the seal finds
    the tail's rows moved and is refused (a storage error, not a stale owner), and the reload takes the
    commit in, although its client was told the outcome is unknown."""
    stale = part_of(old)
    await stale.produce(item("first"))
    await new.claim("queue", 0, EPOCH + 1)

    async def late_write_then_seal(partition: CassandraPartition, step: Step, send: Send) -> Rows:
        if step.kind == "seal" and not landed:
            landed.append(await stale_produce(stale, "late"))
        return await send(step)

    landed: list[StaleOwnerError] = []
    hook.wrap = late_write_then_seal
    owner = part_of(new)
    owner.new_id = KsuidGenerator(NOW // SECOND + 3600).next
    with pytest.raises(StorageError) as failed:
        await owner.produce(item("refused"))
    assert landed and landed[0].maybe_applied
    assert not isinstance(failed.value, StaleOwnerError) and not failed.value.maybe_applied
    await owner.produce(item("after"))
    assert payloads(await owner.list()) == ["first", "late", "after"]
    await check(cassandra_settings, sizes, EPOCH + 10, ["first", "late", "after"], [], applied=True)


@pytest.mark.parametrize("rolled", [False, True], ids=["before the new owner's load", "after its roll"])
async def test_dedup_ids_of_a_stale_owner_are_stored_once_on_the_new_owner(
    old: CassandraStore,
    new: CassandraStore,
    cassandra_settings: CassandraSettings,
    sizes: Segments,
    rolled: bool,
) -> None:
    """A run with dedup markers keeps the fenced commit: the stale owner's is refused, nothing of it
    applied, and the producer's retry on the new owner stores the items (never lost); ids the old owner
    stored before the takeover are duplicates on the new owner (stored once)."""
    stale = part_of(old)
    (first,) = await stale.produce(item("kept", dedup_id="d-kept"), dedup_window=WINDOW)
    await new.claim("queue", 0, EPOCH + 1)
    owner = part_of(new, after=first.id)
    if rolled:
        await owner.produce(item("new"))
    error = await stale_produce(stale, "a", "b", dedup=True)
    assert not error.maybe_applied
    retry = [item("a", dedup_id="d-a"), item("b", dedup_id="d-b"), item("kept again", dedup_id="d-kept")]
    await owner.produce(*retry, dedup_window=WINDOW)
    expected = ["kept", *(["new"] if rolled else []), "a", "b"]
    assert payloads(await owner.list()) == expected
    await check(cassandra_settings, sizes, EPOCH + 10, expected, [], applied=True)


async def test_a_verify_read_that_finds_no_row_is_a_storage_error(
    new: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, hook: Hook
) -> None:
    """No row names no owner: the outcome is unknown (the commit was sent), the next run reloads and
    goes on, and the commit, applied, is found."""
    owner = part_of(new)
    await owner.produce(item("first"))
    hook.wrap = Fault("found nothing", "verify").send
    with pytest.raises(StorageError) as failed:
        await owner.produce(item("unknown"))
    assert not isinstance(failed.value, StaleOwnerError) and failed.value.maybe_applied
    assert "found no row" in failed.value.message
    await owner.produce(item("after"))
    await check(cassandra_settings, sizes, EPOCH + 10, ["first", "unknown", "after"], [], applied=True)


async def test_runs_of_a_queues_partitions_share_one_read_of_their_epochs(
    new: CassandraStore, hook: Hook
) -> None:
    """Runs whose commits are acknowledged while no read is in flight share the next one: four runs,
    four plain commits, one read; and no Paxos round."""
    parts = [Part(new.partition("queue", n)) for n in range(4)]
    await asyncio.gather(*(p.produce(item(f"first-{n}")) for n, p in enumerate(parts)))
    waiting: list[int] = []
    all_waiting = asyncio.Event()

    async def together(partition: CassandraPartition, step: Step, send: Send) -> Rows:
        if step.kind == "verify":
            waiting.append(partition.number)
            if len(waiting) == len(parts):
                all_waiting.set()
            await all_waiting.wait()
        return await send(step)

    hook.wrap = together
    counters = new.run_counters
    before = (counters.paxos, counters.plain)
    await asyncio.gather(*(p.produce(item(f"second-{n}")) for n, p in enumerate(parts)))
    assert (counters.paxos - before[0], counters.plain - before[1]) == (0, len(parts) + 1)
    for n, p in enumerate(parts):
        assert payloads(await p.list()) == [f"first-{n}", f"second-{n}"]


@pytest.mark.parametrize("skew_s", [-30, 30], ids=["driver's clock behind", "driver's clock ahead"])
async def test_plain_and_fenced_commits_stay_in_order_whatever_the_drivers_clock(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, skew_s: int
) -> None:
    """A run with dedup markers writes the tail's statics with Paxos, at the coordinator's time; the
    others write them plainly. Timed by the driver's clock, the later write of the two was hidden by the
    earlier one whenever that clock was behind Cassandra's (a plain commit after a fenced one) or ahead
    of it (a fenced commit after a plain one), and the later run's items were lost."""
    cluster = store._connection.opened().session.cluster
    real = cluster.timestamp_generator
    cluster.timestamp_generator = lambda: real() + skew_s * 1_000_000
    part = part_of(store)
    plain, fenced = item("plain"), item("fenced", dedup_id="d-fenced")
    for run in [fenced, plain] if skew_s < 0 else [plain, fenced]:
        await part.produce(run, dedup_window=WINDOW)
    await check(cassandra_settings, sizes, EPOCH + 10, ["fenced", "plain"], [], applied=True)


async def test_the_fence_meets_claims_at_a_quorum_whatever_the_configured_consistency(
    cassandra_settings: CassandraSettings, sizes: Segments
) -> None:
    """With ``--cassandra-consistency ONE``, a read of the epoch at ONE could miss a newer owner's
    claim committed at ONE on other replicas, and acknowledge a write that owner never loads: the plain
    commit, the read and the claims go at ``LOCAL_QUORUM``."""
    levels: list[int | None] = []

    async def record(partition: CassandraPartition, step: Step, send: Send) -> Rows:
        if step.kind == "write":
            levels.append(step.statement.consistency_level)
        return await send(step)

    weak = replace(cassandra_settings, consistency="ONE")
    async with opened_store(weak, segments=sizes, send=record) as store:
        await part_of(store).produce(item("a"))
        cql = store._connection.opened()
        fenced = [Statement.EPOCHS, Statement.CREATE_PARTITION, Statement.CLAIM_PARTITION]
        levels.extend(cql.stmt(s).consistency_level for s in fenced)
        assert cql.stmt(Statement.SEGMENT_META).consistency_level is None  # the configured one
    assert levels == [ConsistencyLevel.LOCAL_QUORUM] * 4
