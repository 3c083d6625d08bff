"""Service: the one Python API of Querator -- validates requests and turns them into engine calls.

Every method takes and returns wire messages (``querator.wire.messages``), so the HTTP layer only
decodes and encodes, and an embedding program gets the same behaviour as an HTTP client. Validation
follows the reference's order and messages (spec §1.5-§1.6), with the fixes of decisions.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import unicodedata
from datetime import datetime

import msgspec

from querator import _tasks
from querator.auth import ClusterAuth
from querator.clock import Clock, SystemClock, from_datetime, sleep_until, to_datetime
from querator.cluster.node import ClusterNode
from querator.cluster.proxy import Forward, Proxy
from querator.cluster.router import FORWARDED, Router
from querator.duration import DurationError, format_duration, parse_duration
from querator.engine.logical_queue import LEASE_TIMED_OUT
from querator.engine.queue import Queue
from querator.engine.queues_manager import QueuesManager
from querator.engine.redrive import redrive
from querator.errors import TRY_AGAIN, InvalidOption, QueratorError, RetryRequest, shutting_down, try_again
from querator.metrics import Metrics
from querator.storage.base import DEFAULT_DEDUP_WINDOW, ClearOptions, Item, QueueRecord, Store
from querator.storage.operations import RetryEntry, moved_copies, storage_id_error
from querator.wire import messages as m

MAX_PRODUCE_BATCH = 1000
MAX_LEASE_BATCH = 1000
MAX_COMPLETE_BATCH = 1000
MAX_REQUEST_TIMEOUT = 15 * 60 * 1_000_000
MIN_REQUEST_TIMEOUT = 10_000
MAX_LIST_LIMIT = 65536
MAX_NAME = 512
"""Characters of a queue name (and of a dead queue's)."""
MAX_PARTITIONS = 4096
MAX_DEDUP_ID = 128
MAX_DEDUP_WINDOW = 7 * 24 * 3600 * 1_000_000
DEFAULT_LIST_LIMIT = 1000
SYSTEM_NAMESPACE = "_system"
NANOS_PER_MICRO = 1000
DEDUP_PURGE_INTERVAL = 60 * 1_000_000
READY_TIMEOUT = 5.0
NODE_CALL_TIMEOUT = 30.0
"""Seconds a node-to-node call without a request_timeout of its own may take (complete, stats, ...)."""
REPLY_MARGIN = 5.0
"""Seconds a forwarded lease may take beyond its request_timeout: the owner's reply on its way back."""
WRITE_MARGIN = 60.0
"""Seconds a forwarded produce may take beyond its request_timeout: once the owner's write started it
is always waited for (a 454 then would make the client store the items twice)."""
PROBE_TIMEOUT = 1.0
"""Seconds a lease probe of another owner may take, reply included."""
PROBE_MIN = 0.05
"""Seconds a lease must have left to ask other owners at all."""
IMPORT_CHUNK = 8_000_000
"""Payload bytes per storage import sent to another node: far below its body limit once encoded."""
LEASE_PROBE = "10ms"
"""The request_timeout of a lease sent to look for items at another owner: ask, do not wait there."""
LEASE_SLICE = 1_000_000
"""Microseconds a lease waits on this node's partitions before it looks at the other owners again: the
longest an item produced at another owner waits while a consumer waits here."""
NOT_SERVING = f"{TRY_AGAIN}; this node is not serving partitions now"

log = logging.getLogger(__name__)


class Service:
    """Querator on one node: queue administration and the queue API over a storage backend."""

    def __init__(
        self,
        store: Store,
        clock: Clock | None = None,
        max_requests_per_queue: int = 100,
        cluster: ClusterNode | None = None,
        cluster_auth: ClusterAuth | None = None,
        cluster_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.store = store
        self.cluster = cluster or ClusterNode(None, self.clock, "")
        self.router = Router(self.cluster)
        self.proxy = Proxy(self.cluster.node_id, cluster_auth, cluster_tls)
        clustered = self.cluster.clustered
        self.manager = QueuesManager(
            store,
            self.clock,
            self._dead_letter,
            max_requests_per_queue,
            owned=self.router.owned if clustered else None,
        )
        self._closing = False
        self._started = False
        self._purger: asyncio.Task[None] | None = None
        self.metrics = Metrics(self.clock)

    async def start(self) -> None:
        """Opens the storage backend and starts dropping expired de-duplication records."""
        await self.store.open()
        try:
            await self.cluster.start()
        except BaseException:
            await self.store.close()
            raise
        self.cluster.on_change(self._cluster_changed)
        self._purger = _tasks.start(self._purge_dedup(), "dedup-purge")
        self._started = True

    async def shutdown(self) -> None:
        """Stops every queue (waiting requests get 453), then closes storage."""
        self._closing = True
        if self._purger is not None:
            self._purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._purger
        await self.manager.shutdown()
        await self.cluster.stop()
        await self.proxy.close()
        await self.store.close()

    async def ready(self) -> str:
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
        try:
            await asyncio.wait_for(self.store.check(), READY_TIMEOUT)
        except Exception as e:
            return f"storage cannot take writes: {e or type(e).__name__}"
        try:
            await asyncio.wait_for(self.store.list_queues("", 1, SYSTEM_NAMESPACE), READY_TIMEOUT)
        except Exception as e:
            log.warning("readiness: storage check failed: %s", e)
            return "storage check failed"
        return ""

    async def cluster_info(self, req: m.ClusterInfoRequest) -> m.ClusterInfoResponse:
        """The members, the ring's revision and the owner of each partition (of one queue, or of every
        queue of a namespace)."""
        if req.queue_name:
            _check_stored_name(req.queue_name)
            record = await self.manager.record(req.queue_name)
            if record is None:
                raise InvalidOption(f"queue does not exist; no such queue named '{req.queue_name}'")
            records = [record]
        else:
            records = await self._queues_of(_namespace(req.namespace))
        cluster = self.cluster
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
        )

    async def _queues_of(self, namespace: str) -> list[QueueRecord]:
        """Every queue of ``namespace``, page by page (the pivot is inclusive)."""
        found: list[QueueRecord] = []
        last = ""
        while True:
            page = await self.manager.list_queues(last, MAX_LIST_LIMIT, namespace)
            found.extend(r for r in page if r.name > last)
            if len(page) < MAX_LIST_LIMIT:
                return found
            last = page[-1].name

    async def render_metrics(self, accept: str = "") -> tuple[bytes, str]:
        """The Prometheus exposition of this node, in the format ``accept`` asks for, and its type."""
        return await self.metrics.render(self.manager.running(), accept)

    async def _purge_dedup(self) -> None:
        while True:
            await sleep_until(self.clock, self.clock.now() + DEDUP_PURGE_INTERVAL)
            try:
                purged = await self.store.purge_dedup(self.clock.now())
            except Exception as e:
                log.warning("dropping expired dedup ids failed (tried again later): %s", e)
            else:
                if purged:
                    log.debug("dropped %d expired dedup ids", purged)

    async def _queue(self, name: str, request_timeout: str = "") -> Queue:
        """The queue's running engine. A request that carries a ``request_timeout`` waits for an engine
        being started no longer than that (read leniently here: a bad one is refused right after)."""
        if self._closing:
            if FORWARDED.get():
                # The forwarding node's client should try again, and reach the next owner.
                raise RetryRequest(NOT_SERVING)
            raise shutting_down("service")
        _check_stored_name(name)
        if not self.cluster.serving:
            raise RetryRequest(NOT_SERVING)
        queue = await self.manager.get(name, _wait_limit(request_timeout))
        if not self.cluster.serving:  # lost while the engine spawned: it must not keep serving
            self.manager.hand_off(queue)
            raise RetryRequest(NOT_SERVING)
        return queue

    # -- the cluster ----------------------------------------------------------------------------------------

    def _cluster_changed(self) -> None:
        if self.cluster.serving:
            self.manager.rebalance()
        else:
            # The lease may lapse: stop writing before another node can be given these partitions.
            self.manager.hand_off_all()

    def _to_partition(self, queue: Queue, partition: int, timeout: float = NODE_CALL_TIMEOUT) -> None:
        """Checks the partition number; raises ``Forward`` when another node owns it."""
        queue.owner_check(partition)
        target = self.router.partition_target(queue.name, partition, timeout)
        if target is not None:
            raise target

    def _to_queue(self, queue: Queue, timeout: float) -> None:
        """For produce and lease: raises ``Forward`` when this node owns no partition of the queue."""
        target = self.router.queue_target(queue.name, queue.settings.requested_partitions, timeout)
        if target is not None:
            raise target

    def _other_owners(self, queue: Queue, timeout: float = NODE_CALL_TIMEOUT) -> list[Forward]:
        return self.router.other_owners(queue.name, queue.settings.requested_partitions, timeout)

    async def _dead_letter(self, dead_queue: str, items: list[Item]) -> None:
        """Dead items go to partition 0 of the dead queue, wherever its owner is (cluster mode)."""
        record = await self.manager.record(dead_queue)
        if record is None:
            raise InvalidOption(f"queue does not exist; no such queue named '{dead_queue}'")
        copies = moved_copies(items, self.clock.now(), record.expire_timeout)
        try:
            await self.import_items_anywhere(dead_queue, 0, copies)
        except InvalidOption as e:
            # Only the record read above says the dead queue is gone; any other refusal keeps the
            # items where they are, to be dead-lettered again later.
            raise try_again(e.message) from e

    async def refresh(self, req: m.QueuesInfoRequest) -> None:
        """Another node changed or deleted a queue: its engine here takes the new settings, or stops."""
        _check_stored_name(req.queue_name)
        record = await self.store.get_queue(req.queue_name)
        if record is None:
            await self.manager.forget(req.queue_name)
        else:
            await self.manager.refresh(record)

    async def _refresh_elsewhere(self, name: str) -> None:
        """Tells every other member that a queue changed; a member that cannot be told keeps its engine
        until it respawns (logged: its settings may lag)."""
        if not self.cluster.clustered:
            return
        calls = []
        for member in self.cluster.members():
            if member.node_id != self.cluster.node_id and member.address:
                target = Forward(member.node_id, member.address, NODE_CALL_TIMEOUT)
                request = m.QueuesInfoRequest(queue_name=name)
                calls.append(self.proxy.call(target, "/v1/cluster.refresh", request, m.Reply))
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("queue %s changed, but a node could not be told: %s", name, result)

    # -- the queue API --------------------------------------------------------------------------------------

    async def produce(self, req: m.QueueProduceRequest) -> None:
        queue = await self._queue(req.queue_name, req.request_timeout)
        timeout = _request_timeout(req.request_timeout)
        if not req.items:
            raise InvalidOption("items cannot be empty; at least one item is required")
        if len(req.items) > MAX_PRODUCE_BATCH:
            raise InvalidOption(
                "items is invalid; max_produce_batch_size is "
                f"{MAX_PRODUCE_BATCH} but received {len(req.items)}"
            )
        for i in req.items:
            if len(i.dedup_id) > MAX_DEDUP_ID:
                raise InvalidOption(
                    f"dedup id is invalid; cannot be greater than '{MAX_DEDUP_ID}' characters"
                )
        items = [
            Item(
                enqueue_at=from_datetime(i.enqueue_at) if i.enqueue_at is not None else 0,
                reference=i.reference,
                encoding=i.encoding,
                kind=i.kind,
                payload=i.bytes or i.utf8.encode(),
                dedup_id=i.dedup_id,
            )
            for i in req.items
        ]
        self._to_queue(queue, timeout / 1_000_000 + WRITE_MARGIN)
        await queue.produce(items, timeout)

    async def lease(self, req: m.QueueLeaseRequest) -> m.QueueLeaseResponse:
        queue = await self._queue(req.queue_name, req.request_timeout)
        if not req.client_id.strip():
            raise InvalidOption("invalid client id; cannot be empty")
        if req.batch_size <= 0:
            raise InvalidOption("invalid batch size; must be greater than zero")
        if req.batch_size > MAX_LEASE_BATCH:
            raise InvalidOption(
                "invalid batch size; max_lease_batch_size is "
                f"{MAX_LEASE_BATCH}, but {req.batch_size} was requested"
            )
        timeout = _request_timeout(req.request_timeout)
        self._to_queue(queue, timeout / 1_000_000 + REPLY_MARGIN)
        until = self.clock.now() + timeout
        while True:
            # Asking the other owners takes at most half of what is left of the request's time.
            budget = min(PROBE_TIMEOUT, (until - self.clock.now()) / 2_000_000)
            others = self._other_owners(queue, budget)
            if others and queue.un_leased() == 0 and budget > PROBE_MIN:
                # Nothing to lease here now: items may wait at another owner.
                found = await self._lease_elsewhere(req, others, budget)
                if found is not None:
                    return found
            wait = until - self.clock.now()
            try:
                partition, items = await queue.lease(
                    req.client_id, req.batch_size, max(1, min(wait, LEASE_SLICE) if others else wait)
                )
                break
            except RetryRequest as e:
                if e.message != LEASE_TIMED_OUT or self.clock.now() >= until:
                    raise
        # Every item of one lease shares its deadline: convert it once.
        deadline = to_datetime(items[0].lease_deadline) if items else None
        return m.QueueLeaseResponse(
            queue_name=req.queue_name,
            partition=partition,
            items=[
                m.QueueLeaseItem(
                    id=i.id,
                    attempts=i.attempts,
                    lease_deadline=deadline,
                    bytes=i.payload,
                    encoding=i.encoding,
                    kind=i.kind,
                    reference=i.reference,
                )
                for i in items
            ],
        )

    def release(self, reply: m.QueueLeaseResponse) -> None:
        """Gives back the items of a lease whose reply never reached its client, without counting the
        attempt. Best effort, and only for items leased on this node: a lease another owner served comes
        back when it expires."""
        queue = self.manager.find(reply.queue_name)
        if queue is not None and reply.items:
            queue.release(reply.partition, [i.id for i in reply.items])

    async def _lease_elsewhere(
        self, req: m.QueueLeaseRequest, others: list[Forward], budget: float
    ) -> m.QueueLeaseResponse | None:
        """A lease from the first other owner that has items now (each is asked without waiting); all
        the asking takes at most ``budget`` seconds."""
        probe = msgspec.structs.replace(req, request_timeout=LEASE_PROBE)
        until = self.clock.monotonic() + budget
        for owner in others:
            left = until - self.clock.monotonic()
            if left <= PROBE_MIN:
                break
            target = Forward(owner.node_id, owner.address, left)
            try:
                return await self.proxy.call(target, "/v1/queue.lease", probe, m.QueueLeaseResponse)
            except QueratorError as e:  # nothing there, or the owner cannot tell: ask the next one
                log.debug("lease probe of %s: %s", owner.node_id, e)
        return None

    async def complete(self, req: m.QueueCompleteRequest) -> None:
        queue = await self._queue(req.queue_name, req.request_timeout)
        self._to_partition(queue, req.partition)
        _check_ids(req.ids)
        _request_timeout(req.request_timeout, minimum=0)
        await queue.complete(req.partition, list(req.ids))

    async def retry(self, req: m.QueueRetryRequest) -> None:
        queue = await self._queue(req.queue_name)
        self._to_partition(queue, req.partition)
        if not req.items:
            raise InvalidOption("items is invalid; list of items cannot be empty")
        if len(req.items) > MAX_COMPLETE_BATCH:
            raise InvalidOption(
                "items is invalid; max_complete_batch_size is "
                f"{MAX_COMPLETE_BATCH} but received {len(req.items)}"
            )
        entries = [
            RetryEntry(i.id, from_datetime(i.retry_at) if i.retry_at is not None else 0, i.dead)
            for i in req.items
        ]
        await queue.retry(req.partition, entries)

    async def renew(self, req: m.QueueRenewRequest) -> m.QueueRenewResponse:
        """Extends the leases of leased items (extensions.md): lease_deadline = now + lease_timeout."""
        queue = await self._queue(req.queue_name)
        self._to_partition(queue, req.partition)
        _check_ids(req.ids)
        settings = queue.settings
        lease_timeout = _queue_duration(req.lease_timeout, "lease timeout", "8m, 15m or 1h")
        if lease_timeout > settings.expire_timeout:
            raise _lease_too_long(lease_timeout, settings.expire_timeout)
        _request_timeout(req.request_timeout, minimum=0)
        deadline = self.clock.now() + (lease_timeout or settings.lease_timeout)
        items = await queue.renew(req.partition, list(req.ids), deadline)
        return m.QueueRenewResponse(
            items=[m.QueueRenewItem(id=i.id, lease_deadline=to_datetime(i.lease_deadline)) for i in items]
        )

    async def redrive(self, req: m.QueueRedriveRequest) -> m.QueueRedriveResponse:
        """Moves items of a dead-letter queue into a target queue (extensions.md)."""
        source = await self._queue(req.queue_name)
        if not req.target_queue.strip():
            raise InvalidOption("target queue is invalid; cannot be empty")
        if req.target_queue == req.queue_name:
            raise InvalidOption(f"target queue is invalid; '{req.target_queue}' is the queue being redriven")
        target = await self._queue(req.target_queue)
        if req.limit < 0:
            raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
        deadline = self.clock.now() + _request_timeout(req.request_timeout)
        moved = await redrive(self, source.settings, target.settings, req.limit, deadline, self.clock)
        return m.QueueRedriveResponse(moved=moved)

    # -- partitions anywhere in the cluster (engine.redrive.Partitions) -------------------------------------

    async def list_items_anywhere(self, queue: str, partition: int, pivot: str, limit: int) -> list[Item]:
        target = self.router.partition_target(queue, partition, NODE_CALL_TIMEOUT)
        if target is None:
            return await (await self._queue(queue)).list_items(partition, pivot, limit, scheduled=False)
        request = m.StorageItemsListRequest(queue_name=queue, partition=partition, pivot=pivot, limit=limit)
        reply = await self.proxy.call(target, "/v1/storage/items.list", request, m.StorageItemsListResponse)
        return [stored_item(i) for i in reply.items]

    async def import_items_anywhere(self, queue: str, partition: int, items: list[Item]) -> None:
        target = self.router.partition_target(queue, partition, NODE_CALL_TIMEOUT)
        if target is None:
            await (await self._queue(queue)).import_items(partition, items)
            return
        for chunk in _chunks(items, IMPORT_CHUNK):
            request = m.StorageItemsImportRequest(
                queue_name=queue, partition=partition, items=[storage_item(i) for i in chunk]
            )
            await self.proxy.call(target, "/v1/storage/items.import", request, m.StorageItemsImportResponse)

    async def delete_items_anywhere(self, queue: str, partition: int, ids: list[str]) -> None:
        target = self.router.partition_target(queue, partition, NODE_CALL_TIMEOUT)
        if target is None:
            await (await self._queue(queue)).delete_items(partition, ids)
            return
        request = m.StorageItemsDeleteRequest(queue_name=queue, partition=partition, ids=ids)
        await self.proxy.call(target, "/v1/storage/items.delete", request, m.Reply)

    async def stats(self, req: m.QueueStatsRequest) -> m.QueueStatsResponse:
        queue = await self._queue(req.queue_name)
        logical = []
        for waiting, partitions in await queue.stats():
            logical.append(
                m.QueueLogicalStats(
                    produce_waiting=waiting.produce_waiting,
                    lease_waiting=waiting.lease_waiting,
                    complete_waiting=waiting.complete_waiting,
                    in_flight=waiting.in_flight,
                    partitions=[
                        m.QueuePartitionStats(
                            partition=number,
                            total=s.total,
                            total_leased=s.leased,
                            failures=queue.logical.partitions[number].failures,
                            average_age=format_duration(s.average_age * NANOS_PER_MICRO),
                            average_leased_age=format_duration(s.average_leased_age * NANOS_PER_MICRO),
                            scheduled=s.scheduled,
                        )
                        for number, s in partitions
                    ],
                )
            )
        for target in self._other_owners(queue):
            # Each owner reports its own logical queue, as the reference reports several.
            other = await self.proxy.call(target, "/v1/queue.stats", req, m.QueueStatsResponse)
            logical.extend(other.logical_queues)
        return m.QueueStatsResponse(queue_name=req.queue_name, logical_queues=logical)

    async def clear(self, req: m.QueueClearRequest) -> None:
        queue = await self._queue(req.queue_name)
        if not req.queue and not req.scheduled:
            raise InvalidOption("invalid clear request; one of 'queue', 'scheduled' must be true")
        await queue.clear(ClearOptions(queue=req.queue, scheduled=req.scheduled, destructive=req.destructive))
        for target in self._other_owners(queue):
            await self.proxy.call(target, "/v1/queue.clear", req, m.Reply)

    async def reload(self, req: m.QueueReloadRequest) -> None:
        queue = await self._queue(req.queue_name)
        await queue.reload()
        for target in self._other_owners(queue):
            await self.proxy.call(target, "/v1/queue.reload", req, m.Reply)

    # -- queue administration ------------------------------------------------------------------------------

    async def create_queue(self, info: m.QueueInfo) -> None:
        _check_new_name(info.queue_name)
        # On create only: a queue made before this check stays usable and removable.
        _check_printable("queue name", info.queue_name)
        lease_timeout, expire_timeout = _timeouts(info)
        namespace = _namespace(info.namespace)
        _check_printable("namespace name", namespace)
        if self._closing:
            raise shutting_down("service")
        if await self.manager.record(info.queue_name) is not None:
            raise InvalidOption(f"invalid queue; '{info.queue_name}' already exists")
        await self._check_dead_queue(info.queue_name, info.dead_queue)
        now = self.clock.now()
        record = QueueRecord(
            name=info.queue_name,
            namespace=namespace,
            lease_timeout=lease_timeout,
            expire_timeout=expire_timeout,
            dead_queue=info.dead_queue,
            max_attempts=info.max_attempts,
            reference=info.reference,
            requested_partitions=info.requested_partitions,
            created_at=now,
            updated_at=now,
            dedup_window=_dedup_window(info.dedup_window, DEFAULT_DEDUP_WINDOW),
        )
        _check_record(record)
        await self.manager.create(record)

    async def update_queue(self, info: m.QueueInfo) -> None:
        _check_new_name(info.queue_name)
        lease_timeout, expire_timeout = _timeouts(info)
        current = await self.manager.record(info.queue_name)
        if current is None:
            raise InvalidOption(f"queue does not exist; no such queue named '{info.queue_name}'")
        await self._check_dead_queue(info.queue_name, info.dead_queue)
        record = QueueRecord(
            name=current.name,
            namespace=current.namespace,
            lease_timeout=lease_timeout or current.lease_timeout,
            expire_timeout=expire_timeout or current.expire_timeout,
            # The reference's documented "replace" semantics: these three are always overwritten.
            dead_queue=info.dead_queue,
            max_attempts=info.max_attempts,
            reference=info.reference,
            requested_partitions=info.requested_partitions or current.requested_partitions,
            created_at=current.created_at,
            updated_at=max(self.clock.now(), current.updated_at + 1),
            extra=current.extra,
            dedup_window=_dedup_window(info.dedup_window, current.dedup_window),
        )
        _check_record(record)
        if record.requested_partitions < current.requested_partitions:
            raise InvalidOption(
                f"partitions is invalid; cannot be decreased from {current.requested_partitions}"
                f" to {record.requested_partitions}"
            )
        await self.manager.update(record)
        await self._refresh_elsewhere(record.name)

    async def delete_queue(self, req: m.QueuesDeleteRequest) -> None:
        _check_new_name(req.queue_name)
        # Every node's engine stops writing before the items go.
        await self.manager.delete(req.queue_name, before_items=self._refresh_elsewhere)

    async def queue_info(self, req: m.QueuesInfoRequest) -> m.QueueInfo:
        _check_stored_name(req.queue_name)
        record = await self.manager.record(req.queue_name)
        if record is None:
            raise InvalidOption(f"queue does not exist; no such queue named '{req.queue_name}'")
        return queue_info(record)

    async def list_queues(self, req: m.QueuesListRequest) -> m.QueuesListResponse:
        if req.limit < 0:
            raise InvalidOption("limit is invalid; limit cannot be negative")
        _check_list_limit(req.limit)
        if "~" in req.pivot:
            raise InvalidOption(f"pivot is invalid; '{req.pivot}' cannot contain '~' character")
        records = await self.manager.list_queues(
            req.pivot, req.limit or DEFAULT_LIST_LIMIT, _namespace(req.namespace)
        )
        return m.QueuesListResponse(items=[queue_info(r) for r in records])

    async def _check_dead_queue(self, name: str, dead_queue: str) -> None:
        if not dead_queue:
            return
        if "~" in dead_queue:
            raise InvalidOption(f"dead queue is invalid; '{dead_queue}' cannot contain '~' character")
        if _has_space(dead_queue):
            raise InvalidOption(f"dead queue is invalid; '{dead_queue}' cannot contain whitespace")
        if dead_queue == name:
            raise InvalidOption("dead_queue cannot reference itself")
        target = await self.manager.record(dead_queue)
        if target is None:
            raise InvalidOption(f"dead_queue does not exist; '{dead_queue}' was not found, create it first")
        if target.dead_queue:
            raise InvalidOption(
                f"dead_queue is invalid; '{dead_queue}' already has its own dead_queue configured"
            )

    # -- the storage API (operators and debugging) ---------------------------------------------------------

    async def list_items(
        self, req: m.StorageItemsListRequest, scheduled: bool = False
    ) -> m.StorageItemsListResponse:
        queue = await self._queue(req.queue_name)
        self._to_partition(queue, req.partition)
        if req.pivot and (error := storage_id_error(req.pivot)) is not None:
            raise error
        if req.limit < 0:
            raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
        # The reference has no maximum here; ours is queues.list's. A page also ends early at
        # storage.LIST_PAGE_BYTES of payloads (docs/extensions.md, "Storage lists").
        _check_list_limit(req.limit)
        items = await queue.list_items(req.partition, req.pivot, req.limit or DEFAULT_LIST_LIMIT, scheduled)
        return m.StorageItemsListResponse(items=[storage_item(i) for i in items])

    async def import_items(self, req: m.StorageItemsImportRequest) -> m.StorageItemsImportResponse:
        queue = await self._queue(req.queue_name)
        self._to_partition(queue, req.partition)
        if not req.items:
            raise InvalidOption("items is invalid; cannot be empty")
        for item in req.items:
            if item.attempts < 0:
                raise InvalidOption(f"attempts is invalid; cannot be negative, but {item.attempts} was given")
        stored = await queue.import_items(req.partition, [stored_item(i) for i in req.items])
        return m.StorageItemsImportResponse(items=[storage_item(i) for i in stored])

    async def delete_items(self, req: m.StorageItemsDeleteRequest) -> None:
        queue = await self._queue(req.queue_name)
        self._to_partition(queue, req.partition)
        if not req.ids:
            raise InvalidOption("ids is invalid; cannot be empty")
        for item_id in req.ids:
            if (error := storage_id_error(item_id)) is not None:
                raise error
        await queue.delete_items(req.partition, list(req.ids))


# -- conversions --------------------------------------------------------------------------------------------


def queue_info(r: QueueRecord) -> m.QueueInfo:
    """A stored queue as the wire's QueueInfo."""
    return m.QueueInfo(
        queue_name=r.name,
        created_at=to_datetime(r.created_at),
        updated_at=to_datetime(r.updated_at),
        dead_queue=r.dead_queue,
        reference=r.reference,
        lease_timeout=format_duration(r.lease_timeout * NANOS_PER_MICRO),
        expire_timeout=format_duration(r.expire_timeout * NANOS_PER_MICRO),
        max_attempts=r.max_attempts,
        requested_partitions=r.requested_partitions,
        namespace=r.namespace,
        # Left out of JSON replies to clients that did not ask for extensions (http._reference_view).
        dedup_window=format_duration(r.dedup_window * NANOS_PER_MICRO),
    )


def storage_item(i: Item) -> m.StorageItem:
    """A stored item as the wire's StorageItem; unset deadlines travel as Go's zero time."""
    return m.StorageItem(
        id=i.id,
        source_id=i.source_id,
        is_leased=i.is_leased,
        lease_deadline=to_datetime(i.lease_deadline),
        expire_deadline=to_datetime(i.expire_deadline),
        created_at=to_datetime(i.created_at) if i.id else None,
        enqueue_at=to_datetime(i.enqueue_at) if i.enqueue_at else None,
        attempts=i.attempts,
        max_attempts=i.max_attempts,
        reference=i.reference,
        encoding=i.encoding,
        kind=i.kind,
        payload=i.payload,
    )


def _chunks(items: list[Item], payload_bytes: int) -> list[list[Item]]:
    """``items`` in order, split so that each part holds at most ``payload_bytes`` of payload (an item
    larger than that goes alone)."""
    chunks: list[list[Item]] = [[]]
    size = 0
    for item in items:
        if chunks[-1] and size + len(item.payload) > payload_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item.payload)
    return chunks


