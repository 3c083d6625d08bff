"""The HTTP transport: the v1 routes on aiohttp, kept thin -- decode, call the Service, encode.

Transport rules (docs/semantics.md §1): every RPC is a POST; bodies are JSON or binary protobuf by
Content-Type and Accept; each route has a body limit that is enforced before the body is read whole;
any other method is a 400, an unknown path a 501. Errors are mapped to replies in exactly one place
(``_error_reply``).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from aiohttp.web_request import BaseRequest

from querator import __version__
from querator.auth import (
    EXTENSIONS_HEADER,
    EXTENSIONS_LEVEL,
    FORWARDED_HEADER,
    REPLY_SIGNATURE_HEADER,
    ApiKeys,
    ClusterAuth,
    Forwarded,
)
from querator.clock import to_datetime
from querator.console import CONSOLE_PREFIX, add_console
from querator.errors import (
    CODE_TEXT,
    ClientContentError,
    Forbidden,
    InvalidOption,
    NotImplementedRoute,
    QueratorError,
    StorageError,
    try_again,
)
from querator.metrics import LightHistogram, Observer
from querator.service import MAX_NAME, Service
from querator.tenancy import CALLER, SYSTEM, Access, Principal, Tenancy
from querator.tenancy import permissions as perm
from querator.wire import JSON, decode, encode, negotiate_accept
from querator.wire import messages as m

log = logging.getLogger(__name__)

SERVICE = web.AppKey("service", Service)
MAX_PRODUCE_BODY = 5_000_000
NAME_BODY = 12 * MAX_NAME
"""Bytes of the longest queue name in a JSON body: each character escaped as a surrogate pair
(``\\uXXXX\\uXXXX``, 12 bytes). Protobuf needs at most 4 bytes a character."""
SMALL_BODY = 2 * NAME_BODY + 512
"""The routes whose bodies hold a queue name or two (redrive's source and target) and a few short fields:
any name ``queues.create`` accepts must be usable on every route. (The reference's 512 bytes stranded
names from about 150 CJK characters.)"""
DEFAULT_BODY = 256_000
UPDATE_BODY = 512_000
IMPORT_BODY = 64_000_000
HEALTH_TIMEOUT = 0.5
"""Seconds /health waits for its storage probe: well inside any liveness probe's timeout."""
OPENAPI_PATH = "/openapi.yaml"
OPEN_PATHS = frozenset({"/health", "/ready", OPENAPI_PATH})
"""Paths a GET may reach without an API key. Not ``/metrics``: it names every queue with its depth and
rates (the admin address serves it without a key)."""
ADMIN_OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})
"""What the admin address serves without a key when it also serves the console and its API."""
READY_DETAILS = web.RequestKey("ready_details", bool)
"""False when ``/ready`` must not say why the node is not ready (it may name queues) because
the caller has no key. A probe needs no key to read the status."""
OPENAPI_CONTENT_TYPE = "application/yaml"


@dataclass(frozen=True, slots=True)
class _VerifiedForward:
    """A forwarded request whose signature checked out: its body is still to check, its reply to sign."""

    auth: ClusterAuth
    forwarded: Forwarded

    def check_body(self, body: bytes) -> None:
        ClusterAuth.check_body(self.forwarded, body)

    def sign(self, response: web.StreamResponse) -> None:
        """Signs the owner's reply, so the forwarder can tell it from a stranger's."""
        # Every route answers a web.Response of bytes; anything else goes unsigned, and the forwarder
        # refuses it rather than pass it on.
        if isinstance(response, web.Response) and isinstance(response.body, bytes):
            content_type = response.headers.get("Content-Type", "")
            signature = self.auth.sign_reply(self.forwarded, response.status, content_type, response.body)
            response.headers[REPLY_SIGNATURE_HEADER] = signature


VERIFIED_FORWARD: web.RequestKey[_VerifiedForward] = web.RequestKey("verified_forward")
"""Set by the authentication middleware on a verified forward; a handler that writes its reply itself
(``_deliver``) signs it first."""

