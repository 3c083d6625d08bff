"""Cluster membership: which nodes are up, as etcd sees it, and whether this node may serve.

A node joins by granting an etcd lease and creating ``<prefix>/nodes/<node-id>`` (value: its address and
start time) attached to the lease, in a txn that only succeeds if the key does not exist. It keeps the
lease alive; when it stops (or dies) the lease is revoked (or expires) and etcd deletes the key. A key
under the prefix that is attached to no lease is ignored: no node writes one. Every node lists
``<prefix>/nodes/`` and watches it from the listed revision + 1, so all nodes see the same member sets
in the same order, each tagged with the etcd revision it was true at.

The safety signal is ``serving``: it turns false *before* etcd could expire this node's lease when the
lease cannot be renewed (etcd down, stopped, partitioned away), at ``SERVING_FRACTION`` of the TTL after
the last renewal that succeeded was sent. The lease can only expire after the full TTL counted from when
etcd *received* that renewal, which is later, so the node has at least the rest of the TTL to stop
serving its partitions before another node can be given them. Storage fencing covers what a clock or a
paused process can still get wrong (docs/cluster.md).

Failures: etcd outages are retried forever (with back-off) in the background; only ``start`` raises,
``MembershipError`` when the node id belongs to a live node, ``EtcdError`` when etcd cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import aiohttp
import msgspec

from querator import _tasks
from querator.clock import Clock, SystemClock, TimerHandle, micros
from querator.cluster.etcd import (
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    Event,
    KeyValue,
    LeaseNotFound,
    RangeResult,
)
from querator.config import ClusterConfig

__all__ = ["Member", "MemberSet", "Membership", "MembershipError"]

log = logging.getLogger(__name__)

RENEW_FRACTION = 1 / 3
"""The lease is renewed every ``ttl * RENEW_FRACTION`` seconds: two renewals may fail before serving stops."""
SERVING_FRACTION = 2 / 3
"""``serving`` turns false ``ttl * SERVING_FRACTION`` seconds after the last successful renewal was sent,
leaving a third of the TTL to stop serving before the lease can expire."""
RETRY_INTERVAL = 0.5
"""Seconds between attempts after a failed renewal or registration (capped at the renewal interval)."""
WATCH_BACKOFF = (0.1, 5.0)
"""First and longest pause, in seconds, before listing and watching again after the watch broke."""
PREDECESSOR_MARGIN = 1.0
"""Seconds beyond the remaining TTL of a key holding our node id before we call its holder alive."""


class MembershipError(Exception):
    """This node cannot be a member: its node id is held by another live node."""


@dataclass(frozen=True)
class Member:
    """One node of the cluster."""

    node_id: str
    address: str
    """``host:port`` the other nodes reach it at."""
    started_at: int
    """When it registered, UTC microseconds since the epoch."""


@dataclass(frozen=True)
class MemberSet:
    """The members at one etcd revision, sorted by node id."""

    revision: int
    members: tuple[Member, ...] = ()

    @property
    def node_ids(self) -> frozenset[str]:
        return frozenset(m.node_id for m in self.members)

    def get(self, node_id: str) -> Member | None:
        """The member with this id, or None."""
        return next((m for m in self.members if m.node_id == node_id), None)


class _Registration(msgspec.Struct):
    # Unknown fields are allowed on purpose: a newer node may add some during a rolling upgrade.
    address: str
    started_at: int


_encode = msgspec.json.Encoder().encode
_decode_registration = msgspec.json.Decoder(_Registration).decode


class Membership:
    """This node's membership in the cluster described by ``config``.

    ``start`` joins (or raises); from then on ``members`` follows etcd and ``serving`` says whether
    the node may serve partitions; ``stop`` leaves. Not thread-safe: use it from one event loop.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        clock: Clock | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._config = config
        self._clock = clock or SystemClock()
        self._session = session
        self._owns_session = session is None
        self._nodes_prefix = f"{config.prefix}/nodes/".encode()
        self._key = self._nodes_prefix + config.node_id.encode()
        self._renew_interval = config.lease_ttl * RENEW_FRACTION
        # A call that cannot finish before the next renewal is due is worth abandoning.
        self._request_timeout = self._renew_interval
        self._retry_interval = min(RETRY_INTERVAL, self._renew_interval)
        self._etcd: EtcdClient | None = None
        self._lease_id: int | None = None
        self._members = MemberSet(0)
        self._changed = asyncio.Event()
        self._serving = False
        self._serving_deadline = 0.0
        self._serving_timer: TimerHandle | None = None
        self._serving_listeners: list[Callable[[bool], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    @property
    def node_id(self) -> str:
        return self._config.node_id

    @property
    def members(self) -> MemberSet:
        """The latest member set seen (it includes this node once ``start`` returned)."""
        return self._members

    @property
    def serving(self) -> bool:
        """True while this node's lease is certainly alive, so it may serve its partitions."""
        return self._serving

    def on_serving(self, callback: Callable[[bool], None]) -> Callable[[], None]:
        """Calls ``callback(serving)`` on the event loop each time ``serving`` flips; returns an unsubscribe.

        The call comes the moment the flip is known (a timer, not a poll), so a node can stop serving its
        partitions right there. Exceptions from the callback are logged and ignored.
        """
        self._serving_listeners.append(callback)
        return lambda: self._serving_listeners.remove(callback)

    async def changes(self) -> AsyncIterator[MemberSet]:
        """The current member set, then each newer one, until ``stop``.

        A slow reader skips intermediate sets and gets the latest: each set is complete, not a delta.
        """
        seen: MemberSet | None = None
        while not self._stopped:
            changed = self._changed
            if self._members is not seen:
                seen = self._members
                yield seen
            else:
                await changed.wait()

    async def start(self) -> None:
        """Joins the cluster and returns once registered, with the first member set listed.

        Raises MembershipError if another live node holds this node id (a dead one's key is waited
        for: it goes when its lease expires), EtcdError if etcd cannot be reached.
        """
        config = self._config
        if self._session is None:
            tls = config.etcd_tls if config.etcd_tls is not None else True
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls))
        self._etcd = EtcdClient(config.endpoints, self._session, config.etcd_username, config.etcd_password)
        try:
            await self._register()
            await self._list()
        except BaseException:
            await self._leave()
            raise
        self._tasks = [
            _tasks.start(self._keep_alive(), f"membership-keepalive-{self.node_id}"),
            _tasks.start(self._watch(), f"membership-watch-{self.node_id}"),
        ]
        log.info(
            "node %s joined %s as %s at revision %d with %d member(s)",
            self.node_id,
            self._config.prefix,
            self._config.advertise_address,
            self._members.revision,
            len(self._members.members),
        )

    async def stop(self) -> None:
        """Leaves the cluster: stops the background tasks and revokes the lease, which deletes this
        node's key at once. If etcd cannot be reached the key goes when the lease expires."""
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._changed.set()
        await self._leave()

    async def _leave(self) -> None:
        if self._serving_timer is not None:
            self._serving_timer.cancel()
        self._set_serving(False)
        if self._lease_id is not None and self._etcd is not None:
            try:
                await self._etcd.revoke(self._lease_id, self._request_timeout)
                log.info("node %s left %s", self.node_id, self._config.prefix)
            except LeaseNotFound:
                pass
            except EtcdError as e:
                log.warning(
                    "node %s could not revoke its lease (%s); its key goes when the lease expires",
                    self.node_id,
                    e,
                )
            self._lease_id = None
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def _register(self) -> None:
        """Grants a lease and creates our key with it; waits out a dead predecessor's key."""
        assert self._etcd is not None
        value = _encode(_Registration(self._config.advertise_address, self._clock.now()))
        holder_deadline: float | None = None
        while True:
            sent = self._clock.monotonic()
            lease = await self._etcd.grant(self._config.lease_ttl, self._request_timeout)
            try:
                txn = await self._etcd.create(self._key, value, lease.id, self._request_timeout)
                if txn.succeeded:
                    self._lease_id = lease.id
                    self._renewed(sent, lease.ttl)
                    return
            finally:
                if self._lease_id != lease.id:
                    # Nothing renews this lease: revoke it rather than leave a key for a full TTL.
                    await self._revoke_quietly(lease.id)
            holder = _existing(txn.responses[0].response_range if txn.responses else None)
            if holder is None:
                continue  # it went between the compare and the read
            if holder_deadline is None:
                holder_deadline = await self._holder_deadline(holder)
            if self._clock.monotonic() >= holder_deadline:
                if await self._holder_alive(holder):
                    raise MembershipError(
                        f"node id '{self.node_id}' is already registered by a live node "
                        f"({_address(holder)}, lease {holder.lease:x}); give each node its own --node-id"
                    )
                # Expired, not yet revoked: etcd's lessor lags behind on a busy machine.
                holder_deadline = self._clock.monotonic() + PREDECESSOR_MARGIN
            await self._sleep(self._retry_interval)

    async def _revoke_quietly(self, lease_id: int) -> None:
        assert self._etcd is not None
        with contextlib.suppress(EtcdError):
            await self._etcd.revoke(lease_id, self._request_timeout)

    async def _holder_deadline(self, holder: KeyValue) -> float:
        """When the key holding our id must have gone if its holder is dead (monotonic seconds)."""
        assert self._etcd is not None
        if holder.lease == 0:
            return self._clock.monotonic()  # not attached to a lease: it will never go by itself
        ttl = await self._etcd.time_to_live(holder.lease, self._request_timeout)
        log.warning(
            "node id %s is held by lease %x (%s) with %ds left; waiting for it to expire in case "
            "its holder is a previous run of this node",
            self.node_id,
            holder.lease,
            _address(holder),
            ttl.ttl,
        )
        return self._clock.monotonic() + max(ttl.ttl, 0) + PREDECESSOR_MARGIN

    async def _holder_alive(self, holder: KeyValue) -> bool:
        """Whether the key's lease lives on past the TTL it had when first seen: its holder renews it."""
        assert self._etcd is not None
        if holder.lease == 0:
            return True
        ttl = await self._etcd.time_to_live(holder.lease, self._request_timeout)
        return ttl.ttl > 0

    async def _keep_alive(self) -> None:
        """Renews the lease forever; re-registers (same id) when etcd lost it."""
        assert self._etcd is not None
        outage = _Outage(f"node {self.node_id}: etcd lease renewal")
        while True:
            if self._lease_id is None:
                try:
                    await self._register()
                except (EtcdError, MembershipError) as e:
                    outage.failed(e)
                    await self._sleep(self._retry_interval)
                    continue
                log.info("node %s registered again", self.node_id)
                outage.ended()
                await self._sleep(self._renew_interval)
                continue
            sent = self._clock.monotonic()
            try:
                ttl = await self._etcd.keepalive(self._lease_id, self._request_timeout)
            except LeaseNotFound:
                # The lease expired (etcd was unreachable too long): our key is gone with it.
                log.warning("node %s lost its etcd lease; registering again", self.node_id)
                self._lease_id = None
                self._set_serving(False)
                continue
            except EtcdError as e:
                outage.failed(e)
                await self._sleep(self._retry_interval)
                continue
            outage.ended()
            self._renewed(sent, ttl)
            await self._sleep(self._renew_interval)

    def _renewed(self, sent: float, ttl: int) -> None:
        """The lease lives at least ``ttl`` seconds from ``sent`` (monotonic): serve for a safe part."""
        self._serving_deadline = sent + ttl * SERVING_FRACTION
        self._arm_serving_timer()
        self._set_serving(True)

    def _arm_serving_timer(self) -> None:
        if self._serving_timer is not None:
            self._serving_timer.cancel()
        # Measured on the monotonic clock, so a wall-clock step cannot stretch the deadline.
        delay = self._serving_deadline - self._clock.monotonic()
        self._serving_timer = self._clock.call_at(
            self._clock.now() + max(0, micros(delay)), self._serving_timer_fired
        )

    def _serving_timer_fired(self) -> None:
        self._serving_timer = None
        if self._clock.monotonic() < self._serving_deadline:
            self._arm_serving_timer()
            return
        if self._serving:
            log.warning(
                "node %s stops serving: its etcd lease was not renewed in time and may expire",
                self.node_id,
            )
        self._set_serving(False)

    def _set_serving(self, serving: bool) -> None:
        if serving == self._serving:
            return
        self._serving = serving
        for callback in list(self._serving_listeners):
            try:
                callback(serving)
            except Exception:
                log.exception("serving listener failed")

    async def _list(self) -> None:
        assert self._etcd is not None
        listing = await self._etcd.get_prefix(self._nodes_prefix, self._request_timeout)
        members = {}
        for kv in listing.kvs:
            member = self._member(kv)
            if member is not None:
                members[member.node_id] = member
        self._publish(listing.header.revision, members.values())

    async def _watch(self) -> None:
        """Follows the member set: watch from the listed revision + 1; on a break, back off, list again."""
        assert self._etcd is not None
        outage = _Outage(f"node {self.node_id}: member watch")
        backoff = WATCH_BACKOFF[0]
        relist = False
        while True:
            try:
                if relist:
                    await self._list()
                    relist = False
                stream = self._etcd.watch_prefix(
                    self._nodes_prefix, self._members.revision + 1, self._request_timeout
                )
                async with contextlib.aclosing(stream):
                    async for response in stream:
                        outage.ended()
                        backoff = WATCH_BACKOFF[0]
                        if response.events:
                            self._apply(response.header.revision, response.events)
            except EtcdCompacted as e:
                log.info("node %s: member watch compacted (%s); listing again", self.node_id, e)
            except EtcdError as e:
                outage.failed(e)
            relist = True
            await self._sleep(backoff)
            backoff = min(backoff * 2, WATCH_BACKOFF[1])

    def _apply(self, revision: int, events: Iterable[Event]) -> None:
        members = {m.node_id: m for m in self._members.members}
        for event in events:
            member = None if event.type == "DELETE" else self._member(event.kv)
            if member is None:  # deleted, or overwritten by something that is no registration
                members.pop(self._node_id_of(event.kv), None)
            else:
                members[member.node_id] = member
        self._publish(revision, members.values())

    def _publish(self, revision: int, members: Iterable[Member]) -> None:
        current = MemberSet(revision, tuple(sorted(members, key=lambda m: m.node_id)))
        if current == self._members:
            return
        self._members = current
        self._changed.set()
        self._changed = asyncio.Event()

    def _node_id_of(self, kv: KeyValue) -> str:
        return kv.key[len(self._nodes_prefix) :].decode(errors="replace")

    def _member(self, kv: KeyValue) -> Member | None:
        if not kv.lease:
            # A node's key lives and dies with its lease; one without (put by hand, or a node's key
            # overwritten) would outlive any node, so it is nobody's.
            log.warning("ignoring %r: a member key must be attached to a lease", kv.key)
            return None
        try:
            registration = _decode_registration(kv.value)
        except msgspec.DecodeError as e:
            log.warning("ignoring %r: not a node registration (%s)", kv.key, e)
            return None
        return Member(self._node_id_of(kv), registration.address, registration.started_at)

    async def _sleep(self, seconds: float) -> None:
        """Waits on the injected clock, so a test clock controls the pacing too."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)

        handle = self._clock.call_at(self._clock.now() + micros(seconds), wake)
        try:
            await done
        finally:
            handle.cancel()


class _Outage:
    """Logs the first failure of an outage as a warning, the repeats at debug, and the recovery."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._failures = 0

    def failed(self, error: Exception) -> None:
        self._failures += 1
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        log.log(level, "%s failing: %s", self._what, error)

    def ended(self) -> None:
        if self._failures:
            log.info("%s: recovered after %d failed attempt(s)", self._what, self._failures)
            self._failures = 0


def _existing(listing: RangeResult | None) -> KeyValue | None:
    return listing.kvs[0] if listing is not None and listing.kvs else None


def _address(holder: KeyValue) -> str:
    try:
        return _decode_registration(holder.value).address
    except msgspec.DecodeError:
        return "unknown address"
