"""The LogicalQueue under storage faults and bugs: nothing handed out twice, nothing left hanging.

These drive the engine directly with a FakeClock and a memory partition that can fail like a real
transaction (rolled back) or raise an unexpected exception.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from querator.clock import MICROS, FakeClock
from querator.engine.logical_queue import LEASE_GRACE_US, LogicalQueue
from querator.errors import QueratorError, RetryRequest, StorageError, outcome_unknown
from querator.storage.base import Item, PartitionTx, QueueRecord
from querator.storage.memory import MemoryPartition
from tests.conftest import eventually

R = TypeVar("R")
MINUTE = 60 * MICROS


@dataclass
class Settings:
    settings: QueueRecord


def record(**fields: Any) -> QueueRecord:
    values: dict[str, Any] = {"name": "q", "lease_timeout": MINUTE, "expire_timeout": 60 * MINUTE}
    values.update(fields)
    return QueueRecord(**values)


class FaultyPartition:
    """A memory partition with real rollback, told to fail its next commit or to raise a bug."""

    def __init__(self) -> None:
        self.part = MemoryPartition()
        self.fail_commits = 0
        self.lose_answers = 0
        """Commits to apply and then fail, as a write whose answer was lost."""
        self.bug: Exception | None = None

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        if self.bug is not None:
            raise self.bug
        before = copy.deepcopy(self.part.__dict__)
        result = fn(self.part)
        if self.fail_commits:
            self.fail_commits -= 1
            self.part.__dict__.update(before)
            raise StorageError("commit failed")
        if self.lose_answers:
            self.lose_answers -= 1
            raise StorageError("timed out", maybe_applied=True)
        return result


async def no_dead_queue(name: str, items: list[Item]) -> None:
    raise AssertionError("no dead-lettering expected")


async def test_a_failed_lease_transaction_hands_nothing_out() -> None:
    clock = FakeClock()
    p = FaultyPartition()
    lq = LogicalQueue(Settings(record()), [(0, p)], clock, no_dead_queue)
    await lq.produce([Item(payload=b"x")], MINUTE)
    p.fail_commits = 1
    lease = asyncio.ensure_future(lq.lease("c1", 1, 10 * MINUTE))

    async def failed() -> bool:
        return lq.partitions[0].failures == 1

    await eventually(failed)
    assert not lease.done()  # the rolled-back items were not given out; the request waits
    clock.advance(1)  # past the back-off: the partition recovers and the parked lease is served

    async def served() -> bool:
        return lease.done()

    await eventually(served)
    _, [item] = lease.result()
    assert item.attempts == 1 and p.part.head(1) == [] and list(p.part.leased) == [item.id]
    await lq.shutdown()


async def test_failed_dead_lettering_keeps_counts_and_wakes_leases() -> None:
    clock = FakeClock()
    part = MemoryPartition()
    failures = [RetryRequest("queue is overloaded; try again later")] * 3
    copied: list[Item] = []

    async def flaky_dead_queue(name: str, items: list[Item]) -> None:
        if failures:
            raise failures.pop()
        copied.extend(items)

    lq = LogicalQueue(
        Settings(record(dead_queue="dead", expire_timeout=MINUTE)), [(0, part)], clock, flaky_dead_queue
    )
    await lq.produce([Item(payload=b"a"), Item(payload=b"b")], MINUTE)
    clock.advance(61)

    async def dead_lettered() -> bool:
        clock.advance(6)  # through the back-offs
        return len(copied) == 2

    await eventually(dead_lettered)
    assert part.head(10) == [] and lq.partitions[0].un_leased == 0
    # With honest counts a parked lease is woken as soon as a scheduled item comes due.
    await lq.produce([Item(payload=b"s", enqueue_at=clock.now() + 10 * MICROS)], MINUTE)
    lease = asyncio.ensure_future(lq.lease("c", 1, MINUTE))

    async def parked() -> bool:
        return lq.waiting().lease_waiting == 1

    await eventually(parked)
    clock.advance(11)
    _, [item] = await asyncio.wait_for(lease, 5)
    assert item.payload == b"s"
    await lq.shutdown()


async def test_an_unexpected_error_backs_off_instead_of_killing_the_queue() -> None:
    clock = FakeClock()
    p = FaultyPartition()
    lq = LogicalQueue(Settings(record(lease_timeout=10 * MICROS)), [(0, p)], clock, no_dead_queue)
    await lq.produce([Item(payload=b"x")], MINUTE)
    await lq.lease("c", 1, MINUTE)
    p.bug = RuntimeError("a bug in a storage function")
    clock.advance(11)  # the lease expires; the lifecycle hits the bug

    async def backed_off() -> bool:
        return lq.partitions[0].failures > 0

    await eventually(backed_off)
    p.bug = None
    clock.advance(1)

    async def recovered() -> bool:
        return lq.partitions[0].failures == 0

    await eventually(recovered)
    await asyncio.wait_for(lq.produce([Item(payload=b"y")], MINUTE), 5)
    _, items = await asyncio.wait_for(lq.lease("c2", 2, MINUTE), 5)
    assert sorted(i.payload for i in items) == [b"x", b"y"]  # the expired lease came back too
    await lq.shutdown()


async def test_lease_in_a_batch_that_completes_more_still_arms_its_expiry() -> None:
    clock = FakeClock()
    part = MemoryPartition()
    queue = Settings(record(lease_timeout=10 * MINUTE))
    lq = LogicalQueue(queue, [(0, part)], clock, no_dead_queue)
    await lq.produce([Item(payload=b"a"), Item(payload=b"b"), Item(payload=b"c")], MINUTE)
    _, old = await lq.lease("c1", 2, MINUTE)
    queue.settings = record(lease_timeout=MINUTE)  # queues.update shortens the lease
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(lq.call(hold.wait))
    lease = asyncio.ensure_future(lq.lease("c2", 1, MINUTE))
    done = asyncio.ensure_future(lq.complete(0, [i.id for i in old]))

    async def queued() -> bool:
        return len(lq._waiting.pending) == 2

    await eventually(queued)
    hold.set()
    await blocker
    await done
    _, [item] = await lease  # one batch leased 1 and completed 2
    clock.advance(61)

    async def expired() -> bool:
        head = part.head(1)
        return bool(head) and head[0].payload == item.payload

    await eventually(expired)
    await lq.shutdown()


async def test_a_produce_not_taken_before_its_timeout_is_454() -> None:
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(lq.call(hold.wait))  # the loop is busy (a slow disk, say)
    produce = asyncio.ensure_future(lq.produce([Item(payload=b"x")], MICROS))

    async def queued() -> bool:
        return len(lq._waiting.pending) == 1

    await eventually(queued)
    clock.advance(2)
    with pytest.raises(RetryRequest, match=r"^request timeout;"):
        await asyncio.wait_for(produce, 5)
    hold.set()
    await blocker
    assert lq.partitions[0].un_leased == 0
    await lq.shutdown()


async def test_waiting_requests_are_each_answered_at_their_own_deadline() -> None:
    """One sweep timer serves every waiting request: a request with a shorter timeout behind a longer one
    brings it forward, and the longer one is still answered at its own deadline, not before."""
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(lq.call(hold.wait))  # the loop is busy (a slow disk, say)
    slow = asyncio.ensure_future(lq.produce([Item(payload=b"x")], 10 * MICROS))
    quick = asyncio.ensure_future(lq.produce([Item(payload=b"y")], MICROS))
    lease = asyncio.ensure_future(lq.lease("c", 1, 3 * MICROS))
    await eventually(lambda: _true(len(lq._waiting.pending) == 3))
    clock.advance(1)
    with pytest.raises(RetryRequest, match=r"^request timeout; the items could not be stored"):
        await asyncio.wait_for(quick, 5)
    clock.advance(2)
    with pytest.raises(RetryRequest, match=r"^request timeout; no items are in the queue"):
        await asyncio.wait_for(lease, 5)
    clock.advance(6.9)
    for _ in range(3):
        await asyncio.sleep(0)  # let a timer due now run
    assert not slow.done()
    clock.advance(0.1)
    with pytest.raises(RetryRequest, match=r"^request timeout; the items could not be stored"):
        await asyncio.wait_for(slow, 5)
    hold.set()
    await blocker
    await lq.shutdown()


async def test_requests_after_the_task_died_fail_fast() -> None:
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    lq._task.cancel()

    async def dead() -> bool:
        return lq._task.done()

    await eventually(dead)
    with pytest.raises(QueratorError, match="shutting down"):
        await asyncio.wait_for(lq.produce([Item(payload=b"x")], MINUTE), 5)
    await lq.shutdown()


class SlowLoad(FaultyPartition):
    """A partition whose first transaction (the engine's load) waits until ``loaded`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = asyncio.Event()

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        await self.loaded.wait()
        return await super().run(fn)


async def test_requests_waiting_for_a_partition_load_are_answered_at_their_deadline() -> None:
    """A produce or lease queued behind a slow load (a claim and a read in Cassandra) still gets its 454
    at its request_timeout, not whenever the load ends."""
    clock = FakeClock()
    partition = SlowLoad()
    lq = LogicalQueue(Settings(record()), [(0, partition)], clock, no_dead_queue)  # type: ignore[list-item]
    lease = asyncio.create_task(lq.lease("c", 1, 5 * MICROS))
    produce = asyncio.create_task(lq.produce([Item(payload=b"x")], 5 * MICROS))
    await asyncio.sleep(0)  # both submitted: waiting behind the load
    clock.advance(5 * MICROS + 1)
    with pytest.raises(RetryRequest, match="request timeout; no items are in the queue"):
        await lease
    with pytest.raises(RetryRequest, match="request timeout; the items could not be stored"):
        await produce
    partition.loaded.set()
    await lq.shutdown()


async def test_a_write_that_may_have_been_applied_answers_outcome_unknown() -> None:
    clock = FakeClock()
    p = FaultyPartition()
    lq = LogicalQueue(Settings(record()), [(0, p)], clock, no_dead_queue)
    p.fail_commits = 1
    with pytest.raises(RetryRequest) as refused:
        await lq.produce([Item(payload=b"refused")], MINUTE)
    assert not outcome_unknown(refused.value)  # rolled back: a plain retry cannot duplicate it

    async def recovered() -> bool:
        return lq.partitions[0].failures == 0

    clock.advance(1)  # past the back-off: the partition reloads what storage holds
    await eventually(recovered)
    p.lose_answers = 1
    with pytest.raises(RetryRequest) as unknown:
        await lq.produce([Item(payload=b"stored")], MINUTE)
    assert outcome_unknown(unknown.value), unknown.value.message
    clock.advance(1)
    await eventually(recovered)
    _, items = await lq.lease("c1", 10, MINUTE)
    assert [i.payload for i in items] == [b"stored"]
    await lq.shutdown()


async def test_a_count_a_lost_answer_left_too_high_does_not_hold_leases_on_an_empty_partition() -> None:
    clock = FakeClock()
    p0, p1 = FaultyPartition(), FaultyPartition()
    lq = LogicalQueue(Settings(record()), [(0, p0), (1, p1)], clock, no_dead_queue)
    await lq.produce([Item(payload=b"a")], MINUTE)  # partition 0: ties go to the first
    p0.lose_answers = 1
    lease = asyncio.ensure_future(lq.lease("c1", 1, MINUTE))  # "a" is leased, the engine cannot know

    async def failed() -> bool:
        return lq.partitions[0].failures == 1

    await eventually(failed)
    clock.advance(1)  # past the back-off: the lease is placed again, and partition 0 has nothing

    async def recovered() -> bool:
        return lq.partitions[0].failures == 0 and not lq.partitions[0].un_leased

    await eventually(recovered)
    assert p0.part.head(1) == [] and not lease.done()
    await lq.produce([Item(payload=b"b")], MINUTE)
    _, items = await asyncio.wait_for(lease, 5)
    assert [i.payload for i in items] == [b"b"]
    await lq.shutdown()


async def test_a_lease_finding_counts_too_high_in_turn_is_tried_again_until_one_holds_items() -> None:
    clock = FakeClock()
    parts = [FaultyPartition() for _ in range(3)]
    lq = LogicalQueue(Settings(record()), list(enumerate(parts)), clock, no_dead_queue)
    await lq.produce([Item(payload=b"first")], MINUTE)  # loads the partitions
    _, _ = await lq.lease("c0", 1, MINUTE)
    # Partitions 0 and 1 count an item each that is not there (as a lost answer can leave them), and
    # look as if it has waited long; partition 2 gets the only real one.
    for n in (0, 1):
        lq.partitions[n].recount(1, lq._monotonic() - 10 * MICROS)
    await lq.produce([Item(payload=b"x")], MINUTE)
    # The lease's batch sends it to partition 0, the parked pass after it to partition 1: each time the
    # storage finds nothing and the count is put right, and the next pass must follow.
    _, items = await asyncio.wait_for(lq.lease("c1", 1, MINUTE), 5)
    assert [i.payload for i in items] == [b"x"]
    assert [p.un_leased for p in lq.partitions.values()] == [0, 0, 0]
    await lq.shutdown()


async def test_parked_leases_are_tried_again_while_their_passes_put_counts_right() -> None:
    """Nothing new arrives to wake the loop again: each pass that finds a count too high must be followed
    by another at once, until one leases or no count changes."""
    clock = FakeClock()
    parts = [FaultyPartition() for _ in range(3)]
    lq = LogicalQueue(Settings(record()), list(enumerate(parts)), clock, no_dead_queue)
    await lq.produce([Item(payload=b"first")], MINUTE)  # loads the partitions
    _, _ = await lq.lease("c0", 1, MINUTE)
    lease = asyncio.ensure_future(lq.lease("c1", 1, MINUTE))

    async def parked() -> bool:  # c0's answered lease may still be listed
        return any(not waiting.future.done() for waiting in lq._waiting.leases)

    # Parked with every count at zero: the loop has nothing to try and waits, idle.
    await eventually(parked)
    # Partition 2 holds an item the loop counts; partitions 0 and 1 count one each that is not there (as a
    # lost answer can leave them), waiting longer, so passes go to them first.
    parts[2].part.insert([Item(id=lq.partitions[2].new_id(), payload=b"x")])
    lq.partitions[2].recount(1, lq._monotonic())
    for n in (0, 1):
        lq.partitions[n].recount(1, lq._monotonic() - 10 * MICROS)
    lq._serve_parked_soon()  # as a lifecycle timer does
    _, items = await asyncio.wait_for(lease, 5)
    assert [i.payload for i in items] == [b"x"]
    assert [p.un_leased for p in lq.partitions.values()] == [0, 0, 0]
    await lq.shutdown()


async def test_a_parked_lease_is_answered_at_its_deadline_while_the_loop_waits_on_storage() -> None:
    """The loop may wait out storage timeouts (a reload after a failure, say) for longer than any client
    waits: a parked lease still gets its 454 at its request_timeout, and its client id is free again."""
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    lease = asyncio.create_task(lq.lease("c", 1, 5 * MICROS))

    async def parked() -> bool:
        return len(lq._waiting.leases) == 1

    await eventually(parked)
    started, hold = asyncio.Event(), asyncio.Event()

    async def stuck() -> None:
        started.set()
        await hold.wait()

    blocker = asyncio.create_task(lq.call(stuck))
    await asyncio.wait_for(started.wait(), 5)  # the loop runs the call and waits on it
    clock.advance(5)
    with pytest.raises(RetryRequest, match="request timeout; no items are in the queue"):
        await asyncio.wait_for(lease, 5)
    again = asyncio.create_task(lq.lease("c", 1, MICROS))  # not refused as a duplicate client id
    await eventually(lambda: _true(len(lq._waiting.pending) == 1))
    clock.advance(1)
    with pytest.raises(RetryRequest, match="request timeout; no items are in the queue"):
        await asyncio.wait_for(again, 5)
    hold.set()
    await blocker
    await lq.shutdown()


class HeldWrites(FaultyPartition):
    """A partition whose transactions wait for ``release`` while ``held`` (a write waiting out a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.waiting = 0
        self.release = asyncio.Event()
        self.committed: Callable[[], object] | None = None
        """Called as a transaction returns, before the engine answers its requests."""

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        if self.held:
            self.waiting += 1
            await self.release.wait()
        result = await super().run(fn)
        if self.committed is not None:
            self.committed()
        return result

    def let_go(self) -> None:
        self.held = False
        self.release.set()


async def one_item_in_each(parts: list[FaultyPartition], clock: FakeClock) -> LogicalQueue:
    """A logical queue over ``parts`` with one queued item in each (produce goes to the emptiest)."""
    lq = LogicalQueue(Settings(record()), list(enumerate(parts)), clock, no_dead_queue)  # type: ignore[arg-type]
    for _ in parts:
        await lq.produce([Item(payload=b"x")], MINUTE)
    return lq


async def lease_past_its_deadline_with_its_write_held() -> tuple[
    FakeClock, HeldWrites, LogicalQueue, asyncio.Task[tuple[int, list[Item]]]
]:
    """One item queued, a lease of it whose write is held, and the lease's deadline just passed."""
    clock = FakeClock()
    p = HeldWrites()
    lq = LogicalQueue(Settings(record()), [(0, p)], clock, no_dead_queue)  # type: ignore[list-item]
    await lq.produce([Item(payload=b"x")], MINUTE)
    p.held = True
    lease = asyncio.create_task(lq.lease("c", 1, MICROS))
    await eventually(lambda: _true(p.waiting == 1))
    clock.advance(1)
    for _ in range(3):
        await asyncio.sleep(0)  # let the deadline's timer run
    return clock, p, lq, lease


async def test_a_lease_whose_write_hangs_is_answered_after_a_grace_and_its_items_come_back() -> None:
    clock, p, lq, lease = await lease_past_its_deadline_with_its_write_held()
    assert not lease.done()  # its write may still lease the item
    clock.advance(LEASE_GRACE_US / MICROS)
    with pytest.raises(RetryRequest, match="the lease could not be stored before request_timeout"):
        await asyncio.wait_for(lease, 5)
    await items_leased_to_nobody_come_back_at_once(p, lq)


async def test_a_lease_cancelled_while_its_write_is_in_flight_gives_its_items_back() -> None:
    _, p, lq, lease = await lease_past_its_deadline_with_its_write_held()
    lease.cancel()  # its caller went away (an HTTP client that disconnected)
    await items_leased_to_nobody_come_back_at_once(p, lq)


async def test_a_lease_cancelled_after_its_items_were_dealt_gives_them_back() -> None:
    _, p, lq, lease = await lease_past_its_deadline_with_its_write_held()
    # Cancelled after the engine dealt it the item, before it resumed to take it: the callback runs
    # before the lease's wake-up, which the engine schedules when it answers.
    p.committed = lambda: asyncio.get_running_loop().call_soon(lease.cancel)
    p.let_go()
    with pytest.raises(asyncio.CancelledError):
        await lease
    _, items = await asyncio.wait_for(lq.lease("c", 1, MINUTE), 5)
    assert [(i.payload, i.attempts) for i in items] == [(b"x", 1)]
    assert lq.counters.released == 1
    await lq.shutdown()


async def test_a_parked_lease_cancelled_stops_waiting_at_once() -> None:
    """Its caller gone, a parked lease is off the queue's lists before any batch runs again: not counted
    as waiting (queue.stats), and the next item goes to the next lease."""
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], FakeClock(), no_dead_queue)
    lease = asyncio.ensure_future(lq.lease("c", 1, 10 * MINUTE))
    await eventually(lambda: _true(lq.waiting().lease_waiting == 1))
    lease.cancel()  # its caller went away (an HTTP client that disconnected)
    with pytest.raises(asyncio.CancelledError):
        await lease
    assert lq.waiting().lease_waiting == 0
    await lq.produce([Item(payload=b"x")], MINUTE)
    _, items = await asyncio.wait_for(lq.lease("c", 1, MINUTE), 5)
    assert [(i.payload, i.attempts) for i in items] == [(b"x", 1)]
    assert lq.counters.released == 0  # nothing was leased to the cancelled one
    await lq.shutdown()


