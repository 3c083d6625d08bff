"""A Python client of the Querator v1 HTTP API: ``AsyncClient`` for asyncio code, ``Client`` for the rest.

Both speak to any v1 server (this one or the Go reference) over one pooled aiohttp session. Every call is a
``POST`` of a wire message (``querator.wire.messages``) encoded as protojson, or as binary protobuf when the
client is built with ``protobuf=True`` (then replies are requested as protobuf too). Every call goes through
``AsyncClient.call``.

Timeouts (ADR 0009 of the reference, spec §2.13): a call that carries a ``request_timeout`` lets the
server wait that long (a lease long-polls), so the client abandons the HTTP exchange only after
``request_timeout + timeout_margin`` seconds; calls without one use ``DEFAULT_TIMEOUT + timeout_margin``.

Failures, all ``querator.errors.QueratorError`` with ``.code`` and ``.message``:

- a non-200 reply raises the class of the body's ``code``: 400 ``InvalidOption``, 401 ``Unauthorized``,
  453 ``RequestFailed``, 454 ``RetryRequest`` (e.g. a lease that found nothing before its timeout: lease
  again), 455 ``ClientContentError``, 501 ``NotImplementedRoute``; any other code a plain ``QueratorError``
  with that code. ``.message`` is the server's message (``<stable prefix>; <details>``).
- a reply whose body is neither JSON nor protobuf (a proxy's HTML page, say) raises a plain
  ``QueratorError`` whose code is the HTTP status.
- no reply at all -- connection refused or reset, DNS failure, or the HTTP timeout above elapsing -- raises
  ``ConnectionFailed`` (code 0). Unless the connection was refused, the server may have applied the call.

The synchronous ``Client`` runs an ``AsyncClient`` on a private event loop in a daemon thread, so its
session (and its pooled connections) live as long as the client, and any number of threads may call it
at once. ``asyncio.run`` per call was rejected: an aiohttp session is bound to the loop that made it, so it
would have meant a new session, a new connection and a new TCP handshake on every call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp
import msgspec

from querator import __version__, wire
from querator.auth import EXTENSIONS_HEADER
from querator.clock import MICROS, SystemClock, from_datetime
from querator.duration import SECOND, DurationError, format_duration, parse_duration
from querator.errors import InvalidOption, QueratorError, RetryRequest, error_for, plain_error
from querator.wire import messages as m

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_TIMEOUT",
    "AsyncClient",
    "Client",
    "ConnectionFailed",
    "ProduceItem",
    "RetryItem",
    "error_for",
    "new_queue_info",
]

DEFAULT_ENDPOINT = "http://localhost:2319"
DEFAULT_TIMEOUT = 30.0
"""Seconds a call without a ``request_timeout`` may take (before ``timeout_margin`` is added)."""

R = TypeVar("R", bound=m.Message)
T = TypeVar("T")

ProduceItem = m.QueueProduceItem | bytes | str
"""An item to produce: a full message, or just its payload (``bytes`` -> ``bytes``, ``str`` -> ``utf8``)."""
RetryItem = m.QueueRetryItem | str
"""An item to retry: a full message, or just its id (retry now)."""

_SNIPPET = 200
MIN_RENEW_WAIT = 0.01
"""Seconds: the shortest wait between two renewals of a lease about to run out."""


class ConnectionFailed(QueratorError):
    """No reply was received: the connection failed, broke, or the call's HTTP timeout elapsed.

    ``code`` is 0 (no HTTP status exists). Retrying is the caller's choice: unless the connection was
    refused outright the server may have received and applied the request.
    """

    code = 0


def _media_type(header: str | None) -> str:
    """A Content-Type cut at the first ``;`` or ``,``, trimmed and lower-cased (the server's rule too)."""
    if not header:
        return ""
    for sep in ";,":
        header = header.partition(sep)[0]
    return header.strip().lower()


def _http_timeout(request_timeout: str) -> float | None:
    """Seconds of a Go duration, or None if the text is not a positive duration (the server will say why)."""
    try:
        nanos = parse_duration(request_timeout)
    except DurationError:
        return None
    return nanos / SECOND if nanos > 0 else None


def _produce_item(item: ProduceItem) -> m.QueueProduceItem:
    if isinstance(item, m.QueueProduceItem):
        return item
    if isinstance(item, str):
        return m.QueueProduceItem(utf8=item)
    return m.QueueProduceItem(bytes=bytes(item))


class AsyncClient:
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
        timeout_margin: seconds to wait beyond a call's timeout before abandoning it (ADR 0009).
        limit: the pool's maximum number of connections.
        limit_per_host: the pool's maximum number of connections per host (0: only ``limit`` applies).
        ssl: the TLS context of an ``https://`` endpoint (None: the system's CAs verify the server).
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
    ) -> None:
        if timeout_margin < 0:
            raise ValueError("timeout_margin cannot be negative")
        self.endpoint = endpoint.rstrip("/")
        self.protobuf = protobuf
        self.timeout_margin = timeout_margin
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._ssl = ssl
        media = wire.PROTOBUF if protobuf else wire.JSON
        self._headers = {
            "Content-Type": media,
            "Accept": media,
            "User-Agent": f"querator-python/{__version__}",
            # This client knows the extension fields: the server may put them in JSON replies.
            EXTENSIONS_HEADER: "1",
        }
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._encode = wire.encode_protobuf if protobuf else wire.encode_json
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the session and its pooled connections; later calls raise ``RuntimeError``. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("querator client is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limit, limit_per_host=self._limit_per_host, ssl=self._ssl or True
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        total = (DEFAULT_TIMEOUT if seconds is None else seconds) + self.timeout_margin
        timeout = self._timeouts.get(total)
        if timeout is None:
            if len(self._timeouts) > 64:
                self._timeouts.clear()
            timeout = self._timeouts[total] = aiohttp.ClientTimeout(total=total)
        return timeout

    # -- the one way out ----------------------------------------------------------------------------------

    async def call(
        self, path: str, msg: m.Message, reply_type: type[R], *, seconds: float | None = None
    ) -> R:
        """POSTs ``msg`` to ``path`` (e.g. ``/v1/queue.stats``) and decodes the 200 reply as ``reply_type``.

        Args:
            path: the route, starting with ``/``.
            msg: the request message.
            reply_type: the message type of a successful reply (``m.Reply`` for routes without a payload).
            seconds: how long the server may take; ``timeout_margin`` is added. None: ``DEFAULT_TIMEOUT``.

        Returns:
            The decoded reply.

        Raises:
            QueratorError: the typed error of a non-200 reply (see the module docstring), or a plain
                ``QueratorError`` with the HTTP status as code when the reply cannot be decoded.
            ConnectionFailed: no reply was received within the timeout.
            RuntimeError: the client is closed.
        """
        session = self._get_session()
        try:
            async with session.post(
                self.endpoint + path,
                data=self._encode(msg),
                headers=self._headers,
                timeout=self._timeout(seconds),
            ) as resp:
                status = resp.status
                media = _media_type(resp.headers.get("Content-Type"))
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise _connection_failed(self.endpoint + path, e) from e
        if status == 200:
            return _decode(body, media, reply_type, status)
        reply = _decode(body, media, m.Reply, status)
        raise error_for(reply.code or status, reply.message)

    async def _reply_call(self, path: str, msg: m.Message, seconds: float | None = None) -> None:
        await self.call(path, msg, m.Reply, seconds=seconds)

    # -- the queue API ------------------------------------------------------------------------------------

    async def produce(
        self, queue_name: str, items: Sequence[ProduceItem], request_timeout: str = "1m"
    ) -> None:
        """Produces ``items`` to ``queue_name`` in one request: one partition, in the given order.

        Args:
            queue_name: the queue.
            items: messages, or bare payloads (``bytes`` for the ``bytes`` field, ``str`` for ``utf8``).
            request_timeout: Go duration the server may spend (10ms to 15m).

        Raises:
            InvalidOption: unknown queue, no items, too many items, bad timeout, body too large.
            RetryRequest: the queue is overloaded or the write failed; nothing was stored.
            RequestFailed: the queue or the service is shutting down.
            ConnectionFailed: no reply; the items may or may not have been stored.
        """
        msg = m.QueueProduceRequest(
            queue_name=queue_name, request_timeout=request_timeout, items=[_produce_item(i) for i in items]
        )
        await self._reply_call("/v1/queue.produce", msg, _http_timeout(request_timeout))

    async def lease(
        self, queue_name: str, batch_size: int, client_id: str, request_timeout: str = "1m"
    ) -> m.QueueLeaseResponse:
        """Leases up to ``batch_size`` items, long-polling until at least one is available.

        Returns as soon as one or more items are leased, all from the one partition named in the reply;
        complete or retry them there before their ``lease_deadline``. ``client_id`` must be unique among
        the leases waiting on this queue.

        Raises:
            RetryRequest: nothing became available within ``request_timeout``: lease again.
            InvalidOption: unknown queue, bad batch size, client id empty or already waiting, bad timeout.
            RequestFailed: the queue or the service is shutting down.
            ConnectionFailed: no reply; items leased by a lost reply come back when their lease expires.
        """
        msg = m.QueueLeaseRequest(
            queue_name=queue_name, batch_size=batch_size, client_id=client_id, request_timeout=request_timeout
        )
        return await self.call(
            "/v1/queue.lease", msg, m.QueueLeaseResponse, seconds=_http_timeout(request_timeout)
        )

    async def complete(
        self, queue_name: str, partition: int, ids: Sequence[str], request_timeout: str = "1m"
    ) -> None:
        """Marks leased items done (deletes them). Fails fast; never retried by the server.

        Ids are processed in order; the first that fails stops the request, and the ids before it stay
        completed.

        Raises:
            InvalidOption: unknown queue or partition, no ids, an id that does not exist or is not leased.
            RetryRequest: a storage or partition failure; the ids after the failing one were not completed.
            ConnectionFailed: no reply; some ids may have been completed.
        """
        msg = m.QueueCompleteRequest(
            queue_name=queue_name, partition=partition, request_timeout=request_timeout, ids=list(ids)
        )
        await self._reply_call("/v1/queue.complete", msg, _http_timeout(request_timeout))

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
            items=[m.QueueRetryItem(id=i) if isinstance(i, str) else i for i in items],
        )
        await self._reply_call("/v1/queue.retry", msg)

    async def renew(
        self,
        queue_name: str,
        partition: int,
        ids: Sequence[str],
        lease_timeout: str = "",
        request_timeout: str = "1m",
    ) -> m.QueueRenewResponse:
        """Extends leases (a heartbeat): each leased id's deadline becomes now + ``lease_timeout``.

        ``lease_timeout`` defaults to the queue's and may not exceed its expire timeout. Ids are processed
        in order; the first that fails stops the request, and the ids before it stay renewed.

        Raises:
            InvalidOption: unknown queue or partition, no ids, an id that does not exist or is not leased
                (its lease expired and it went back to the queue), a bad ``lease_timeout``.
            RetryRequest: a storage or partition failure.
            ConnectionFailed: no reply; some ids may have been renewed.
        """
        msg = m.QueueRenewRequest(
            queue_name=queue_name,
            partition=partition,
            ids=list(ids),
            lease_timeout=lease_timeout,
            request_timeout=request_timeout,
        )
        return await self.call(
            "/v1/queue.renew", msg, m.QueueRenewResponse, seconds=_http_timeout(request_timeout)
        )

    @contextlib.asynccontextmanager
    async def leased(
        self,
        queue_name: str,
        batch_size: int,
        client_id: str,
        request_timeout: str = "1m",
        lease_timeout: str = "",
    ) -> AsyncIterator[m.QueueLeaseResponse]:
        """Leases items for the body of an ``async with``, renewing the leases while it runs.

        On a normal exit the items are completed; if the body raises, they are retried (now) and the
        exception propagates. Renewal happens each time a third of the time left on the lease has passed
        (measured against the server's ``lease_deadline``; with ``lease_timeout``, at least every third
        of it), so the first renewal always comes before the queue's own lease timeout runs out. A
        renewal that fails for a retryable reason (454, no answer) is tried again, sooner; one answered
        400 means the lease was lost (it expired and the item went back to the queue), and renewal stops.

        Example::

            async with client.leased("orders", 10, "worker-1") as lease:
                for item in lease.items:
                    await handle(item.bytes)

        Raises:
            as ``lease`` when leasing (and ValueError for a ``lease_timeout`` that is not a duration);
            as ``complete``/``retry`` on exit: completing items whose lease was lost answers
            InvalidOption, as their ids no longer exist.
        """
        if lease_timeout:
            parse_duration(lease_timeout)
        lease = await self.lease(queue_name, batch_size, client_id, request_timeout)
        ids = [i.id for i in lease.items]
        renewing = asyncio.create_task(self._keep_renewed(lease, lease_timeout))
        try:
            yield lease
        except BaseException:
            await _stopped(renewing)
            with contextlib.suppress(QueratorError):
                # Best effort: items not retried come back anyway when their lease expires.
                await self.retry(queue_name, lease.partition, ids)
            raise
        await _stopped(renewing)
        await self.complete(queue_name, lease.partition, ids)

    async def _keep_renewed(self, lease: m.QueueLeaseResponse, lease_timeout: str) -> None:
        """Renews ``lease``'s items until cancelled, or until a renewal says the lease is lost."""
        if not lease.items:
            return
        ids = [i.id for i in lease.items]
        clock = SystemClock()
        first = lease.items[0].lease_deadline
        deadline = from_datetime(first) if first is not None else clock.now() + MICROS
        period = parse_duration(lease_timeout) / 1e9 / 3 if lease_timeout else None
        while True:
            third = (deadline - clock.now()) / MICROS / 3
            await asyncio.sleep(max(third if period is None else min(period, third), MIN_RENEW_WAIT))
            try:
                reply = await self.renew(lease.queue_name, lease.partition, ids, lease_timeout)
            except InvalidOption:
                return  # lost; completing on exit will say so
            except (RetryRequest, ConnectionFailed):
                continue  # the next try comes after a third of what is left
            if reply.items and reply.items[0].lease_deadline is not None:
                deadline = from_datetime(reply.items[0].lease_deadline)

    async def redrive(
        self, queue_name: str, target_queue: str, limit: int = 0, request_timeout: str = "1m"
    ) -> int:
        """Moves items of a dead-letter queue into ``target_queue`` (FIFO; at most ``limit``, 0 = all).

        Returns the number moved; fewer than asked when ``request_timeout`` ran out first (call again to
        go on). An interrupted redrive neither loses nor duplicates items.

        Raises:
            InvalidOption: unknown queue or target, target equal to the queue, negative limit.
            RetryRequest: a storage or partition failure; items moved so far stay moved.
        """
        msg = m.QueueRedriveRequest(
            queue_name=queue_name, target_queue=target_queue, limit=limit, request_timeout=request_timeout
        )
        reply = await self.call(
            "/v1/queue.redrive", msg, m.QueueRedriveResponse, seconds=_http_timeout(request_timeout)
        )
        return reply.moved

    async def cluster_info(self, queue_name: str = "", namespace: str = "") -> m.ClusterInfoResponse:
        """The members of the cluster, the ring's revision and the owner of each partition (of
        ``queue_name``, or of every queue of ``namespace``). A node alone is a one-member ring.

        Raises:
            InvalidOption: unknown queue.
        """
        msg = m.ClusterInfoRequest(queue_name=queue_name, namespace=namespace)
        return await self.call("/v1/cluster.info", msg, m.ClusterInfoResponse)

    async def stats(self, queue_name: str) -> m.QueueStatsResponse:
        """Counts of waiting requests and, per partition, of items, leases, failures and ages.

        Raises:
            InvalidOption: unknown queue.
        """
        return await self.call(
            "/v1/queue.stats", m.QueueStatsRequest(queue_name=queue_name), m.QueueStatsResponse
        )

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
        await self._reply_call("/v1/queue.reload", m.QueueReloadRequest(queue_name=queue_name))

    # -- queue administration -----------------------------------------------------------------------------

    async def create_queue(
        self,
        info: m.QueueInfo | str,
        *,
        lease_timeout: str | None = None,
        expire_timeout: str | None = None,
        max_attempts: int | None = None,
        dead_queue: str | None = None,
        reference: str | None = None,
        partitions: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """Creates a queue from a full ``QueueInfo``, or from a name and keyword settings.

        With a name, unset settings default to a lease timeout of ``1m``, an expire timeout of 60 times
        the lease timeout, 1 partition, unlimited attempts, no dead queue and the ``_system`` namespace.
        Keywords cannot be combined with a ``QueueInfo``.

        Raises:
            InvalidOption: the name is taken or invalid, a setting is invalid, the dead queue is missing.
            TypeError: keywords were given together with a ``QueueInfo``.
        """
        options = {
            "lease_timeout": lease_timeout,
            "expire_timeout": expire_timeout,
            "max_attempts": max_attempts,
            "dead_queue": dead_queue,
            "reference": reference,
            "partitions": partitions,
            "namespace": namespace,
        }
        if isinstance(info, m.QueueInfo):
            given = [k for k, v in options.items() if v is not None]
            if given:
                raise TypeError(f"create_queue: {', '.join(given)} cannot be combined with a QueueInfo")
        else:
            info = new_queue_info(
                info,
                lease_timeout=lease_timeout or "1m",
                expire_timeout=expire_timeout,
                max_attempts=max_attempts or 0,
                dead_queue=dead_queue or "",
                reference=reference or "",
                partitions=1 if partitions is None else partitions,
                namespace=namespace or "",
            )
        await self._reply_call("/v1/queues.create", info)

    async def update_queue(self, info: m.QueueInfo) -> None:
        """Changes a queue's settings, with the server's "replace" semantics.

        Empty ``lease_timeout``/``expire_timeout`` and a zero ``requested_partitions`` keep the current
        values, but ``dead_queue``, ``max_attempts`` and ``reference`` are always replaced: to change one
        setting, start from ``queue_info()`` and modify it (``msgspec.structs.replace``).

        Raises:
            InvalidOption: unknown queue, invalid setting, partitions decreased, lease > expire timeout.
        """
        await self._reply_call("/v1/queues.update", info)

    async def delete_queue(self, name: str, force: bool = False) -> None:
        """Deletes a queue and its items; its waiting requests get ``RequestFailed``.

        Raises:
            InvalidOption: invalid name or unknown queue.
        """
        await self._reply_call("/v1/queues.delete", m.QueuesDeleteRequest(queue_name=name, force=force))

    async def queue_info(self, name: str) -> m.QueueInfo:
        """The queue's current settings.

        Raises:
            InvalidOption: invalid name or unknown queue (``queue does not exist; ...``).
        """
        return await self.call("/v1/queues.info", m.QueuesInfoRequest(queue_name=name), m.QueueInfo)

    async def list_queues(self, pivot: str = "", limit: int = 0, namespace: str = "") -> m.QueuesListResponse:
        """Queues of ``namespace`` (empty: ``_system``) by name, from the first name >= ``pivot``.

        ``limit`` 0 means the server's default (1000).

        Raises:
            InvalidOption: limit out of range or invalid pivot.
        """
        msg = m.QueuesListRequest(pivot=pivot, limit=limit, namespace=namespace)
        return await self.call("/v1/queues.list", msg, m.QueuesListResponse)

    # -- the storage API (operators and debugging) --------------------------------------------------------

    async def list_items(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """Queued (not scheduled) items of one partition in FIFO order, from the first id >= ``pivot``.

        Raises:
            InvalidOption: unknown queue or partition, pivot not a valid id, negative limit.
        """
        return await self._list("/v1/storage/items.list", queue_name, partition, pivot, limit)

    async def list_scheduled(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """Scheduled items of one partition, like ``list_items``."""
        return await self._list("/v1/storage/scheduled.list", queue_name, partition, pivot, limit)

    async def _list(
        self, path: str, queue_name: str, partition: int, pivot: str, limit: int
    ) -> m.StorageItemsListResponse:
        msg = m.StorageItemsListRequest(queue_name=queue_name, partition=partition, pivot=pivot, limit=limit)
        return await self.call(path, msg, m.StorageItemsListResponse)

    async def import_items(
        self, queue_name: str, partition: int, items: Sequence[m.StorageItem]
    ) -> m.StorageItemsImportResponse:
        """Writes items into a partition as they are (new ids); items whose ``source_id`` exists are skipped.

        Call ``reload`` afterwards so that the queue's counters include them.

        Raises:
            InvalidOption: unknown queue or partition, no items.
        """
        msg = m.StorageItemsImportRequest(queue_name=queue_name, partition=partition, items=list(items))
        return await self.call("/v1/storage/items.import", msg, m.StorageItemsImportResponse)

    async def delete_items(self, queue_name: str, partition: int, ids: Sequence[str]) -> None:
        """Deletes items by id from a partition; unknown ids are ignored.

        Raises:
            InvalidOption: unknown queue or partition, no ids, a malformed id.
        """
        msg = m.StorageItemsDeleteRequest(queue_name=queue_name, partition=partition, ids=list(ids))
        await self._reply_call("/v1/storage/items.delete", msg)

    async def health(self) -> dict[str, Any]:
        """``GET /health``: the server's health+json body, for a passing (200) or failing (503) check.

        Returns:
            The body, e.g. ``{"status": "pass", "version": ..., "checks": {...}}``.

        Raises:
            QueratorError: any other status or a body that is not a JSON object (code = HTTP status).
            ConnectionFailed: no reply.
        """
        session = self._get_session()
        url = self.endpoint + "/health"
        try:
            async with session.get(url, headers=self._headers, timeout=self._timeout(None)) as resp:
                status = resp.status
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise _connection_failed(url, e) from e
        if status not in (200, 503):
            raise plain_error(status, f"health check failed; HTTP {status}: {_snippet(body)}")
        try:
            return msgspec.json.decode(body, type=dict[str, Any])
        except msgspec.DecodeError:
            raise plain_error(status, f"unexpected health reply; {_snippet(body)}") from None


def new_queue_info(
    name: str,
    *,
    lease_timeout: str = "1m",
    expire_timeout: str | None = None,
    max_attempts: int = 0,
    dead_queue: str = "",
    reference: str = "",
    partitions: int = 1,
    namespace: str = "",
) -> m.QueueInfo:
    """A ``QueueInfo`` for ``create_queue``; the expire timeout defaults to 60 times the lease timeout.

    Raises:
        ValueError: ``expire_timeout`` is None and ``lease_timeout`` is not a Go duration.
    """
    if expire_timeout is None:
        expire_timeout = format_duration(60 * parse_duration(lease_timeout))
    return m.QueueInfo(
        queue_name=name,
        lease_timeout=lease_timeout,
        expire_timeout=expire_timeout,
        max_attempts=max_attempts,
        dead_queue=dead_queue,
        reference=reference,
        requested_partitions=partitions,
        namespace=namespace,
    )


async def _stopped(task: asyncio.Task[None]) -> BaseException | None:
    """Cancels ``task`` and waits for it; the exception it had already failed with, if any."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return None
    except Exception as e:
        return e
    return None


def _snippet(body: bytes) -> str:
    text = body[:_SNIPPET].decode("utf-8", "replace").strip()
    return text + ("..." if len(body) > _SNIPPET else "") if text else "<empty body>"


def _connection_failed(url: str, error: BaseException) -> ConnectionFailed:
    if isinstance(error, TimeoutError):
        return ConnectionFailed(f"request timed out; no reply from {url}")
    return ConnectionFailed(f"connection failed; {url}: {error or type(error).__name__}")


def _decode(body: bytes, media: str, type_: type[R], status: int) -> R:
    """A reply body by its Content-Type; anything undecodable is a QueratorError carrying ``status``."""
    try:
        if media == wire.JSON:
            return wire.decode_json(body, type_)
        if media == wire.PROTOBUF:
            return wire.decode_protobuf(body, type_)
    except (msgspec.DecodeError, msgspec.ValidationError, QueratorError, ValueError) as e:
        raise plain_error(
            status, f"undecodable reply; HTTP {status} {media or 'no content type'}: {e}"
        ) from None
    raise plain_error(
        status, f"unexpected reply; HTTP {status} {media or 'no content type'}: {_snippet(body)}"
    )


class Client:
    """The blocking client: an ``AsyncClient`` driven on a private event loop in a daemon thread.

    Thread-safe: calls from several threads run concurrently on the one loop and share the connection
    pool. Do not call it from the client's own callbacks (there are none) -- it would deadlock. Close it
    with ``close()`` or use it as a ``with`` context manager; a client left open keeps its thread (a daemon
    thread, so it never blocks interpreter exit). Arguments, return values and errors are those of
    ``AsyncClient``; its methods are documented there.
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
    ) -> None:
        self.aio = AsyncClient(
            endpoint, api_key, protobuf, timeout_margin, limit=limit, limit_per_host=limit_per_host
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="querator-client", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("querator client is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted (KeyboardInterrupt) or failed: make sure the call does not outlive us.
            future.cancel()
            raise

    def close(self) -> None:
        """Closes the session, stops the loop and joins its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.aio.close(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def call(self, path: str, msg: m.Message, reply_type: type[R], *, seconds: float | None = None) -> R:
        """See ``AsyncClient.call``."""
        return self._run(self.aio.call(path, msg, reply_type, seconds=seconds))

    def produce(self, queue_name: str, items: Sequence[ProduceItem], request_timeout: str = "1m") -> None:
        """See ``AsyncClient.produce``."""
        self._run(self.aio.produce(queue_name, items, request_timeout))

    def lease(
        self, queue_name: str, batch_size: int, client_id: str, request_timeout: str = "1m"
    ) -> m.QueueLeaseResponse:
        """See ``AsyncClient.lease``."""
        return self._run(self.aio.lease(queue_name, batch_size, client_id, request_timeout))

    def complete(
        self, queue_name: str, partition: int, ids: Sequence[str], request_timeout: str = "1m"
    ) -> None:
        """See ``AsyncClient.complete``."""
        self._run(self.aio.complete(queue_name, partition, ids, request_timeout))

    def retry(self, queue_name: str, partition: int, items: Sequence[RetryItem]) -> None:
        """See ``AsyncClient.retry``."""
        self._run(self.aio.retry(queue_name, partition, items))

    def renew(
        self,
        queue_name: str,
        partition: int,
        ids: Sequence[str],
        lease_timeout: str = "",
        request_timeout: str = "1m",
    ) -> m.QueueRenewResponse:
        """See ``AsyncClient.renew``."""
        return self._run(self.aio.renew(queue_name, partition, ids, lease_timeout, request_timeout))

    @contextlib.contextmanager
    def leased(
        self,
        queue_name: str,
        batch_size: int,
        client_id: str,
        request_timeout: str = "1m",
        lease_timeout: str = "",
    ) -> Iterator[m.QueueLeaseResponse]:
        """See ``AsyncClient.leased``; renewal runs on the client's own loop while the body works."""
        if lease_timeout:
            parse_duration(lease_timeout)
        lease = self.lease(queue_name, batch_size, client_id, request_timeout)
        ids = [i.id for i in lease.items]
        renewing = asyncio.run_coroutine_threadsafe(self.aio._keep_renewed(lease, lease_timeout), self._loop)
        try:
            yield lease
        except BaseException:
            renewing.cancel()
            with contextlib.suppress(QueratorError):
                self.retry(queue_name, lease.partition, ids)
            raise
        renewing.cancel()
        with contextlib.suppress(concurrent.futures.CancelledError):
            renewing.result()
        self.complete(queue_name, lease.partition, ids)

    def redrive(self, queue_name: str, target_queue: str, limit: int = 0, request_timeout: str = "1m") -> int:
        """See ``AsyncClient.redrive``."""
        return self._run(self.aio.redrive(queue_name, target_queue, limit, request_timeout))

    def cluster_info(self, queue_name: str = "", namespace: str = "") -> m.ClusterInfoResponse:
        """See ``AsyncClient.cluster_info``."""
        return self._run(self.aio.cluster_info(queue_name, namespace))

    def stats(self, queue_name: str) -> m.QueueStatsResponse:
        """See ``AsyncClient.stats``."""
        return self._run(self.aio.stats(queue_name))

    def clear(
        self, queue_name: str, queue: bool = False, scheduled: bool = False, destructive: bool = False
    ) -> None:
        """See ``AsyncClient.clear``."""
        self._run(self.aio.clear(queue_name, queue, scheduled, destructive))

    def reload(self, queue_name: str) -> None:
        """See ``AsyncClient.reload``."""
        self._run(self.aio.reload(queue_name))

    def create_queue(
        self,
        info: m.QueueInfo | str,
        *,
        lease_timeout: str | None = None,
        expire_timeout: str | None = None,
        max_attempts: int | None = None,
        dead_queue: str | None = None,
        reference: str | None = None,
        partitions: int | None = None,
        namespace: str | None = None,
    ) -> None:
        """See ``AsyncClient.create_queue``."""
        self._run(
            self.aio.create_queue(
                info,
                lease_timeout=lease_timeout,
                expire_timeout=expire_timeout,
                max_attempts=max_attempts,
                dead_queue=dead_queue,
                reference=reference,
                partitions=partitions,
                namespace=namespace,
            )
        )

    def update_queue(self, info: m.QueueInfo) -> None:
        """See ``AsyncClient.update_queue``."""
        self._run(self.aio.update_queue(info))

    def delete_queue(self, name: str, force: bool = False) -> None:
        """See ``AsyncClient.delete_queue``."""
        self._run(self.aio.delete_queue(name, force))

    def queue_info(self, name: str) -> m.QueueInfo:
        """See ``AsyncClient.queue_info``."""
        return self._run(self.aio.queue_info(name))

    def list_queues(self, pivot: str = "", limit: int = 0, namespace: str = "") -> m.QueuesListResponse:
        """See ``AsyncClient.list_queues``."""
        return self._run(self.aio.list_queues(pivot, limit, namespace))

    def list_items(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """See ``AsyncClient.list_items``."""
        return self._run(self.aio.list_items(queue_name, partition, pivot, limit))

    def list_scheduled(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """See ``AsyncClient.list_scheduled``."""
        return self._run(self.aio.list_scheduled(queue_name, partition, pivot, limit))

    def import_items(
        self, queue_name: str, partition: int, items: Sequence[m.StorageItem]
    ) -> m.StorageItemsImportResponse:
        """See ``AsyncClient.import_items``."""
        return self._run(self.aio.import_items(queue_name, partition, items))

    def delete_items(self, queue_name: str, partition: int, ids: Sequence[str]) -> None:
        """See ``AsyncClient.delete_items``."""
        self._run(self.aio.delete_items(queue_name, partition, ids))

    def health(self) -> dict[str, Any]:
        """See ``AsyncClient.health``."""
        return self._run(self.aio.health())
