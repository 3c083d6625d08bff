"""Hand-off of a queue's engine on a cluster node (QueuesManager, in-process, memory store).

The ring decides which partitions a node serves; when that changes the engine is stopped and the next
request spawns one over the new set, never while the old one can still write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from querator.clock import FakeClock
from querator.cluster.node import ClusterNode
from querator.engine.hand_off_log import MAX_HAND_OFFS, Direction, Outcome
from querator.engine.logical_queue import PARTITION_MOVED
from querator.engine.queues_manager import FENCED_RECHECK_S, HandOff, QueuesManager
from querator.errors import RetryRequest, StaleOwnerError
from querator.metrics import Metrics
from querator.storage.base import Item, Partition, PartitionTx, QueueRecord
from querator.storage.memory import MemoryStore
from tests.conftest import eventually

R = TypeVar("R")

MINUTE = 60 * 1_000_000


class Ring:
    """Which partitions this node owns; tests change it as etcd would."""

    def __init__(self, owned: Sequence[int]) -> None:
        self.owned = list(owned)

    def __call__(self, queue: str, count: int) -> Sequence[int]:
        return [n for n in self.owned if n < count]


async def nowhere(queue: QueueRecord, items: list[Item]) -> None:
    raise AssertionError("nothing dies in these tests")


async def ready() -> str:
    """Readiness for ``Metrics``: always ready."""
    return ""


class FencedStore(MemoryStore):
    """A memory store whose partitions refuse every transaction once ``fenced``, as Cassandra does
    when another node has claimed them with a newer epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.fenced = False

    def partition(self, queue: str, number: int) -> Partition:
        return _FencedPartition(self, super().partition(queue, number))


class _FencedPartition:
    def __init__(self, store: FencedStore, partition: Partition) -> None:
        self._store = store
        self._partition = partition

    async def run(self, fn: Callable[[PartitionTx], R]) -> R:
        if self._store.fenced:
            raise StaleOwnerError("partition is owned by a newer epoch")
        return await self._partition.run(fn)

    async def claim(self) -> None:
        await self._partition.claim()


@pytest.fixture
async def manager() -> QueuesManager:
    store = FencedStore()
    await store.open()
    await store.add_queue(
        QueueRecord(name="q", lease_timeout=MINUTE, expire_timeout=60 * MINUTE, requested_partitions=4)
    )
    return QueuesManager(store, FakeClock(), nowhere, owned=Ring([0, 2]))


async def test_a_queue_serves_only_its_owned_partitions(manager: QueuesManager) -> None:
    queue = await manager.get("q")
    assert sorted(queue.logical.partitions) == [0, 2]
    with pytest.raises(RetryRequest, match=PARTITION_MOVED):
        queue.owner(1)  # a partition of the queue that another node serves
    await manager.shutdown()


async def scrape(manager: QueuesManager) -> dict[tuple[str, tuple[str, ...]], float]:
    clock = FakeClock()
    metrics = Metrics(clock, ClusterNode(None, clock, ""), manager, ready=ready)
    body, _ = await metrics.render("application/openmetrics-text; version=1.0.0")
    return {
        (s.name, tuple(s.labels.values())): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }


