"""Queue administration: creating, changing, reading, listing and deleting queues' settings, and telling
the other members of the cluster when a queue changed (``refresh``)."""

from __future__ import annotations

import asyncio
import logging

from querator.clock import Clock
from querator.cluster.proxy import Proxy
from querator.cluster.remote_queue import CALL_TIMEOUT_S
from querator.cluster.router import Router
from querator.engine.queues_manager import QueuesManager
from querator.errors import InvalidOption, no_such_queue, shutting_down
from querator.names import check_new_name_characters
from querator.service._conversion import queue_info
from querator.service._schedules import Schedules
from querator.service._validation import (
    DEFAULT_LIST_LIMIT,
    SYSTEM_NAMESPACE,
    check_lease_token_setting,
    check_new_name,
    check_queues_list,
    check_record,
    check_stored_name,
    dedup_window,
    has_space,
    namespace,
    timeouts,
)
from querator.service._workflows import Workflows
from querator.storage.base import DEFAULT_DEDUP_WINDOW, QueueRecord, Store
from querator.storage.operations import LEASE_TOKEN_KEY, new_lease_token_key
from querator.storage.split import SplitStore
from querator.tenancy import RequestContext, Tenancy
from querator.tenancy import permissions as perm
from querator.wire import messages as m

log = logging.getLogger(__name__)


