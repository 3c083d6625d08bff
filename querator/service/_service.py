"""Service: the one Python API of Querator -- validates requests, routes them, and calls the queue.

Every method takes and returns wire messages (``querator.wire.messages``), so the HTTP layer only decodes
and encodes, and an embedding program gets the same behaviour as an HTTP client, in a cluster too. A
queue request is checked completely first (``_validation``), then routed (``querator.cluster.router``):
to this node's engine (``LocalQueue``) or to the owner (``RemoteQueue``), which have the same methods.
Every method of a request takes its ``RequestContext`` first (docs/adr/0056): whom it is for (authorized
by ``Tenancy.authorize``), until when its waits may last (``deadline_us``), and ``forwarded_by``, the node
that forwarded the request ("" for a client's own): such a request is served here or refused, never
forwarded again. The server's own calls pass ``AS_SERVER``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Awaitable, Iterable

import msgspec

from querator import _tasks
from querator.auth import ClusterAuth
from querator.clock import MICROS, Clock, SystemClock, seconds, sleep_until, to_datetime
from querator.cluster.lease_wait import LeaseCounters, SharedQueue, Watches
from querator.cluster.node import ClusterNode
from querator.cluster.proxy import Proxy
from querator.cluster.remote_queue import RemoteQueue
from querator.cluster.router import HERE, Remote, Route, Router
from querator.engine.queues_manager import HandOff, QueuesManager
from querator.engine.redrive import redrive
from querator.errors import (
    TRY_AGAIN,
    InvalidOption,
    RetryRequest,
    no_such_queue,
    shutting_down,
    try_again,
)
from querator.metrics import Metrics
from querator.schedules import Scheduler
from querator.service._conversion import storage_item, stored_item
from querator.service._local_queue import LocalQueue
from querator.service._queue_admin import QueueAdministration
from querator.service._rate_limits import RateLimits, check_take
from querator.service._schedules import TELL_TIMEOUT_S, Schedules, tick_produce
from querator.service._validation import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    SYSTEM_NAMESPACE,
    check_clear,
    check_complete,
    check_delete,
    check_import,
    check_lease,
    check_list_items,
    check_partition,
    check_produce,
    check_redrive,
    check_redrive_target,
    check_renew,
    check_retry,
    check_stored_name,
    namespace,
)
from querator.service._workflows import DEFAULT_RETENTION_US, Workflows
from querator.storage.base import Item, QueueRecord, Store
from querator.storage.operations import moved_copies
from querator.storage.schedules import ScheduleRecord
from querator.storage.split import SplitStore
from querator.tenancy import AS_SERVER, RequestContext, Tenancy
from querator.tenancy import permissions as perm
from querator.wire import messages as m

DEDUP_PURGE_INTERVAL_US = 60 * MICROS
WORKFLOW_SWEEP_INTERVAL_US = 60 * MICROS
WORKFLOW_SWEEPER = "querator.workflow-sweep"
"""The ring key whose owner sweeps the workflows (docs/durable.md, "No workflow stuck")."""
READY_TIMEOUT_S = 5.0
NOT_SERVING = f"{TRY_AGAIN}; this node is not serving partitions now"
FORWARD_TIMEOUT_S = 5.0
"""Seconds a forwarded rate limit take may take, reply included."""

Target = LocalQueue | RemoteQueue
"""Where a routed request is carried out: the same methods either way."""
LeaseTarget = Target | SharedQueue[LocalQueue]
"""Where a lease waits: this member's engine, another owner, or both with a watch on the others."""

log = logging.getLogger(__name__)