def stored_item(i: m.StorageItem) -> Item:
    """The wire's StorageItem as an item (an import ignores its id, created_at and enqueue_at)."""
    return Item(
        id=i.id,
        source_id=i.source_id,
        is_leased=i.is_leased,
        lease_deadline=_micros(i.lease_deadline),
        expire_deadline=_micros(i.expire_deadline),
        enqueue_at=_micros(i.enqueue_at),
        created_at=_micros(i.created_at),
        attempts=i.attempts,
        max_attempts=i.max_attempts,
        reference=i.reference,
        encoding=i.encoding,
        kind=i.kind,
        payload=i.payload,
    )


def _micros(value: datetime | None) -> int:
    return from_datetime(value) if value is not None else 0


# -- validation ---------------------------------------------------------------------------------------------


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _unprintable(text: str) -> str | None:
    """The first control or invisible format character of ``text`` (Unicode Cc, Cf: NUL, escapes, bidi
    overrides, zero-width spaces), as ``U+XXXX``: names reach logs, metrics labels and terminals, where
    such characters hide or disguise what a name says."""
    found = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf")), None)
    return None if found is None else f"U+{ord(found):04X}"


def _check_printable(what: str, name: str) -> None:
    if (found := _unprintable(name)) is not None:
        # The name is not quoted: it is what must not reach the logs.
        raise InvalidOption(
            f"{what} is invalid; cannot contain control or invisible characters, found {found}"
        )