M = TypeVar("M", bound=m.Message)
R = TypeVar("R", bound=m.Message)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    service: Service,
    max_produce_body: int = MAX_PRODUCE_BODY,
    api_keys: ApiKeys | None = None,
    operations: bool = True,
    console: bool = False,
) -> web.Application:
    """The aiohttp application serving ``service``; the caller owns starting and stopping the service.

    With ``api_keys`` every request but ``GET /health``, ``/ready`` and ``/openapi.yaml`` must carry a
    key; ``/ready`` without one tells only whether the node is ready, not why not.
    ``operations`` False leaves ``/ready`` and ``/metrics`` to the admin application (``--admin-address``);
    ``/health`` stays, as the reference serves it on the API address.
    ``console`` serves the web console at ``/ui/`` (docs/console.md); its files need no key.
    """
    app = _api_app(service, max_produce_body, api_keys, console, admin=False)
    app.router.add_route("*", "/health", _health)
    if operations:
        app.router.add_route("*", "/ready", _ready)
        app.router.add_route("*", "/metrics", _metrics)
    openapi_document()  # read now, not in the event loop at the first GET
    app.router.add_route("*", OPENAPI_PATH, _openapi)
    if console:
        add_console(app, _unknown)
    app.router.add_route("*", "/{tail:.*}", _unknown)
    return app


def create_admin_app(
    service: Service,
    console: bool = False,
    api_keys: ApiKeys | None = None,
    max_produce_body: int = MAX_PRODUCE_BODY,
) -> web.Application:
    """Health, readiness and metrics, for a separate admin address; never authenticated without ``console``.

    With ``console`` it also serves the web console and the v1 routes it calls, so that the console
    works where only the admin address is reachable; those routes need a key as on the API address,
    the probes and ``/metrics`` still do not.
    """
    if console:
        app = _api_app(service, max_produce_body, api_keys, console, admin=True)
    else:
        app = web.Application()
        app[SERVICE] = service
    app.router.add_route("*", "/health", _health)
    app.router.add_route("*", "/ready", _ready)
    app.router.add_route("*", "/metrics", _metrics)
    if console:
        add_console(app, _unknown)
    app.router.add_route("*", "/{tail:.*}", _unknown)  # the error body, not aiohttp's text/plain 404
    return app


