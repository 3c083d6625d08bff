"""ClusterNode: this node's view of the cluster -- who the members are and who owns each partition.

It joins through ``Membership`` (etcd), feeds every member set to ``Placement`` and keeps the current
``Ring``, re-evaluated when a vanished member's grace period runs out. Member events are settled first:
a burst of them (a node's processes starting, or their grace periods ending, together) makes one new
ring, built off the event loop (docs/adr/0039). Without ``--cluster`` the node is
a one-member ring: the same code answers ``cluster.info`` and ownership questions either way, so the
rest of the server never asks whether it runs alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from querator import _tasks
from querator.clock import Clock, TimerHandle, micros
from querator.cluster.local_members import LocalMembers
from querator.cluster.membership import Member, MemberSet, Membership
from querator.cluster.ring import Placement, Ring
from querator.config import ClusterConfig

log = logging.getLogger(__name__)

LOCAL_NODE = "local"
"""The node id of a node that runs alone."""
SETTLE_S = 0.5
"""Seconds without a member event before the ring is rebuilt: a node's processes register within about
this much of each other, and each partition moving twice costs more than half a second of waiting."""
SETTLE_MAX_S = 2.0
"""Seconds a stream of member events may hold a new ring back, at most."""


@dataclass(frozen=True, slots=True)
class MemberState:
    """A member as ``cluster.info`` reports it."""

    node_id: str
    address: str
    state: str
    """``serving`` (live), ``grace`` (vanished, still owns its partitions) or ``joining`` (this node,
    registered but not yet sure of its lease)."""


class ClusterNode:
    """Membership and placement of this node; ``start`` joins, ``stop`` leaves.

    ``local``: the member set of this node's own processes (``serve --processes N``), in place of
    etcd's; this node is then one of them, with the id and private address ``local`` gives it.
    """

    def __init__(
        self, config: ClusterConfig | None, clock: Clock, address: str, local: LocalMembers | None = None
    ) -> None:
        self._config = config
        self._clock = clock
        self.node_id = config.node_id if config else LOCAL_NODE
        self.address = config.advertise_address if config else address
        self._membership: Membership | LocalMembers | None = (
            Membership(config, clock=clock) if config else None
        )
        if local is not None:
            self.node_id, self.address, self._membership = local.node_id, local.address, local
        self._placement = Placement(config.grace_period if config else 0.0, clock)
        self._ring = Ring([self.node_id], 0)
        self._follower: asyncio.Task[None] | None = None
        self._grace_timer: TimerHandle | None = None
        self._settle_timer: TimerHandle | None = None
        self._burst_began = 0
        """When the first member event not yet in the ring came (UTC microseconds)."""
        self._builder: asyncio.Task[None] | None = None
        self._build_again = False
        self._listeners: list[Callable[[], None]] = []
        self.ring_changes = 0
        """Rings adopted after the first (exported as ``querator_cluster_ring_changes_total``)."""

    @property
    def clustered(self) -> bool:
        return self._membership is not None

    @property
    def ring(self) -> Ring:
        return self._ring

    @property
    def serving(self) -> bool:
        """Whether this node may serve partitions now (always, alone)."""
        return self._membership is None or self._membership.serving

    def on_change(self, callback: Callable[[], None]) -> None:
        """Calls ``callback()`` on the event loop whenever the ring or ``serving`` changes: the owned
        partitions of this node may have changed."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                log.exception("cluster change listener failed")

    def address_of(self, node_id: str) -> str:
        """The advertised address of a live member ("" for one that vanished or is unknown)."""
        if node_id == self.node_id:
            return self.address
        if self._membership is None:
            return ""
        member = self._membership.members.get(node_id)
        return member.address if member is not None else ""

    async def start(self) -> None:
        """Joins the cluster (no-op alone); raises MembershipError or EtcdError if it cannot."""
        if self._membership is None:
            return
        await self._membership.start()
        self._placement.see(self._membership.members)
        self._ring = self._placement.ring()  # nothing is served yet: no need to build it elsewhere
        self._arm_grace_timer()
        self._follower = _tasks.start(self._follow(self._membership), "cluster-members")
        self._membership.on_serving(lambda _serving: self._changed())
        log.info(
            "joined the cluster as %s (%s): %d members at revision %d",
            self.node_id,
            self.address,
            len(self._ring.node_ids),
            self._ring.revision,
        )

    async def stop(self) -> None:
        """Leaves the cluster: the lease is revoked, the other nodes see this node go at once."""
        for timer in (self._grace_timer, self._settle_timer):
            if timer is not None:
                timer.cancel()
        for task in (self._follower, self._builder):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._membership is not None:
            await self._membership.stop()

    def owner(self, queue: str, partition: int) -> str:
        """The node id owning ``partition`` of ``queue``."""
        return self._ring.owner(queue, partition)

    def members(self) -> list[MemberState]:
        """The ring's members, sorted by id."""
        if self._membership is None:
            return [MemberState(self.node_id, self.address, "serving")]
        listed: MemberSet = self._membership.members
        found: list[MemberState] = []
        for node_id in sorted(self._ring.node_ids):
            member: Member | None = listed.get(node_id)
            if member is None:
                found.append(MemberState(node_id, "", "grace"))
            elif node_id == self.node_id and not self.serving:
                found.append(MemberState(node_id, member.address, "joining"))
            else:
                found.append(MemberState(node_id, member.address, "serving"))
        return found

    async def _follow(self, membership: Membership | LocalMembers) -> None:
        async for members in membership.changes():
            self._placement.see(members)
            self._settle()

    def _settle(self) -> None:
        """(Re)arms the timer that builds the next ring: ``SETTLE_S`` after the last event of a burst,
        ``SETTLE_MAX_S`` after its first at the latest."""
        now = self._clock.now()
        if self._settle_timer is None:
            self._burst_began = now
        else:
            self._settle_timer.cancel()
        due = min(now + micros(SETTLE_S), self._burst_began + micros(SETTLE_MAX_S))
        self._settle_timer = self._clock.call_at(due, self._settled)

    def _settled(self) -> None:
        self._settle_timer = None
        if self._builder is None or self._builder.done():
            self._builder = _tasks.start(self._build(), "cluster-ring")
        else:
            self._build_again = True  # the build running may miss the newest events: another follows

    async def _build(self) -> None:
        """Builds the ring of the settled member set in a thread (hashing the members' points takes
        milliseconds per dozen members) and adopts it unless newer events came meanwhile."""
        while True:
            self._build_again = False
            node_ids, revision = self._placement.node_ids()
            if node_ids != self._ring.node_ids:
                ring = await asyncio.get_running_loop().run_in_executor(None, Ring, node_ids, revision)
                if self._build_again:
                    continue
                log.info("ring changed at revision %d: %s", ring.revision, sorted(ring.node_ids))
                self._ring = ring
                self.ring_changes += 1
                self._changed()
            self._arm_grace_timer()
            if not self._build_again:
                return

    def _arm_grace_timer(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        ends = self._placement.next_change_at()
        if ends is not None:
            self._grace_timer = self._clock.call_at(ends, self._grace_ended)

    def _grace_ended(self) -> None:
        self._grace_timer = None
        self._settle()
