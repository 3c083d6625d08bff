"""LocalMembers and a ClusterNode over them: the fixed member set of a node's processes
(docs/processes.md)."""

from __future__ import annotations

import pytest

from querator.clock import FakeClock
from querator.cluster.local_members import LocalMembers
from querator.cluster.node import ClusterNode
from querator.cluster.ring import Ring

ADDRESSES = ("127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003")


def test_each_process_is_a_member_at_its_private_address() -> None:
    local = LocalMembers("local", 1, ADDRESSES)
    assert (local.node_id, local.address, local.serving) == ("local-1", "127.0.0.1:4002", True)
    assert [(m.node_id, m.address) for m in local.members.members] == [
        ("local-0", "127.0.0.1:4001"),
        ("local-1", "127.0.0.1:4002"),
        ("local-2", "127.0.0.1:4003"),
    ]


@pytest.mark.parametrize("index", [-1, 3])
def test_an_index_outside_the_set_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match=f"process {index} is not one of 3"):
        LocalMembers("local", index, ADDRESSES)


async def test_a_cluster_node_over_them_owns_what_the_ring_gives_it() -> None:
    node = ClusterNode(None, FakeClock(), "localhost:2319", LocalMembers("local", 2, ADDRESSES))
    await node.start()
    try:
        assert (node.node_id, node.address, node.clustered, node.serving) == (
            "local-2",
            "127.0.0.1:4003",
            True,
            True,
        )
        assert [(s.node_id, s.address, s.state) for s in node.members()] == [
            ("local-0", "127.0.0.1:4001", "serving"),
            ("local-1", "127.0.0.1:4002", "serving"),
            ("local-2", "127.0.0.1:4003", "serving"),
        ]
        ring = Ring(["local-0", "local-1", "local-2"], 1)
        assert [node.owner("q", n) for n in range(16)] == [ring.owner("q", n) for n in range(16)]
        assert node.address_of("local-0") == "127.0.0.1:4001"
    finally:
        await node.stop()