async def test_a_ring_change_moves_only_the_partitions_that_changed_owner(manager: QueuesManager) -> None:
    """A join that gives one partition and takes partition 1 (docs/adr/0039): only those two change
    hands, with one claim (partition 1's); the engine goes on serving the partition that stays, and
    neither a lease parked across the change nor a complete of an item leased before it gets a 454."""
    ring = manager._owned
    assert isinstance(ring, Ring)
    queue = await manager.get("q")
    await queue.produce([Item(payload=b"a")], MINUTE)
    kept, leased = await queue.lease("early", 1, MINUTE)
    given = {0: 2, 2: 0}[kept]
    assert manager.counters.partition_claims == 2
    parked = asyncio.create_task(queue.lease("parked", 1, MINUTE))  # the queue is empty: it waits

    async def is_parked() -> bool:
        return queue.logical.waiting().lease_waiting == 1

    await eventually(is_parked)
    ring.owned = [1, kept]
    manager.rebalance()
    assert manager.find("q") is queue, "the engine serves on"

    async def moved() -> bool:
        partitions = queue.logical.partitions
        return sorted(partitions) == sorted([1, kept]) and partitions[1].ids is not None

    await eventually(moved)
    await queue.complete(kept, [i.id for i in leased])  # no 454: its partition did not move
    with pytest.raises(RetryRequest, match=PARTITION_MOVED):
        await queue.complete(given, ["gone"])  # its new owner serves it now
    assert not parked.done(), "the parked lease waits on"
    await queue.produce([Item(payload=b"c")], MINUTE)
    served_from, items = await parked
    assert served_from in (1, kept) and [i.payload for i in items] == [b"c"]
    samples = await scrape(manager)
    assert manager.counters.partition_claims == 3, "partition 1 was claimed, the one kept not again"
    assert samples[("querator_cluster_partition_claims_total", ())] == 3
    assert samples[("querator_cluster_partitions_moved_total", ("given",))] == 1
    assert samples[("querator_cluster_partitions_moved_total", ("taken",))] == 1
    assert samples[("querator_cluster_hand_offs_total", ("ring",))] == 1
    await manager.shutdown()


async def test_a_ring_change_that_leaves_no_partition_hands_off(manager: QueuesManager) -> None:
    """With none of its partitions left here the engine stops: what waits gets 454 (the client's retry
    goes to the new owners), and the next request spawns one over what the ring gives then."""
    ring = manager._owned
    assert isinstance(ring, Ring)
    old = await manager.get("q")
    waiting = asyncio.create_task(old.lease("c", 1, MINUTE))  # parked: the queue is empty
    await asyncio.sleep(0)
    ring.owned = []
    manager.rebalance()
    with pytest.raises(RetryRequest, match=PARTITION_MOVED):
        await waiting
    ring.owned = [1, 2]
    new = await manager.get("q")
    assert new is not old and old.logical._task.done(), "the old engine stopped before a new one started"
    assert sorted(new.logical.partitions) == [1, 2]
    await manager.shutdown()


async def test_an_unchanged_ring_keeps_the_engine(manager: QueuesManager) -> None:
    queue = await manager.get("q")
    manager.rebalance()
    assert await manager.get("q") is queue
    await manager.shutdown()


async def test_a_hand_off_does_not_block_spawning_other_queues(manager: QueuesManager) -> None:
    """A stopping engine may need another queue's engine (dead-lettering): spawning it must not wait."""
    await manager.store.add_queue(
        QueueRecord(name="dead", lease_timeout=MINUTE, expire_timeout=60 * MINUTE, requested_partitions=1)
    )
    queue = await manager.get("q")
    started, spawned = asyncio.Event(), asyncio.Event()

    async def last_batch() -> None:  # the engine's batch in progress needs the dead queue
        started.set()
        await manager.get("dead")
        spawned.set()

    running = asyncio.create_task(queue.logical.call(last_batch))
    await started.wait()
    manager.hand_off(queue, HandOff.RING)
    await asyncio.wait_for(spawned.wait(), 5)
    await running
    await manager.shutdown()


async def test_a_request_waits_for_a_starting_engine_no_longer_than_its_timeout(
    manager: QueuesManager,
) -> None:
    """After a hand-off the next request starts a new engine once the old one stopped; a request whose
    timeout passes first gets its 454 then, not whenever the old engine is done."""
    queue = await manager.get("q")
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_batch() -> None:  # the old engine's batch in progress: storage is slow to answer
        started.set()
        await release.wait()

    running = asyncio.create_task(queue.logical.call(slow_batch))
    await started.wait()
    manager.hand_off(queue, HandOff.RING)
    with pytest.raises(RetryRequest, match="request timeout; queue 'q' is not served on this node yet"):
        await manager.get("q", within=0.05)
    release.set()
    await running
    assert await manager.get("q", within=60) is not queue
    await manager.shutdown()