async def items_leased_to_nobody_come_back_at_once(p: HeldWrites, lq: LogicalQueue) -> None:
    """The held write goes through, leasing the item to a request nobody waits for any more: it comes
    back at once (no lease expiry) and that lease does not count as an attempt."""
    p.let_go()
    _, items = await asyncio.wait_for(lq.lease("c", 1, MINUTE), 5)
    assert [(i.payload, i.attempts) for i in items] == [(b"x", 1)]
    assert lq.counters.released == 1
    await lq.shutdown()


async def test_a_lease_whose_write_ends_within_the_grace_gets_its_items() -> None:
    _, p, lq, lease = await lease_past_its_deadline_with_its_write_held()
    p.let_go()
    _, items = await asyncio.wait_for(lease, 5)
    assert [(i.payload, i.attempts) for i in items] == [(b"x", 1)]
    await lq.shutdown()


async def test_a_lease_is_answered_when_its_partition_commits_not_when_the_slowest_does() -> None:
    clock = FakeClock()
    parts = [HeldWrites(), HeldWrites()]
    lq = await one_item_in_each(parts, clock)
    assert [p.part.stats(0).total for p in parts] == [1, 1]
    parts[0].held = True
    leases = [asyncio.create_task(lq.lease(f"c{n}", 1, MINUTE)) for n in range(2)]  # one batch
    await eventually(lambda: _true(parts[0].waiting == 1))
    done, _ = await asyncio.wait(leases, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert [t.result()[0] for t in done] == [1]  # partition 1's lease, while partition 0's write waits
    parts[0].let_go()
    assert [(await t)[0] for t in leases if t not in done] == [0]
    await lq.shutdown()


async def test_a_bug_in_one_partition_lets_the_others_finish_and_answer() -> None:
    """The batch ends only when every partition's transaction has: none outlives it into the next one."""
    parts = [FaultyPartition(), HeldWrites()]
    lq = await one_item_in_each(parts, FakeClock())
    parts[0].bug = RuntimeError("a bug")
    parts[1].held = True
    leases = [asyncio.create_task(lq.lease(f"c{n}", 1, MINUTE)) for n in range(2)]  # one batch
    await eventually(lambda: _true(parts[1].waiting == 1))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not any(t.done() for t in leases)  # partition 0 raised; partition 1's write is still out
    parts[1].let_go()
    done = await asyncio.gather(*leases, return_exceptions=True)
    answers = {repr(d) if isinstance(d, Exception) else f"partition {d[0]}" for d in done}
    assert answers == {"partition 1", "RuntimeError('a bug')"}
    parts[0].bug = None
    await lq.shutdown()


async def test_partitions_wait_on_storage_side_by_side() -> None:
    """One partition waiting out a storage timeout does not hold up the others' loads and lifecycles for
    as long again: they run concurrently, as batches do."""
    clock = FakeClock()
    parts = [HeldWrites(), HeldWrites()]
    lq = await one_item_in_each(parts, clock)
    for n in range(2):
        await lq.lease(f"c{n}", 1, MINUTE)
    assert all(p.part.stats(0).leased == 1 for p in parts)
    for p in parts:
        p.held = True
    clock.advance(61)  # both leases expire: both partitions' lifecycles are due
    await eventually(lambda: _true([p.waiting for p in parts] == [1, 1]))
    for p in parts:
        p.let_go()
    await lq.shutdown()


async def _true(value: bool) -> bool:
    return value
