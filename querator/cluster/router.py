"""Router: where a request is served -- on this node (``HERE``), or at the node that owns what it needs
(a ``Remote``). Routing is a value the service acts on, never an exception.

Requests that name a partition (complete, retry, renew, the storage routes) go to that partition's owner.
Produce and lease name none: a node that owns a partition of the queue serves them itself, a node that
owns none hands them to an owner, each in turn. A request another node forwarded (``forwarded_by`` set)
is always served here or refused with 454: the rings of two nodes may disagree for a moment, and a retry
is cheaper than a loop.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Final

from querator.cluster.node import ClusterNode
from querator.cluster.ring import Ring
from querator.errors import try_again


@dataclass(frozen=True, slots=True)
class Here:
    """This node serves the request."""


@dataclass(frozen=True, slots=True)
class Remote:
    """Another node serves the request: its id and the address it is reached at."""

    node_id: str
    address: str


HERE: Final = Here()
Route = Here | Remote


class Router:
    """Ownership questions of the service, answered from this node's current ring."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node
        self._turn = itertools.count()
        self._ring: Ring | None = None
        self._owners_of: dict[tuple[str, int], list[str]] = {}
        """The owners of each queue's partitions under ``_ring``: produce and lease ask on every call."""
        self._owner_of: dict[tuple[str, int], str] = {}
        """The owner of each (queue, partition) under ``_ring``: complete and retry ask on every call,
        and a hash ring look-up hashes the key each time."""

    def owned(self, queue: str, count: int) -> list[int]:
        """The partitions of ``queue`` (of ``count``) this node owns."""
        me = self._node.node_id
        return [n for n in range(count) if self._node.owner(queue, n) == me]

    def schedule_owner(self, name: str) -> str:
        """The node id that fires the schedule ``name`` (docs/schedules.md)."""
        return self._node.ring.schedule_owner(name)

    def owns_schedule(self, name: str) -> bool:
        """Whether this node fires the schedule ``name`` now: it owns it on the ring and may serve."""
        return self._node.serving and self.schedule_owner(name) == self._node.node_id

    def rate_limit(self, queue: str, key: str, forwarded_by: str) -> Route:
        """Where the rate limit ``key`` of ``queue`` is kept: at the ring owner of the pair.

        Raises:
            RetryRequest: as ``partition``.
        """
        owner = self._current_ring().rate_limit_owner(queue, key)
        return HERE if owner == self._node.node_id else self._remote(owner, forwarded_by)

    def owns_schedule_slot(self, slot: int) -> bool:
        """Whether this node fires the schedules of ``slot`` now (``owns_schedule`` for a slot)."""
        return self._node.serving and self._node.ring.schedule_slot_owner(slot) == self._node.node_id

    def partition(self, queue: str, partition: int, forwarded_by: str) -> Route:
        """Where the requests of one partition are served.

        Raises:
            RetryRequest: another node owns it and the request was forwarded already, or the owner is
                unavailable.
        """
        ring = self._current_ring()
        owner = self._owner_of.get((queue, partition))
        if owner is None:
            owner = self._owner_of[queue, partition] = ring.owner(queue, partition)
        return HERE if owner == self._node.node_id else self._remote(owner, forwarded_by)

    def queue(self, queue: str, count: int, forwarded_by: str) -> Route:
        """For produce and lease: here when this node owns a partition of the queue; otherwise one of the
        owners, in turn, so that the requests of a node that owns nothing spread over the owners.

        Raises:
            RetryRequest: as ``partition``.
        """
        owners = self._owners(queue, count)
        if self._node.node_id in owners:
            return HERE
        return self._remote(owners[next(self._turn) % len(owners)], forwarded_by)

    def other_owners(self, queue: str, count: int, forwarded_by: str) -> list[Remote]:
        """Every other node owning a partition of the queue (for calls that need them all), starting
        with a different one each time; none for a request another node forwarded (its sender asks
        them)."""
        if forwarded_by or not self._node.clustered:
            return []
        # An owner that vanished (its grace period runs) serves nothing: no use asking it.
        others = [
            Remote(o, address)
            for o in self._owners(queue, count)
            if o != self._node.node_id and (address := self._node.address_of(o))
        ]
        if not others:
            return []
        start = next(self._turn) % len(others)
        return others[start:] + others[:start]

    def other_members(self) -> list[Remote]:
        """Every other member that can be reached now."""
        return [
            Remote(s.node_id, s.address)
            for s in self._node.members()
            if s.node_id != self._node.node_id and s.address
        ]

    def _current_ring(self) -> Ring:
        ring = self._node.ring
        if ring is not self._ring:  # a new ring: every answer may have changed
            self._ring, self._owners_of, self._owner_of = ring, {}, {}
        return ring

    def _owners(self, queue: str, count: int) -> list[str]:
        ring = self._current_ring()
        owners = self._owners_of.get((queue, count))
        if owners is None:
            owners = self._owners_of[queue, count] = sorted({ring.owner(queue, n) for n in range(count)})
        return owners

    def _remote(self, node_id: str, forwarded_by: str) -> Remote:
        if forwarded_by:
            raise try_again(f"{forwarded_by} sent it to {self._node.node_id}, which does not own it now")
        address = self._node.address_of(node_id)
        if not address:
            raise try_again(f"the owner {node_id} is unavailable")
        return Remote(node_id, address)
