"""LocalMembers: the member set of a node's own processes (``serve --processes N``), fixed at start.

The processes of one node split its queues' partitions with the cluster's ring and forwarding
(docs/processes.md), but they need no etcd: the supervisor knows every process before any starts, and a
process that dies is restarted at the same private address. So the set never changes, and a dead process
stays a member: its partitions wait for its restart, and forwards to it wait in its socket's backlog,
which the supervisor keeps open. ``ClusterNode`` reads it as it reads etcd's ``Membership``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from querator.cluster.membership import Member, MemberSet
from querator.cluster.ring import Ring

__all__ = ["LocalMembers", "process_id", "process_owner"]

REVISION = 1
"""The revision of the only member set there is."""


def process_id(node_id: str, index: int) -> str:
    """The member id of process ``index`` of node ``node_id``."""
    return f"{node_id}-{index}"


def process_owner(node_id: str, processes: int) -> Callable[[str, int], int]:
    """The index of the process owning each (queue, partition) among ``processes`` processes of node
    ``node_id``: the ring they route by, for moving their partitions when their number changes."""
    indexes = {process_id(node_id, i): i for i in range(processes)}
    ring = Ring(indexes, REVISION)
    return lambda queue, number: indexes[ring.owner(queue, number)]


class LocalMembers:
    """Process ``index`` among the processes at ``addresses`` (their private ``host:port``s)."""

    def __init__(self, node_id: str, index: int, addresses: Sequence[str]) -> None:
        if not 0 <= index < len(addresses):
            raise ValueError(f"process {index} is not one of {len(addresses)}")
        self.node_id = process_id(node_id, index)
        self.address = addresses[index]
        self.members = MemberSet(
            REVISION, tuple(Member(process_id(node_id, i), a, 0) for i, a in enumerate(addresses))
        )

    @property
    def serving(self) -> bool:
        """Always: no lease can lapse, the supervisor restarts a process at the same place."""
        return True

    def on_serving(self, callback: Callable[[bool], None]) -> Callable[[], None]:
        """``serving`` never changes: nothing to call back."""
        del callback
        return lambda: None

    async def start(self) -> None:
        """Nothing to join."""

    async def stop(self) -> None:
        """Nothing to leave."""

    async def changes(self) -> AsyncIterator[MemberSet]:
        """Never yields: the set is fixed."""
        await asyncio.Event().wait()
        yield self.members  # pragma: no cover - unreachable; makes this an async generator