def _api_app(
    service: Service, max_produce_body: int, api_keys: ApiKeys | None, console: bool, admin: bool
) -> web.Application:
    """An application with the v1 routes, authenticated by ``api_keys`` but for GETs of the open paths
    (the admin address's, with ``admin``) and of the console's files (with ``console``)."""
    middlewares = []
    access = service.tenancy.access if service.tenancy.enabled else None
    if api_keys or access:
        open_paths = ADMIN_OPEN_PATHS if admin else OPEN_PATHS
        prefix = CONSOLE_PREFIX if console else None
        # The admin address tells anyone why it is not ready, as it does without the console.
        middlewares.append(_authenticate(api_keys, access, open_paths, prefix, ready_details=admin))
    app = web.Application(
        client_max_size=max(IMPORT_BODY, max_produce_body) + 1, handler_args={}, middlewares=middlewares
    )
    app[SERVICE] = service
    app[REFUSE_CROSS_SITE] = console
    s = service
    w = service.workflows

    # A handler is cancelled when its client disconnects (``handler_cancellation``): a parked lease must
    # not take items for nobody. Routes that change queues or move items in several steps are shielded
    # from it: their work runs to its end, only the answer is lost.
    routes: list[tuple[str, Handler]] = [
        ("/v1/queue.produce", _routed(s.produce, m.QueueProduceRequest, max_produce_body)),
        ("/v1/queue.lease", _routed(s.lease, m.QueueLeaseRequest, SMALL_BODY, undelivered=s.release)),
        ("/v1/queue.complete", _routed(s.complete, m.QueueCompleteRequest, DEFAULT_BODY)),
        ("/v1/queue.retry", _routed(s.retry, m.QueueRetryRequest, DEFAULT_BODY)),
        ("/v1/queue.renew", _routed(s.renew, m.QueueRenewRequest, DEFAULT_BODY)),
        ("/v1/queue.redrive", _rpc(s.redrive, m.QueueRedriveRequest, SMALL_BODY, shield=True)),
        ("/v1/cluster.info", _rpc(s.cluster_info, m.ClusterInfoRequest, DEFAULT_BODY)),
        ("/v1/cluster.refresh", _rpc(s.refresh, m.QueuesInfoRequest, SMALL_BODY, shield=True)),
        ("/v1/queue.stats", _routed(s.stats, m.QueueStatsRequest, SMALL_BODY)),
        ("/v1/queue.clear", _routed(s.clear, m.QueueClearRequest, SMALL_BODY, shield=True)),
        ("/v1/queue.reload", _routed(s.reload, m.QueueReloadRequest, SMALL_BODY, shield=True)),
        ("/v1/queues.create", _rpc(s.create_queue, m.QueueInfo, DEFAULT_BODY, shield=True)),
        ("/v1/queues.list", _rpc(s.list_queues, m.QueuesListRequest, DEFAULT_BODY)),
        ("/v1/queues.update", _rpc(s.update_queue, m.QueueInfo, UPDATE_BODY, shield=True)),
        ("/v1/queues.delete", _rpc(s.delete_queue, m.QueuesDeleteRequest, DEFAULT_BODY, shield=True)),
        ("/v1/queues.info", _rpc(s.queue_info, m.QueuesInfoRequest, DEFAULT_BODY)),
        ("/v1/storage/items.list", _routed(s.list_items, m.StorageItemsListRequest, DEFAULT_BODY)),
        (
            "/v1/storage/items.import",
            _routed(s.import_items, m.StorageItemsImportRequest, IMPORT_BODY, shield=True),
        ),
        (
            "/v1/storage/items.delete",
            _routed(s.delete_items, m.StorageItemsDeleteRequest, DEFAULT_BODY, shield=True),
        ),
        ("/v1/storage/scheduled.list", _routed(s.list_scheduled, m.StorageItemsListRequest, DEFAULT_BODY)),
        # Durable workflows (docs/durable.md): writes in several steps are shielded, as above.
        ("/v1/workflows.start", _rpc(w.start, m.WorkflowsStartRequest, max_produce_body, shield=True)),
        ("/v1/workflows.info", _rpc(w.info, m.WorkflowsInfoRequest, SMALL_BODY)),
        ("/v1/workflows.list", _rpc(w.list, m.WorkflowsListRequest, SMALL_BODY)),
        ("/v1/workflows.signal", _rpc(w.signal, m.WorkflowsSignalRequest, max_produce_body, shield=True)),
        ("/v1/workflows.cancel", _rpc(w.cancel, m.WorkflowsCancelRequest, SMALL_BODY, shield=True)),
        ("/v1/workflows.result", _rpc(w.result, m.WorkflowsResultRequest, SMALL_BODY)),
        ("/v1/workflows.claim", _rpc(w.claim, m.WorkflowsClaimRequest, SMALL_BODY, shield=True)),
        ("/v1/workflows.append", _rpc(w.append, m.WorkflowsAppendRequest, max_produce_body, shield=True)),
        *_schedule_routes(s),
        *_tenancy_routes(s.tenancy),
    ]
    latency = service.metrics.latency
    for path, handler in routes:
        app.router.add_route("*", path, _timed(handler, path, latency))
    return app


