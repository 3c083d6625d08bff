"""Authorization with tenancy on (docs/tenancy.md "Authorization"): every permission of every standard role
against every route, the cascade (scoped keys, ``_system`` admins), anonymous callers and Open Door,
expired and deleted keys, and the bounded delay of changes made elsewhere (docs/adr/0021)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from querator.clock import FakeClock, to_datetime
from querator.errors import Forbidden
from querator.http._routes import DIRECT_ROUTES, create_app
from querator.tenancy import AS_SERVER, CACHE_TTL_S, NOBODY, STANDARD_ROLES, RequestContext
from querator.tenancy._directory import Directory
from querator.wire import messages as m
from tests.api.tenancy import BOOTSTRAP_KEY, Caller, tenant_server
from tests.conftest import ServerFactory, eventually

TEAM = "team"
_unique = itertools.count()


def _queue(ns: str) -> str:
    return f"q-{ns}"


def _new_queue(ns: str, name: str = "") -> dict[str, Any]:
    name = name or f"new-{next(_unique)}"
    return {
        "queue_name": name,
        "namespace": ns,
        "lease_timeout": "1m",
        "expire_timeout": "1h",
        "requested_partitions": 1,
    }


Body = Callable[[str], dict[str, Any]]
# Each route with the permission the reference checks (docs/semantics.md §1.3), where it checks it
# ("ns": the namespace under test; "_system": always there), and a body that reaches the check. Bodies
# that would change shared state are invalid in a way checked only after authorization, so an allowed
# caller gets a 4xx or 453 other than 403, and a refused one gets 403.
ROUTES: list[tuple[str, str, str, Body]] = [
    (
        "/v1/queue.produce",
        "queue.produce",
        "ns",
        lambda ns: {"queue_name": _queue(ns), "request_timeout": "1m"},
    ),
    ("/v1/queue.lease", "queue.lease", "ns", lambda ns: {"queue_name": _queue(ns), "request_timeout": "1m"}),
    (
        "/v1/queue.complete",
        "queue.complete",
        "ns",
        lambda ns: {"queue_name": _queue(ns), "request_timeout": "1m"},
    ),
    ("/v1/queue.retry", "queue.retry", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/queue.renew", "queue.lease", "ns", lambda ns: {"queue_name": _queue(ns), "request_timeout": "1m"}),
    ("/v1/queue.stats", "queue.stats", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/queue.clear", "queue.clear", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/queue.reload", "queue.update", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/queues.create", "queue.create", "ns", _new_queue),
    ("/v1/queues.list", "queue.list", "ns", lambda ns: {"namespace": ns}),
    ("/v1/queues.update", "queue.update", "ns", lambda ns: {"queue_name": _queue(ns), "max_attempts": -1}),
    ("/v1/queues.info", "queue.stats", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/queues.delete", "queue.delete", "ns", lambda ns: {"queue_name": f"doomed-{ns}"}),
    ("/v1/storage/items.list", "queue.stats", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/storage/scheduled.list", "queue.stats", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/storage/items.import", "queue.produce", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/storage/items.delete", "queue.clear", "ns", lambda ns: {"queue_name": _queue(ns)}),
    ("/v1/cluster.info", "queue.list", "ns", lambda ns: {"namespace": ns}),
    ("/v1/namespaces.create", "namespace.create", "_system", lambda ns: {"name": f"n{next(_unique)}"}),
    ("/v1/namespaces.update", "namespace.update", "_system", lambda ns: {"name": TEAM}),
    ("/v1/namespaces.list", "namespace.list", "_system", lambda ns: {}),
    ("/v1/namespaces.delete", "namespace.delete", "_system", lambda ns: {"name": "nope"}),
    ("/v1/users.create", "user.create", "_system", lambda ns: {"username": f"u{next(_unique)}"}),
    ("/v1/users.list", "user.list", "_system", lambda ns: {}),
    ("/v1/users.delete", "user.delete", "_system", lambda ns: {"id": "nope"}),
    ("/v1/apikeys.create", "apikey.create", "_system", lambda ns: {"user_id": "nope"}),
    ("/v1/apikeys.list", "apikey.list", "_system", lambda ns: {}),
    ("/v1/apikeys.delete", "apikey.delete", "_system", lambda ns: {"id": "nope"}),
    ("/v1/roles.create", "role.create", "ns", lambda ns: {"namespace": ns, "name": "Admin"}),
    ("/v1/roles.list", "role.list", "ns", lambda ns: {"namespace": ns}),
    ("/v1/roles.update", "role.update", "ns", lambda ns: {"namespace": ns, "name": "nope"}),
    ("/v1/roles.delete", "role.delete", "ns", lambda ns: {"namespace": ns, "name": "nope"}),
    (
        "/v1/rolebindings.create",
        "rolebinding.create",
        "ns",
        lambda ns: {"namespace": ns, "role_name": "nope", "user_id": "u"},
    ),
    ("/v1/rolebindings.list", "rolebinding.list", "ns", lambda ns: {"namespace": ns}),
    (
        "/v1/rolebindings.delete",
        "rolebinding.delete",
        "ns",
        lambda ns: {"namespace": ns, "role_name": "nope", "user_id": "u"},
    ),
    ("/v1/rate_limits.take", "queue.lease", "ns", lambda ns: {"queue_name": _queue(ns)}),
]


@pytest.fixture
async def admin(start_server: ServerFactory, clock: FakeClock) -> Caller:
    admin = Caller(await tenant_server(start_server, clock), BOOTSTRAP_KEY)
    await admin.namespace(TEAM)
    await admin.create_queue(_queue(TEAM), namespace=TEAM)
    await admin.create_queue(_queue("_system"))
    return admin


def test_the_table_covers_every_permission_checked_on_a_route() -> None:
    enforced = {p for p in next(iter(STANDARD_ROLES.values())) if not p.startswith("system.")}
    assert {permission for _, permission, _, _ in ROUTES} == enforced


@pytest.mark.parametrize("role", sorted(STANDARD_ROLES))
@pytest.mark.parametrize("bound_in", [TEAM, "_system"])
async def test_every_standard_role_against_every_route(admin: Caller, role: str, bound_in: str) -> None:
    """A user bound to ``role`` in ``bound_in`` may call exactly the routes whose permission the role
    holds where the route checks it: in TEAM, a binding there or in ``_system`` (the admin cascade); in
    ``_system``, only a binding there."""
    caller = await admin.member(f"{role}-{bound_in}", bound_in, role)
    granted = set(STANDARD_ROLES[role])
    for path, permission, where, body in ROUTES:
        for target in (TEAM, "_system"):
            checked_in = target if where == "ns" else "_system"
            allowed = permission in granted and bound_in in (checked_in, "_system")
            if path == "/v1/queues.delete":  # something to delete, each time
                await admin.call(
                    "/v1/queues.create", {**ROUTES[8][3](target), "queue_name": f"doomed-{target}"}
                )
            status, reply = await caller.call(path, body(target))
            assert (status == 403) is (not allowed), (role, bound_in, path, target, status, reply)
            if status == 403:
                assert reply == {"code": 403, "code_text": "Forbidden", "message": "access denied"}
    async with admin.api.session.get(
        admin.api.base + "/metrics", headers={"Authorization": f"Bearer {caller.key}"}
    ) as resp:
        assert resp.status == (
            200 if bound_in == "_system" else 403
        )  # every standard role has system.metrics


async def test_queues_list_shows_only_namespaces_the_caller_may_list(admin: Caller) -> None:
    await admin.namespace("other")
    await admin.create_queue("q-other", namespace="other")
    await admin.role(TEAM, "lister", ["queue.list"])
    lister = await admin.member("lister", TEAM, "lister")
    assert [q["queue_name"] for q in (await lister.ok("/v1/queues.list", {"namespace": TEAM}))["items"]] == [
        _queue(TEAM)
    ]
    await lister.fails("/v1/queues.list", {"namespace": "other"}, 403, "access denied")
    await lister.fails("/v1/queues.list", {}, 403, "access denied")  # no namespace: _system


async def test_a_scoped_key_reaches_its_namespace_and_system_only(admin: Caller) -> None:
    await admin.namespace("other")
    await admin.create_queue("q-other", namespace="other")
    user_id = await admin.user("scoped")
    await admin.bind(TEAM, "NamespaceOwner", user_id)
    await admin.bind("other", "NamespaceOwner", user_id)
    await admin.role("_system", "viewer", ["queue.stats"])
    await admin.bind("_system", "viewer", user_id)
    scoped = Caller(admin.api, await admin.new_key(user_id, namespace_scope=TEAM))
    unscoped = Caller(admin.api, await admin.new_key(user_id))
    assert (await scoped.call("/v1/queue.stats", {"queue_name": _queue(TEAM)}))[0] == 200
    await scoped.fails("/v1/queue.stats", {"queue_name": "q-other"}, 403, "access denied")
    assert (await unscoped.call("/v1/queue.stats", {"queue_name": "q-other"}))[0] == 200
    # _system: only what the user holds there, whatever it holds elsewhere.
    assert (await scoped.call("/v1/queue.stats", {"queue_name": _queue("_system")}))[0] == 200
    await scoped.fails("/v1/queue.clear", {"queue_name": _queue("_system")}, 403, "access denied")


async def test_system_admins_administer_every_namespace(admin: Caller) -> None:
    root = await admin.member("root", "_system", "Admin")
    await root.namespace("fresh")
    await root.create_queue("q-fresh", namespace="fresh")
    user_id = await root.user("worker")
    await root.role("fresh", "consumer", ["queue.lease", "queue.complete"])
    await root.bind("fresh", "consumer", user_id)


async def test_authentication_errors_are_401_and_counted(admin: Caller) -> None:
    await Caller(admin.api, "nonsense").fails("/v1/queues.list", {}, 401, "api key is invalid")
    await Caller(admin.api, "qtr-live-" + "x" * 43).fails(
        "/v1/queues.list", {}, 401, "api key does not exist"
    )
    async with admin.api.session.post(
        admin.api.base + "/v1/queues.list", data=b"{}", headers={"Authorization": "Basic abc"}
    ) as resp:
        assert resp.status == 401 and (await resp.json())["message"] == "invalid authorization header format"
    # Unknown paths authenticate first, as in the reference.
    await Caller(admin.api, "nonsense").fails("/v1/nothing", {}, 401, "api key is invalid")
    async with admin.api.session.get(
        admin.api.base + "/metrics", headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    ) as resp:
        text = await resp.text()
    assert 'querator_auth_failures_total{reason="malformed"} 2.0' in text
    assert 'querator_auth_failures_total{reason="unknown"} 1.0' in text
    assert 'querator_auth_failures_total{reason="header"} 1.0' in text


async def test_an_expired_key_is_refused(admin: Caller, clock: FakeClock) -> None:
    user_id = await admin.user("temp")
    await admin.bind("_system", "Admin", user_id)
    at = to_datetime(clock.now() + 3600 * 1_000_000).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    temp = Caller(admin.api, await admin.new_key(user_id, expires_at=at))
    assert (await temp.call("/v1/queues.list"))[0] == 200
    listed = (await admin.ok("/v1/apikeys.list", {"user_id": user_id}))["items"]
    assert listed[0]["expires_at"] == at
    clock.advance(3600)
    await temp.fails("/v1/queues.list", {}, 401, "api key has expired")


async def test_last_use_is_written_in_batches(admin: Caller, clock: FakeClock) -> None:
    user = await admin.member("busy", "_system", "PublicViewer")
    for _ in range(3):
        assert (await user.call("/v1/queues.list"))[0] == 403
    listed = (await admin.ok("/v1/apikeys.list"))["items"]
    assert all("last_used_at" not in k for k in listed)  # nothing written per request
    clock.advance(10)

    async def written() -> bool:
        return any("last_used_at" in k for k in (await admin.ok("/v1/apikeys.list"))["items"])

    await eventually(written)


async def test_changes_made_elsewhere_take_effect_within_the_cache_ttl(
    admin: Caller, clock: FakeClock
) -> None:
    """A key deleted by another node (here: straight in the store, which this node's caches do not see)
    works on here until the cache's TTL ends, then is refused (docs/adr/0021)."""
    user_id = await admin.user("remote")
    await admin.bind("_system", "Admin", user_id)
    created = await admin.ok("/v1/apikeys.create", {"user_id": user_id})
    caller = Caller(admin.api, created["key"])
    assert (await caller.call("/v1/queues.list"))[0] == 200
    elsewhere = Directory(admin.api.service.store)
    await elsewhere.delete_key(created["id"])
    assert (await caller.call("/v1/queues.list"))[0] == 200  # cached
    clock.advance(CACHE_TTL_S + 0.001)
    await caller.fails("/v1/queues.list", {}, 401, "api key does not exist")
    # A binding removed elsewhere: the same bound delay.
    other = await admin.member("grant", "_system", "Admin")
    assert (await other.call("/v1/queues.list"))[0] == 200
    admin_role = next(r for r in (await admin.ok("/v1/roles.list"))["items"] if r["name"] == "Admin")
    grant_id = next(u["id"] for u in (await admin.ok("/v1/users.list"))["items"] if u["username"] == "grant")
    await elsewhere.delete_binding("_system", grant_id, admin_role["id"])
    clock.advance(CACHE_TTL_S + 0.001)
    await other.fails("/v1/queues.list", {}, 403, "access denied")


async def test_open_door_lets_anonymous_in_until_an_operator_closes_it(
    start_server: ServerFactory, clock: FakeClock, backend: str
) -> None:
    api = await tenant_server(start_server, clock, open_door=True)
    anonymous = Caller(api)
    user_id = await anonymous.user("first-admin")
    await anonymous.bind("_system", "Admin", user_id)
    admin = Caller(api, await anonymous.new_key(user_id))
    anonymous_id = next(
        u["id"] for u in (await admin.ok("/v1/users.list"))["items"] if u["username"] == "anonymous"
    )
    await admin.ok("/v1/rolebindings.delete", {"role_name": "Admin", "user_id": anonymous_id})
    await anonymous.fails("/v1/queues.list", {}, 403, "access denied")
    if backend == "sqlite":  # a restart on the same file does not open the door again
        await api.service.shutdown()
        again = await tenant_server(start_server, clock, open_door=True)
        await Caller(again).fails("/v1/queues.list", {}, 403, "access denied")


async def test_without_bootstrap_keys_or_open_door_anonymous_may_do_nothing(admin: Caller) -> None:
    await Caller(admin.api).fails("/v1/queues.list", {}, 403, "access denied")
    async with admin.api.session.get(admin.api.base + "/metrics") as resp:
        assert resp.status == 403
    async with admin.api.session.get(admin.api.base + "/health") as resp:
        assert resp.status == 200


async def test_workflow_routes_need_the_permissions_of_their_queue(admin: Caller) -> None:
    """Workflows (docs/durable.md) belong to their queue's namespace, and a request names it: starting,
    signalling and cancelling need queue.produce there, reading queue.stats, claiming and appending
    queue.lease, listing queue.list. The activation the server produces is its own."""
    owner = await admin.member("wf-owner", TEAM, "NamespaceOwner")
    viewer = await admin.member("wf-viewer", "_system", "PublicViewer")
    start = {"workflow_id": "wf-1", "name": "flow", "queue_name": _queue(TEAM)}
    await viewer.fails("/v1/workflows.start", start, 403, "access denied")
    assert (await owner.ok("/v1/workflows.start", start))["created"] is True
    wf = {"workflow_id": "wf-1", "namespace": TEAM}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("/v1/workflows.info", wf),
        ("/v1/workflows.signal", {**wf, "name": "go"}),
        ("/v1/workflows.claim", wf),
    ]
    for path, body in calls:
        await viewer.fails(path, body, 403, "access denied")
        assert (await owner.call(path, body))[0] == 200, path
    # (the owner's result would wait on the test's FakeClock: the refusal comes before any wait)
    await viewer.fails("/v1/workflows.result", {**wf, "request_timeout": "1s"}, 403, "access denied")
    update = {**wf, "name": "go", "update_id": "u-1", "request_timeout": "1s"}
    await viewer.fails("/v1/workflows.update", update, 403, "access denied")  # before it records or waits
    await owner.fails("/v1/workflows.list", {}, 403, "access denied")  # queue.list in _system
    listed = await owner.ok("/v1/workflows.list", {"namespace": TEAM})
    assert [(w["workflow_id"], w["namespace"]) for w in listed["workflows"]] == [("wf-1", TEAM)]
    assert (await admin.ok("/v1/workflows.list")).get("workflows", []) == []  # none in _system
    await viewer.fails("/v1/workflows.cancel", wf, 403, "access denied")
    assert (await owner.call("/v1/workflows.cancel", wf))[0] == 200
    await viewer.fails("/v1/workflows.resume", wf, 403, "access denied")
    fork = {**wf, "new_workflow_id": "wf-2", "from_step": 1}
    await viewer.fails("/v1/workflows.fork", fork, 403, "access denied")
    assert (await owner.ok("/v1/workflows.fork", fork))["workflow"]["forked_from"] == "wf-1"
    await viewer.fails("/v1/workflows.terminate", wf, 403, "access denied")
    assert (await owner.call("/v1/workflows.terminate", wf))[0] == 200


