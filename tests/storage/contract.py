"""The storage contract suite: what every backend must do, written once.

Each backend binds ``StoreContract`` in a few lines (``test_memory.py``, ``test_sqlite.py``) by overriding
the ``store`` fixture with one that opens a fresh store and closes it afterwards. Every test drives a
partition through ``Partition.run`` and the shared rules of ``querator.storage.operations``, with a fixed
``NOW`` and ids from ``KsuidGenerator(NOW // 1_000_000)``, so results are exact and the same everywhere.
No test may ask which backend it runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import pytest

from querator.errors import QueratorError
from querator.ksuid import KSUID_MAX, KSUID_MIN, KsuidGenerator
from querator.storage.base import (
    LIST_PAGE_BYTES,
    ClearOptions,
    Deadlines,
    Item,
    Partition,
    PartitionTx,
    QueueRecord,
    Store,
)
from querator.storage.failures import EXPIRED, LEASE_EXPIRED, MAX_FAILURES, Failure, failures_of
from querator.storage.operations import (
    LIFECYCLE_LIMIT,
    NEAR_NOW,
    BatchResult,
    CompleteOp,
    LeaseOp,
    LifecycleResult,
    NewId,
    PartitionBatch,
    ReleaseOp,
    RenewOp,
    RetryEntry,
    RetryOp,
    apply_batch,
    import_items,
    lease_token,
    lifecycle,
    moved_copies,
)
from tests.storage.schedule_contract import ScheduleContract
from tests.storage.workflow_contract import WorkflowContract

T = TypeVar("T")

SECOND = 1_000_000
NOW = 1_700_000_000 * SECOND
EXPIRE = NOW + 3600 * SECOND
"""The expire_deadline test items get unless a test says otherwise."""

SIZE_ERROR = "Valid encoded KSUIDs are 27 characters"
VALUE_ERROR = f"Valid encoded KSUIDs are bounded by {KSUID_MIN} and {KSUID_MAX}"


def new_ids() -> NewId:
    return KsuidGenerator(NOW // SECOND).next


def item(payload: str, **fields: Any) -> Item:
    fields.setdefault("expire_deadline", EXPIRE)
    return Item(payload=payload.encode(), **fields)


def payloads(items: Iterable[Item]) -> list[str]:
    return [i.payload.decode() for i in items]


def ids(items: Iterable[Item]) -> list[str]:
    return [i.id for i in items]


class Part:
    """A partition plus its id generator, with one method per operation the tests use."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.new_id = new_ids()

    async def run(self, fn: Callable[[PartitionTx], T]) -> T:
        return await self.partition.run(fn)

    async def batch(
        self,
        batch: PartitionBatch,
        now: int = NOW,
        dead_queue: bool = False,
        dedup_window: int = 0,
        max_attempts: int = 0,
        token_key: bytes = b"",
        expire_timeout: int = 0,
    ) -> BatchResult:
        return await self.run(
            lambda tx: apply_batch(
                tx, batch, now, self.new_id, dead_queue, dedup_window, max_attempts, token_key, expire_timeout
            )
        )

    async def produce(self, *items: Item, now: int = NOW, dedup_window: int = 0) -> list[Item]:
        await self.batch(PartitionBatch(produce=list(items)), now, dedup_window=dedup_window)
        return list(items)

    async def lease(self, *sizes: int, deadline: int = NOW + 60 * SECOND) -> list[list[Item]]:
        ops = [LeaseOp(size, deadline) for size in sizes]
        await self.batch(PartitionBatch(lease=ops))
        return [op.items for op in ops]

    async def complete(self, *ids: str) -> QueratorError | None:
        op = CompleteOp(list(ids))
        await self.batch(PartitionBatch(complete=[op]))
        return op.error

    async def retry(
        self, *entries: RetryEntry, now: int = NOW, dead_queue: bool = False
    ) -> tuple[QueratorError | None, BatchResult]:
        op = RetryOp(list(entries))
        result = await self.batch(PartitionBatch(retry=[op]), now, dead_queue)
        return op.error, result

    async def lifecycle(self, now: int, max_attempts: int = 0, dead_queue: bool = False) -> LifecycleResult:
        return await self.run(lambda tx: lifecycle(tx, now, self.new_id, max_attempts, dead_queue))

    async def import_items(self, *items: Item, now: int = NOW) -> list[Item]:
        return await self.run(lambda tx: import_items(tx, list(items), now, self.new_id))

    async def get(self, *ids: str) -> dict[str, Item]:
        return await self.run(lambda tx: tx.get(ids))

    async def head(self, limit: int = 1000) -> list[Item]:
        return await self.run(lambda tx: tx.head(limit))

    async def last_id(self) -> str:
        return await self.run(lambda tx: tx.last_id())

    # Last, so that ``list`` in the annotations above is still the builtin.
    async def list(self, pivot: str = "", limit: int = 1000, scheduled: bool = False) -> list[Item]:
        return await self.run(lambda tx: tx.list(pivot, limit, scheduled))


def leased(items: Sequence[Item], deadline: int) -> None:
    for i in items:
        assert i.is_leased
        assert i.lease_deadline == deadline