def _schedule_routes(s: Service) -> list[tuple[str, Handler]]:
    """The schedules routes (docs/schedules.md); a create or update carries an item template."""
    api = s.schedules
    return [
        ("/v1/schedules.create", _rpc(api.create, m.ScheduleInfo, DEFAULT_BODY, shield=True)),
        ("/v1/schedules.update", _rpc(api.update, m.ScheduleInfo, DEFAULT_BODY, shield=True)),
        ("/v1/schedules.info", _rpc(api.info, m.SchedulesRequest, SMALL_BODY)),
        ("/v1/schedules.list", _rpc(api.list, m.SchedulesListRequest, SMALL_BODY)),
        ("/v1/schedules.delete", _rpc(api.delete, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.pause", _rpc(api.pause, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.resume", _rpc(api.resume, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.refresh", _rpc(api.refresh, m.SchedulesRequest, SMALL_BODY)),
    ]


def _tenancy_routes(t: Tenancy) -> list[tuple[str, Handler]]:
    """The routes of namespaces, users, API keys, roles and role bindings (docs/tenancy.md)."""
    size = DEFAULT_BODY
    return [
        ("/v1/namespaces.create", _rpc(t.create_namespace, m.NamespaceInfo, size, shield=True)),
        ("/v1/namespaces.update", _rpc(t.update_namespace, m.NamespaceInfo, size, shield=True)),
        ("/v1/namespaces.list", _rpc(t.list_namespaces, m.NamespacesListRequest, size)),
        (
            "/v1/namespaces.delete",
            _rpc(t.delete_namespace, m.NamespacesDeleteRequest, size, shield=True),
        ),
        ("/v1/users.create", _rpc(t.create_user, m.UserCreateRequest, size, shield=True)),
        ("/v1/users.list", _rpc(t.list_users, m.UsersListRequest, size)),
        ("/v1/users.delete", _rpc(t.delete_user, m.UsersDeleteRequest, size, shield=True)),
        ("/v1/apikeys.create", _rpc(t.create_key, m.APIKeyCreateRequest, size, shield=True)),
        ("/v1/apikeys.list", _rpc(t.list_keys, m.APIKeysListRequest, size)),
        ("/v1/apikeys.delete", _rpc(t.delete_key, m.APIKeysDeleteRequest, size, shield=True)),
        ("/v1/roles.create", _rpc(t.create_role, m.RoleCreateRequest, size, shield=True)),
        ("/v1/roles.list", _rpc(t.list_roles, m.RolesListRequest, size)),
        ("/v1/roles.update", _rpc(t.update_role, m.RoleUpdateRequest, size, shield=True)),
        ("/v1/roles.delete", _rpc(t.delete_role, m.RolesDeleteRequest, size, shield=True)),
        (
            "/v1/rolebindings.create",
            _rpc(t.create_binding, m.RoleBindingCreateRequest, size, shield=True),
        ),
        ("/v1/rolebindings.list", _rpc(t.list_bindings, m.RoleBindingsListRequest, size)),
        (
            "/v1/rolebindings.delete",
            _rpc(t.delete_binding, m.RoleBindingDeleteRequest, size, shield=True),
        ),
    ]


def _authenticate(
    keys: ApiKeys | None,
    access: Access | None,
    open_paths: frozenset[str],
    open_prefix: str | None,
    ready_details: bool,
) -> Any:
    """The middleware that checks who a request is: ``keys`` checks forwards (and, without tenancy, the
    configured keys); with tenancy, ``access`` finds the caller (docs/tenancy.md), which the service then
    authorizes. A verified forward has no caller: its first node authorized it. GETs of ``open_paths``
    and of the console's files (under ``open_prefix``) pass without a key."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        # Before routing, as the reference does: a caller without a key learns nothing, not even which
        # paths exist. Only the GETs of probes (and of the console's files, which hold no data) pass
        # (POST /health is an ordinary 501).
        forwarded = None
        caller = None
        try:
            if keys:
                forwarded = keys.authenticate(
                    request.method, request.path, request.headers, _certified(request)
                )
            if access is not None and forwarded is None:
                caller = await access.authenticate(request.headers.get("Authorization"))
                if request.method == "GET":
                    await _check_get(request, access, caller)
        except QueratorError as e:
            path = request.path
            if request.method != "GET" or not (
                path in open_paths
                or (open_prefix is not None and (path.startswith(open_prefix) or path == open_prefix[:-1]))
            ):
                return _error_reply(e, _accept_or_json(request))
            request[READY_DETAILS] = ready_details
        verified = None
        if forwarded is not None and keys is not None and keys.cluster is not None:
            verified = request[VERIFIED_FORWARD] = _VerifiedForward(keys.cluster, forwarded)
        token = CALLER.set(caller)
        try:
            response = await handler(request)
        finally:
            CALLER.reset(token)
        if verified is not None and not response.prepared:  # (a reply written early signed itself)
            verified.sign(response)
        return response

    return authenticate


CROSS_SITE = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values of a request another site's page made the browser send."""
REFUSE_CROSS_SITE = web.AppKey("refuse_cross_site", bool)
"""Whether a body without a Content-Type is refused when a browser sent it for another site."""


def _check_forgery(request: web.Request, content_type: str | None) -> None:
    """Refuses a cross-site request forgery: a page of another site making the console user's browser
    POST to the node. Such a page can send no Content-Type but the form ones (text/plain, urlencoded,
    multipart), which ``decode`` refuses, or none, which it reads as JSON: so only a body without one is
    checked, and requests of real clients (which name their type) cost nothing more. With API keys the
    forgery would also lack the key: the console sends it in a header no other site can set
    (docs/adr/0020-web-console.md)."""
    if (
        content_type is None
        and request.app.get(REFUSE_CROSS_SITE, False)
        and request.headers.get("Sec-Fetch-Site") in CROSS_SITE
    ):
        raise InvalidOption("request is invalid; a browser sent it for another site (Sec-Fetch-Site)")


async def _check_get(request: web.Request, access: Access, caller: Principal) -> None:
    """The GET routes the service does not serve: /metrics needs ``system.metrics`` in ``_system``,
    and /ready says why a node is not ready only to holders of ``system.health``."""
    if request.path == "/metrics" and not await access.may(caller, SYSTEM, perm.SYSTEM_METRICS):
        raise Forbidden("access denied")
    if request.path == "/ready":
        request[READY_DETAILS] = await access.may(caller, SYSTEM, perm.SYSTEM_HEALTH)


def _certified(request: web.Request) -> bool:
    """Whether a forwarded request came with a verified client certificate (TLS with
    --tls-client-ca-file); only forwards are asked, so other requests skip the look-up."""
    if FORWARDED_HEADER not in request.headers:
        return False
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


CLIENT_GONE = 499
"""The status a request is counted under when its client went away before the answer (nginx's)."""


def _timed(handler: Handler, path: str, latency: LightHistogram) -> Handler:
    """``handler``, timed into ``latency`` by route and status code (a code's child made once)."""
    by_code: dict[int, Observer] = {}

    async def timed(request: web.Request) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        code = CLIENT_GONE
        try:
            response = await handler(request)
            code = response.status
            return response
        finally:
            child = by_code.get(code)
            if child is None:
                child = by_code[code] = latency.labels(path, str(code))
            child.observe(loop.time() - started)

    return timed


def _routed(
    call: Callable[[M, str], Awaitable[R | None]],
    type_: type[M],
    limit: int,
    undelivered: Callable[[R], None] | None = None,
    shield: bool = False,
) -> Handler:
    """The handler of a route the service may forward to another node: the call is told which node
    forwarded the request, if one did."""

    def forwardable(request: web.Request, message: M) -> Awaitable[R | None]:
        return call(message, request.headers.get(FORWARDED_HEADER, ""))

    return _handler(forwardable, type_, limit, undelivered, shield)


def _rpc(
    call: Callable[[M], Awaitable[R | None]],
    type_: type[M],
    limit: int,
    undelivered: Callable[[R], None] | None = None,
    shield: bool = False,
) -> Handler:
    """The handler of a route this node always serves itself."""
    return _handler(lambda _, message: call(message), type_, limit, undelivered, shield)


def _handler(
    call: Callable[[web.Request, M], Awaitable[R | None]],
    type_: type[M],
    limit: int,
    undelivered: Callable[[R], None] | None,
    shield: bool,
) -> Handler:
    """The handler of one route. ``undelivered`` is told of a reply that could not be written (the
    client went away); ``shield`` lets the call run to its end when the client disconnects."""

    # Long on purpose: each failure is mapped to its reply here, in one place.
    async def handler(request: web.Request) -> web.StreamResponse:  # noqa: PLR0911
        if request.method != "POST":
            return _method_not_allowed(request)
        try:
            accept = negotiate_accept(request.headers.get("Accept"))
        except ClientContentError as e:
            return _error_reply(e, JSON)
        try:
            content_type = request.headers.get("Content-Type")
            _check_forgery(request, content_type)
            body = await _read_body(request, limit)
            if (verified := _verified_forward(request)) is not None:
                verified.check_body(body)
            pending = call(request, decode(body, content_type, type_))
            result = await (asyncio.shield(pending) if shield else pending)
        except StorageError as e:
            # Queue metadata reads and writes reach storage outside the engine: a storage outage is a
            # "try again" for them too, never a 500 (the engine does the same for partition work).
            log.warning("%s failed: %s", request.path, e.message)
            return _error_reply(try_again(outcome_unknown=e.maybe_applied), accept)
        except QueratorError as e:
            return _error_reply(e, accept)
        except Exception:
            log.exception("%s failed", request.path)
            return _reply(m.Reply(code=500, code_text=CODE_TEXT[500], message="Internal Error"), accept, 500)
        if result is None:
            return _reply(m.OK_REPLY, accept, 200)
        level = EXTENSIONS_LEVEL if accept != JSON else _extensions_level(request)
        response = _reply(_reference_view(result, level) if level < EXTENSIONS_LEVEL else result, accept, 200)
        if undelivered is not None:
            await _deliver(request, response, lambda: undelivered(result))
        return response

    return handler


async def _deliver(request: web.Request, response: web.Response, undelivered: Callable[[], None]) -> None:
    """Writes the reply now rather than after the handler, to learn whether it could be written."""
    if (verified := _verified_forward(request)) is not None:
        verified.sign(response)
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:  # the client left: aiohttp expects this of a reply and logs nothing
        undelivered()
    except asyncio.CancelledError:
        undelivered()
        raise


def _verified_forward(request: web.Request) -> _VerifiedForward | None:
    """The forward's signature check, if the request is a signed forward. Looked up only when the
    forwarded header is there: a request's ``get`` of a missing key raises and catches a KeyError."""
    return request.get(VERIFIED_FORWARD) if FORWARDED_HEADER in request.headers else None


def _extensions_level(request: web.Request) -> int:
    """The level of extension fields a JSON client knows (``EXTENSIONS_LEVEL``): 0 without the header;
    a value that is not a number counts as 1, the level of the clients that sent "1" before levels."""
    value = request.headers.get(EXTENSIONS_HEADER)
    if value is None:
        return 0
    try:
        return max(int(value), 1)
    except ValueError:
        return 1


def _reference_view(msg: m.Message, level: int) -> m.Message:
    """``msg`` with only the extension fields a JSON client of extensions ``level`` knows: the reference's
    Go client (level 0) rejects fields it does not know, and so does our client of level 1 in a produce's
    reply and a lease's items. (Binary protobuf decoders skip unknown fields.) Level 1 knows
    ``dedup_window``; level 2 the produce reply's ``ids`` and lease tokens."""
    if isinstance(msg, m.QueueProduceResponse):
        return m.OK_REPLY
    if isinstance(msg, m.QueueLeaseResponse):
        # One queue's items: all carry a lease token, or none does.
        if msg.items and msg.items[0].lease_token:
            return msgspec.structs.replace(
                msg, items=[msgspec.structs.replace(i, lease_token="") for i in msg.items]
            )
        return msg
    if isinstance(msg, m.QueueInfo):
        return _info_view(msg, level)
    if isinstance(msg, m.QueuesListResponse):
        items = [_info_view(i, level) for i in msg.items]
        if any(view is not i for view, i in zip(items, msg.items, strict=True)):
            return msgspec.structs.replace(msg, items=items)
    return msg


def _info_view(info: m.QueueInfo, level: int) -> m.QueueInfo:
    """A queue's settings for a JSON client of extensions ``level`` below ``EXTENSIONS_LEVEL``."""
    dedup_window = info.dedup_window if level >= 1 else ""
    if dedup_window == info.dedup_window and not info.lease_token:
        return info
    return msgspec.structs.replace(info, dedup_window=dedup_window, lease_token="")


def _accept_or_json(request: web.Request) -> str:
    try:
        return negotiate_accept(request.headers.get("Accept"))
    except ClientContentError:
        return JSON


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The request body, refused as soon as it is known to exceed ``limit`` (never buffered whole), or
    to be compressed (see ``protocol_factory``)."""
    encoding = request.headers.get("Content-Encoding")
    if encoding and encoding.strip().lower() not in ("", "identity"):
        # 400 rather than HTTP's 415: clients know duh's codes only (docs/semantics.md §1.4), and for them,
        # as for the reference, a body that cannot be read as it is is a bad request.
        raise InvalidOption(
            f"Content-Encoding header '{encoding}' is invalid; request bodies must not be compressed"
        )
    length = request.content_length
    if length is not None and length > limit:
        raise _too_large(limit)
    try:
        if length is not None:
            return await request.read()
        chunks = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)
    except ConnectionResetError:
        # The client left, or was cut off by the body timeout (querator.connections), mid-body: the
        # client's doing, so a client error (never sent: nobody is listening), not a logged 500.
        raise InvalidOption("request body is incomplete; the connection was closed") from None


def _too_large(limit: int) -> InvalidOption:
    return InvalidOption(f"request body exceeds {human_size(limit)} limit")


def human_size(n: int) -> str:
    """A byte count as the reference prints limits: ``512B``, ``250.0KiB``, ``5.0MB``."""
    if n < 1000:
        return f"{n}B"
    base, units = (1024, ("KiB", "MiB", "GiB")) if n % 1024 == 0 else (1000, ("KB", "MB", "GB"))
    value = n / base
    for unit in units:
        if value < base or unit == units[-1]:
            return f"{value:.1f}{unit}"
        value /= base
    raise AssertionError("unreachable")


def _reply(msg: m.Message, accept: str, status: int) -> web.Response:
    body, content_type = encode(msg, accept)
    # Our own codes (453-455) have no standard reason phrase: proxies, logs and `curl -i` show this one.
    return web.Response(
        body=body,
        status=status,
        reason=CODE_TEXT.get(status),
        headers={"Content-Type": content_type, "X-Content-Type-Options": "nosniff"},
    )


def _error_reply(error: QueratorError, accept: str) -> web.Response:
    reply = m.Reply(code=error.code, code_text=CODE_TEXT.get(error.code, ""), message=error.message)
    return _reply(reply, accept, error.code)


def _method_not_allowed(request: web.Request) -> web.Response:
    return _error_reply(InvalidOption(f"http method '{request.method}' not allowed; only POST"), JSON)


async def _unknown(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return _method_not_allowed(request)
    return _error_reply(NotImplementedRoute(f"no such method; {request.path}"), JSON)


async def _health(request: web.Request) -> web.StreamResponse:
    """Liveness, in the draft health+json format the reference uses, with its storage probe.

    Liveness means the process and its event loop answer, so a failing or slow storage is reported
    (overall ``warn``, the check ``fail``) but still answered 200 within ``HEALTH_TIMEOUT``: restarting
    a node cannot fix its database, and would turn a storage outage into a restart storm. ``/ready`` is
    what takes a node out of traffic.
    """
    if request.method != "GET":
        return await _unknown(request)
    service = request.app[SERVICE]
    check: dict[str, Any] = {"componentType": "datastore", "status": "pass"}
    try:
        await asyncio.wait_for(service.store.list_queues("", 1, "_system"), HEALTH_TIMEOUT)
    except Exception as e:
        log.warning("health check: storage check failed: %s", e or type(e).__name__)
        check.update(status="fail", output="storage check failed")
    check["time"] = _rfc3339_seconds(service.clock.now())
    status = "pass" if check["status"] == "pass" else "warn"
    body = {"status": status, "version": __version__, "checks": {"queues:storage": [check]}}
    return web.Response(
        body=msgspec.json.encode(body), status=200, headers={"Content-Type": "application/health+json"}
    )


async def _ready(request: web.Request) -> web.StreamResponse:
    """Readiness: 200 when this node should get traffic, 503 with the reason otherwise."""
    if request.method != "GET":
        return await _unknown(request)
    reason = await request.app[SERVICE].ready()
    body: dict[str, str] = {"status": "fail" if reason else "pass"}
    if reason and request.get(READY_DETAILS, True):
        body["output"] = reason
    return web.Response(
        body=msgspec.json.encode(body),
        status=503 if reason else 200,
        headers={"Content-Type": "application/health+json"},
    )


async def _metrics(request: web.Request) -> web.StreamResponse:
    if request.method != "GET":
        return await _unknown(request)
    body, content_type = await request.app[SERVICE].render_metrics(request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


@functools.cache
def openapi_document() -> bytes:
    """``querator/openapi.yaml``, the OpenAPI 3.1 description of every route above (package data)."""
    return importlib.resources.files("querator").joinpath("openapi.yaml").read_bytes()


async def _openapi(request: web.Request) -> web.StreamResponse:
    if request.method != "GET":
        return await _unknown(request)
    return web.Response(body=openapi_document(), headers={"Content-Type": OPENAPI_CONTENT_TYPE})


def _rfc3339_seconds(micros: int) -> str:
    return to_datetime(micros).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the connection's protocol -----------------------------------------------------------------------------


def protocol_factory(server: web.Server, **settings: Any) -> Callable[[], web.RequestHandler]:
    """The protocol of each connection accepted for ``server`` (an AppRunner's): aiohttp's, with
    ``settings`` (its RequestHandler options), except that

    - it inflates no request body: aiohttp would inflate ``Content-Encoding: gzip``/``deflate`` bodies in
      its parser, on the event loop, before any handler could refuse them (even a request without an
      API key), counting compressed bytes against the body limit. Go's net/http does not inflate either,
      so a compressed body was never a valid request; ``_read_body`` refuses one unread;
    - it answers a request it cannot parse with the error body of docs/semantics.md §1.4, not
      aiohttp's text/plain, and logs it briefly (``_ProtocolErrors``), not at ERROR with a traceback
      quoting the raw bytes (headers, API keys).
    """
    loop = asyncio.get_running_loop()
    # access_log None: no access log (aiohttp takes None there; its annotation does not say so).
    options: dict[str, Any] = {"auto_decompress": False, "access_log": None, **settings}
    return lambda: _Protocol(server, loop=loop, **options)


PROTOCOL_LOG_INTERVAL = 10.0
"""Seconds between two log lines about malformed requests: a flood of them must not flood the log."""


class _ProtocolErrors:
    """Logs malformed requests at WARNING, at most once per ``PROTOCOL_LOG_INTERVAL``, counting the rest."""

    def __init__(self) -> None:
        self._last = -PROTOCOL_LOG_INTERVAL
        self._unlogged = 0

    def report(self, remote: str | None, exc: BaseException | None) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._last < PROTOCOL_LOG_INTERVAL:
            self._unlogged += 1
            return
        # The exception's class only: its message quotes the request's raw bytes.
        log.warning(
            "malformed request from %s (%s); answered 400 and closed%s",
            remote,
            type(exc).__name__ if exc is not None else "unknown error",
            f"; {self._unlogged} more since the last report" if self._unlogged else "",
        )
        self._last = now
        self._unlogged = 0


_protocol_errors = _ProtocolErrors()


class _Protocol(web.RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The reply to a request aiohttp could not parse (a 4xx) or whose handler raised (a 5xx)."""
        if request.writer.output_size > 0:  # as aiohttp's own: a reply is under way, the connection is lost
            raise ConnectionError("a reply was being sent when its request failed")
        if status >= 500:
            # A fault of ours (the handlers answer every error they expect): worth a traceback.
            log.error("%s %s failed", request.method, request.path, exc_info=exc)
            reply = _reply(m.Reply(code=500, code_text=CODE_TEXT[500], message="Internal Error"), JSON, 500)
        else:
            _protocol_errors.report(request.remote, exc)
            # Any parse error is a plain 400: clients know duh's codes only (docs/semantics.md §1.4).
            reply = _error_reply(InvalidOption("request is invalid; malformed HTTP request"), JSON)
        reply.force_close()
        return reply