def _check_stored_name(name: str) -> None:
    if not name.strip():
        raise InvalidOption("queue name is invalid; queue name cannot be empty")
    if "~" in name:
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain '~' character")


def _check_new_name(name: str) -> None:
    if len(name) > MAX_NAME:
        raise InvalidOption(f"queue name is invalid; cannot be greater than '{MAX_NAME}' characters")
    if not name.strip():
        raise InvalidOption("queue name is invalid; queue name cannot be empty")
    if _has_space(name):
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain whitespace")
    if "~" in name:
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain '~' character")


def _check_list_limit(limit: int) -> None:
    """The largest page of a list, in the reference's text for queues.list (its tests compare it); each
    list checks a negative limit first, in its own words."""
    if limit > MAX_LIST_LIMIT:
        raise InvalidOption(f"limit is invalid; cannot be greater than {MAX_LIST_LIMIT}")


def _check_ids(ids: list[str]) -> None:
    """The ids of a complete or renew."""
    if not ids:
        raise InvalidOption("ids is invalid; list of ids cannot be empty")
    if len(ids) > MAX_COMPLETE_BATCH:
        raise InvalidOption(
            f"ids is invalid; max_complete_batch_size is {MAX_COMPLETE_BATCH} but received {len(ids)}"
        )


