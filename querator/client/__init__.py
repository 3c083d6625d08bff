"""A Python client of the Querator v1 HTTP API: ``AsyncClient`` for asyncio code, ``Client`` for the rest.

Both speak to any v1 server (this one or the Go reference) over one pooled aiohttp session. Every call is a
``POST`` of a wire message (``querator.wire.messages``) encoded as protojson, or as binary protobuf when the
client is built with ``protobuf=True`` (then replies are requested as protobuf too). Every call goes through
``AsyncClient.call``::

    from querator.client import AsyncClient

    async with AsyncClient("http://localhost:2319") as client:
        ids = await client.produce("jobs", [b"hello"], delay=timedelta(seconds=5), dedup_id="hello-1")
        async with client.leased("jobs", batch_size=10) as lease:
            for item in lease.items:
                print(item.bytes)           # completed when the block ends (lease.retry(item) to retry)

Locks and semaphores are queues of tokens (docs/locks.md): ``async with client.lock("invoice-42",
ttl="30s") as held:`` runs its body while no other holder does, and ``held.fencing_token`` increases with
each acquisition; ``client.semaphore("gpu", limit=4)`` admits four at once, ``client.set_limit`` changes
that.

Durations are Go strings (``"1m30s"``), ``timedelta``s or seconds. For running tasks from a queue, see
``querator.worker``, which is built on this client.

Timeouts (the reference's ADR 0009; docs/semantics.md §4.10): a call that carries a ``request_timeout``
lets the server wait that long (a lease long-polls), so the client abandons the HTTP exchange only after
``request_timeout + timeout_margin`` seconds; calls without one use ``DEFAULT_TIMEOUT + timeout_margin``.

Failures, all ``querator.errors.QueratorError`` with ``.code`` and ``.message``:

- a non-200 reply raises the class of the body's ``code``: 400 ``InvalidOption``, 401 ``Unauthorized``,
  453 ``RequestFailed``, 454 ``RetryRequest`` (overloaded, storage failing: back off and try again),
  455 ``ClientContentError``, 501 ``NotImplementedRoute``; any other code a plain ``QueratorError`` with
  that code (``error_for`` makes these). ``.message`` is the server's message (``<stable prefix>;
  <details>``). A lease that found nothing before its timeout is not a failure: it returns no items.
- a reply whose body is neither JSON nor protobuf (a proxy's HTML page, say) raises a plain
  ``QueratorError`` whose code is the HTTP status.
- no reply at all -- connection refused or reset, DNS failure, or the HTTP timeout above elapsing -- raises
  ``ConnectionFailed`` (code 0, a ``ConnectionError`` too). Unless the connection was refused
  (``.sent`` False), the server may have applied the call.

Before raising, transient failures (454, no reply) are tried again with back-off where that cannot do a
call's work twice (``Retries``; ``retries=None`` turns it off): ``_retries`` lists which calls.

The synchronous ``Client`` runs an ``AsyncClient`` on a private event loop in a daemon thread, so its
session (and its pooled connections) live as long as the client, and any number of threads may call it
at once. ``asyncio.run`` per call was rejected: an aiohttp session is bound to the loop that made it, so it
would have meant a new session, a new connection and a new TCP handshake on every call. Its methods are
``AsyncClient``'s, made blocking in one place rather than written twice.

Modules: ``_async`` (``AsyncClient``: the API as coroutines), ``_queues``, ``_storage``, ``_schedules``,
``_workflows`` and ``_tenancy`` (its queue administration, storage, schedule, durable workflow and tenancy
calls, bases of it through ``_caller``), ``_sync`` (``Client``: the same, blocking),
``_loop`` (the loop thread ``Client`` blocks on), ``_transport`` (the session, encoding, decoding,
timeouts), ``_retries`` (which calls are tried again, and how), ``_lease`` (``Lease``, what ``leased``
hands its body), ``_renew`` (keeping a lease alive in ``leased``), ``_lock`` and ``_lock_queue``
(``lock``, ``semaphore`` and ``set_limit``: docs/locks.md), ``_arguments`` (bare payloads and ids,
durations, ``new_queue_info``) and ``_errors`` (``ConnectionFailed``).

``querator.worker`` and ``querator.durable`` are built on this client and import nothing but this
module: besides the client they use ``seconds_of``, ``go_duration`` and ``absolute`` (a ``Duration``
as seconds or a Go string, a ``When`` as a datetime), ``keep_renewed`` (renewing leases while work
runs) and ``LoopThread`` (the loop a blocking caller waits on). No module outside a package imports
its private modules (``_name``): import-linter's private-modules contract in pyproject.toml.
"""

from __future__ import annotations

from querator.client._arguments import (
    Duration,
    ProduceItem,
    RetryItem,
    When,
    absolute,
    go_duration,
    new_client_id,
    new_queue_info,
    seconds_of,
)
from querator.client._async import DEFAULT_ENDPOINT, DEFAULT_TIMEOUT, AsyncClient
from querator.client._errors import AcquireTimedOut, ConnectionFailed, LockError, LockLost, LockMismatch
from querator.client._lease import Lease
from querator.client._lock import Held
from querator.client._loop import LoopThread
from querator.client._renew import MIN_RENEW_WAIT, keep_renewed
from querator.client._retries import DEFAULT_RETRIES, Retries
from querator.client._sync import Client
from querator.errors import error_for

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "MIN_RENEW_WAIT",
    "AcquireTimedOut",
    "AsyncClient",
    "Client",
    "ConnectionFailed",
    "Duration",
    "Held",
    "Lease",
    "LockError",
    "LockLost",
    "LockMismatch",
    "LoopThread",
    "ProduceItem",
    "Retries",
    "RetryItem",
    "When",
    "absolute",
    "error_for",
    "go_duration",
    "keep_renewed",
    "new_client_id",
    "new_queue_info",
    "seconds_of",
]