async def test_schedule_routes_need_the_permissions_of_their_queue(admin: Caller) -> None:
    """A schedule (docs/schedules.md) produces into its queue: managing one needs queue.update in that
    queue's namespace, reading one queue.stats there, listing them all (they span queues) queue.list in
    _system. Before this, with tenancy on, any caller could schedule items into any queue."""
    owner = await admin.member("sched-owner", TEAM, "NamespaceOwner")
    viewer = await admin.member("sched-viewer", "_system", "PublicViewer")
    create = {"name": "nightly", "cron": "0 2 * * *", "queue_name": _queue(TEAM)}
    await viewer.fails("/v1/schedules.create", create, 403, "access denied")
    await owner.fails(
        "/v1/schedules.create", {**create, "queue_name": _queue("_system")}, 403, "access denied"
    )
    assert (await owner.ok("/v1/schedules.create", create))["name"] == "nightly"
    for path in ("/v1/schedules.info", "/v1/schedules.pause", "/v1/schedules.resume"):
        await viewer.fails(path, {"name": "nightly"}, 403, "access denied")
        assert (await owner.call(path, {"name": "nightly"}))[0] == 200, path
    moved = {**create, "queue_name": _queue("_system")}
    await owner.fails("/v1/schedules.update", moved, 403, "access denied")  # into a queue not theirs
    await owner.fails("/v1/schedules.list", {}, 403, "access denied")
    assert [s["name"] for s in (await admin.ok("/v1/schedules.list"))["items"]] == ["nightly"]
    await viewer.fails("/v1/schedules.delete", {"name": "nightly"}, 403, "access denied")
    assert (await owner.call("/v1/schedules.delete", {"name": "nightly"}))[0] == 200