def _lease_too_long(lease_timeout: int, expire_timeout: int) -> InvalidOption:
    return InvalidOption(
        f"lease timeout is too long; {format_duration(lease_timeout * NANOS_PER_MICRO)} cannot be greater"
        f" than the expire timeout {format_duration(expire_timeout * NANOS_PER_MICRO)}"
    )


def _wait_limit(request_timeout: str) -> float | None:
    """Seconds of a request_timeout, or None when there is none that can be read."""
    try:
        nanos = parse_duration(request_timeout) if request_timeout else 0
    except DurationError:
        return None
    return nanos / 1e9 if nanos > 0 else None


def _request_timeout(text: str, minimum: int = MIN_REQUEST_TIMEOUT) -> int:
    """A request_timeout in microseconds, checked against the reference's bounds (10ms..15m inclusive)."""
    if not text:
        raise InvalidOption("request timeout is required; '5m' is recommended, 15m is the maximum")
    try:
        nanos = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"request timeout is invalid; {e} - expected format: 900ms, 5m or 15m") from None
    if nanos == 0:
        raise InvalidOption("request timeout is required; '5m' is recommended, 15m is the maximum")
    if nanos > MAX_REQUEST_TIMEOUT * NANOS_PER_MICRO:
        raise InvalidOption(
            "request timeout is invalid; maximum timeout is '15m' "
            f"but '{format_duration(nanos)}' was requested"
        )
    if nanos < minimum * NANOS_PER_MICRO:
        raise InvalidOption(
            "request timeout is invalid; minimum timeout is '10ms' "
            f"but '{format_duration(nanos)}' was requested"
        )
    return nanos // NANOS_PER_MICRO


