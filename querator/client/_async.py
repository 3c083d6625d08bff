"""``AsyncClient``: the queue API of one server as coroutines, with its other groups of calls mixed in
(``_queues``, ``_storage``, ``_schedules``, ``_workflows``, ``_tenancy``)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import msgspec

from querator.client._arguments import (
    Duration,
    ProduceItem,
    RetryItem,
    go_duration,
    new_client_id,
    produce_items,
    retry_item,
)
from querator.client._errors import ConnectionFailed, snippet
from querator.client._lease import Lease
from querator.client._lock import Held, hold
from querator.client._lock_queue import LockQueue
from querator.client._lock_queue import set_limit as change_limit
from querator.client._owners import Owners
from querator.client._queues import QueueAdminCalls
from querator.client._renew import keep_renewed, stopped
from querator.client._retries import DEFAULT_RETRIES, Retries, with_retries
from querator.client._schedules import ScheduleCalls
from querator.client._storage import StorageCalls
from querator.client._tenancy import TenancyMethods
from querator.client._transport import Transport, http_timeout_s
from querator.client._workflows import WorkflowCalls
from querator.duration import parse_duration
from querator.errors import LeaseTimedOut, QueratorError, RetryRequest, plain_error
from querator.wire import messages as m

DEFAULT_ENDPOINT = "http://localhost:2319"
DEFAULT_TIMEOUT = 30.0
"""Seconds a call without a ``request_timeout`` may take (before ``timeout_margin`` is added)."""

R = TypeVar("R", bound=m.Message)


class AsyncClient(QueueAdminCalls, StorageCalls, ScheduleCalls, WorkflowCalls, TenancyMethods):
    """An asyncio client of one Querator server.

    The aiohttp session is created on first use, in the running loop, and must be used from that loop only;
    close it with ``await client.close()`` or by using the client as an ``async with`` context manager.
    The connection pool holds at most ``limit`` connections (``limit_per_host`` per host, 0 = no extra
    cap): each waiting lease holds one connection for its whole long poll, so size it for the number of
    concurrent calls.

    Args:
        endpoint: base URL of the server, e.g. ``http://localhost:2319``.
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        protobuf: send binary protobuf bodies and ask for protobuf replies instead of JSON.
        timeout_margin: seconds to wait beyond a call's timeout before abandoning it (docs/semantics.md
            §4.10).
        limit: the pool's maximum number of connections.
        limit_per_host: the pool's maximum number of connections per host (0: only ``limit`` applies).
        ssl: the TLS context of an ``https://`` endpoint (None: the system's CAs verify the server).
        retries: how calls are tried again after transient failures (``querator.client.Retries``; None:
            never). Which calls, and after which failures, is in the ``querator.client._retries``
            docstring: a call is never repeated where that could do its work twice.
        reach_owners: send produce, lease, complete, retry and renew straight to a cluster member that
            owns what they need, at its advertised address (``cluster.info``, read again every 10 s and
            after a failure there), instead of letting the endpoint forward them (docs/cluster.md,
            "Clients that reach owners"). Only for clients that can reach every member's
            ``--advertise-address`` with this endpoint's scheme, API key and TLS settings.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        api_key: str | None = None,
        protobuf: bool = False,
        timeout_margin: float = 1.0,
        *,
        limit: int = 100,
        limit_per_host: int = 0,
        ssl: ssl.SSLContext | None = None,
        retries: Retries | None = DEFAULT_RETRIES,
        reach_owners: bool = False,
    ) -> None:
        if timeout_margin < 0:
            raise ValueError("timeout_margin cannot be negative")
        self.endpoint = endpoint.rstrip("/")
        self.protobuf = protobuf
        self.timeout_margin = timeout_margin
        self.retries = retries
        self._transport = Transport(
            api_key, protobuf, limit=limit, limit_per_host=limit_per_host, ssl_context=ssl
        )
        self._locks: dict[str, LockQueue] = {}
        """Lock name -> its queue's settings, once this client made sure of the queue."""
        self._owners = Owners(self.endpoint, self.cluster_info) if reach_owners else None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the session and its pooled connections; later calls raise ``RuntimeError``. Idempotent."""
        await self._transport.close()

    def _timeout_s(self, seconds: float | None) -> float:
        """Seconds to wait for the reply of a call the server may spend ``seconds`` on."""
        return (DEFAULT_TIMEOUT if seconds is None else seconds) + self.timeout_margin

    # -- the one way out ----------------------------------------------------------------------------------

    async def call(
        self,
        path: str,
        msg: m.Message,
        reply_type: type[R],
        *,
        seconds: float | None = None,
        idempotent: bool = False,
    ) -> R:
        """POSTs ``msg`` to ``path`` (e.g. ``/v1/queue.stats``) and decodes the 200 reply as ``reply_type``.

        Transient failures are tried again under ``retries``: those that say nothing was done, and with
        ``idempotent`` those after which the request may have been carried out too.

        Args:
            path: the route, starting with ``/``.
            msg: the request message.
            reply_type: the message type of a successful reply (``m.Reply`` for routes without a payload).
            seconds: how long the server may take; ``timeout_margin`` is added. None: ``DEFAULT_TIMEOUT``.
            idempotent: carrying the request out twice does what carrying it out once does.

        Returns:
            The decoded reply.

        Raises:
            QueratorError: the typed error of a non-200 reply (see ``querator.client``), or a plain
                ``QueratorError`` with the HTTP status as code when the reply cannot be decoded.
            ConnectionFailed: no reply was received within the timeout.
            RuntimeError: the client is closed.
        """
        url, timeout_s = self.endpoint + path, self._timeout_s(seconds)
        return await with_retries(
            self.retries, idempotent, lambda: self._transport.post(url, msg, reply_type, timeout_s)
        )

    async def _owner_call(
        self,
        queue: str,
        partition: int | None,
        path: str,
        msg: m.Message,
        reply_type: type[R],
        seconds: float | None = None,
        idempotent: bool = False,
    ) -> R:
        """``call``, sent to the member owning ``partition`` of ``queue`` (None: some partition of it)
        when the client reaches owners."""
        owners = self._owners
        if owners is None:
            return await self.call(path, msg, reply_type, seconds=seconds, idempotent=idempotent)
        timeout_s = self._timeout_s(seconds)

        async def attempt() -> R:
            base = await (
                owners.queue_url(queue) if partition is None else owners.partition_url(queue, partition)
            )
            try:
                return await self._transport.post(base + path, msg, reply_type, timeout_s)
            except ConnectionFailed as e:
                if base == self.endpoint:
                    raise
                owners.stale(queue, base)
                if e.sent:
                    raise
                # The member never got it (it left): the endpoint serves it, forwarding if need be.
                return await self._transport.post(self.endpoint + path, msg, reply_type, timeout_s)
            except RetryRequest as e:
                if not isinstance(e, LeaseTimedOut):  # the partition may have moved
                    owners.stale(queue, base)
                raise

        return await with_retries(self.retries, idempotent, attempt)

    # -- the queue API ------------------------------------------------------------------------------------

    async def produce(
        self,
        queue_name: str,
        items: Sequence[ProduceItem],
        request_timeout: Duration = "1m",
        *,
        enqueue_at: datetime | None = None,
        delay: Duration | None = None,
        dedup_id: str | Sequence[str] | None = None,
        kind: str = "",
        reference: str = "",
        encoding: str = "",
    ) -> list[str]:
        """Produces ``items`` to ``queue_name`` in one request: one partition, in the given order.

        The keywords fill the fields each item leaves empty. Tried again after transient failures when
        every item has a dedup id (the server then stores it once), otherwise only after those that say
        nothing was stored.

        Args:
            queue_name: the queue.
            items: messages, or bare payloads (``bytes`` for the ``bytes`` field, ``str`` for ``utf8``).
            request_timeout: how long the server may spend (10ms to 15m): Go duration, timedelta or seconds.
            enqueue_at: schedule the items: they join the queue at this (aware) time.
            delay: schedule the items this long from now (not with ``enqueue_at``).
            dedup_id: one per item (a str for one item): an item whose id was seen within the queue's
                dedup window is accepted but not stored again.
            kind, reference, encoding: free-form strings the consumer gets with each item.

        Returns:
            Each item's id, in order: "" for one not stored because its dedup id was seen, and for every
            item when the server is one that does not report ids (the reference, or before this version).

        Raises:
            ValueError: ``enqueue_at`` with ``delay``; dedup ids not one per item.
            InvalidOption: unknown queue, no items, too many items, bad timeout, body too large.
            RetryRequest: the queue is overloaded or the write failed (nothing was stored unless its
                ``outcome_unknown``).
            RequestFailed: the queue or the service is shutting down.
            ConnectionFailed: no reply; the items may or may not have been stored.
        """
        timeout = go_duration(request_timeout)
        messages = produce_items(
            items,
            enqueue_at=enqueue_at,
            delay=delay,
            dedup_id=dedup_id,
            kind=kind,
            reference=reference,
            encoding=encoding,
        )
        msg = m.QueueProduceRequest(queue_name=queue_name, request_timeout=timeout, items=messages)
        once = all(i.dedup_id for i in messages)
        reply = await self._owner_call(
            queue_name,
            None,
            "/v1/queue.produce",
            msg,
            m.QueueProduceResponse,
            seconds=http_timeout_s(timeout),
            idempotent=once,
        )
        return list(reply.ids) if reply.ids else [""] * len(messages)

    async def lease(
        self,
        queue_name: str,
        batch_size: int = 1,
        client_id: str | None = None,
        request_timeout: Duration = "1m",
    ) -> m.QueueLeaseResponse:
        """Leases up to ``batch_size`` items, long-polling until at least one is available.

        Returns as soon as one or more items are leased, all from the one partition named in the reply;
        complete or retry them there before their ``lease_deadline``. When nothing became available
        within ``request_timeout`` the reply has no items (the server's 454 ``request timeout; no items
        are in the queue, try again``): lease again. ``client_id`` must be unique among the leases
        waiting on this queue; None makes a new one for this call (host, process and random bits).

        Raises:
            InvalidOption: unknown queue, bad batch size, client id empty or already waiting, bad timeout.
            RetryRequest: the queue is overloaded, or a storage or partition failure: back off, then lease
                again (tried again under ``retries`` first).
            RequestFailed: the queue or the service is shutting down.
            ConnectionFailed: no reply; items leased by a lost reply come back when their lease expires.
        """
        timeout = go_duration(request_timeout)
        msg = m.QueueLeaseRequest(
            queue_name=queue_name,
            batch_size=batch_size,
            client_id=new_client_id() if client_id is None else client_id,
            request_timeout=timeout,
        )
        try:
            return await self._owner_call(
                queue_name,
                None,
                "/v1/queue.lease",
                msg,
                m.QueueLeaseResponse,
                seconds=http_timeout_s(timeout),
                idempotent=True,
            )
        except LeaseTimedOut:
            return m.QueueLeaseResponse(queue_name=queue_name)

    async def lease_workflows(
        self,
        queue_name: str,
        batch_size: int = 1,
        client_id: str | None = None,
        request_timeout: Duration = "1m",
        *,
        claims: int = 0,
        claim_timeout: Duration = "30s",
        app_version: str = "",
        claimant: str = "",
    ) -> m.WorkflowsLeaseResponse:
        """``lease`` of a durable app's task queue that also claims, as ``claim_workflow`` would, the
        workflows of up to ``claims`` of the activations it leases (docs/adr/0071): the reply's
        ``claims`` name their items by id; an activation without one is claimed by its worker.
        ``claimant``: the worker process the claims are for (its claims that run out count as one
        worker lost).

        Raises:
            as ``lease``; NotImplementedRoute: a server older than the route (lease and claim then).
        """
        timeout = go_duration(request_timeout)
        msg = m.WorkflowsLeaseRequest(
            queue_name=queue_name,
            batch_size=batch_size,
            client_id=new_client_id() if client_id is None else client_id,
            request_timeout=timeout,
            claims=claims,
            claim_timeout=go_duration(claim_timeout),
            app_version=app_version,
            claimant=claimant,
        )
        try:
            # Not tried again: a lost reply's claims hold until their timeout, as claim_workflow's.
            return await self._owner_call(
                queue_name,
                None,
                "/v1/workflows.lease",
                msg,
                m.WorkflowsLeaseResponse,
                seconds=http_timeout_s(timeout),
            )
        except LeaseTimedOut:
            return m.WorkflowsLeaseResponse(queue_name=queue_name)

    async def complete(
        self,
        queue_name: str,
        partition: int,
        ids: Sequence[str],
        request_timeout: Duration = "1m",
        lease_tokens: Sequence[str] = (),
    ) -> None:
        """Marks leased items done (deletes them). Fails fast; never retried by the server.

        Ids are processed in order; the first that fails stops the request, and the ids before it stay
        completed. ``lease_tokens``: each id's ``lease_token`` from its lease, which a queue that requires
        lease tokens asks for (docs/extensions.md, "Lease tokens").

        Raises:
            InvalidOption: unknown queue or partition, no ids, an id that does not exist or is not leased.
            RetryRequest: a storage or partition failure; the ids after the failing one were not completed.
            ConnectionFailed: no reply; some ids may have been completed.
        """
        timeout = go_duration(request_timeout)
        msg = m.QueueCompleteRequest(
            queue_name=queue_name,
            partition=partition,
            request_timeout=timeout,
            ids=list(ids),
            lease_tokens=list(lease_tokens),
        )
        await self._owner_call(
            queue_name, partition, "/v1/queue.complete", msg, m.Reply, seconds=http_timeout_s(timeout)
        )

    async def retry(self, queue_name: str, partition: int, items: Sequence[RetryItem]) -> None:
        """Gives leased items back: now (new id, queue tail), at ``retry_at`` (scheduled), or dead.

        Args:
            queue_name: the queue.
            partition: the partition the items were leased from.
            items: messages, or bare ids meaning "retry now".

        Raises:
            InvalidOption: unknown queue or partition, no items, an id that does not exist or is not leased.
            RetryRequest: a storage or partition failure.
            ConnectionFailed: no reply; some items may have been retried.
        """
        msg = m.QueueRetryRequest(
            queue_name=queue_name,
            partition=partition,
            items=[retry_item(i) for i in items],
        )
        await self._owner_call(queue_name, partition, "/v1/queue.retry", msg, m.Reply)

    async def renew(
        self,
        queue_name: str,
        partition: int,
        ids: Sequence[str],
        lease_timeout: Duration = "",
        request_timeout: Duration = "1m",
        lease_tokens: Sequence[str] = (),
    ) -> m.QueueRenewResponse:
        """Extends leases (a heartbeat): each leased id's deadline becomes now + ``lease_timeout``.

        ``lease_timeout`` defaults to the queue's and may not exceed its expire timeout. Ids are processed
        in order; the first that fails stops the request, and the ids before it stay renewed.
        ``lease_tokens``: as for ``complete``.

        Raises:
            InvalidOption: unknown queue or partition, no ids, an id that does not exist or is not leased
                (its lease expired and it went back to the queue), a bad ``lease_timeout``.
            RetryRequest: a storage or partition failure.
            ConnectionFailed: no reply; some ids may have been renewed.
        """
        timeout = go_duration(request_timeout)
        msg = m.QueueRenewRequest(
            queue_name=queue_name,
            partition=partition,
            ids=list(ids),
            lease_timeout=go_duration(lease_timeout),
            request_timeout=timeout,
            lease_tokens=list(lease_tokens),
        )
        return await self._owner_call(
            queue_name,
            partition,
            "/v1/queue.renew",
            msg,
            m.QueueRenewResponse,
            seconds=http_timeout_s(timeout),
            idempotent=True,
        )

    @contextlib.asynccontextmanager
    async def leased(
        self,
        queue_name: str,
        batch_size: int = 1,
        client_id: str | None = None,
        request_timeout: Duration = "1m",
        lease_timeout: Duration = "",
    ) -> AsyncIterator[Lease]:
        """Leases items for the body of an ``async with``, renewing the leases while it runs.

        The body gets a ``Lease`` (``.items``, ``.partition``) and may mark each item ``complete``,
        ``retry`` (now or later) or ``dead``; when the body ends, marked items get their outcome and the
        rest are completed, or retried now if the body raised (the exception propagates). A lease that
        found nothing has no items and settles nothing. Renewal happens each time a third of the time
        left on the lease has passed (measured against the server's ``lease_deadline``; with
        ``lease_timeout``, at least every third of it), so the first renewal always comes before the
        queue's own lease timeout runs out. A renewal that fails for a retryable reason (454, no answer)
        is tried again, sooner; one answered 400 means the lease was lost (it expired and the item went
        back to the queue), and renewal stops.

        Example::

            async with client.leased("orders", 10) as lease:
                for item in lease.items:
                    try:
                        await handle(item.bytes)
                    except Temporary:
                        lease.retry(item, at=timedelta(seconds=30))

        Raises:
            as ``lease`` when leasing (and ValueError for a ``lease_timeout`` that is not a duration);
            as ``complete``/``retry`` on exit: settling items whose lease was lost answers InvalidOption,
            as their ids no longer exist.
        """
        renewal = go_duration(lease_timeout)
        if renewal:
            parse_duration(renewal)
        lease = Lease(await self.lease(queue_name, batch_size, client_id, request_timeout))
        ids = [i.id for i in lease.items]
        deadline = lease.items[0].lease_deadline if ids else None
        tokens = {i.id: i.lease_token for i in lease.items if i.lease_token}
        renewing = asyncio.create_task(
            keep_renewed(self, queue_name, lease.partition, ids, deadline, renewal, tokens=tokens)
        )
        try:
            yield lease
        except BaseException:
            await stopped(renewing)
            with contextlib.suppress(QueratorError):
                # Best effort: items not retried come back anyway when their lease expires.
                await lease.settle(self, failed=True)
            raise
        await stopped(renewing)
        await lease.settle(self, failed=False)

    # -- locks and semaphores (docs/locks.md) -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock(
        self, name: str, ttl: Duration = "30s", *, timeout: Duration | None = None
    ) -> AsyncIterator[Held]:
        """Holds the lock ``name`` for the body of an ``async with``: a semaphore of limit 1.

        ``Held.fencing_token`` increases with each acquisition of the lock, across processes and restarts.
        See ``semaphore`` for ``ttl``, ``timeout`` and what is raised.
        """
        async with hold(self, self._locks, name, 1, ttl, timeout) as held:
            yield held

    @contextlib.asynccontextmanager
    async def semaphore(
        self, name: str, limit: int, ttl: Duration = "30s", *, timeout: Duration | None = None
    ) -> AsyncIterator[Held]:
        """Holds one of ``limit`` slots of the semaphore ``name`` for the body of an ``async with``.

        The first use of a name creates its queue (``lock.<name>``) with ``limit`` tokens; any number of
        processes may do so at once. The acquire long-polls for a free token, for at most ``timeout``
        (None: until one is free). The token's lease is renewed while the body runs and given back when it
        ends; a holder that dies without giving it back loses it ``ttl`` after its last renewal. The body
        gets a ``Held``: its ``slot`` and ``fencing_token`` (docs/locks.md, "Fencing tokens").

        Raises:
            ValueError: an empty name, a limit below 1, a ttl below 1s or not a duration, a negative timeout.
            LockMismatch: the semaphore exists with another limit (``set_limit`` changes it).
            AcquireTimedOut: no token was free within ``timeout``.
            LockLost: on exit, when the lease ended before the body did (the body ran past its ttl without
                a renewal getting through): another holder may have had the slot meanwhile.
            InvalidOption: the server refused the name (docs/semantics.md §2.2).
        """
        async with hold(self, self._locks, name, limit, ttl, timeout) as held:
            yield held

    async def set_limit(self, name: str, limit: int, timeout: Duration | None = None) -> None:
        """Changes the limit of the existing semaphore ``name``, and returns once it holds ``limit`` tokens.

        Growing adds tokens at once. Shrinking takes tokens out as their holders release them, waiting at
        most ``timeout`` (None: as long as it takes); until it returns, more than ``limit`` may be held.
        One call at a time per name.

        Raises:
            ValueError: a limit below 1.
            LockMismatch: the queue is not a lock's.
            AcquireTimedOut: shrinking did not finish within ``timeout`` (call again to go on).
            InvalidOption: no such semaphore.
        """
        await change_limit(self, name, limit, timeout)

    async def take_rate(
        self,
        queue_name: str,
        key: str = "",
        *,
        limit: int,
        period: Duration,
        max_wait: Duration = 0,
    ) -> m.RateLimitsTakeResponse:
        """Reserves the next start of a cluster-wide rate limit: at most ``limit`` starts of ``key`` per
        ``period``, evenly spaced, shared by every caller of the cluster that names the same queue and key
        (docs/extensions.md, "Rate limits"). ``granted``: start after ``wait``; else ask again after
        ``wait``, when a start within ``max_wait`` is free. Not tried again by itself: a lost reply may
        have reserved a start.

        Raises:
            InvalidOption: unknown queue, a limit, period, max wait or key out of bounds.
            RetryRequest: the key's owner is unreachable, or holds too many keys.
        """
        msg = m.RateLimitsTakeRequest(
            queue_name=queue_name,
            key=key,
            limit=limit,
            period=go_duration(period),
            max_wait=go_duration(max_wait),
        )
        return await self.call("/v1/rate_limits.take", msg, m.RateLimitsTakeResponse)

    async def redrive(
        self, queue_name: str, target_queue: str, limit: int = 0, request_timeout: Duration = "1m"
    ) -> int:
        """Moves items of a dead-letter queue into ``target_queue`` (FIFO; at most ``limit``, 0 = all).

        Returns the number moved; fewer than asked when ``request_timeout`` ran out first (call again to
        go on). An interrupted redrive neither loses nor duplicates items.

        Raises:
            InvalidOption: unknown queue or target, target equal to the queue, negative limit.
            RetryRequest: a storage or partition failure; items moved so far stay moved.
        """
        timeout = go_duration(request_timeout)
        msg = m.QueueRedriveRequest(
            queue_name=queue_name, target_queue=target_queue, limit=limit, request_timeout=timeout
        )
        reply = await self.call(
            "/v1/queue.redrive", msg, m.QueueRedriveResponse, seconds=http_timeout_s(timeout)
        )
        return reply.moved

    async def cluster_info(self, queue_name: str = "", namespace: str = "") -> m.ClusterInfoResponse:
        """The members of the cluster, the ring's revision and the owner of each partition (of
        ``queue_name``, or of every queue of ``namespace``). A node alone is a one-member ring.

        Raises:
            InvalidOption: unknown queue.
        """
        msg = m.ClusterInfoRequest(queue_name=queue_name, namespace=namespace)
        return await self.call("/v1/cluster.info", msg, m.ClusterInfoResponse, idempotent=True)

    async def stats(self, queue_name: str) -> m.QueueStatsResponse:
        """Counts of waiting requests and, per partition, of items, leases, failures and ages.

        Raises:
            InvalidOption: unknown queue.
        """
        request = m.QueueStatsRequest(queue_name=queue_name)
        return await self.call("/v1/queue.stats", request, m.QueueStatsResponse, idempotent=True)

    async def clear(
        self, queue_name: str, queue: bool = False, scheduled: bool = False, destructive: bool = False
    ) -> None:
        """Deletes items of every partition: un-leased queued ones (``queue``; with ``destructive`` leased
        ones too) and/or scheduled ones (``scheduled``).

        Raises:
            InvalidOption: unknown queue, or neither ``queue`` nor ``scheduled`` set.
        """
        msg = m.QueueClearRequest(
            queue_name=queue_name, queue=queue, scheduled=scheduled, destructive=destructive
        )
        await self._reply_call("/v1/queue.clear", msg)

    async def reload(self, queue_name: str) -> None:
        """Re-reads the queue's counters from storage (after an ``import_items``, for instance).

        Raises:
            InvalidOption: unknown queue.
        """
        await self._reply_call(
            "/v1/queue.reload", m.QueueReloadRequest(queue_name=queue_name), idempotent=True
        )

    async def health(self) -> dict[str, Any]:
        """``GET /health``: the server's health+json body, for a passing (200) or failing (503) check.

        Returns:
            The body, e.g. ``{"status": "pass", "version": ..., "checks": {...}}``.

        Raises:
            QueratorError: any other status or a body that is not a JSON object (code = HTTP status).
            ConnectionFailed: no reply.
        """
        url, timeout_s = self.endpoint + "/health", self._timeout_s(None)
        status, body = await with_retries(self.retries, True, lambda: self._transport.get(url, timeout_s))
        if status not in (200, 503):
            raise plain_error(status, f"health check failed; HTTP {status}: {snippet(body)}")
        try:
            return msgspec.json.decode(body, type=dict[str, Any])
        except msgspec.DecodeError:
            raise plain_error(status, f"unexpected health reply; {snippet(body)}") from None