class QueueAdministration:
    """The queue administration routes of ``Service``, mixed into it: ``Service`` sets the attributes
    declared here."""

    clock: Clock
    store: Store
    manager: QueuesManager
    tenancy: Tenancy
    router: Router
    proxy: Proxy
    schedules: Schedules
    workflows: Workflows
    _closing: bool
    _split: SplitStore | None

    async def create_queue(self, ctx: RequestContext, info: m.QueueInfo) -> None:
        check_new_name(info.queue_name)
        # On create only: a queue made before this check stays usable and removable.
        check_new_name_characters("queue name", info.queue_name)
        lease_timeout, expire_timeout = timeouts(info)
        owner = namespace(info.namespace)
        check_new_name_characters("namespace name", owner)
        check_lease_token_setting(info.lease_token)
        await self.tenancy.authorize(ctx, owner, perm.QUEUE_CREATE)
        await self.tenancy.check_namespace(owner)
        if self._closing:
            raise shutting_down("service")
        if await self.manager.record(info.queue_name) is not None:
            raise InvalidOption(f"invalid queue; '{info.queue_name}' already exists")
        await self._check_dead_queue(info.queue_name, info.dead_queue, owner)
        now = self.clock.now()
        record = QueueRecord(
            name=info.queue_name,
            namespace=owner,
            lease_timeout=lease_timeout,
            expire_timeout=expire_timeout,
            dead_queue=info.dead_queue,
            max_attempts=info.max_attempts,
            reference=info.reference,
            requested_partitions=info.requested_partitions,
            created_at=now,
            updated_at=now,
            extra=_with_lease_tokens({}, info.lease_token),
            dedup_window=dedup_window(info.dedup_window, DEFAULT_DEDUP_WINDOW),
        )
        check_record(record)
        await self.manager.create(record)

    async def update_queue(self, ctx: RequestContext, info: m.QueueInfo) -> None:
        check_new_name(info.queue_name)
        lease_timeout, expire_timeout = timeouts(info)
        check_lease_token_setting(info.lease_token)
        current = await self._authorized_record(ctx, info.queue_name, perm.QUEUE_UPDATE)
        await self._check_dead_queue(
            info.queue_name, info.dead_queue, current.namespace or SYSTEM_NAMESPACE, kept=current.dead_queue
        )
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
            extra=_with_lease_tokens(current.extra, info.lease_token),
            dedup_window=dedup_window(info.dedup_window, current.dedup_window),
        )
        check_record(record)
        if record.requested_partitions < current.requested_partitions:
            raise InvalidOption(
                f"partitions is invalid; cannot be decreased from {current.requested_partitions}"
                f" to {record.requested_partitions}"
            )
        await self.manager.update(record)
        await self._refresh_elsewhere(record.name)

    async def delete_queue(self, ctx: RequestContext, req: m.QueuesDeleteRequest) -> None:
        check_new_name(req.queue_name)
        current = await self.manager.record(req.queue_name)
        await self._authorize_in(ctx, current, perm.QUEUE_DELETE)
        # Every node's engine stops writing before the items go.
        await self.manager.delete(req.queue_name, before_items=self._refresh_elsewhere)
        if current is not None:
            await self._queue_deleted(current)

    async def queue_info(self, ctx: RequestContext, req: m.QueuesInfoRequest) -> m.QueueInfo:
        check_stored_name(req.queue_name)
        return queue_info(await self._authorized_record(ctx, req.queue_name, perm.QUEUE_STATS))

    async def list_queues(self, ctx: RequestContext, req: m.QueuesListRequest) -> m.QueuesListResponse:
        listed = check_queues_list(req)
        await self.tenancy.authorize(ctx, listed, perm.QUEUE_LIST)
        records = await self.manager.list_queues(req.pivot, req.limit or DEFAULT_LIST_LIMIT, listed)
        return m.QueuesListResponse(items=[queue_info(r) for r in records])

    async def _authorized_record(self, ctx: RequestContext, name: str, permission: str) -> QueueRecord:
        """The settings of the queue ``name``, once the caller holds ``permission`` in its namespace."""
        record = await self.manager.record(name)
        await self._authorize_in(ctx, record, permission)
        if record is None:
            raise no_such_queue(name)
        return record

    async def _authorize_in(self, ctx: RequestContext, record: QueueRecord | None, permission: str) -> None:
        """403 unless the caller holds ``permission`` in the namespace of the queue ``record``, or in
        ``_system`` when there is no such queue: a caller refused in a namespace gets the same 403
        whether a queue of the name is there or nowhere, and only one who may see every namespace learns
        that a queue does not exist (docs/tenancy.md, "Boundaries between namespaces")."""
        await self.tenancy.authorize(ctx, record.namespace if record else SYSTEM_NAMESPACE, permission)

    async def _check_dead_queue(self, name: str, dead_queue: str, owner: str, kept: str = "") -> None:
        """The reference's dead-queue checks; with tenancy, also that the dead queue is in the queue's
        namespace ``owner``: dead items are written there by the server, so a dead queue elsewhere
        would let a namespace's owner produce into a queue it may not write (docs/tenancy.md). The
        rule of new names spares the dead queue ``kept`` by an update, set before that rule."""
        if not dead_queue:
            return
        if "~" in dead_queue:
            raise InvalidOption(f"dead queue is invalid; '{dead_queue}' cannot contain '~' character")
        if has_space(dead_queue):
            raise InvalidOption(f"dead queue is invalid; '{dead_queue}' cannot contain whitespace")
        if dead_queue != kept:
            check_new_name_characters("dead queue", dead_queue)
        if dead_queue == name:
            raise InvalidOption("dead_queue cannot reference itself")
        target = await self.manager.record(dead_queue)
        if target is None:
            raise InvalidOption(f"dead_queue does not exist; '{dead_queue}' was not found, create it first")
        # Before the next check, which would tell how another namespace's queue is set.
        if self.tenancy.enabled and (target.namespace or SYSTEM_NAMESPACE) != owner:
            raise InvalidOption(
                f"dead_queue is invalid; '{dead_queue}' is not in the queue's namespace '{owner}'"
            )
        if target.dead_queue:
            raise InvalidOption(
                f"dead_queue is invalid; '{dead_queue}' already has its own dead_queue configured"
            )

    async def refresh(self, ctx: RequestContext, req: m.QueuesInfoRequest) -> None:
        """Another node changed or deleted a queue: its engine here takes the new settings, or stops."""
        check_stored_name(req.queue_name)
        await self.tenancy.authorize(
            ctx, SYSTEM_NAMESPACE, perm.QUEUE_UPDATE
        )  # a client's, not a node's, call
        record = await self.store.get_queue(req.queue_name)
        if record is None:
            await self.manager.forget(req.queue_name)
            if self._split is not None:  # this member's partitions are its own to drop
                await self._split.forget_partitions(req.queue_name)
        else:
            await self.manager.refresh(record)

    async def _queue_deleted(self, record: QueueRecord) -> None:
        """What names a deleted queue goes with it: its schedules, which would fire into whoever's queue
        of that name comes next, and its running workflows, which no activation can reach."""
        schedules = await self.schedules.delete_of_queue(record.name)
        workflows = await self.workflows.end_of_queue(record.name, record.namespace)
        if schedules or workflows:
            log.info(
                "queue %s deleted with its %d schedule(s); %d running workflow(s) terminated",
                record.name, schedules, workflows,
            )  # fmt: skip

    async def _refresh_elsewhere(self, name: str) -> None:
        """Tells every other member that a queue changed; a member that cannot be told keeps its engine
        until it respawns (logged: its settings may lag)."""
        request = m.QueuesInfoRequest(queue_name=name)
        calls = [
            self.proxy.call(member, "/v1/cluster.refresh", request, m.Reply, CALL_TIMEOUT_S)
            for member in self.router.other_members()
        ]
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("queue %s changed, but a node could not be told: %s", name, result)


def _with_lease_tokens(extra: dict[str, str], setting: str) -> dict[str, str]:
    """A queue's settings beyond the reference's, after a create or update set ``lease_token`` to
    ``setting`` ("" keeps what there is). Turning tokens on keeps an existing secret, so tokens already
    handed out stay good; turning them off forgets it."""
    if setting == "required" and LEASE_TOKEN_KEY not in extra:
        return {**extra, LEASE_TOKEN_KEY: new_lease_token_key()}
    if setting == "off" and LEASE_TOKEN_KEY in extra:
        return {k: v for k, v in extra.items() if k != LEASE_TOKEN_KEY}
    return extra
