"""Item rows outside the Paxos round (ADR 0004) and commits checked by a read after the write (ADR
0038): a run sends one plain batch, acknowledged once a read of the owner epoch finds its own, or (with
dedup markers) its item rows, then the fenced batch that commits them. Every way the commit or the read
can fail, for every writer of item rows, leaves rows nobody may ever see: after the failure, a reload,
more writes and a full lease, every acknowledged item appears exactly once and no orphan appears
anywhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from cassandra import OperationTimedOut, Unavailable, WriteTimeout, WriteType
from cassandra.connection import ConnectionShutdown

from querator.errors import StaleOwnerError, StorageError
from querator.ksuid import KsuidGenerator
from querator.storage.base import ClearOptions, Item
from querator.storage.cassandra import CassandraPartition, CassandraSettings, CassandraStore, Segments, Step
from querator.storage.cassandra._partition import Rows, Send
from querator.storage.operations import RetryEntry
from tests.storage.contract import NOW, SECOND, Part, item, payloads
from tests.storage.test_cassandra import EPOCH, opened_store, segments

HOUR = 3600 * SECOND


@dataclass
class Fault:
    """Breaks the next run of a partition at one of its steps (``at``: a ``Step.kind``), one of these
    ways (``how``): ``refused`` (a newer owner claims the partition just before it), ``unavailable``,
    ``lost`` (timed out, not applied), ``answered late`` (applied, the answer lost), ``retried``
    (applied, then sent again as the driver's retry on the next host does, which its condition refuses),
    ``late`` (the connection cut before the answer while the coordinator goes on: kept in ``late`` to be
    sent later), ``lands first`` (``late`` is sent just before the step), ``found nothing`` (refused by
    a condition on a row that is not there, as Cassandra answers one: ``[applied]`` alone; for the read
    of the owner epoch, no row)."""

    how: str
    at: str = "commit"
    claimer: CassandraStore | None = None
    orphans: list[Item] = field(default_factory=list)
    """The item rows the failed run wrote."""
    seen: list[str] = field(default_factory=list)
    """The kinds of the steps the failed run sent, or tried to."""
    armed: bool = True
    late: Any = None

    # Long on purpose: one branch per way a step fails, in the order the docstring lists them.
    async def send(self, partition: CassandraPartition, step: Step, send: Send) -> Rows:  # noqa: C901
        if not self.armed:
            return await send(step)
        self.seen.append(step.kind)
        if step.kind in ("items", "write"):
            assert partition._index is not None
            self.orphans = [i.copy() for i in partition._index.writes.items]
        if step.kind != self.at:
            return await send(step)
        self.armed = False
        if self.how == "refused":
            assert self.claimer is not None
            await self.claimer.claim(partition.queue, partition.number, EPOCH + 1)
            return await send(step)
        if self.how == "found nothing":
            return [] if step.kind == "verify" else [{"[applied]": False}]
        if self.how == "unavailable":
            raise Unavailable("too few replicas alive")
        if self.how == "lost":
            raise OperationTimedOut("no answer; not applied")
        if self.how == "late":
            self.late = step
            raise ConnectionShutdown("connection cut; the coordinator goes on")
        if self.how == "lands first":
            await send(self.late)
            return await send(step)
        if self.how == "retried":
            await send(step)
            return await send(step)
        assert self.how == "answered late"
        await send(step)
        raise WriteTimeout("applied, the answer lost", write_type=WriteType.CAS)

    @property
    def applied(self) -> bool:
        """Whether the run was applied all the same: its commit was, or its plain commit was sent before
        the newer owner loads (a claim alone loads nothing)."""
        if self.at == "verify" or (self.at == "write" and self.how == "refused"):
            return True
        return self.how == "answered late" and self.at in ("commit", "write")


FENCED_FAULTS = [
    ("refused", "commit"),
    ("unavailable", "commit"),
    ("lost", "commit"),
    ("answered late", "commit"),
    ("answered late", "items"),
]
"""How the commit of a run with dedup markers fails."""
PLAIN_FAULTS = [
    ("refused", "write"),
    ("unavailable", "write"),
    ("lost", "write"),
    ("answered late", "write"),
    ("refused", "verify"),
    ("lost", "verify"),
    ("answered late", "verify"),
]
"""How the plain commit of any other run, or the read that acknowledges it, fails (ADR 0038)."""


def fill_tail(store: CassandraStore, sizes: Segments) -> None:
    """Makes the tail of partition 0 full: its next run opens a new one."""
    index = store._partition("queue", 0)._index
    assert index is not None
    sizes.rows = index.meta.rows - index.carried_count()


class Faults:
    """The store's send hook: hands every step to the fault injected last."""

    def __init__(self) -> None:
        self.fault: Fault | None = None

    async def send(self, partition: CassandraPartition, step: Step, send: Send) -> Rows:
        if self.fault is None:
            return await send(step)
        return await self.fault.send(partition, step, send)


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
async def store(
    cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults
) -> AsyncIterator[CassandraStore]:
    async with opened_store(cassandra_settings, segments=sizes, send=faults.send) as store:
        yield store


@pytest.fixture
async def claimer(cassandra_settings: CassandraSettings, sizes: Segments) -> AsyncIterator[CassandraStore]:
    """A newer owner that takes the partition over in the middle of a run."""
    async with opened_store(cassandra_settings, EPOCH + 1, segments=sizes) as store:
        yield store


def inject(faults: Faults, fault: Fault) -> None:
    faults.fault = fault


Writer = Callable[[Part, Item], Awaitable[object]]
"""One run that writes item rows, on the partition ``setup`` made; it gets the leased item."""


async def setup(part: Part) -> Item:
    """A partition with a leased item, a queued one and one scheduled soon, all committed."""
    await part.produce(item("held"), item("kept"), item("soon", enqueue_at=NOW + SECOND))
    [[held]] = await part.lease(1, deadline=NOW + SECOND)
    return held


async def produce(part: Part, held: Item) -> object:
    return await part.produce(item("new-1"), item("new-2"))


async def produce_scheduled(part: Part, held: Item) -> object:
    return await part.produce(item("later", enqueue_at=NOW + HOUR))


async def retry_now(part: Part, held: Item) -> object:
    return await part.retry(RetryEntry(held.id))


async def lifecycle(part: Part, held: Item) -> object:
    """The expired lease goes back to the tail, the scheduled item comes due: both with new ids."""
    return await part.lifecycle(NOW + 2 * SECOND)


async def import_(part: Part, held: Item) -> object:
    """What dead-lettering does in the dead queue."""
    return await part.import_items(item("imported", source_id="source-1"))


async def produce_deduplicated(part: Part, held: Item) -> object:
    return await part.produce(item("new-1", dedup_id="d-1"), item("new-2", dedup_id="d-2"), dedup_window=HOUR)


WRITERS: dict[str, tuple[Writer, list[str]]] = {
    "produce": (produce, ["new-1", "new-2"]),
    "produce with dedup ids": (produce_deduplicated, ["new-1", "new-2"]),
    "scheduled produce": (produce_scheduled, ["later"]),
    "retry now": (retry_now, []),
    "lease expiry and scheduled items coming due": (lifecycle, []),
    "import": (import_, ["imported"]),
}


async def everything(store: CassandraStore) -> tuple[list[Item], list[Item]]:
    """What a new owner finds in partition 0: the items (queued and leased) and the scheduled ones."""
    part = Part(store.partition("queue", 0))
    return await part.list(limit=1000), await part.list(limit=1000, scheduled=True)


def rows(items: Iterable[Item]) -> set[tuple[str, bytes]]:
    return {(i.id, i.payload) for i in items}


async def check(
    settings: CassandraSettings,
    sizes: Segments,
    epoch: int,
    expected: list[str],
    orphans: list[Item],
    applied: bool,
) -> None:
    """A new owner finds each expected item once, no orphan, and consistent stats and leases. (An
    orphan's id may be taken again by a newer owner, in another segment: rows are told apart by their
    payloads, which are all different.)"""
    async with opened_store(settings, epoch, segments=sizes) as store:
        await store.partition("queue", 0).claim()
        part = Part(store.partition("queue", 0))
        found, scheduled = await everything(store)
        assert sorted(payloads(found + scheduled)) == sorted(expected)
        assert len({i.id for i in found + scheduled}) == len(found) + len(scheduled)
        if not applied:
            assert not rows(orphans) & rows(found + scheduled)
            assert not rows(orphans) & rows((await part.get(*(i.id for i in orphans))).values())
        stats = await part.run(lambda tx: tx.stats(NOW))
        assert (stats.total, stats.scheduled) == (len(found), len(scheduled))
        queued = [i for i in found if not i.is_leased]
        [leased] = await part.lease(1000)
        assert payloads(leased) == payloads(queued)
        assert await part.lease(1000) == [[]]


@pytest.mark.parametrize(
    ("writer", "how", "at"),
    [
        pytest.param(writer, how, at, id=f"{writer}-{at} {how}")
        for writer in WRITERS
        for how, at in (FENCED_FAULTS if writer == "produce with dedup ids" else PLAIN_FAULTS)
    ],
)
@pytest.mark.parametrize("rolls", [False, True], ids=["in the tail", "rolling"])
async def test_a_failed_commit_leaves_no_orphan(
    store: CassandraStore,
    claimer: CassandraStore,
    cassandra_settings: CassandraSettings,
    sizes: Segments,
    faults: Faults,
    how: str,
    at: str,
    writer: str,
    rolls: bool,
) -> None:
    write, added = WRITERS[writer]
    part = Part(store.partition("queue", 0))
    held = await setup(part)
    found, scheduled = await everything(store)
    before = payloads(found + scheduled)
    last_id = await part.last_id()
    if rolls:
        # The tail is full: the failing run opens the next segment, and so does every run after it.
        fill_tail(store, sizes)
    fault = Fault(how, at, claimer)
    inject(faults, fault)

    with pytest.raises(StorageError) as failed:
        await write(part, held)
    assert fault.orphans and not fault.armed
    assert ("roll" in fault.seen) == rolls
    assert isinstance(failed.value, StaleOwnerError) == (how == "refused")
    # A 454 says whether the outcome is unknown: once the commit was sent and not refused by the fence
    # (even Unavailable: Paxos v1 answers it after a quorum accepted), or once a plain commit was sent,
    # whatever the read after it found.
    assert failed.value.maybe_applied == (at in ("write", "verify") or (at == "commit" and how != "refused"))

    # The owner goes on, its ids still growing past the orphans'; or the owner that took the partition
    # over, its ids seeded from the committed last id.
    owner = part
    if how == "refused":
        owner = Part(claimer.partition("queue", 0))
        if not fault.applied:
            assert await owner.last_id() == last_id
        owner.new_id = KsuidGenerator(NOW // SECOND, after=await owner.last_id()).next
    await owner.produce(item("after-1"), item("after-2"))
    expected = [*before, *(added if fault.applied else []), "after-1", "after-2"]
    found, scheduled = await everything(claimer if how == "refused" else store)
    assert sorted(payloads(found + scheduled)) == sorted(expected)

    await check(cassandra_settings, sizes, EPOCH + 10, expected, fault.orphans, fault.applied)


async def test_an_orphan_above_the_next_segments_committed_ids_hides_none_of_them(
    store: CassandraStore, claimer: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments
) -> None:
    """A stale owner's rows land in the segment it still thinks is the tail, above the ids the new owner
    began the next segment with, and below the ones it wrote later: no read of the old segment returns
    them, and none moves past them (which would skip the next segment's ids below them)."""
    old = Part(store.partition("queue", 0))
    (first,) = await old.produce(item("first"))
    await claimer.claim("queue", 0, EPOCH + 1)
    new = Part(claimer.partition("queue", 0))
    new.new_id = KsuidGenerator(NOW // SECOND, after=first.id).next
    # The new owner's first write of items opens a segment after the claimed tail.
    await new.produce(*(item(f"new-{n}") for n in range(3)))
    # The stale owner's ids run ahead: its rows sort after all of the new owner's so far.
    old.new_id = KsuidGenerator(NOW // SECOND + 3600, after=first.id).next
    stale = [item("stale-1"), item("stale-2")]
    with pytest.raises(StaleOwnerError):
        await old.produce(*stale)
    assert min(i.id for i in stale) > max(i.id for i in await new.list())
    # Then the new owner's ids pass the orphans': new-3 and after sort above them.
    new.new_id = KsuidGenerator(NOW // SECOND + 7200).next
    await new.produce(*(item(f"new-{n}") for n in range(3, 6)))
    assert await segments(claimer) == [0, 1]
    expected = ["first", *(f"new-{n}" for n in range(6))]
    await check(cassandra_settings, sizes, EPOCH + 10, expected, stale, applied=False)


@pytest.mark.parametrize("how", ["lost", "answered late"])
async def test_a_produce_retried_with_its_dedup_ids_is_stored_once(
    store: CassandraStore, faults: Faults, how: str
) -> None:
    """A 454 after the item rows were written: the client's retry with the same dedup ids stores the
    items once, whether the commit was applied or not."""
    window = 300 * SECOND
    part = Part(store.partition("queue", 0))
    inject(faults, Fault(how))
    with pytest.raises(StorageError):
        await part.produce(item("a", dedup_id="x"), item("b", dedup_id="y"), dedup_window=window)
    await part.produce(item("a", dedup_id="x"), item("b", dedup_id="y"), dedup_window=window)
    assert payloads(await part.list()) == ["a", "b"]


WINDOW = 300 * SECOND


async def commit_cut_off(store: CassandraStore, faults: Faults) -> tuple[Part, Fault]:
    """Partition 0 holds "before"; the produce of "a" (dedup id "x") then lost its connection at the
    commit, which is kept in the fault's ``late`` while its coordinator "goes on"."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("before"))
    cut = Fault("late")
    inject(faults, cut)
    with pytest.raises(StorageError):
        await part.produce(item("a", dedup_id="x"), dedup_window=WINDOW)
    return part, cut


async def test_a_commit_that_lands_after_the_next_run_loaded_is_refused(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults
) -> None:
    """A produce's commit fails on the client's side while its coordinator goes on; the next run loads
    the partition and opens a new tail. Landing on the old tail then, the commit would leave its items
    unread and its dedup marker answering "duplicate" to the client's retry: the old tail is sealed, so
    the commit is refused and the retry stores the item."""
    part, cut = await commit_cut_off(store, faults)
    await part.produce(item("next"))
    rows_ = await store._connection.execute_async(asyncio.get_running_loop(), cut.late.statement)
    assert not rows_[0]["[applied]"]
    await part.produce(item("a", dedup_id="x"), dedup_window=WINDOW)
    assert payloads(await part.list()) == ["before", "next", "a"]
    await check(cassandra_settings, sizes, EPOCH + 10, ["before", "next", "a"], cut.orphans, applied=False)


async def test_a_commit_that_lands_before_the_seal_is_loaded(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults
) -> None:
    """The same commit landing after the load but before the seal: the seal fails (the tail's rows
    changed), and the next run loads the commit's items, which its dedup marker rightly answers for."""
    part, cut = await commit_cut_off(store, faults)
    lands = Fault("lands first", "seal", late=cut.late)
    inject(faults, lands)
    with pytest.raises(StorageError) as failed:
        await part.produce(item("next"))
    assert lands.seen[-1] == "seal" and not isinstance(failed.value, StaleOwnerError)
    await part.produce(item("next"))
    await part.produce(item("a again", dedup_id="x"), dedup_window=WINDOW)
    assert payloads(await part.list()) == ["before", "a", "next"]
    await check(cassandra_settings, sizes, EPOCH + 10, ["before", "a", "next"], [], applied=True)


@pytest.mark.parametrize("how", ["lost", "answered late", "retried"])
async def test_a_failed_seal_applies_nothing_of_its_run(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults, how: str
) -> None:
    """The seal fails, applied or not: the run fails as a storage error, and the next one goes on (a
    sealed tail is left sealed, an unsealed one sealed again)."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("before"))
    inject(faults, Fault("lost", "write"))
    with pytest.raises(StorageError):
        await part.produce(item("lost"))
    seal = Fault(how, "seal")
    inject(faults, seal)
    with pytest.raises(StorageError) as failed:
        await part.produce(item("lost too"))
    assert seal.seen == ["seal"] and not isinstance(failed.value, StaleOwnerError)
    assert not failed.value.maybe_applied
    await part.produce(item("after"))
    await check(cassandra_settings, sizes, EPOCH + 10, ["before", "after"], [], applied=False)


async def test_clear_after_a_failed_run_then_lease(store: CassandraStore, faults: Faults) -> None:
    """Clearing puts the cursor at the committed last id, under the orphans: they stay unseen."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("cleared"))
    inject(faults, Fault("lost", "write"))
    with pytest.raises(StorageError):
        await part.produce(item("orphan"))
    await part.run(lambda tx: tx.clear(ClearOptions(queue=True)))
    await part.produce(item("after"))
    [leased] = await part.lease(10)
    assert payloads(leased) == ["after"]


async def drained_behind_leases(store: CassandraStore, sizes: Segments) -> Part:
    """A partition whose next run opens a new tail, and drops a drained segment and carries two leases
    over (in two chunks) as it does."""
    sizes.rows, sizes.carry_chunk = 4, 1
    part = Part(store.partition("queue", 0))
    await part.produce(item("held-1"), item("held-2"))
    await part.lease(2, deadline=NOW + HOUR)
    for n in range(3):  # segments that drain, behind the held ones
        await part.produce(item(f"done-{n}"), item(f"done-{n}b"))
        [got] = await part.lease(2)
        assert await part.complete(*(i.id for i in got)) is None
    await part.produce(item("kept"))
    fill_tail(store, sizes)
    return part


async def test_a_roll_drops_a_drained_segment_and_carries_leases(
    store: CassandraStore, sizes: Segments, faults: Faults
) -> None:
    """What the roll-fault test below relies on: its failing run's roll has every kind of step."""
    part = await drained_behind_leases(store, sizes)
    fault = Fault("lost", "none")
    inject(faults, fault)
    await part.produce(item("more"))
    assert fault.seen == ["drop", "roll", "open", "carry", "write", "verify"]


@pytest.mark.parametrize("how", ["lost", "answered late"])
@pytest.mark.parametrize("at", ["drop", "roll", "open", "carry"])
async def test_a_failed_roll_applies_nothing_of_its_run(
    store: CassandraStore,
    cassandra_settings: CassandraSettings,
    sizes: Segments,
    faults: Faults,
    how: str,
    at: str,
) -> None:
    """A run that must open a new tail first and fails in the middle of that: nothing of the run is
    applied, nothing committed is lost, and the next run opens a tail again."""
    part = await drained_behind_leases(store, sizes)
    fault = Fault(how, at)
    inject(faults, fault)
    with pytest.raises(StorageError) as failed:
        await part.produce(item("lost"))
    assert not fault.armed and fault.seen[-1] == at and "write" not in fault.seen
    assert not failed.value.maybe_applied
    await part.produce(item("after"))
    await check(
        cassandra_settings, sizes, EPOCH + 10, ["held-1", "held-2", "kept", "after"], [], applied=False
    )


@pytest.mark.parametrize("at", ["roll", "open"])
async def test_a_roll_step_refused_on_the_drivers_retry_is_not_a_newer_owner(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults, at: str
) -> None:
    """A roll or open applied, then refused when the driver sent it again (its tail moved, its segment
    exists), answers this owner's own epoch: the run fails and the next one goes on, where a stale owner
    would refuse every run until the partition is claimed again (on a single node: never)."""
    part = await drained_behind_leases(store, sizes)
    fault = Fault("retried", at)
    inject(faults, fault)
    with pytest.raises(StorageError) as failed:
        await part.produce(item("lost"))
    assert not fault.armed and fault.seen[-1] == at
    assert not isinstance(failed.value, StaleOwnerError) and not failed.value.maybe_applied
    await part.produce(item("after"))
    await check(
        cassandra_settings, sizes, EPOCH + 10, ["held-1", "held-2", "kept", "after"], [], applied=False
    )


@pytest.mark.parametrize("at", ["roll", "open"])
async def test_a_step_refused_by_a_row_that_is_not_there_is_not_a_newer_owner(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults, at: str
) -> None:
    """A refusal that found no row names no owner (replica faults left it: a CI run saw a node alone
    refuse every run after one, 'owned by epoch None'): the run fails, and the next one reloads, claims
    the partition row again and goes on."""
    part = await drained_behind_leases(store, sizes)
    fault = Fault("found nothing", at)
    inject(faults, fault)
    with pytest.raises(StorageError) as failed:
        await part.produce(item("refused"))
    assert not fault.armed and fault.seen[-1] == at
    assert not isinstance(failed.value, StaleOwnerError) and not failed.value.maybe_applied
    assert "found no row" in failed.value.message
    await part.produce(item("after"))
    await check(
        cassandra_settings, sizes, EPOCH + 10, ["held-1", "held-2", "kept", "after"], [], applied=False
    )


@pytest.mark.parametrize("at", ["seal", "roll", "open", "carry"])
async def test_a_roll_step_refused_by_a_newer_owner_is_a_stale_owner(
    store: CassandraStore, claimer: CassandraStore, sizes: Segments, faults: Faults, at: str
) -> None:
    """Only this owner's own epoch makes a refused step a storage error (above): a newer owner's is
    stale, whatever the step."""
    part = await drained_behind_leases(store, sizes)
    if at == "seal":  # the next roll seals the old tail after a failed run
        inject(faults, Fault("lost", "roll"))
        with pytest.raises(StorageError):
            await part.produce(item("lost"))
    fault = Fault("refused", at, claimer)
    inject(faults, fault)
    with pytest.raises(StaleOwnerError):
        await part.produce(item("refused"))
    assert not fault.armed and fault.seen[-1] == at


@pytest.mark.parametrize("how", ["lost", "answered late"])
async def test_a_read_that_opens_a_tail_and_fails_at_its_commit(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults, how: str
) -> None:
    """Any run opens the new tail when one is due, a read too; its commit failing loses nothing."""
    part = await drained_behind_leases(store, sizes)
    fault = Fault(how, "write")
    inject(faults, fault)
    with pytest.raises(StorageError):
        await part.list()
    assert fault.seen == ["drop", "roll", "open", "carry", "write"]
    await part.produce(item("after"))
    await check(
        cassandra_settings, sizes, EPOCH + 10, ["held-1", "held-2", "kept", "after"], [], applied=False
    )


async def test_a_run_that_raises_after_its_roll_was_planned_sends_nothing(
    store: CassandraStore, sizes: Segments, faults: Faults
) -> None:
    part = await drained_behind_leases(store, sizes)
    tail = (await segments(store))[-1]
    fault = Fault("lost", "none")
    inject(faults, fault)

    def fail(tx: object) -> None:
        raise RuntimeError("a bug in the run")

    with pytest.raises(RuntimeError):
        await part.run(fail)
    assert fault.seen == []
    await part.produce(item("after"))
    # After any failed run the old tail is sealed before the roll (see the late-commit tests).
    assert fault.seen == ["seal", "drop", "roll", "open", "carry", "write", "verify"]
    assert (await segments(store))[-1] == tail + 1
    assert payloads(await part.list()) == ["held-1", "held-2", "kept", "after"]


async def test_a_failed_run_that_would_drain_a_segment_keeps_it(
    store: CassandraStore, cassandra_settings: CassandraSettings, sizes: Segments, faults: Faults
) -> None:
    """A run completes the last leases of a segment and opens a new tail, and its commit fails: the
    roll was made from the committed state, which still needs that segment (a roll made from the run's
    state dropped it, and the leases, still committed, lost their payloads)."""
    part = Part(store.partition("queue", 0))
    leased = await part.produce(item("a1"), item("a2"))
    await part.lease(2, deadline=NOW + HOUR)
    fill_tail(store, sizes)
    await part.produce(item("b1"))  # opens segment 1; segment 0 now holds only the two leases
    fill_tail(store, sizes)
    fault = Fault("lost", "write")
    inject(faults, fault)
    with pytest.raises(StorageError):
        await part.complete(*(i.id for i in leased))
    assert "roll" in fault.seen
    async with opened_store(cassandra_settings, EPOCH + 10, segments=sizes) as again:
        reloaded = Part(again.partition("queue", 0))
        got = await reloaded.get(*(i.id for i in leased))
        assert payloads(got.values()) == ["a1", "a2"]


async def test_the_tail_a_claim_opened_takes_items_without_a_roll(store: CassandraStore) -> None:
    """Only a tail this owner did not open is rolled before item rows go in: a new partition is not,
    whether its first run claims it or a claim came first (the cluster's way)."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("a"))
    await part.produce(item("b"))
    assert await segments(store) == [0]
    await store.claim("queue", 1, EPOCH)
    claimed = Part(store.partition("queue", 1))
    await claimed.produce(item("c"))
    await claimed.produce(item("d"))
    assert await segments(store, number=1) == [0]


async def test_a_source_id_whose_orphan_id_was_given_again_is_imported(
    store: CassandraStore, claimer: CassandraStore, faults: Faults
) -> None:
    """Import's dedup index is written before the items: an entry for an orphan may point at an id that
    the new owner then gives to another item. That item does not make the source id a duplicate."""
    old = Part(store.partition("queue", 0))
    (first,) = await old.produce(item("first"))
    fault = Fault("lost", "write")
    inject(faults, fault)
    # No expire deadline: the dedup index's entry lives as long as its item may (these stores' clocks
    # are real, the items' deadlines are in the contract's past).
    with pytest.raises(StorageError):
        await old.import_items(item("dead", source_id="source-1", expire_deadline=0))
    await claimer.claim("queue", 0, EPOCH + 1)
    new = Part(claimer.partition("queue", 0))
    # A seed from an earlier second: the new owner's first id is the one right after the committed last id.
    new.new_id = KsuidGenerator(NOW // SECOND - 1, after=first.id).next
    (other,) = await new.produce(item("other"))
    assert [other.id] == [i.id for i in fault.orphans]
    [imported] = await new.import_items(item("dead", source_id="source-1", expire_deadline=0))
    assert imported.id  # stored, not skipped as a duplicate
    assert payloads(await new.list()) == ["first", "other", "dead"]


async def test_items_of_the_run_that_opens_a_tail_expire_on_time(
    store: CassandraStore, sizes: Segments
) -> None:
    """The expire bound of a new tail covers the items of the run that opened it (a roll made after
    the run credited them to the closed segment, and nothing found them until a later insert)."""
    part = Part(store.partition("queue", 0))
    await part.produce(item("first"))
    fill_tail(store, sizes)
    await part.produce(item("short", expire_deadline=NOW + SECOND))
    assert await segments(store) == [0, 1]
    result = await part.lifecycle(NOW + 2 * SECOND)
    assert result.deleted == 1
    assert payloads(await part.list()) == ["first"]
