"""ClusterNode settles member events before it changes the ring (docs/adr/0039): a burst of them, as when
a node's processes register one by one or their grace periods end together, makes one ring change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from querator.clock import FakeClock
from querator.cluster.local_members import LocalMembers
from querator.cluster.membership import Member, MemberSet
from querator.cluster.node import SETTLE_MAX_S, SETTLE_S, ClusterNode
from tests.conftest import eventually

K = 4
"""Processes of the node that joins."""


class Events(LocalMembers):
    """A member set fed by the test, as etcd's watch would deliver it."""

    def __init__(self) -> None:
        super().__init__("a", 0, ["127.0.0.1:1"])
        self.sets: asyncio.Queue[MemberSet] = asyncio.Queue()

    def send(self, node_ids: list[str]) -> None:
        revision = self.members.revision + 1
        self.members = MemberSet(revision, tuple(Member(n, f"{n}:1", 0) for n in sorted(node_ids)))
        self.sets.put_nowait(self.members)

    async def changes(self) -> AsyncIterator[MemberSet]:
        while True:
            members = await self.sets.get()
            yield members
            self.sets.task_done()  # the node is done with it: it asked for the next one


async def started() -> tuple[ClusterNode, Events, FakeClock, list[frozenset[str]]]:
    clock = FakeClock()
    events = Events()
    node = ClusterNode(None, clock, "", local=events)
    await node.start()
    rings: list[frozenset[str]] = []
    node.on_change(lambda: rings.append(node.ring.node_ids))
    return node, events, clock, rings


async def test_a_burst_of_member_events_is_one_ring_change() -> None:
    node, events, clock, rings = await started()
    joining = [f"b-{i}" for i in range(K)]
    for i in range(K):  # the processes of node b register a little after one another
        events.send(["a-0", *joining[: i + 1]])
        await events.sets.join()
        clock.advance(SETTLE_S / 2)
    assert rings == [] and node.ring_changes == 0, "not settled yet"
    clock.advance(SETTLE_S)

    async def changed() -> bool:
        return bool(rings)

    await eventually(changed)
    assert rings == [frozenset(["a-0", *joining])]
    assert node.ring_changes == 1

    for i in range(K):  # and they leave together
        events.send(["a-0", *joining[i + 1 :]])
        await events.sets.join()
    clock.advance(SETTLE_S)

    async def left() -> bool:
        return len(rings) == 2

    await eventually(left)
    assert rings[1] == frozenset(["a-0"])
    assert node.ring_changes == 2
    await node.stop()


async def test_a_stream_of_member_events_holds_the_ring_back_for_a_bounded_time() -> None:
    node, events, clock, rings = await started()
    joined = ["a-0"]
    waited_s = 0.0
    while waited_s < SETTLE_MAX_S:  # never quiet for SETTLE_S
        joined.append(f"b-{len(joined)}")
        events.send(joined)
        await events.sets.join()
        clock.advance(SETTLE_S / 2)
        waited_s += SETTLE_S / 2

    async def changed() -> bool:
        return bool(rings)

    await eventually(changed)
    assert node.ring_changes == 1
    await node.stop()