async def test_a_fenced_write_gives_up_that_partition_and_both_are_counted(manager: QueuesManager) -> None:
    """Storage refusing a write (another node claimed the partition) gives that partition up at once, the
    engine serving on with the others; after ``FENCED_RECHECK_S`` a partition the ring still gives this
    node is claimed back. The refused write and the hand-off show in the node's metrics, as does a ring
    move after it."""
    store = manager.store
    assert isinstance(store, FencedStore)
    clock = manager.clock
    assert isinstance(clock, FakeClock)
    queue = await manager.get("q")
    await queue.produce([Item(payload=b"a")], MINUTE)
    store.fenced = True
    with pytest.raises(RetryRequest):
        await queue.produce([Item(payload=b"b")], MINUTE)
    (fenced,) = {0, 2} - set(queue.owned)  # the one partition the refused write went to
    assert manager.find("q") is queue, "the engine serves on with the other partition"

    async def given_up() -> bool:
        return fenced not in queue.logical.partitions

    await eventually(given_up)
    store.fenced = False
    claims = manager.counters.partition_claims
    clock.advance(FENCED_RECHECK_S)  # the ring still names this node: it takes the partition back

    async def taken_back() -> bool:
        p = queue.logical.partitions.get(fenced)
        return p is not None and p.ids is not None

    await eventually(taken_back)
    assert manager.counters.partition_claims == claims + 1
    ring = manager._owned
    assert isinstance(ring, Ring)
    ring.owned = [1]
    manager.rebalance()
    samples = await scrape(manager)
    assert samples[("querator_cluster_fenced_writes_total", ())] == 1
    assert [samples[("querator_cluster_hand_offs_total", (r.value,))] for r in HandOff] == [2, 0, 1]
    await manager.shutdown()


async def test_a_fenced_write_to_the_last_partition_hands_the_engine_off(manager: QueuesManager) -> None:
    store = manager.store
    assert isinstance(store, FencedStore)
    ring = manager._owned
    assert isinstance(ring, Ring)
    ring.owned = [3]
    queue = await manager.get("q")
    store.fenced = True
    with pytest.raises(RetryRequest):
        await queue.produce([Item(payload=b"b")], MINUTE)

    async def stopped() -> bool:
        return queue.logical._task.done()

    await eventually(stopped)
    assert manager.find("q") is None, "handed off"
    assert manager.counters.hand_offs[HandOff.FENCED] == 1
    await manager.shutdown()


async def test_the_hand_off_log_names_the_partitions_that_moved_and_stays_bounded() -> None:
    """A ring change logs, partition by partition, what this node gave (to the new owner) and took
    (from the old one); the log keeps only the newest ``MAX_HAND_OFFS`` entries."""
    store = MemoryStore()
    await store.open()
    await store.add_queue(
        QueueRecord(name="q", lease_timeout=MINUTE, expire_timeout=60 * MINUTE, requested_partitions=4)
    )
    ring = Ring([0, 2])
    owners = {0: "me", 1: "b", 2: "me", 3: "c"}
    clock = FakeClock()
    manager = QueuesManager(store, clock, nowhere, owned=ring, owner=lambda queue, n: owners[n])
    old = await manager.get("q")
    ring.owned, owners[1], owners[2] = [0, 1], "me", "b"  # b left partition 1 to this node, took 2
    manager.rebalance()
    taken, given = manager.hand_offs.newest_first()[::-1]  # logged by partition
    assert (given.partition, given.direction, given.other_node) == (2, Direction.GIVEN, "b")
    assert (taken.partition, taken.direction, taken.other_node) == (1, Direction.TAKEN, "b")
    assert {given.reason, taken.reason} == {"ring"}
    assert given.at_us == clock.now()

    async def stopped() -> bool:  # the engine gave partition 2 up between two batches, and serves on
        return {given.outcome, taken.outcome} == {Outcome.STOPPED}

    await eventually(stopped)
    assert manager.find("q") is old

    await manager.get("q")  # serving 0 and 1 now; losing the lease gives up both, to no node yet
    manager.hand_off_all()
    assert [
        (e.partition, e.direction, e.other_node, e.reason) for e in manager.hand_offs.newest_first()[:2]
    ] == [
        (1, Direction.GIVEN, "", "lease"),
        (0, Direction.GIVEN, "", "lease"),
    ]
    for _ in range(MAX_HAND_OFFS):
        await manager.get("q")
        manager.hand_off_all()
    entries = manager.hand_offs.newest_first()
    assert len(entries) == MAX_HAND_OFFS
    assert given not in entries, "the oldest went first"
    await manager.shutdown()