# Bodies that reach the check of the routes ROUTES leaves to the tests above (each route checks once).
_WF = {"workflow_id": "wf-x", "namespace": TEAM}
_SCHEDULE = {"name": "nightly", "cron": "0 2 * * *", "queue_name": _queue(TEAM)}
OTHER_ROUTES: dict[str, dict[str, Any]] = {
    "/v1/queue.watch": {"queue_name": _queue(TEAM), "request_timeout": "1m"},
    "/v1/queue.redrive": {"queue_name": _queue(TEAM), "target_queue": _queue(TEAM)},
    "/v1/cluster.refresh": {"queue_name": _queue(TEAM)},
    "/v1/workflows.start": {"workflow_id": "wf-x", "name": "flow", "queue_name": _queue(TEAM)},
    "/v1/workflows.info": _WF,
    "/v1/workflows.list": {"namespace": TEAM},
    "/v1/workflows.signal": {**_WF, "name": "go"},
    "/v1/workflows.update": {**_WF, "name": "go", "update_id": "u-1", "request_timeout": "1s"},
    "/v1/workflows.cancel": _WF,
    "/v1/workflows.resume": _WF,
    "/v1/workflows.fork": {**_WF, "from_step": 1},
    "/v1/workflows.terminate": _WF,
    "/v1/workflows.result": {**_WF, "request_timeout": "1s"},
    "/v1/workflows.claim": _WF,
    "/v1/workflows.lease": {
        "queue_name": _queue(TEAM),
        "request_timeout": "1m",
        "claims": 1,
        "claim_timeout": "30s",
    },
    "/v1/workflows.append": {**_WF, "fence": 1},
    "/v1/schedules.create": _SCHEDULE,
    "/v1/schedules.update": _SCHEDULE,
    "/v1/schedules.info": {"name": "nightly"},
    "/v1/schedules.list": {},
    "/v1/schedules.delete": {"name": "nightly"},
    "/v1/schedules.pause": {"name": "nightly"},
    "/v1/schedules.resume": {"name": "nightly"},
    "/v1/schedules.refresh": {"name": "nightly"},
}


