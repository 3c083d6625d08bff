"""Placement: which node owns each (queue, partition), decided by a consistent-hash ring of node ids.

``Ring`` is pure: the same node ids give the same owner for every (queue, partition) on every node (md5
points, ids added in sorted order), and adding a node to N moves about 1/(N+1) of the partitions, all to
the new node. A ring is tagged with the etcd revision of the member set it was built from, so two
nodes can tell whose view is newer.

``Placement`` decides which ids go into the ring. A member that vanishes (its key deleted: it left, or
its lease expired) stays in the ring for ``grace_period`` seconds, measured on the injected clock: a
rolling restart that brings the same node id back within the grace period moves nothing. The grace
period is local to each node (it starts when that node saw the deletion), so nodes can disagree about
the ring for as long as their watches lag; storage fencing, not agreement, keeps a partition single-
writer (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from uhashring import HashRing

from querator.clock import Clock, micros
from querator.cluster.membership import MemberSet
from querator.storage.schedules import schedule_slot

__all__ = ["Placement", "Ring"]


class Ring:
    """The owner of every (queue, partition) among ``node_ids``, as of etcd ``revision``."""

    def __init__(self, node_ids: Iterable[str], revision: int) -> None:
        self.node_ids = frozenset(node_ids)
        self.revision = revision
        # uhashring hashes with md5 (not Python's per-process salted hash()), so every node computes the
        # same points; sorting makes the (rare) tie between two points the same everywhere too.
        self._ring = HashRing(nodes=sorted(self.node_ids))

    def owner(self, queue: str, partition: int) -> str:
        """The node id owning ``partition`` of ``queue``; LookupError if the ring is empty."""
        if not self.node_ids:
            raise LookupError("the ring has no members")
        # '#' then digits cannot be confused: a queue named 'a#1' has keys 'a#1#<n>', never 'a#<n>'.
        owner: str = self._ring.get_node(f"{queue}#{partition}")
        return owner

    def schedule_owner(self, name: str) -> str:
        """The node id firing the schedule ``name`` (docs/schedules.md): its slot's owner; LookupError if
        the ring is empty."""
        return self.schedule_slot_owner(schedule_slot(name))

    def schedule_slot_owner(self, slot: int) -> str:
        """The node id firing the schedules of ``slot`` (``storage.schedules.schedule_slot``), which
        reads only its slots' schedules (docs/adr/0041); LookupError if the ring is empty."""
        if not self.node_ids:
            raise LookupError("the ring has no members")
        # '@schedule-slot' cannot be a partition's key, which ends in '#<digits>'.
        owner: str = self._ring.get_node(f"{slot}@schedule-slot")
        return owner

    def rate_limit_owner(self, queue: str, key: str) -> str:
        """The node id keeping the rate limit ``key`` of ``queue`` (docs/extensions.md, "Rate limits");
        LookupError if the ring is empty."""
        if not self.node_ids:
            raise LookupError("the ring has no members")
        # '@rate' cannot end a partition's key ('#<digits>') or a schedule's ('@schedule').
        owner: str = self._ring.get_node(f"{queue}/{key}@rate")
        return owner

    def __repr__(self) -> str:
        return f"Ring(revision={self.revision}, node_ids={sorted(self.node_ids)})"


class Placement:
    """The ring to route by: live members, plus vanished ones for ``grace_period`` seconds.

    Feed it every member set (``update``) and ask for ``ring()``. The ring object changes only when the
    set of ids in it changes, so callers can compare rings by identity to detect ownership changes;
    ``next_change_at()`` says when a grace period runs out, for the caller's timer.
    """

    def __init__(self, grace_period: float, clock: Clock) -> None:
        if grace_period < 0:
            raise ValueError("grace_period must not be negative")
        self._grace = micros(grace_period)
        self._clock = clock
        self._live: frozenset[str] = frozenset()
        self._revision = 0
        self._vanished: dict[str, int] = {}
        """Node id -> when its grace period ends (UTC microseconds)."""
        self._ring = Ring((), 0)

    def update(self, members: MemberSet) -> Ring:
        """Takes a new member set (ignored if older than the last one); returns ``ring()``."""
        self.see(members)
        return self.ring()

    def see(self, members: MemberSet) -> None:
        """Takes a new member set (ignored if older than the last one), without building a ring."""
        if members.revision < self._revision:
            return
        now = self._clock.now()
        live = members.node_ids
        for node_id in self._live - live:
            self._vanished[node_id] = now + self._grace
        for node_id in live:
            self._vanished.pop(node_id, None)
        self._live = live
        self._revision = members.revision

    def ring(self) -> Ring:
        """The ring of the live members and those still in their grace period, as of now."""
        effective, revision = self.node_ids()
        if effective != self._ring.node_ids:
            self._ring = Ring(effective, revision)
        return self._ring

    def node_ids(self) -> tuple[frozenset[str], int]:
        """The ids ``ring()`` would hold now (live members and those still in their grace period), and
        the revision of the member set: for a caller that builds the ring elsewhere."""
        now = self._clock.now()
        for node_id, until in list(self._vanished.items()):
            if until <= now:
                del self._vanished[node_id]
        return self._live | self._vanished.keys(), self._revision

    def in_grace(self) -> frozenset[str]:
        """Ids that vanished but still own their partitions (as of the last ``ring()``)."""
        return frozenset(self._vanished)

    def next_change_at(self) -> int | None:
        """When the earliest grace period ends (UTC microseconds), or None if none is running."""
        return min(self._vanished.values(), default=None)
