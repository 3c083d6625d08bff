"""Router: where a request is served -- on this node, or by the node that owns the partition it needs.

Requests that name a partition (complete, retry, renew, the storage routes) go to that partition's owner.
Produce and lease name none: a node that owns a partition of the queue serves them itself, a node that
owns none hands them to an owner, each in turn. A request another node forwarded is always served here
or refused with 454 (``FORWARDED``): the rings of two nodes may disagree for a moment, and a retry is
cheaper than a loop.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar

from querator.cluster.node import ClusterNode
from querator.cluster.proxy import Forward
from querator.cluster.ring import Ring
from querator.errors import try_again

FORWARDED: ContextVar[str] = ContextVar("forwarded", default="")
"""The id of the node that forwarded the request being served; "" for a client's own request."""


class Router:
    """Ownership questions of the service, answered from this node's current ring."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node
        self._turn = itertools.count()
        self._ring: Ring | None = None
        self._owners_of: dict[tuple[str, int], list[str]] = {}
        """The owners of each queue's partitions under ``_ring``: produce and lease ask on every call."""

    @property
    def clustered(self) -> bool:
        return self._node.clustered

    def owned(self, queue: str, count: int) -> list[int]:
        """The partitions of ``queue`` (of ``count``) this node owns."""
        me = self._node.node_id
        return [n for n in range(count) if self._node.owner(queue, n) == me]

    def partition_target(self, queue: str, partition: int, timeout: float) -> Forward | None:
        """None when this node owns the partition; otherwise where to forward its request."""
        owner = self._node.owner(queue, partition)
        return None if owner == self._node.node_id else self._target(owner, timeout)

    def queue_target(self, queue: str, count: int, timeout: float) -> Forward | None:
        """For produce and lease: None when this node owns a partition of the queue; otherwise one of
        the owners, in turn, so that requests of a node that owns nothing spread over the owners."""
        owners = self._owners(queue, count)
        if self._node.node_id in owners:
            return None
        return self._target(owners[next(self._turn) % len(owners)], timeout)

    def other_owners(self, queue: str, count: int, timeout: float) -> list[Forward]:
        """Every other node owning a partition of the queue (for calls that need them all), starting
        with a different one each time; empty for a request another node forwarded."""
        if FORWARDED.get():
            return []
        # An owner that vanished (its grace period runs) serves nothing: no use asking it.
        others = [
            o for o in self._owners(queue, count) if o != self._node.node_id and self._node.address_of(o)
        ]
        if not others:
            return []
        start = next(self._turn) % len(others)
        return [self._target(o, timeout) for o in others[start:] + others[:start]]

    def _owners(self, queue: str, count: int) -> list[str]:
        ring = self._node.ring
        if ring is not self._ring:  # a new ring: every answer may have changed
            self._ring, self._owners_of = ring, {}
        owners = self._owners_of.get((queue, count))
        if owners is None:
            owners = self._owners_of[queue, count] = sorted({ring.owner(queue, n) for n in range(count)})
        return owners

    def _target(self, node_id: str, timeout: float) -> Forward:
        forwarded_by = FORWARDED.get()
        if forwarded_by:
            raise try_again(f"{forwarded_by} sent it to {self._node.node_id}, which does not own it now")
        address = self._node.address_of(node_id)
        if not address:
            raise try_again(f"the owner {node_id} is unavailable")
        return Forward(node_id, address, timeout)