class Service(QueueAdministration):
    """Querator on one node: queue administration (``QueueAdministration``) and the queue API over a storage
    backend."""

    def __init__(
        self,
        store: Store,
        clock: Clock | None = None,
        max_requests_per_queue: int = 100,
        workflow_retention_us: int = DEFAULT_RETENTION_US,
        cluster: ClusterNode | None = None,
        cluster_auth: ClusterAuth | None = None,
        cluster_tls: ssl.SSLContext | None = None,
        tenancy: bool = False,
        bootstrap_keys: Iterable[bytes] = (),
    ) -> None:
        """``tenancy``: authorize every request by namespaces, users and roles (docs/tenancy.md), with
        ``bootstrap_keys`` (SHA-256 digests) as the keys of the bootstrap admin."""
        self.clock: Clock = clock or SystemClock()
        self.store = store
        self.cluster = cluster or ClusterNode(None, self.clock, "")
        self.router = Router(self.cluster)
        self.manager = QueuesManager(
            store,
            self.clock,
            self._dead_letter,
            max_requests_per_queue,
            owned=self.router.owned if self.cluster.clustered else None,
            owner=self.cluster.owner if self.cluster.clustered else None,
        )
        lease_counters = LeaseCounters()
        self.metrics = Metrics(
            self.clock, self.cluster, self.manager, self.ready, self.background_tasks, lease_counters
        )
        self.proxy = Proxy(self.cluster.node_id, cluster_auth, cluster_tls, self.metrics.forwarded)
        self.watches = Watches(self.proxy, self.clock, lease_counters)
        self.scheduler = Scheduler(store, self.clock, self.router.owns_schedule_slot, self._fire_tick)
        self.schedules = Schedules(
            store,
            self.clock,
            self._queue_exists,
            self.router.schedule_owner,
            self.scheduler,
            authorize=self._authorize_queue if tenancy else None,
            tell_owner=self._tell_schedule_owner,
        )
        self.tenancy = Tenancy(store, self.clock, self.metrics.registry)
        if tenancy:
            self.tenancy.enable(bootstrap_keys)
        self.workflows = Workflows(
            store.workflows,
            self.clock,
            self._produce_own,
            self.complete,
            self._queue_namespace,
            self._lease_in,
            self.release,
            workflow_retention_us,
            authorize=self.tenancy.authorize if tenancy else None,
        )
        self.rate_limits = RateLimits()
        """The cluster-wide rate limits whose keys this node owns (docs/extensions.md)."""
        self._split = store if isinstance(store, SplitStore) else None
        """One of a node's processes (docs/processes.md): its partitions, and their de-duplication
        records, are its own; a produce carrying dedup ids goes to the owner of partition 0, whose
        records are then the queue's."""
        self._closing = False
        self._started = False
        self._purger: _tasks.Supervised | None = None
        self._sweeper: _tasks.Supervised | None = None

    async def start(self) -> None:
        """Opens the storage backend and starts dropping expired de-duplication records. What a task
        started here asks of the service, it asks as the server (``AS_SERVER``, docs/adr/0056)."""
        await self.store.open()
        try:
            await self.cluster.start()
        except BaseException:
            await self.store.close()
            raise
        try:
            await self.tenancy.start()
        except BaseException:
            await self.cluster.stop()
            await self.store.close()
            raise
        self.cluster.on_change(self._cluster_changed)
        self._purger = _tasks.Supervised(self._purge_dedup, "dedup-purge", self.clock)
        self._sweeper = _tasks.Supervised(self._sweep_workflows, "workflow-sweep", self.clock)
        self.scheduler.start()
        self._started = True

    async def shutdown(self) -> None:
        """Stops every queue (waiting requests get 453), then closes storage."""
        self._closing = True
        for task in (self._purger, self._sweeper):
            if task is not None:
                await task.stop()
        await self.scheduler.stop()
        await self.manager.shutdown()
        await self.tenancy.stop()
        await self.cluster.stop()
        await self.watches.close()
        await self.proxy.close()
        await self.store.close()

    def background_tasks(self) -> list[_tasks.Supervised]:
        """The node's long-lived tasks that run now (started again when they fail)."""
        tasks = (self._purger, self._sweeper, self.scheduler.task, self.tenancy.flusher)
        return [task for task in tasks if task is not None]

    # Long on purpose: one reason per check, in the order a probe should read them.
    async def ready(self) -> str:  # noqa: PLR0911
        """Why this node should not get traffic now, or "" when it is ready (storage answers)."""
        if not self._started:
            return "starting"
        if self._closing:
            return "shutting down"
        if not self.cluster.serving:
            return "not serving: the cluster lease is not certain"
        loading = next((q.name for q in self.manager.running() if q.loading()), None)
        if loading is not None:
            # A node that just took partitions over answers for them only once their state is read.
            return f"loading the partitions of queue {loading}"
        for queue in self.manager.running():
            failing = queue.failing()
            if failing is not None:
                # Storage refused it (a damaged file, a full disk, an outage): until it recovers, its
                # requests get 454s; a node whose partition serves nothing should not get traffic.
                return f"partition {failing[0]} of queue {queue.name} is failing: {failing[1]}"
        # A task that keeps failing (the scheduler: no schedule of this node fires) is restarted, but
        # what it does is not done meanwhile: the node should be looked at, not just kept in traffic.
        failing_task = next((t.failing() for t in self.background_tasks() if t.failing()), "")
        if failing_task:
            return failing_task
        try:
            await asyncio.wait_for(self.store.check(), READY_TIMEOUT_S)
        except Exception as e:
            return f"storage cannot take writes: {e or type(e).__name__}"
        try:
            await asyncio.wait_for(self.store.list_queues("", 1, SYSTEM_NAMESPACE), READY_TIMEOUT_S)
        except Exception as e:
            log.warning("readiness: storage check failed: %s", e)
            return "storage check failed"
        return ""

    async def cluster_info(self, ctx: RequestContext, req: m.ClusterInfoRequest) -> m.ClusterInfoResponse:
        """The members, the ring's revision, and the owner of each partition and this node's recent
        hand-offs (of one queue, or of every queue of a namespace: never those of a queue the caller
        may not see)."""
        if req.queue_name:
            check_stored_name(req.queue_name)
            records = [await self._authorized_record(ctx, req.queue_name, perm.QUEUE_STATS)]
        else:
            listed = namespace(req.namespace)
            await self.tenancy.authorize(ctx, listed, perm.QUEUE_LIST)
            records = await self._queues_of(listed)
        cluster = self.cluster
        names = {r.name for r in records}
        return m.ClusterInfoResponse(
            node_id=cluster.node_id,
            revision=cluster.ring.revision,
            members=[
                m.ClusterMember(node_id=s.node_id, address=s.address, state=s.state)
                for s in cluster.members()
            ],
            partitions=[
                m.ClusterPartition(queue_name=r.name, partition=n, owner=cluster.owner(r.name, n))
                for r in records
                for n in range(r.requested_partitions)
            ],
            hand_offs=[
                m.ClusterHandOff(
                    at=to_datetime(e.at_us),
                    queue_name=e.queue,
                    partition=e.partition,
                    direction=e.direction.value,
                    other_node=e.other_node,
                    reason=e.reason,
                    outcome=e.outcome.value,
                )
                for e in self.manager.hand_offs.newest_first()
                if e.queue in names
            ],
        )

    async def _queues_of(self, listed: str) -> list[QueueRecord]:
        """Every queue of the namespace ``listed``, page by page (the pivot is inclusive)."""
        found: list[QueueRecord] = []
        last = ""
        while True:
            page = await self.manager.list_queues(last, MAX_LIST_LIMIT, listed)
            found.extend(r for r in page if r.name > last)
            if len(page) < MAX_LIST_LIMIT:
                return found
            last = page[-1].name

    async def render_metrics(self, accept: str = "") -> tuple[bytes, str]:
        """The Prometheus exposition of this node, in the format ``accept`` asks for, and its type."""
        return await self.metrics.render(accept)

    async def _purge_dedup(self) -> None:
        while True:
            await sleep_until(self.clock, self.clock.now() + DEDUP_PURGE_INTERVAL_US)
            try:
                purged = await self.store.purge_dedup(self.clock.now())
                finished = await self.store.workflows.purge_workflows(self.clock.now())
            except Exception as e:
                log.warning("dropping expired dedup ids or workflows failed (tried again later): %s", e)
            else:
                if purged or finished:
                    log.debug("dropped %d expired dedup ids, %d expired workflows", purged, finished)

    async def _sweep_workflows(self) -> None:
        """Wakes stranded workflows (``Workflows.sweep``) every ``WORKFLOW_SWEEP_INTERVAL_US`` on the one
        node the ring gives ``WORKFLOW_SWEEPER``: the scan reads every running record, once per interval
        whatever the number of nodes."""
        while True:
            await sleep_until(self.clock, self.clock.now() + WORKFLOW_SWEEP_INTERVAL_US)
            if not self.router.owns_schedule(WORKFLOW_SWEEPER):
                continue
            try:
                woken = await self.workflows.sweep()
            except Exception as e:  # a store's failure: the next interval tries again
                log.warning("sweeping workflows failed (tried again later): %s", e)
            else:
                if woken:
                    log.info("woke %d running workflow(s) that had no activation to move them on", woken)

    async def _queue_exists(self, name: str) -> bool:
        return await self._queue_namespace(name) is not None

    async def _queue_namespace(self, name: str) -> str | None:
        """The namespace of queue ``name`` by the settings its routes are checked and routed by (the
        running engine's, else the ones last read): a start reads no record when they are at hand, and
        the activation it produces goes by the same ones anyway (docs/adr/0072)."""
        record = await self.manager.known(name)
        return record.namespace if record is not None else None

    async def _produce_own(self, req: m.QueueProduceRequest) -> m.QueueProduceResponse:
        """A produce of the server's own (a workflow's activation, a schedule's tick), whoever's request
        caused it, as the server (``AS_SERVER``): the route that did was authorized for what it asked,
        not for the queue the activation goes to."""
        return await self.produce(AS_SERVER, req)

    async def _authorize_queue(self, ctx: RequestContext, name: str, permission: str) -> None:
        """403 unless the caller holds ``permission`` in the namespace of queue ``name`` (``_system`` for
        "" or a queue that is gone): for routes that name a queue only indirectly (schedules)."""
        await self._authorize_in(ctx, await self.manager.record(name) if name else None, permission)

    # -- routing --------------------------------------------------------------------------------------------

    async def _record(self, ctx: RequestContext, name: str, permission: str) -> QueueRecord:
        """The settings of the queue a request names, once the caller may use ``permission`` in its
        namespace (403, as ``_authorize_in``; then 400 when there is none): what it is checked and
        routed by. Never waits for an engine."""
        if self._closing:
            if ctx.forwarded_by:
                # The forwarding node's client should try again, and reach the next owner.
                raise RetryRequest(NOT_SERVING)
            raise shutting_down("service")
        check_stored_name(name)
        # The running engine's settings without an await: most requests find one (and a coroutine per
        # step is a measurable part of a small request: docs/benchmarks-log.md, "Small requests").
        queue = self.manager.find(name)
        record = queue.settings if queue is not None else await self.manager.known(name)
        if self.tenancy.enabled:
            await self._authorize_in(ctx, record, permission)
        if record is None:
            raise no_such_queue(name)
        return record

    def _at_partition(
        self, record: QueueRecord, partition: int, forwarded_by: str = "", within_s: float | None = None
    ) -> Awaitable[Target]:
        """Where the requests of one partition go. ``within_s``: the longest to wait for this node's engine
        to start (the request's own timeout), then 454."""
        self._check_serving()
        return self._target(
            record.name, self.router.partition(record.name, partition, forwarded_by), within_s
        )

    def _at_queue(self, record: QueueRecord, forwarded_by: str, within_s: float) -> Awaitable[Target]:
        """Where a produce or lease goes: this node if it owns a partition of the queue, else an owner."""
        self._check_serving()
        route = self.router.queue(record.name, record.requested_partitions, forwarded_by)
        return self._target(record.name, route, within_s)

    async def _lease_target(self, record: QueueRecord, forwarded_by: str, within_s: float) -> LeaseTarget:
        """As ``_at_queue``; a lease here when other members own partitions of the queue too also
        watches them (``SharedQueue``). A forwarded lease waits here only: its sender chose this owner."""
        target = await self._at_queue(record, forwarded_by, within_s)
        if isinstance(target, RemoteQueue) or forwarded_by or not self.cluster.clustered:
            return target
        owners = functools.partial(self.router.other_owners, record.name, record.requested_partitions, "")
        others = owners()
        return SharedQueue(target, others, owners, self.watches, self.clock) if others else target

    async def _target(self, name: str, route: Route, within_s: float | None) -> Target:
        if isinstance(route, Remote):
            return RemoteQueue(self.proxy, route)
        queue = self.manager.find(name) or await self.manager.get(name, within_s)
        if not self.cluster.serving:  # lost while the engine spawned: it must not keep serving
            self.manager.hand_off(queue, HandOff.LEASE)
            raise RetryRequest(NOT_SERVING)
        return LocalQueue(queue, self.clock)

    def _check_serving(self) -> None:
        if not self.cluster.serving:
            raise RetryRequest(NOT_SERVING)

    async def _everywhere(self, record: QueueRecord, forwarded_by: str) -> list[Target]:
        """For calls that need every owner (stats, clear, reload): this node's engine if it owns a
        partition of the queue, then the other owners (none for a forwarded request)."""
        self._check_serving()
        targets: list[Target] = []
        if self.router.owned(record.name, record.requested_partitions) or not self.cluster.clustered:
            targets.append(await self._target(record.name, HERE, None))
        others = self.router.other_owners(record.name, record.requested_partitions, forwarded_by)
        targets.extend(RemoteQueue(self.proxy, r) for r in others)
        return targets

    # -- the cluster ----------------------------------------------------------------------------------------

    def _cluster_changed(self) -> None:
        self.scheduler.ring_changed()  # the schedules this node fires may have changed
        if self.cluster.serving:
            self.manager.rebalance()
        else:
            # The lease may lapse: stop writing before another node can be given these partitions.
            self.manager.hand_off_all()

    async def _dead_letter(self, source: QueueRecord, items: list[Item]) -> None:
        """Dead items go to partition 0 of the dead queue, wherever its owner is (cluster mode). With
        tenancy, only into the source's namespace: a dead queue deleted and its name taken by another
        namespace is gone for the source (docs/security.md, "Tenancy boundaries")."""
        dead_queue = source.dead_queue
        record = await self.manager.record(dead_queue)
        if record is None:
            raise no_such_queue(dead_queue)
        owners = {r.namespace or SYSTEM_NAMESPACE for r in (record, source)}
        if self.tenancy.enabled and len(owners) > 1:
            raise InvalidOption(f"dead_queue is invalid; '{dead_queue}' is not in the queue's namespace")
        copies = moved_copies(items, self.clock.now(), record.expire_timeout)
        try:
            await self.import_items_anywhere(dead_queue, 0, copies)
        except InvalidOption as e:
            # Only the record read above says the dead queue is gone; any other refusal keeps the
            # items where they are, to be dead-lettered again later.
            raise try_again(e.message) from e

    async def _fire_tick(self, record: ScheduleRecord, tick: int) -> None:
        """Produces the item of one tick of a schedule (docs/schedules.md), wherever its queue is."""
        await self._produce_own(tick_produce(record, tick))

    async def _tell_schedule_owner(self, name: str) -> None:
        """Tells the member firing the schedule ``name``, when another, of a change (schedules.refresh)."""
        owner = self.router.schedule_owner(name)
        address = self.cluster.address_of(owner) if owner != self.cluster.node_id else ""
        if address:  # "" also for an owner that vanished: it reads the schedules when it is back
            request = m.SchedulesRequest(name=name)
            await self.proxy.call(
                Remote(owner, address), "/v1/schedules.refresh", request, m.Reply, TELL_TIMEOUT_S
            )

    # -- the queue API --------------------------------------------------------------------------------------

    async def produce(self, ctx: RequestContext, req: m.QueueProduceRequest) -> m.QueueProduceResponse:
        """Stores the request's items; the reply names each one's id (docs/extensions.md)."""
        record = await self._record(ctx, req.queue_name, perm.QUEUE_PRODUCE)
        timeout_us = ctx.within_us(check_produce(req), self.clock.now())
        if self._split is not None and any(i.dedup_id for i in req.items):
            target = await self._at_partition(record, 0, ctx.forwarded_by, seconds(timeout_us))
        else:
            target = await self._at_queue(record, ctx.forwarded_by, seconds(timeout_us))
        return await target.produce(req, timeout_us)

    async def lease(self, ctx: RequestContext, req: m.QueueLeaseRequest) -> m.QueueLeaseResponse:
        return (await self._lease_in(ctx, req))[0]

    async def _lease_in(
        self, ctx: RequestContext, req: m.QueueLeaseRequest
    ) -> tuple[m.QueueLeaseResponse, str]:
        """``lease``'s reply, and the namespace of the queue (a ``workflows.lease`` claims there)."""
        record = await self._record(ctx, req.queue_name, perm.QUEUE_LEASE)
        timeout_us = ctx.within_us(check_lease(req), self.clock.now())
        target = await self._lease_target(record, ctx.forwarded_by, seconds(timeout_us))
        return await target.lease(req, timeout_us), record.namespace

    async def watch(self, ctx: RequestContext, req: m.QueueLeaseRequest) -> None:
        """Answers once this node's partitions of the queue hold items a lease could take, leasing
        nothing (a member whose leases wait asks the other owners: ADR 0042); 454 as a lease that got
        nothing at ``request_timeout``."""
        record = await self._record(ctx, req.queue_name, perm.QUEUE_LEASE)
        timeout_us = ctx.within_us(check_lease(req), self.clock.now())
        await (await self._at_queue(record, ctx.forwarded_by, seconds(timeout_us))).watch(req, timeout_us)

    def release(self, reply: m.QueueLeaseResponse) -> None:
        """Gives back the items of a lease whose reply never reached its client, without counting the
        attempt. Best effort, and only for items leased on this node: a lease another owner served comes
        back when it expires."""
        queue = self.manager.find(reply.queue_name)
        if queue is not None and reply.items:
            queue.release(reply.partition, [i.id for i in reply.items])

    async def complete(self, ctx: RequestContext, req: m.QueueCompleteRequest) -> None:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_COMPLETE)
        check_partition(record, req.partition)
        timeout_us = ctx.within_us(check_complete(req), self.clock.now())
        await (
            await self._at_partition(record, req.partition, ctx.forwarded_by, seconds(timeout_us))
        ).complete(req)

    async def retry(self, ctx: RequestContext, req: m.QueueRetryRequest) -> None:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_RETRY)
        check_partition(record, req.partition)
        check_retry(req)
        await (await self._at_partition(record, req.partition, ctx.forwarded_by)).retry(req)

    async def renew(self, ctx: RequestContext, req: m.QueueRenewRequest) -> m.QueueRenewResponse:
        """Extends the leases of leased items (docs/extensions.md): lease_deadline = now + lease_timeout."""
        record = await self._record(ctx, req.queue_name, perm.QUEUE_LEASE)
        check_partition(record, req.partition)
        lease_timeout_us = check_renew(req, record)
        return await (await self._at_partition(record, req.partition, ctx.forwarded_by)).renew(
            req, lease_timeout_us
        )

    async def redrive(self, ctx: RequestContext, req: m.QueueRedriveRequest) -> m.QueueRedriveResponse:
        """Moves items of a dead-letter queue into a target queue (docs/extensions.md)."""
        source = await self._record(ctx, req.queue_name, perm.QUEUE_LEASE)
        check_redrive_target(req)
        target = await self._record(ctx, req.target_queue, perm.QUEUE_PRODUCE)
        now = self.clock.now()
        deadline = now + ctx.within_us(check_redrive(req), now)
        moved = await redrive(self, source, target, req.limit, deadline, self.clock)
        return m.QueueRedriveResponse(moved=moved)

    async def stats(self, ctx: RequestContext, req: m.QueueStatsRequest) -> m.QueueStatsResponse:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_STATS)
        logical: list[m.QueueLogicalStats] = []
        for target in await self._everywhere(record, ctx.forwarded_by):
            # Each owner reports its own logical queue, as the reference reports several.
            logical.extend(await target.stats(req))
        return m.QueueStatsResponse(queue_name=req.queue_name, logical_queues=logical)

    async def clear(self, ctx: RequestContext, req: m.QueueClearRequest) -> None:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_CLEAR)
        check_clear(req)
        for target in await self._everywhere(record, ctx.forwarded_by):
            await target.clear(req)

    async def reload(self, ctx: RequestContext, req: m.QueueReloadRequest) -> None:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_UPDATE)
        for target in await self._everywhere(record, ctx.forwarded_by):
            await target.reload(req)

    async def take_rate(self, ctx: RequestContext, req: m.RateLimitsTakeRequest) -> m.RateLimitsTakeResponse:
        """Reserves the next start of a cluster-wide rate limit's key, at the key's ring owner
        (docs/extensions.md, "Rate limits")."""
        record = await self._record(ctx, req.queue_name, perm.QUEUE_LEASE)
        interval_us, max_wait_us = check_take(req)
        self._check_serving()
        route = self.router.rate_limit(record.name, req.key, ctx.forwarded_by)
        if isinstance(route, Remote):
            path = "/v1/rate_limits.take"
            return await self.proxy.call(route, path, req, m.RateLimitsTakeResponse, FORWARD_TIMEOUT_S)
        return self.rate_limits.take(record.name, req.key, interval_us, max_wait_us, self.clock.now())

    # -- partitions anywhere in the cluster (engine.redrive.Partitions) -------------------------------------

    async def list_items_anywhere(self, queue: str, partition: int, pivot: str, limit: int) -> list[Item]:
        target = await self._at_partition(await self.manager.settings(queue), partition)
        request = m.StorageItemsListRequest(queue_name=queue, partition=partition, pivot=pivot, limit=limit)
        return [stored_item(i) for i in (await target.list_items(request, scheduled=False)).items]

    async def import_items_anywhere(self, queue: str, partition: int, items: list[Item]) -> None:
        target = await self._at_partition(await self.manager.settings(queue), partition)
        request = m.StorageItemsImportRequest(
            queue_name=queue, partition=partition, items=[storage_item(i) for i in items]
        )
        await target.import_items(request)

    async def delete_items_anywhere(self, queue: str, partition: int, ids: list[str]) -> None:
        target = await self._at_partition(await self.manager.settings(queue), partition)
        await target.delete_items(m.StorageItemsDeleteRequest(queue_name=queue, partition=partition, ids=ids))

    # -- the storage API (operators and debugging) ---------------------------------------------------------

    async def list_items(
        self, ctx: RequestContext, req: m.StorageItemsListRequest
    ) -> m.StorageItemsListResponse:
        return await self._list(ctx, req, scheduled=False)

    async def list_scheduled(
        self, ctx: RequestContext, req: m.StorageItemsListRequest
    ) -> m.StorageItemsListResponse:
        return await self._list(ctx, req, scheduled=True)

    async def _list(
        self, ctx: RequestContext, req: m.StorageItemsListRequest, scheduled: bool
    ) -> m.StorageItemsListResponse:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_STATS)
        check_partition(record, req.partition)
        check_list_items(req)
        if not req.limit:
            req = msgspec.structs.replace(req, limit=DEFAULT_LIST_LIMIT)
        return await (await self._at_partition(record, req.partition, ctx.forwarded_by)).list_items(
            req, scheduled
        )

    async def import_items(
        self, ctx: RequestContext, req: m.StorageItemsImportRequest
    ) -> m.StorageItemsImportResponse:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_PRODUCE)
        check_partition(record, req.partition)
        check_import(req)
        return await (await self._at_partition(record, req.partition, ctx.forwarded_by)).import_items(req)

    async def delete_items(self, ctx: RequestContext, req: m.StorageItemsDeleteRequest) -> None:
        record = await self._record(ctx, req.queue_name, perm.QUEUE_CLEAR)
        check_partition(record, req.partition)
        check_delete(req)
        await (await self._at_partition(record, req.partition, ctx.forwarded_by)).delete_items(req)