class StoreContract(ScheduleContract, WorkflowContract):
    """Every backend's storage: bind it by overriding ``store``."""

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError("bind the contract: override the store fixture")

    @pytest.fixture
    def part(self, store: Store) -> Part:
        return Part(store.partition("queue", 0))

    # --- produce ------------------------------------------------------------------------------------------

    async def test_produce_keeps_order_and_assigns_ids(self, part: Part) -> None:
        result = await part.batch(PartitionBatch(produce=[item("a"), item("b"), item("c")]))
        assert result.queued_delta == 3
        assert result.next_enqueue_at == 0
        stored = await part.list()
        assert payloads(stored) == ["a", "b", "c"]
        assert ids(stored) == sorted(ids(stored))
        assert len(set(ids(stored))) == 3
        for i in stored:
            assert (i.created_at, i.attempts, i.is_leased) == (NOW, 0, False)
            assert (i.lease_deadline, i.enqueue_at) == (0, 0)
            assert i.expire_deadline == EXPIRE
        assert await part.last_id() == stored[-1].id
        assert ids(await part.head()) == ids(stored)

    async def test_produce_round_trips_every_field(self, part: Part) -> None:
        data = bytes(range(256)) * 5
        await part.produce(
            Item(reference="ref", encoding="application/octet-stream", kind="k", payload=data, max_attempts=7,
                 expire_deadline=EXPIRE, source_id="src"),
        )  # fmt: skip
        (stored,) = await part.list()
        assert (stored.reference, stored.encoding, stored.kind, stored.payload) == (
            "ref", "application/octet-stream", "k", data,
        )  # fmt: skip
        assert (stored.max_attempts, stored.source_id, stored.expire_deadline) == (7, "src", EXPIRE)
        assert isinstance(stored.is_leased, bool)
        assert await part.get(stored.id) == {stored.id: stored}

    async def test_produce_schedules_from_near_now(self, part: Part) -> None:
        batch = [
            item("later", enqueue_at=NOW + 2 * NEAR_NOW),
            item("threshold", enqueue_at=NOW + NEAR_NOW),
            item("past", enqueue_at=NOW - SECOND),
            item("near", enqueue_at=NOW + NEAR_NOW - 1),
            item("now", enqueue_at=NOW),
        ]
        result = await part.batch(PartitionBatch(produce=batch))
        assert result.queued_delta == 3
        assert result.next_enqueue_at == NOW + NEAR_NOW
        queued = await part.list()
        assert payloads(queued) == ["past", "near", "now"]
        assert all(i.enqueue_at == 0 for i in queued)
        scheduled = await part.list(scheduled=True)
        assert payloads(scheduled) == ["later", "threshold"]
        assert [i.enqueue_at for i in scheduled] == [NOW + 2 * NEAR_NOW, NOW + NEAR_NOW]
        assert payloads(await part.head()) == ["past", "near", "now"]
        stats = await part.run(lambda tx: tx.stats(NOW))
        assert (stats.total, stats.scheduled) == (3, 2)

    # --- lease --------------------------------------------------------------------------------------------

    async def test_lease_takes_the_head_in_fifo_order(self, part: Part) -> None:
        produced = await part.produce(*(item(str(n)) for n in range(5)))
        deadline = NOW + 30 * SECOND
        ops = [LeaseOp(3, deadline)]
        result = await part.batch(PartitionBatch(lease=ops))
        got = ops[0].items
        assert (result.queued_delta, result.leased_delta) == (-3, 3)
        assert ids(got) == ids(produced[:3])
        leased(got, deadline)
        assert [i.attempts for i in got] == [1, 1, 1]
        stored = await part.get(*ids(got))
        assert [stored[i.id] for i in got] == got
        (rest,) = await part.lease(5, deadline=deadline)
        assert ids(rest) == ids(produced[3:])
        assert await part.lease(1) == [[]]
        assert await part.head() == []

    async def test_lease_deals_round_robin(self, part: Part) -> None:
        produced = ids(await part.produce(*(item(str(n)) for n in range(23))))
        first, second, third = await part.lease(20, 6, 1)
        assert [len(first), len(second), len(third)] == [16, 6, 1]
        assert ids(first) == [produced[n] for n in (0, 3, 5, 7, 9, 11, *range(13, 23))]
        assert ids(second) == [produced[n] for n in (1, 4, 6, 8, 10, 12)]
        assert ids(third) == [produced[2]]

    async def test_each_lease_request_gets_its_deadline(self, part: Part) -> None:
        await part.produce(*(item(str(n)) for n in range(4)))
        ops = [LeaseOp(2, NOW + SECOND), LeaseOp(2, NOW + 2 * SECOND)]
        await part.batch(PartitionBatch(lease=ops))
        leased(ops[0].items, NOW + SECOND)
        leased(ops[1].items, NOW + 2 * SECOND)
        stored = await part.get(*ids(ops[0].items + ops[1].items))
        deadlines = sorted(i.lease_deadline for i in stored.values())
        assert deadlines == [NOW + SECOND] * 2 + [NOW + 2 * SECOND] * 2

    async def test_each_lease_counts_an_attempt(self, part: Part) -> None:
        await part.produce(item("a"))
        [[first]] = await part.lease(1)
        assert first.attempts == 1
        error, _ = await part.retry(RetryEntry(first.id))
        assert error is None
        [[second]] = await part.lease(1)
        assert second.id != first.id
        assert second.attempts == 2
        assert (await part.get(second.id))[second.id].attempts == 2

    # --- complete -----------------------------------------------------------------------------------------

    async def test_complete_deletes_leased_items(self, part: Part) -> None:
        a, b, c = await part.produce(item("a"), item("b"), item("c"))
        await part.lease(3)
        op = CompleteOp([a.id, c.id])
        result = await part.batch(PartitionBatch(complete=[op]))
        assert op.error is None
        assert (result.queued_delta, result.leased_delta) == (0, -2)
        assert ids(await part.list()) == [b.id]
        assert await part.get(a.id, c.id) == {}

    async def test_complete_unknown_id(self, part: Part) -> None:
        await part.produce(item("a"))
        await part.lease(1)
        unknown = KsuidGenerator(NOW // SECOND - 10).next()
        error = await part.complete(unknown)
        assert error is not None
        assert error.code == 400
        assert error.message == f"invalid storage id; '{unknown}' does not exist"

    async def test_complete_malformed_ids(self, part: Part) -> None:
        error = await part.complete("bogus")
        assert error is not None
        assert error.message == f"invalid storage id; 'bogus': {SIZE_ERROR}"
        error = await part.complete("!" * 27)
        assert error is not None
        assert error.message == f"invalid storage id; '{'!' * 27}': {VALUE_ERROR}"

    async def test_complete_refuses_items_not_leased(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        error = await part.complete(a.id)
        assert error is not None
        assert error.message == f"item(s) cannot be completed; '{a.id}' is not marked as leased"
        assert ids(await part.list()) == [a.id]

    async def test_complete_keeps_ids_completed_before_an_error(self, part: Part) -> None:
        a, b, c = await part.produce(item("a"), item("b"), item("c"))
        await part.lease(3)
        missing = KsuidGenerator(NOW // SECOND - 10).next()
        failing = CompleteOp([a.id, missing, b.id])
        other = CompleteOp([c.id])
        result = await part.batch(PartitionBatch(complete=[failing, other]))
        assert failing.error is not None
        assert failing.error.message == f"invalid storage id; '{missing}' does not exist"
        assert other.error is None
        assert result.leased_delta == -2
        assert ids(await part.list()) == [b.id]
        assert (await part.get(b.id))[b.id].is_leased

    async def test_complete_the_same_id_twice(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1)
        error = await part.complete(a.id, a.id)
        assert error is not None
        assert error.message == f"invalid storage id; '{a.id}' does not exist"
        assert await part.list() == []

    async def test_a_queue_with_a_token_key_needs_each_leases_token(self, part: Part) -> None:
        key = b"k" * 32
        a, b, c, d = await part.produce(item("a"), item("b"), item("c"), item("d"))
        [leased_items] = await part.lease(4)
        token = {i.id: lease_token(key, i) for i in leased_items}
        # A token made with another key, another item's token, or none at all: refused, item untouched.
        forged = lease_token(b"x" * 32, leased_items[0])
        for given in ([forged], [token[b.id]], []):
            op = CompleteOp([a.id], given)
            await part.batch(PartitionBatch(complete=[op]), token_key=key)
            assert op.error is not None
            assert op.error.message == f"item(s) cannot be completed; '{a.id}' needs its lease token"
            assert (await part.get(a.id))[a.id].is_leased
        complete = CompleteOp([a.id], [token[a.id]])
        renew = RenewOp([b.id], NOW + 600 * SECOND, [token[b.id]])
        retry = RetryOp([RetryEntry(c.id, lease_token=token[c.id])])
        stranger = RetryOp([RetryEntry(d.id)])
        batch = PartitionBatch(complete=[complete], renew=[renew], retry=[retry, stranger])
        await part.batch(batch, token_key=key)
        assert (complete.error, renew.error, retry.error) == (None, None, None)
        assert stranger.error is not None
        assert stranger.error.message == f"item(s) cannot be retried; '{d.id}' needs its lease token"
        # The next lease of a retried item is another attempt, with another token.
        [[again]] = await part.lease(1)
        assert again.attempts == 2
        assert lease_token(key, again) != token[c.id]
        # Without a key (tokens off) no token is asked for.
        assert await part.complete(b.id) is None

    # --- renew --------------------------------------------------------------------------------------------

    async def test_renew_moves_the_lease_deadline_only(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(2)
        op = RenewOp([b.id, a.id], NOW + 600 * SECOND)
        result = await part.batch(PartitionBatch(renew=[op]))
        assert op.error is None
        assert ids(op.renewed) == [b.id, a.id]
        assert (result.queued_delta, result.leased_delta) == (0, 0)
        stored = await part.get(a.id, b.id)
        for i in stored.values():
            assert (i.is_leased, i.lease_deadline, i.attempts) == (True, NOW + 600 * SECOND, 1)
        assert (await part.run(lambda tx: tx.deadlines())).lease_deadline == NOW + 600 * SECOND
        assert await part.run(lambda tx: tx.expired_leases(NOW + 61 * SECOND, 10)) == []

    async def test_renew_errors_keep_earlier_ids_renewed(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(1)
        op = RenewOp([a.id, b.id], NOW + 600 * SECOND)
        await part.batch(PartitionBatch(renew=[op]))
        assert op.error is not None
        assert op.error.message == f"item(s) cannot be renewed; '{b.id}' is not marked as leased"
        assert ids(op.renewed) == [a.id]
        assert (await part.get(a.id))[a.id].lease_deadline == NOW + 600 * SECOND

    async def test_renew_then_complete_or_retry_in_one_batch(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(2)
        renew = RenewOp([a.id, b.id], NOW + 600 * SECOND)
        complete = CompleteOp([a.id])
        retry = RetryOp([RetryEntry(b.id)])
        result = await part.batch(PartitionBatch(renew=[renew], complete=[complete], retry=[retry]))
        assert (renew.error, complete.error, retry.error) == (None, None, None)
        assert result.leased_delta == -2
        [requeued] = await part.list()
        assert requeued.payload == b"b" and not requeued.is_leased and requeued.id not in (a.id, b.id)

    # --- de-duplication -----------------------------------------------------------------------------------

    async def test_dedup_ids_are_stored_once_per_window(self, part: Part) -> None:
        window = 300 * SECOND
        await part.produce(
            item("a", dedup_id="x"), item("b"), item("a-again", dedup_id="x"), item("c", dedup_id="y"),
            dedup_window=window,
        )  # fmt: skip
        assert payloads(await part.list()) == ["a", "b", "c"]
        await part.produce(item("later", dedup_id="x"), now=NOW + window - 1, dedup_window=window)
        assert payloads(await part.list()) == ["a", "b", "c"]
        await part.produce(item("after", dedup_id="x"), now=NOW + window, dedup_window=window)
        assert payloads(await part.list()) == ["a", "b", "c", "after"]

    async def test_dedup_outlives_completion(self, part: Part) -> None:
        (a,) = await part.produce(item("a", dedup_id="x"), dedup_window=60 * SECOND)
        await part.lease(1)
        assert await part.complete(a.id) is None
        await part.produce(item("again", dedup_id="x"), now=NOW + SECOND, dedup_window=60 * SECOND)
        assert await part.list() == []

    async def test_without_a_window_dedup_ids_are_ignored(self, part: Part) -> None:
        await part.produce(item("a", dedup_id="x"), item("b", dedup_id="x"))
        assert payloads(await part.list()) == ["a", "b"]

    async def test_dedup_is_queue_wide(self, store: Store) -> None:
        window = 60 * SECOND
        first, second = Part(store.partition("queue", 0)), Part(store.partition("queue", 1))
        other = Part(store.partition("other", 0))
        await first.produce(item("a", dedup_id="x"), dedup_window=window)
        await second.produce(item("a", dedup_id="x"), dedup_window=window)
        await other.produce(item("a", dedup_id="x"), dedup_window=window)
        assert payloads(await first.list()) == ["a"]
        assert await second.list() == []
        assert payloads(await other.list()) == ["a"]

    async def test_a_failed_produce_leaves_no_dedup_record(self, part: Part) -> None:
        def failing(tx: PartitionTx) -> None:
            apply_batch(
                tx, PartitionBatch(produce=[item("a", dedup_id="x")]), NOW, part.new_id, False, SECOND
            )
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await part.run(failing)
        await part.produce(item("retried", dedup_id="x"), dedup_window=SECOND)
        assert payloads(await part.list()) == ["retried"]

    async def test_purge_and_delete_drop_dedup_records(self, store: Store) -> None:
        part = Part(store.partition("queue", 0))
        await part.produce(item("a", dedup_id="old"), dedup_window=SECOND)
        await part.produce(item("b", dedup_id="new"), dedup_window=100 * SECOND)
        purged = await store.purge_dedup(NOW + 2 * SECOND)
        assert purged in (0, 1)  # 0: the backend expires records by itself
        seen = await part.run(lambda tx: tx.dedup({"old", "new"}, NOW + 2 * SECOND, NOW + 3 * SECOND))
        assert seen == {"new"}
        await store.delete_partitions("queue", 1)
        part = Part(store.partition("queue", 0))
        await part.produce(item("c", dedup_id="new"), dedup_window=100 * SECOND)
        assert payloads(await part.list()) == ["c"]

    # --- retry --------------------------------------------------------------------------------------------

    async def test_retry_now_moves_the_item_to_the_tail_with_a_new_id(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(1)
        error, result = await part.retry(RetryEntry(a.id, retry_at=NOW + NEAR_NOW - 1))
        assert error is None
        assert (result.queued_delta, result.leased_delta, result.next_enqueue_at) == (1, -1, 0)
        stored = await part.list()
        assert ids(stored)[0] == b.id
        moved = stored[1]
        assert moved.id > b.id
        assert (moved.is_leased, moved.lease_deadline, moved.attempts, moved.enqueue_at) == (False, 0, 1, 0)
        assert (moved.payload, moved.created_at, moved.expire_deadline) == (b"a", NOW, EXPIRE)
        assert await part.get(a.id) == {}
        assert await part.last_id() == moved.id
        assert ids(await part.head()) == [b.id, moved.id]

    async def test_release_gives_items_back_without_counting_the_attempt(self, part: Part) -> None:
        a, b, c = await part.produce(item("a"), item("b"), item("c"))
        await part.lease(2)
        await part.complete(b.id)
        # b is gone and c was never leased: released ids that are not leased are skipped quietly.
        result = await part.batch(PartitionBatch(release=[ReleaseOp([a.id, b.id, c.id, a.id])]))
        assert (result.queued_delta, result.leased_delta, result.released) == (1, -1, 1)
        stored = await part.list()
        assert ids(stored)[0] == c.id
        moved = stored[1]
        assert moved.id > c.id  # to the tail under a new id, as an expired lease's item
        assert (moved.payload, moved.is_leased, moved.lease_deadline, moved.attempts) == (b"a", False, 0, 0)
        assert await part.get(a.id) == {}
        assert ids(await part.head()) == [c.id, moved.id]

    async def test_retry_later_schedules_the_item_under_its_id(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1)
        retry_at = NOW + NEAR_NOW
        error, result = await part.retry(RetryEntry(a.id, retry_at=retry_at))
        assert error is None
        assert (result.queued_delta, result.leased_delta, result.next_enqueue_at) == (0, -1, retry_at)
        assert await part.list() == []
        (scheduled,) = await part.list(scheduled=True)
        assert (scheduled.id, scheduled.enqueue_at, scheduled.is_leased, scheduled.attempts) == (
            a.id, retry_at, False, 1,
        )  # fmt: skip
        assert await part.head() == []
        error = await part.complete(a.id)
        assert error is not None
        assert error.message == f"item(s) cannot be completed; '{a.id}' is not marked as leased"
        error, _ = await part.retry(RetryEntry(a.id))
        assert error is not None
        assert error.message == f"item(s) cannot be retried; '{a.id}' is not marked as leased"

    async def test_retry_dead_without_dead_queue_deletes(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1)
        error, result = await part.retry(RetryEntry(a.id, dead=True))
        assert error is None
        assert result.dead == []
        assert (result.queued_delta, result.leased_delta) == (0, -1)
        assert await part.get(a.id) == {}

    async def test_retry_dead_with_dead_queue_keeps_the_item_for_dead_lettering(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1)
        error, result = await part.retry(RetryEntry(a.id, dead=True), dead_queue=True)
        assert error is None
        assert ids(result.dead) == [a.id]
        assert not result.dead[0].is_leased
        assert result.leased_delta == -1
        assert a.id in await part.get(a.id)

    @pytest.mark.parametrize("retry_at", [0, NOW + 60 * SECOND])
    async def test_a_retry_after_the_last_attempt_kills_the_item(self, part: Part, retry_at: int) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(2)  # attempt 1 of 1 for both
        op = RetryOp([RetryEntry(a.id, retry_at=retry_at), RetryEntry(b.id, retry_at=retry_at)])
        result = await part.batch(PartitionBatch(retry=[op]), dead_queue=True, max_attempts=1)
        assert op.error is None
        assert [(i.id, i.attempts, i.is_leased) for i in result.dead] == [(a.id, 1, False), (b.id, 1, False)]
        assert all(e.dead for e in op.items)
        # Without a dead queue they are deleted; below the limit a retry requeues as always.
        c, d = await part.produce(item("c"), item("d"))
        await part.lease(2)
        op = RetryOp([RetryEntry(c.id, retry_at=retry_at), RetryEntry(d.id, retry_at=retry_at)])
        result = await part.batch(PartitionBatch(retry=[op]), max_attempts=1)
        assert (result.dropped, result.dead) == (2, [])
        assert await part.get(c.id, d.id) == {}
        (e,) = await part.produce(item("e"))
        await part.lease(1)
        result = await part.batch(PartitionBatch(retry=[RetryOp([RetryEntry(e.id)])]), max_attempts=2)
        assert (result.dropped, result.dead, result.queued_delta) == (0, [], 1)

    async def test_retry_errors_stop_the_request(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(1)
        error, result = await part.retry(RetryEntry(a.id), RetryEntry(b.id), RetryEntry("bogus"))
        assert error is not None
        assert error.message == f"item(s) cannot be retried; '{b.id}' is not marked as leased"
        assert result.queued_delta == 1
        stored = await part.list()
        assert stored[0].id == b.id
        assert stored[1].payload == b"a"

    # --- jobs and failures (docs/extensions.md, "Jobs and failures") ------------------------------------

    async def test_a_job_keeps_its_first_id_and_its_failures_through_every_move(self, part: Part) -> None:
        """Retried now, retried later, re-queued by an expired lease, dead-lettered: each new id continues
        the job of the produced item, and each failed attempt is recorded with its time and error."""
        (a,) = await part.produce(item("a"))
        await part.lease(1)
        await part.retry(RetryEntry(a.id, error="boom"))
        [[again]] = await part.lease(1, deadline=NOW + 10 * SECOND)
        assert again.id != a.id and again.job_id == a.id
        await part.retry(RetryEntry(again.id, retry_at=NOW + 5 * SECOND), now=NOW + 1)
        (scheduled,) = await part.list(scheduled=True)  # kept its id while scheduled: failures updated
        assert (scheduled.id, scheduled.job_id) == (again.id, a.id)
        assert failures_of(scheduled.failures) == [Failure(NOW, 1, "boom"), Failure(NOW + 1, 2, "")]
        await part.lifecycle(NOW + 6 * SECOND)  # due: to the tail under a new id
        [[third]] = await part.lease(1, deadline=NOW + 20 * SECOND)
        assert third.job_id == a.id and third.attempts == 3
        await part.lifecycle(NOW + 21 * SECOND)  # the lease expired: a crash, recorded as such
        (fourth,) = await part.list()
        assert fourth.job_id == a.id
        assert [f.error for f in failures_of(fourth.failures)] == ["boom", "", LEASE_EXPIRED]
        assert failures_of(fourth.failures)[-1] == Failure(NOW + 21 * SECOND, 3, LEASE_EXPIRED)
        await part.lease(1, deadline=NOW + 30 * SECOND)
        result = await part.lifecycle(NOW + 31 * SECOND, max_attempts=4, dead_queue=True)
        (dead,) = result.dead
        assert dead.job_id == a.id and len(failures_of(dead.failures)) == 4
        (copy,) = moved_copies(result.dead, NOW, EXPIRE)
        assert (copy.source_id, copy.job_id, copy.failures) == (dead.id, a.id, dead.failures)

    async def test_an_expired_item_records_why_and_keeps_the_newest_failures(self, part: Part) -> None:
        (a,) = await part.produce(item("a", expire_deadline=NOW + 1000 * SECOND))
        for n in range(MAX_FAILURES + 2):
            [[leased_item]] = await part.lease(1)
            await part.retry(RetryEntry(leased_item.id, error=f"e{n}"))
        result = await part.lifecycle(NOW + 1001 * SECOND, dead_queue=True)
        (dead,) = result.dead
        assert dead.job_id == a.id
        recorded = failures_of(dead.failures)
        assert len(recorded) == MAX_FAILURES
        assert [f.error for f in recorded[-3:]] == [f"e{MAX_FAILURES}", f"e{MAX_FAILURES + 1}", EXPIRED]

    async def test_a_produced_or_released_item_has_no_failures(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        (stored,) = await part.list()
        assert (stored.job_id, stored.failures) == ("", b"")
        await part.lease(1)
        await part.batch(PartitionBatch(release=[ReleaseOp([a.id])]))
        (released,) = await part.list()
        assert (released.job_id, released.failures) == (a.id, b"")  # its job, but no failed attempt

    # --- expiry counts from when an item becomes leasable (docs/semantics.md §5.3, ADR 0033) --------------

    async def test_a_scheduled_items_expiry_counts_from_its_enqueue_at(self, part: Part) -> None:
        """A produce scheduled further out than the queue's expire_timeout (a durable sleep) still has the
        whole timeout to be leased once due; an item queued at once expires a timeout after its produce."""
        timeout = 10 * SECOND
        produced = [
            item("now", expire_deadline=0),
            item("near", enqueue_at=NOW + NEAR_NOW - 1, expire_deadline=0),
            item("later", enqueue_at=NOW + 3 * timeout, expire_deadline=0),
        ]
        await part.batch(PartitionBatch(produce=produced), expire_timeout=timeout)
        assert [i.expire_deadline for i in produced] == [NOW + timeout, NOW + timeout, NOW + 4 * timeout]
        (scheduled,) = await part.list(scheduled=True)
        assert scheduled.expire_deadline == NOW + 4 * timeout
        # Past its produce's timeout: the queued items die, the scheduled one waits and then comes due.
        result = await part.lifecycle(NOW + 3 * timeout + SECOND)
        assert (result.deleted, result.enqueued) == (2, 1)
        result = await part.lifecycle(NOW + 3 * timeout + 2 * SECOND)
        assert (result.deleted, result.dead) == (0, [])
        assert result.deadlines.expire_deadline == NOW + 4 * timeout
        [[leased]] = await part.lease(1, deadline=NOW + 4 * timeout)
        assert (leased.payload, leased.expire_deadline) == (b"later", NOW + 4 * timeout)

    async def test_a_retry_later_extends_the_expiry_past_its_retry_at(self, part: Part) -> None:
        """A retry's back-off longer than the expire_timeout leaves the item the whole timeout once due;
        a retry now keeps the deadline it had, and an item without one (imported so) gets none."""
        timeout = 10 * SECOND
        far, now = item("far", expire_deadline=0), item("now", expire_deadline=0)
        await part.batch(PartitionBatch(produce=[far, now]), expire_timeout=timeout)
        (never,) = await part.produce(item("never", expire_deadline=0))
        await part.lease(3)
        retry_at = NOW + 3 * timeout
        retry = RetryOp(
            [
                RetryEntry(far.id, retry_at=retry_at),
                RetryEntry(now.id),
                RetryEntry(never.id, retry_at=retry_at),
            ]
        )
        await part.batch(PartitionBatch(retry=[retry]), expire_timeout=timeout)
        assert retry.error is None
        scheduled = await part.list(scheduled=True)
        assert [(i.id, i.expire_deadline) for i in scheduled] == [(far.id, retry_at + timeout), (never.id, 0)]
        (requeued,) = await part.list()
        assert (requeued.payload, requeued.expire_deadline) == (b"now", NOW + timeout)
        result = await part.lifecycle(retry_at + SECOND)
        assert (result.deleted, result.enqueued) == (1, 2)
        [leased] = await part.lease(2, deadline=retry_at + timeout)
        assert [(i.payload, i.expire_deadline) for i in leased] == [
            (b"far", retry_at + timeout),
            (b"never", 0),
        ]

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def test_lifecycle_requeues_expired_leases_at_the_tail(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(1, deadline=NOW + 10 * SECOND)
        early = await part.lifecycle(NOW + 5 * SECOND)
        assert (early.requeued, early.queued_delta, early.leased_delta, early.more) == (0, 0, 0, False)
        assert early.deadlines.lease_deadline == NOW + 10 * SECOND
        result = await part.lifecycle(NOW + 11 * SECOND)
        assert (result.requeued, result.enqueued, result.deleted) == (1, 0, 0)
        assert (result.queued_delta, result.leased_delta) == (1, -1)
        assert result.dead == []
        stored = await part.list()
        assert ids(stored)[0] == b.id
        moved = stored[1]
        assert moved.id > b.id
        assert (moved.payload, moved.is_leased, moved.lease_deadline, moved.attempts) == (b"a", False, 0, 1)
        assert await part.get(a.id) == {}
        assert result.deadlines.lease_deadline == 0

    async def test_max_attempts_kills_only_an_expired_lease(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1, deadline=NOW + 10 * SECOND)
        result = await part.lifecycle(NOW + 5 * SECOND, max_attempts=1)
        assert (result.deleted, result.dead) == (0, [])
        assert (await part.get(a.id))[a.id].is_leased
        result = await part.lifecycle(NOW + 11 * SECOND, max_attempts=1)
        assert (result.deleted, result.requeued, result.leased_delta, result.queued_delta) == (1, 0, -1, 0)
        assert await part.list() == []

    async def test_max_attempts_with_dead_queue_keeps_the_item(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        await part.lease(1, deadline=NOW + 10 * SECOND)
        result = await part.lifecycle(NOW + 11 * SECOND, max_attempts=1, dead_queue=True)
        assert ids(result.dead) == [a.id]
        assert result.deleted == 0
        assert a.id in await part.get(a.id)

    async def test_attempts_below_max_requeue(self, part: Part) -> None:
        await part.produce(item("a"))
        await part.lease(1, deadline=NOW + 10 * SECOND)
        result = await part.lifecycle(NOW + 11 * SECOND, max_attempts=2)
        assert (result.requeued, result.deleted) == (1, 0)
        [[again]] = await part.lease(1, deadline=NOW + 20 * SECOND)
        assert again.attempts == 2
        result = await part.lifecycle(NOW + 21 * SECOND, max_attempts=2)
        assert (result.requeued, result.deleted) == (0, 1)

    async def test_expire_deadline_kills_even_leased_items(self, part: Part) -> None:
        a, _, c = await part.produce(
            item("a", expire_deadline=NOW + 50 * SECOND),
            item("b", expire_deadline=NOW + 70 * SECOND),
            item("c", expire_deadline=0),
        )
        await part.lease(1, deadline=NOW + 100 * SECOND)
        result = await part.lifecycle(NOW + 60 * SECOND)
        assert (result.deleted, result.leased_delta, result.queued_delta) == (1, -1, 0)
        assert await part.get(a.id) == {}
        assert result.deadlines.expire_deadline == NOW + 70 * SECOND
        result = await part.lifecycle(NOW + 80 * SECOND)
        assert (result.deleted, result.leased_delta, result.queued_delta) == (1, 0, -1)
        assert ids(await part.list()) == [c.id]
        assert result.deadlines == Deadlines()

    async def test_expired_items_with_dead_queue_are_returned(self, part: Part) -> None:
        a, b = await part.produce(
            item("a", expire_deadline=NOW + 50 * SECOND), item("b", expire_deadline=NOW + 40 * SECOND)
        )
        result = await part.lifecycle(NOW + 60 * SECOND, dead_queue=True)
        assert sorted(ids(result.dead)) == [a.id, b.id]
        assert (result.deleted, result.queued_delta) == (0, -2)
        assert len(await part.get(a.id, b.id)) == 2

    async def test_due_scheduled_items_move_to_the_tail_in_id_order(self, part: Part) -> None:
        _, s1, s2, s3 = await part.produce(
            item("q"),
            item("s1", enqueue_at=NOW + 2 * SECOND),
            item("s2", enqueue_at=NOW + 1 * SECOND),
            item("s3", enqueue_at=NOW + 10 * SECOND),
        )
        result = await part.lifecycle(NOW + 3 * SECOND)
        assert (result.enqueued, result.requeued, result.queued_delta, result.leased_delta) == (2, 0, 2, 0)
        stored = await part.list()
        assert payloads(stored) == ["q", "s1", "s2"]
        assert stored[1].id > s3.id
        assert all(i.enqueue_at == 0 for i in stored)
        assert await part.get(s1.id, s2.id) == {}
        assert ids(await part.list(scheduled=True)) == [s3.id]
        assert result.deadlines.enqueue_at == NOW + 10 * SECOND
        assert payloads(await part.head()) == ["q", "s1", "s2"]

    async def test_lifecycle_asks_for_more_past_its_limit(self, part: Part) -> None:
        await part.produce(*(item(str(n), enqueue_at=NOW + SECOND) for n in range(LIFECYCLE_LIMIT + 1)))
        result = await part.lifecycle(NOW + 2 * SECOND)
        assert (result.enqueued, result.more) == (LIFECYCLE_LIMIT, True)
        result = await part.lifecycle(NOW + 2 * SECOND)
        assert (result.enqueued, result.more) == (1, False)
        stored = await part.list(limit=LIFECYCLE_LIMIT + 10)
        assert payloads(stored) == [str(n) for n in range(LIFECYCLE_LIMIT + 1)]

    async def test_lifecycle_reports_deadlines(self, part: Part) -> None:
        empty = await part.lifecycle(NOW)
        assert empty.deadlines == Deadlines()
        assert await part.run(lambda tx: tx.deadlines()) == Deadlines()
        await part.produce(
            item("a", expire_deadline=NOW + 100 * SECOND),
            item("b", expire_deadline=NOW + 50 * SECOND),
            item("s", enqueue_at=NOW + 5 * SECOND, expire_deadline=NOW + 10 * SECOND),
        )
        await part.lease(1, deadline=NOW + 30 * SECOND)
        result = await part.lifecycle(NOW)
        assert result.deadlines == Deadlines(NOW + 30 * SECOND, NOW + 50 * SECOND, NOW + 5 * SECOND)

    # --- import -------------------------------------------------------------------------------------------

    async def test_import_assigns_ids_and_skips_known_source_ids(self, part: Part) -> None:
        (first,) = await part.import_items(item("first", source_id="s0"))
        assert first.id
        given = [
            item("dup-of-stored", source_id="s0"),
            item("x", source_id="s1", created_at=5),
            item("dup-in-batch", source_id="s1"),
            item("leased", is_leased=True, lease_deadline=NOW + 5 * SECOND, attempts=2, enqueue_at=NOW + 1),
        ]
        result = await part.import_items(*given, now=NOW + SECOND)
        assert result == given
        assert [i.id == "" for i in result] == [True, False, True, False]
        assert all(i.created_at == NOW + SECOND for i in result if i.id)
        stored = await part.list()
        assert payloads(stored) == ["first", "x", "leased"]
        assert ids(stored) == [first.id, result[1].id, result[3].id]
        imported = stored[2]
        assert (imported.is_leased, imported.lease_deadline, imported.attempts, imported.enqueue_at) == (
            True, NOW + 5 * SECOND, 2, 0,
        )  # fmt: skip
        assert payloads(await part.head()) == ["first", "x"]
        found = await part.run(lambda tx: tx.existing_source_ids({"s0", "s1", "unknown"}))
        assert found == {"s0", "s1"}

    async def test_deleted_source_ids_can_be_imported_again(self, part: Part) -> None:
        (first,) = await part.import_items(item("a", source_id="s0"))
        await part.run(lambda tx: tx.delete([first.id]))
        assert await part.run(lambda tx: tx.existing_source_ids(["s0"])) == set()
        (again,) = await part.import_items(item("a", source_id="s0"))
        assert again.id > first.id

    # --- list ---------------------------------------------------------------------------------------------

    async def test_list_pages_by_pivot(self, part: Part) -> None:
        a, b = await part.produce(item("a"), item("b"))
        gap = part.new_id()  # an id nothing carries, between b and c
        c, d = await part.produce(item("c"), item("d"))
        await part.produce(item("s", enqueue_at=NOW + SECOND))
        await part.lease(1)
        assert payloads(await part.list()) == ["a", "b", "c", "d"]
        assert (await part.list())[0].is_leased
        assert ids(await part.list(b.id)) == [b.id, c.id, d.id]
        assert ids(await part.list(gap)) == [c.id, d.id]
        assert ids(await part.list(a.id, limit=2)) == [a.id, b.id]
        assert await part.list(limit=0) == []
        assert await part.list(KSUID_MAX) == []
        assert payloads(await part.list(scheduled=True)) == ["s"]

    async def test_list_scheduled_pages_by_pivot(self, part: Part) -> None:
        s = await part.produce(*(item(str(n), enqueue_at=NOW + (10 - n) * SECOND) for n in range(4)))
        await part.produce(item("q"))
        assert ids(await part.list(scheduled=True)) == ids(s)
        assert ids(await part.list(s[1].id, limit=2, scheduled=True)) == ids(s[1:3])
        assert await part.list(KSUID_MAX, scheduled=True) == []

    @pytest.mark.parametrize("scheduled", [False, True])
    async def test_list_pages_end_at_the_payload_byte_cap(self, part: Part, scheduled: bool) -> None:
        quarter = "x" * (LIST_PAGE_BYTES // 4)
        at = {"enqueue_at": NOW + SECOND} if scheduled else {}
        stored = await part.produce(*(item(f"{n}{quarter}", **at) for n in range(6)))
        await part.produce(item("other", **({} if scheduled else {"enqueue_at": NOW + SECOND})))
        if not scheduled:
            await part.lease(1)  # a leased item is listed too, merged in id order
        # Each payload is a byte over a quarter of the cap: three fit, the fourth would pass it.
        first = await part.list(limit=100, scheduled=scheduled)
        assert ids(first) == ids(stored[:3])
        assert ids(await part.list(first[-1].id, limit=100, scheduled=scheduled)) == ids(stored[2:5])
        assert ids(await part.list(stored[5].id, scheduled=scheduled)) == [stored[5].id]
        assert ids(await part.list(limit=2, scheduled=scheduled)) == ids(stored[:2])

    async def test_an_item_larger_than_a_page_is_listed_alone(self, part: Part) -> None:
        big, small = await part.produce(item("x" * (LIST_PAGE_BYTES + 1)), item("y"))
        assert ids(await part.list()) == [big.id]
        assert ids(await part.list(big.id)) == [big.id]
        assert ids(await part.list(small.id)) == [small.id]

    # --- stats --------------------------------------------------------------------------------------------

    async def test_stats_counts_and_ages(self, part: Part) -> None:
        empty = await part.run(lambda tx: tx.stats(NOW))
        assert (empty.total, empty.leased, empty.scheduled, empty.average_age, empty.average_leased_age) == (
            0, 0, 0, 0, 0,
        )  # fmt: skip
        await part.produce(*(item(str(n)) for n in range(4)))
        later = NOW + 10 * SECOND
        await part.produce(item("e"), item("f"), item("s", enqueue_at=NOW + 60 * SECOND), now=later)
        await part.lease(2, deadline=NOW + 40 * SECOND)
        await part.lease(1, deadline=NOW + 50 * SECOND)
        stats = await part.run(lambda tx: tx.stats(NOW + 20 * SECOND))
        assert (stats.total, stats.leased, stats.scheduled) == (6, 3, 1)
        assert stats.average_age == (4 * 20 + 2 * 10) * SECOND // 6
        assert stats.average_leased_age == (20 + 20 + 30) * SECOND // 3
        expired = await part.run(lambda tx: tx.stats(NOW + 60 * SECOND))
        assert expired.average_leased_age == (-20 - 20 - 10) * SECOND // 3  # floor, as Python divides

    # --- clear --------------------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("options", "left"),
        [
            (ClearOptions(queue=True), ["leased", "s"]),
            (ClearOptions(scheduled=True), ["leased", "q1", "q2"]),
            (ClearOptions(queue=True, destructive=True), ["s"]),
            (ClearOptions(queue=True, scheduled=True), ["leased"]),
            (ClearOptions(queue=True, scheduled=True, destructive=True), []),
            (ClearOptions(scheduled=True, destructive=True), ["leased", "q1", "q2"]),
        ],
    )
    async def test_clear(self, part: Part, options: ClearOptions, left: list[str]) -> None:
        await part.produce(item("leased"), item("q1"), item("q2"), item("s", enqueue_at=NOW + SECOND))
        await part.lease(1)
        await part.run(lambda tx: tx.clear(options))
        stored = await part.list() + await part.list(scheduled=True)
        assert payloads(stored) == left

    # --- primitives -----------------------------------------------------------------------------------

    async def test_last_id_never_goes_down(self, part: Part) -> None:
        assert await part.last_id() == ""
        a, b = await part.produce(item("a"), item("b"))
        await part.lease(2)
        assert await part.complete(a.id, b.id) is None
        assert await part.list() == []
        assert await part.last_id() == b.id

    async def test_update_and_delete_ignore_absent_items(self, part: Part) -> None:
        (a,) = await part.produce(item("a"))
        ghost = Item(id=KsuidGenerator(NOW // SECOND - 10).next(), is_leased=True, payload=b"ghost")
        await part.run(lambda tx: tx.update([ghost]))
        await part.run(lambda tx: tx.delete([ghost.id]))
        assert ids(await part.list()) == [a.id]
        assert await part.get(ghost.id) == {}

    async def test_run_returns_the_result_and_passes_errors_through(self, part: Part) -> None:
        assert await part.run(lambda tx: 42) == 42
        error = KeyError("boom")

        def fail(tx: PartitionTx) -> None:
            raise error

        with pytest.raises(KeyError) as caught:
            await part.run(fail)
        assert caught.value is error
        assert await part.run(lambda tx: tx.head(10)) == []

    async def test_a_failed_run_changes_nothing(self, part: Part) -> None:
        a, b, _, _ = await part.produce(item("a"), item("b"), item("c"), item("d", source_id="s"))
        await part.produce(item("later", enqueue_at=NOW + 60 * SECOND))
        await part.lease(1)
        before = (await part.list(), await part.list(scheduled=True), await part.head(), await part.last_id())

        def everything_then_fail(tx: PartitionTx) -> None:
            batch = PartitionBatch(
                produce=[item("e"), item("e2")], lease=[LeaseOp(2, NOW + SECOND)],
                complete=[CompleteOp([a.id])],
                retry=[RetryOp([RetryEntry(a.id)])],
            )  # fmt: skip
            apply_batch(tx, batch, NOW, part.new_id, False)
            lifecycle(tx, NOW + 3600 * SECOND, part.new_id, 0, False)
            import_items(tx, [item("f", source_id="t")], NOW, part.new_id)
            tx.clear(ClearOptions(queue=True, scheduled=True, destructive=True))
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await part.run(everything_then_fail)
        after = (await part.list(), await part.list(scheduled=True), await part.head(), await part.last_id())
        assert after == before
        assert ids(await part.head()) == ids(before[2])
        assert await part.run(lambda tx: tx.existing_source_ids({"s", "t"})) == {"s"}
        assert (await part.get(a.id))[a.id].is_leased and not (await part.get(b.id))[b.id].is_leased

    async def test_partitions_are_independent(self, store: Store) -> None:
        first = Part(store.partition("queue", 0))
        second = Part(store.partition("queue", 1))
        other = Part(store.partition("other", 0))
        await first.produce(item("a"))
        await second.produce(item("b"))
        await other.produce(item("c"), item("d", enqueue_at=NOW + SECOND))
        assert payloads(await first.list()) == ["a"]
        assert payloads(await second.list()) == ["b"]
        assert payloads(await other.list()) == ["c"]
        assert (await first.run(lambda tx: tx.stats(NOW))).scheduled == 0
        assert (await other.run(lambda tx: tx.stats(NOW))).scheduled == 1

    async def test_delete_partitions(self, store: Store) -> None:
        for queue, number in [("a", 0), ("a", 1), ("a", 2), ("b", 0)]:
            part = Part(store.partition(queue, number))
            await part.produce(item(f"{queue}{number}"), item("later", enqueue_at=NOW + SECOND))
            await part.lease(1)
        await store.delete_partitions("a", 2)
        for number in (0, 1):
            part = Part(store.partition("a", number))
            assert await part.list() == []
            assert await part.list(scheduled=True) == []
            assert await part.last_id() == ""
            assert (await part.run(lambda tx: tx.stats(NOW))).total == 0
            await part.produce(item("new"))
            assert payloads(await part.list()) == ["new"]
        assert payloads(await Part(store.partition("a", 2)).list()) == ["a2"]
        assert payloads(await Part(store.partition("b", 0)).list()) == ["b0"]
        await store.delete_partitions("never-created", 3)

    # --- queue records ------------------------------------------------------------------------------------

    async def test_queue_records(self, store: Store) -> None:
        assert await store.get_queue("orders") is None
        record = QueueRecord(
            name="orders", namespace="shop", lease_timeout=60 * SECOND, expire_timeout=3600 * SECOND,
            dead_queue="orders-dead", max_attempts=3, reference="r", requested_partitions=4,
            created_at=NOW, updated_at=NOW, extra={"owner": "team-a", "note": "ü"},
        )  # fmt: skip
        assert await store.add_queue(record) is True
        assert await store.get_queue("orders") == record
        assert await store.add_queue(QueueRecord(name="orders", max_attempts=9)) is False
        assert await store.get_queue("orders") == record
        changed = QueueRecord(
            name="orders", namespace="shop", lease_timeout=30 * SECOND, expire_timeout=3600 * SECOND,
            created_at=NOW, updated_at=NOW + SECOND,
        )  # fmt: skip
        await store.update_queue(changed)
        assert await store.get_queue("orders") == changed
        await store.delete_queue("orders")
        assert await store.get_queue("orders") is None
        await store.delete_queue("orders")
        assert await store.add_queue(record) is True

    async def test_list_queues_sorts_then_filters_then_limits(self, store: Store) -> None:
        for name in ["b", "a", "d", "c"]:
            assert await store.add_queue(QueueRecord(name=name))
        assert await store.add_queue(QueueRecord(name="aa", namespace="other"))
        assert await store.add_queue(QueueRecord(name="ab", namespace="other"))

        async def names(pivot: str, limit: int, namespace: str = "_system") -> list[str]:
            return [r.name for r in await store.list_queues(pivot, limit, namespace)]

        assert await names("", 10) == ["a", "b", "c", "d"]
        assert await names("b", 10) == ["b", "c", "d"]
        assert await names("bb", 10) == ["c", "d"]
        assert await names("", 2) == ["a", "b"]
        assert await names("z", 10) == []
        assert await names("", 1, "other") == ["aa"]
        assert await names("", 10, "other") == ["aa", "ab"]
        assert await names("", 10, "none") == []
        assert (await store.list_queues("d", 1, "_system"))[0] == QueueRecord(name="d")


class RecordsContract:
    """``Records`` (tenancy's storage, docs/tenancy.md): every backend binds it next to ``StoreContract``
    with the same ``store`` fixture."""

    async def test_a_record_is_added_once(self, store: Store) -> None:
        assert await store.get_record("user", "a") is None
        assert await store.add_record("user", "a", b"first")
        assert not await store.add_record("user", "a", b"second")
        assert await store.get_record("user", "a") == b"first"
        assert await store.get_record("apikey", "a") is None  # kinds are separate

    async def test_put_replaces_and_delete_removes(self, store: Store) -> None:
        await store.put_record("role", "r", b"one")
        await store.put_record("role", "r", b"two")
        assert await store.get_record("role", "r") == b"two"
        await store.delete_record("role", "r")
        await store.delete_record("role", "r")  # absent is not an error
        assert await store.get_record("role", "r") is None
        assert await store.add_record("role", "r", b"three")

    async def test_lists_are_key_ranges_in_order(self, store: Store) -> None:
        for key in ["b:2", "a:1", "b:1", "c", "b:10", "é"]:
            await store.add_record("binding", key, key.encode())
        await store.add_record("other", "b:3", b"")
        assert [k for k, _ in await store.list_records("binding", "", "", 100)] == [
            "a:1",
            "b:1",
            "b:10",
            "b:2",
            "c",
            "é",
        ]
        assert await store.list_records("binding", "b:", "b;", 100) == [
            ("b:1", b"b:1"),
            ("b:10", b"b:10"),
            ("b:2", b"b:2"),
        ]
        assert [k for k, _ in await store.list_records("binding", "b:10", "b;", 1)] == ["b:10"]
        assert await store.list_records("binding", "d", "", 10) == [("é", "é".encode())]
        assert await store.list_records("binding", "ê", "", 10) == []

    async def test_stamps_keep_the_greatest_and_are_apart_from_records(self, store: Store) -> None:
        """docs/adr/0041: an API key's last use is a stamp every member raises without a read."""
        assert await store.get_stamps("apikey.use", ["a", "b"]) == {}
        await store.raise_stamps("apikey.use", {"a": NOW + 2, "b": NOW})
        await store.raise_stamps("apikey.use", {"a": NOW + 1, "b": NOW + 3})  # another member, later
        await store.raise_stamps("apikey.use", {})
        assert await store.get_stamps("apikey.use", ["a", "b", "c"]) == {"a": NOW + 2, "b": NOW + 3}
        assert await store.get_stamps("other", ["a"]) == {}  # kinds are separate
        assert await store.get_record("apikey.use", "a") is None  # and so are records
        await store.delete_stamp("apikey.use", "a")
        await store.delete_stamp("apikey.use", "a")  # absent is not an error
        assert await store.get_stamps("apikey.use", ["a", "b"]) == {"b": NOW + 3}
        assert await store.get_stamps("apikey.use", []) == {}