def _timeouts(info: m.QueueInfo) -> tuple[int, int]:
    """The lease and expire timeouts of a create or update, in microseconds (0 when absent)."""
    if len(info.lease_timeout) > 15:
        raise InvalidOption("lease timeout is invalid; cannot be greater than '15' characters")
    if len(info.expire_timeout) > 15:
        raise InvalidOption("expire timeout is invalid; cannot be greater than '15' characters")
    expire = _queue_duration(info.expire_timeout, "expire timeout", "60m, 2h or 24h")
    lease = _queue_duration(info.lease_timeout, "lease timeout", "8m, 15m or 1h")
    return lease, expire


def _queue_duration(text: str, what: str, formats: str) -> int:
    if not text:
        return 0
    try:
        nanos = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"{what} is invalid; {e} - expected format: {formats}") from None
    if nanos < 0:
        raise InvalidOption(f"{what} is invalid; cannot be negative but '{text}' was given")
    # Zero reads as "not given": on create the store check answers "cannot be empty", on update the
    # current value is kept (as the reference does for a zero duration).
    return nanos // NANOS_PER_MICRO


def _dedup_window(text: str, unset: int) -> int:
    """A queue's dedup_window in microseconds; ``unset`` when not given, 0 (``0s``) disables."""
    if not text:
        return unset
    try:
        nanos = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"dedup window is invalid; {e} - expected format: 5m, 1h or 0s") from None
    if nanos < 0:
        raise InvalidOption(f"dedup window is invalid; cannot be negative but '{text}' was given")
    if nanos > MAX_DEDUP_WINDOW * NANOS_PER_MICRO:
        raise InvalidOption(
            f"dedup window is invalid; maximum is '{format_duration(MAX_DEDUP_WINDOW * NANOS_PER_MICRO)}'"
            f" but '{format_duration(nanos)}' was given"
        )
    return nanos // NANOS_PER_MICRO


