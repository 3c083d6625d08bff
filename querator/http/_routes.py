"""The applications: the route table of the v1 API, and the admin address's."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from querator.auth import ApiKeys
from querator.console import CONSOLE_PREFIX, add_console
from querator.http._auth import authentication
from querator.http._body import DEFAULT_BODY, IMPORT_BODY, MAX_PRODUCE_BODY, SMALL_BODY, UPDATE_BODY
from querator.http._handler import Route, Timed, route_handler
from querator.http._probes import OPENAPI_PATH, SERVICE, health, metrics, openapi, openapi_document, ready
from querator.http._replies import unknown
from querator.metrics import LightHistogram, Observer
from querator.service import Service
from querator.tenancy import Tenancy
from querator.wire import messages as m

OPEN_PATHS = frozenset({"/health", "/ready", OPENAPI_PATH})
"""Paths a GET may reach without an API key. Not ``/metrics``: it names every queue with its depth and
rates (the admin address serves it without a key)."""
ADMIN_OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})
"""What the admin address serves without a key when it also serves the console and its API."""


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
    app.router.add_route("*", "/health", health)
    if operations:
        app.router.add_route("*", "/ready", ready)
        app.router.add_route("*", "/metrics", metrics)
    openapi_document()  # read now, not in the event loop at the first GET
    app.router.add_route("*", OPENAPI_PATH, openapi)
    if console:
        add_console(app, unknown)
    app.router.add_route("*", "/{tail:.*}", unknown)
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
    app.router.add_route("*", "/health", health)
    app.router.add_route("*", "/ready", ready)
    app.router.add_route("*", "/metrics", metrics)
    if console:
        add_console(app, unknown)
    app.router.add_route("*", "/{tail:.*}", unknown)  # the error body, not aiohttp's text/plain 404
    return app


def _api_app(
    service: Service, max_produce_body: int, api_keys: ApiKeys | None, console: bool, admin: bool
) -> web.Application:
    """An application with the v1 routes, authenticated by ``api_keys`` but for GETs of the open paths
    (the admin address's, with ``admin``) and of the console's files (with ``console``)."""
    auth = None
    access = service.tenancy.access if service.tenancy.enabled else None
    if api_keys or access:
        open_paths = ADMIN_OPEN_PATHS if admin else OPEN_PATHS
        prefix = CONSOLE_PREFIX if console else None
        # The admin address tells anyone why it is not ready, as it does without the console.
        auth = authentication(api_keys, access, open_paths, prefix, ready_details=admin)
    app = web.Application(
        client_max_size=max(IMPORT_BODY, max_produce_body) + 1,
        handler_args={},
        middlewares=[auth] if auth is not None else [],
    )
    app[SERVICE] = service
    s = service
    w = service.workflows

    # A handler is cancelled when its client disconnects (``handler_cancellation``): a parked lease must
    # not take items for nobody. Routes that change queues or move items in several steps are shielded
    # from it: their work runs to its end, only the answer is lost.
    routes: list[tuple[str, Route[Any, Any]]] = [
        ("/v1/queue.produce", Route(s.produce, m.QueueProduceRequest, max_produce_body)),
        ("/v1/queue.lease", Route(s.lease, m.QueueLeaseRequest, SMALL_BODY, undelivered=s.release)),
        ("/v1/queue.watch", Route(s.watch, m.QueueLeaseRequest, SMALL_BODY)),
        ("/v1/queue.complete", Route(s.complete, m.QueueCompleteRequest, DEFAULT_BODY)),
        ("/v1/queue.retry", Route(s.retry, m.QueueRetryRequest, DEFAULT_BODY)),
        ("/v1/queue.renew", Route(s.renew, m.QueueRenewRequest, DEFAULT_BODY)),
        ("/v1/rate_limits.take", Route(s.take_rate, m.RateLimitsTakeRequest, SMALL_BODY)),
        ("/v1/queue.redrive", Route(s.redrive, m.QueueRedriveRequest, SMALL_BODY, shield=True)),
        ("/v1/cluster.info", Route(s.cluster_info, m.ClusterInfoRequest, DEFAULT_BODY)),
        ("/v1/cluster.refresh", Route(s.refresh, m.QueuesInfoRequest, SMALL_BODY, shield=True)),
        ("/v1/queue.stats", Route(s.stats, m.QueueStatsRequest, SMALL_BODY)),
        ("/v1/queue.clear", Route(s.clear, m.QueueClearRequest, SMALL_BODY, shield=True)),
        ("/v1/queue.reload", Route(s.reload, m.QueueReloadRequest, SMALL_BODY, shield=True)),
        ("/v1/queues.create", Route(s.create_queue, m.QueueInfo, DEFAULT_BODY, shield=True)),
        ("/v1/queues.list", Route(s.list_queues, m.QueuesListRequest, DEFAULT_BODY)),
        ("/v1/queues.update", Route(s.update_queue, m.QueueInfo, UPDATE_BODY, shield=True)),
        ("/v1/queues.delete", Route(s.delete_queue, m.QueuesDeleteRequest, DEFAULT_BODY, shield=True)),
        ("/v1/queues.info", Route(s.queue_info, m.QueuesInfoRequest, DEFAULT_BODY)),
        ("/v1/storage/items.list", Route(s.list_items, m.StorageItemsListRequest, DEFAULT_BODY)),
        (
            "/v1/storage/items.import",
            Route(s.import_items, m.StorageItemsImportRequest, IMPORT_BODY, shield=True),
        ),
        (
            "/v1/storage/items.delete",
            Route(s.delete_items, m.StorageItemsDeleteRequest, DEFAULT_BODY, shield=True),
        ),
        ("/v1/storage/scheduled.list", Route(s.list_scheduled, m.StorageItemsListRequest, DEFAULT_BODY)),
        # Durable workflows (docs/durable.md): writes in several steps are shielded, as above.
        ("/v1/workflows.start", Route(w.start, m.WorkflowsStartRequest, max_produce_body, shield=True)),
        ("/v1/workflows.info", Route(w.info, m.WorkflowsInfoRequest, SMALL_BODY)),
        ("/v1/workflows.list", Route(w.list, m.WorkflowsListRequest, SMALL_BODY)),
        ("/v1/workflows.signal", Route(w.signal, m.WorkflowsSignalRequest, max_produce_body, shield=True)),
        ("/v1/workflows.update", Route(w.update, m.WorkflowsUpdateRequest, max_produce_body)),
        ("/v1/workflows.cancel", Route(w.cancel, m.WorkflowsCancelRequest, SMALL_BODY, shield=True)),
        ("/v1/workflows.resume", Route(w.resume, m.WorkflowsResumeRequest, SMALL_BODY, shield=True)),
        ("/v1/workflows.fork", Route(w.fork, m.WorkflowsForkRequest, SMALL_BODY, shield=True)),
        (
            "/v1/workflows.terminate",
            Route(w.terminate, m.WorkflowsTerminateRequest, SMALL_BODY, shield=True),
        ),
        ("/v1/workflows.result", Route(w.result, m.WorkflowsResultRequest, SMALL_BODY)),
        ("/v1/workflows.claim", Route(w.claim, m.WorkflowsClaimRequest, SMALL_BODY, shield=True)),
        # A lease, so not shielded: one parked is cancelled with its client (its claims are shielded).
        (
            "/v1/workflows.lease",
            Route(w.lease, m.WorkflowsLeaseRequest, SMALL_BODY, undelivered=w.lease_undelivered),
        ),
        ("/v1/workflows.append", Route(w.append, m.WorkflowsAppendRequest, max_produce_body, shield=True)),
        *_schedule_routes(s),
        *_tenancy_routes(s.tenancy),
    ]
    latency, monotonic_s = service.metrics.latency, service.clock.monotonic
    direct = app[DIRECT_ROUTES] = {}
    for path, route in routes:
        timed = _timed(path, latency, monotonic_s)
        handler = route_handler(route, monotonic_s, timed, service.clock.now, auth is not None)
        app.router.add_route("*", path, handler)
        direct[path] = handler if auth is None else functools.partial(auth, handler=handler)
    return app


DIRECT_ROUTES = web.AppKey("direct_routes", dict[str, Handler])
"""The v1 routes by path, which ``dispatch_directly`` serves without aiohttp's router."""


def dispatch_directly(runner: web.AppRunner) -> None:
    """Makes the server of ``runner`` (set up, accepting no connection yet) send a request for a v1
    route, named by its exact raw path, straight to the route: aiohttp's routing and application step
    cost the floor app about 4 us per request on the development VM (docs/benchmarks-log.md). Anything
    else (other paths, a query string, an encoded character, an ``Expect`` header) goes through the
    application as before; the route's handler and the authentication middleware are the same objects
    either way."""
    assert runner.server is not None, "set the runner up first"
    routes = runner.app.get(DIRECT_ROUTES)
    if not routes:
        return
    application = runner.server.request_handler

    def dispatch(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        route = routes.get(request.raw_path)
        if route is None or hdrs.EXPECT in request.headers:
            return application(request)
        return route(cast(web.Request, request))  # the application's request factory made it

    runner.server.request_handler = dispatch


def _schedule_routes(s: Service) -> list[tuple[str, Route[Any, Any]]]:
    """The schedules routes (docs/schedules.md); a create or update carries an item template."""
    api = s.schedules
    return [
        ("/v1/schedules.create", Route(api.create, m.ScheduleInfo, DEFAULT_BODY, shield=True)),
        ("/v1/schedules.update", Route(api.update, m.ScheduleInfo, DEFAULT_BODY, shield=True)),
        ("/v1/schedules.info", Route(api.info, m.SchedulesRequest, SMALL_BODY)),
        ("/v1/schedules.list", Route(api.list, m.SchedulesListRequest, SMALL_BODY)),
        ("/v1/schedules.delete", Route(api.delete, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.pause", Route(api.pause, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.resume", Route(api.resume, m.SchedulesRequest, SMALL_BODY, shield=True)),
        ("/v1/schedules.refresh", Route(api.refresh, m.SchedulesRequest, SMALL_BODY)),
    ]


def _tenancy_routes(t: Tenancy) -> list[tuple[str, Route[Any, Any]]]:
    """The routes of namespaces, users, API keys, roles and role bindings (docs/tenancy.md)."""
    size = DEFAULT_BODY
    return [
        ("/v1/namespaces.create", Route(t.create_namespace, m.NamespaceInfo, size, shield=True)),
        ("/v1/namespaces.update", Route(t.update_namespace, m.NamespaceInfo, size, shield=True)),
        ("/v1/namespaces.list", Route(t.list_namespaces, m.NamespacesListRequest, size)),
        (
            "/v1/namespaces.delete",
            Route(t.delete_namespace, m.NamespacesDeleteRequest, size, shield=True),
        ),
        ("/v1/users.create", Route(t.create_user, m.UserCreateRequest, size, shield=True)),
        ("/v1/users.list", Route(t.list_users, m.UsersListRequest, size)),
        ("/v1/users.delete", Route(t.delete_user, m.UsersDeleteRequest, size, shield=True)),
        ("/v1/apikeys.create", Route(t.create_key, m.APIKeyCreateRequest, size, shield=True)),
        ("/v1/apikeys.list", Route(t.list_keys, m.APIKeysListRequest, size)),
        ("/v1/apikeys.delete", Route(t.delete_key, m.APIKeysDeleteRequest, size, shield=True)),
        ("/v1/roles.create", Route(t.create_role, m.RoleCreateRequest, size, shield=True)),
        ("/v1/roles.list", Route(t.list_roles, m.RolesListRequest, size)),
        ("/v1/roles.update", Route(t.update_role, m.RoleUpdateRequest, size, shield=True)),
        ("/v1/roles.delete", Route(t.delete_role, m.RolesDeleteRequest, size, shield=True)),
        (
            "/v1/rolebindings.create",
            Route(t.create_binding, m.RoleBindingCreateRequest, size, shield=True),
        ),
        ("/v1/rolebindings.list", Route(t.list_bindings, m.RoleBindingsListRequest, size)),
        (
            "/v1/rolebindings.delete",
            Route(t.delete_binding, m.RoleBindingDeleteRequest, size, shield=True),
        ),
    ]


def _timed(path: str, latency: LightHistogram, monotonic_s: Callable[[], float]) -> Timed:
    """Counts the requests of ``path`` into ``latency`` by status code (a code's child made once), by
    ``monotonic_s`` rather than by looking the running loop up on each request."""
    by_code: dict[int, Observer] = {}

    def timed(code: int, started_s: float) -> None:
        child = by_code.get(code)
        if child is None:
            child = by_code[code] = latency.labels(path, str(code))
        child.observe(monotonic_s() - started_s)

    return timed