async def test_every_route_is_authorized_by_the_one_check(
    admin: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every v1 route, and /metrics, goes through ``Access.authorize`` with the request's context: a
    caller with no permission gets 403 from it on each (docs/adr/0056)."""
    service = admin.api.service
    nobody_id = await admin.user("nobody")
    nobody = Caller(admin.api, await admin.new_key(nobody_id))
    seen: list[tuple[RequestContext, str, str]] = []
    authorize = service.tenancy.access.authorize

    async def counted(ctx: RequestContext, namespace: str, permission: str) -> None:
        seen.append((ctx, namespace, permission))
        await authorize(ctx, namespace, permission)

    monkeypatch.setattr(service.tenancy.access, "authorize", counted)
    bodies = {path: body(TEAM) for path, _, _, body in ROUTES} | OTHER_ROUTES
    routes: dict[str, Any] = create_app(service)[DIRECT_ROUTES]
    assert set(bodies) == set(routes)  # every v1 route: a new one needs a body here
    for path, body in bodies.items():
        seen.clear()
        await nobody.fails(path, body, 403, "access denied")
        assert [ctx.caller.user_id for ctx, _, _ in seen] == [nobody_id], path
    seen.clear()
    async with admin.api.session.get(
        admin.api.base + "/metrics", headers={"Authorization": f"Bearer {nobody.key}"}
    ) as resp:
        assert resp.status == 403
    assert [(namespace, permission) for _, namespace, permission in seen] == [("_system", "system.metrics")]


async def test_a_service_call_names_its_caller(admin: Caller) -> None:
    """An embedding program passes the context of each call (docs/adr/0056): none at all is refused (a
    bug, never a pass), a caller without the permission gets 403, and the server's own call passes.
    Before, the caller travelled in a context variable, and a call could not say whom it was for."""
    request = m.QueueProduceRequest(
        queue_name=_queue(TEAM), request_timeout="1m", items=[m.QueueProduceItem(utf8="x")]
    )
    service = admin.api.service
    with pytest.raises(RuntimeError, match=r"^no request context; queue\.produce in 'team'"):
        await service.produce(None, request)  # type: ignore[arg-type]  # what an untyped caller may do
    with pytest.raises(Forbidden, match=r"^access denied$"):
        await service.produce(RequestContext(NOBODY), request)
    assert await _items(admin) == 0
    await service.produce(AS_SERVER, request)
    assert await _items(admin) == 1


async def _items(admin: Caller) -> int:
    [logical] = (await admin.ok("/v1/queue.stats", {"queue_name": _queue(TEAM)}))["logicalQueues"]
    [partition] = logical["partitions"]
    return int(partition.get("total", 0))


async def test_every_background_task_runs_as_the_server(
    start_server: ServerFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the node's own tasks ask of the service (a schedule's tick here) is authorized as the
    server's (``AS_SERVER``), not as nobody's and not as whichever request caused it."""
    api = await tenant_server(start_server, clock)
    admin = Caller(api, BOOTSTRAP_KEY)
    await admin.namespace(TEAM)
    await admin.create_queue(_queue(TEAM), namespace=TEAM)
    await admin.ok("/v1/schedules.create", {**_SCHEDULE, "cron": "* * * * *"})
    produced: list[RequestContext] = []
    authorize = api.service.tenancy.access.authorize

    async def recorded(ctx: RequestContext, namespace: str, permission: str) -> None:
        if permission == "queue.produce":
            produced.append(ctx)
        await authorize(ctx, namespace, permission)

    monkeypatch.setattr(api.service.tenancy.access, "authorize", recorded)
    clock.advance(61)

    async def ticked() -> bool:
        return await _items(admin) == 1

    await eventually(ticked)
    # The server's own (on a node of two members, forwarded by the member that owns the schedule).
    assert [ctx.caller for ctx in produced] == [AS_SERVER.caller]