def _namespace(namespace: str) -> str:
    if not namespace:
        return SYSTEM_NAMESPACE
    if len(namespace) > 256:
        raise InvalidOption("namespace name is invalid; cannot be greater than '256' characters")
    if _has_space(namespace):
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain whitespace")
    if "~" in namespace:
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain '~' character")
    if ":" in namespace:
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain ':' character")
    return namespace


def _check_record(r: QueueRecord) -> None:
    """The store checks, in the reference's order."""
    if len(r.dead_queue) > 512:
        raise InvalidOption("dead queue is invalid; cannot be greater than '512' characters")
    if len(r.reference) > 2000:
        raise InvalidOption("reference field is invalid; cannot be greater than '2000' characters")
    if r.max_attempts > 65536:
        raise InvalidOption("max attempts is invalid; cannot be greater than 65536")
    if r.max_attempts < 0:
        raise InvalidOption("max attempts is invalid; cannot be negative number")
    if r.requested_partitions < 1:
        raise InvalidOption("partitions is invalid; cannot be less than 1")
    if r.requested_partitions > MAX_PARTITIONS:
        raise InvalidOption(f"partitions is invalid; cannot be greater than {MAX_PARTITIONS}")
    if not r.lease_timeout:
        raise InvalidOption("lease timeout is invalid; cannot be empty")
    if not r.expire_timeout:
        raise InvalidOption("expire timeout is invalid; cannot be empty")
    if r.lease_timeout > r.expire_timeout:
        raise _lease_too_long(r.lease_timeout, r.expire_timeout)
