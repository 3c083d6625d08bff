"""What one namespace's callers can reach of another's with tenancy on (docs/tenancy.md, "Boundaries"):
dead queues stay in their queue's namespace, and a caller refused in a namespace learns nothing of what
is in it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from querator.clock import FakeClock
from tests.api.tenancy import BOOTSTRAP_KEY, Caller, tenant_server
from tests.conftest import ServerFactory

TEAM = "team"
OTHER = "other"


@pytest.fixture
async def admin(start_server: ServerFactory, clock: FakeClock) -> Caller:
    admin = Caller(await tenant_server(start_server, clock), BOOTSTRAP_KEY)
    for ns in (TEAM, OTHER):
        await admin.namespace(ns)
        await admin.create_queue(f"q-{ns}", namespace=ns)
    return admin


async def test_a_dead_queue_whose_name_another_namespace_took_gets_no_dead_items(admin: Caller) -> None:
    """A dead queue deleted and its name created again in another namespace: the source's dead items
    went there, into a queue its owner may not write (the gap ADR 0030 left). They are deleted, as for a
    dead queue that is gone."""
    await admin.create_queue("dlq", namespace=TEAM)
    await admin.ok("/v1/queues.update", _queue(f"q-{TEAM}", dead_queue="dlq"))
    await admin.ok("/v1/queues.delete", {"queue_name": "dlq"})
    await admin.create_queue("dlq", namespace=OTHER)
    produce = {"queue_name": f"q-{TEAM}", "request_timeout": "5s", "items": [{"utf8": "secret"}]}
    await admin.ok("/v1/queue.produce", produce)
    lease = {"queue_name": f"q-{TEAM}", "batch_size": 1, "client_id": "c", "request_timeout": "5s"}
    [item] = (await admin.ok("/v1/queue.lease", lease))["items"]
    retry = {"queue_name": f"q-{TEAM}", "partition": 0, "items": [{"id": item["id"], "dead": True}]}
    await admin.ok("/v1/queue.retry", retry)
    listed = await admin.ok("/v1/storage/items.list", {"queue_name": "dlq", "partition": 0})
    assert listed.get("items", []) == []
    left = await admin.ok("/v1/storage/items.list", {"queue_name": f"q-{TEAM}", "partition": 0})
    assert left.get("items", []) == []


def _queue(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "queue_name": name,
        "lease_timeout": "1m",
        "expire_timeout": "1h",
        "requested_partitions": 1,
        **fields,
    }


async def test_a_dead_queue_is_in_its_queues_namespace(admin: Caller) -> None:
    """A queue's dead items are written by the server into its dead queue: one in another namespace
    would let a namespace's owner produce where it may not. Refused on create and update, to every
    caller, before the dead queue's own settings are looked at."""
    owner = await admin.member("owner", TEAM, "NamespaceOwner")
    await admin.ok("/v1/queues.update", _queue(f"q-{OTHER}", dead_queue=""))
    foreign = f"dead_queue is invalid; 'q-{OTHER}' is not in the queue's namespace '{TEAM}'"
    for caller in (owner, admin):
        await caller.fails(
            "/v1/queues.create",
            _queue("leaky", namespace=TEAM, max_attempts=1, dead_queue=f"q-{OTHER}"),
            400,
            foreign,
        )
        await caller.fails(
            "/v1/queues.update", _queue(f"q-{TEAM}", max_attempts=1, dead_queue=f"q-{OTHER}"), 400, foreign
        )
    # A queue of _system is no dead queue of a team's queue either, and the reverse.
    await admin.create_queue("q-system")
    await admin.fails(
        "/v1/queues.create",
        _queue("from-system", dead_queue=f"q-{TEAM}"),
        400,
        f"dead_queue is invalid; 'q-{TEAM}' is not in the queue's namespace '_system'",
    )
    await owner.fails(
        "/v1/queues.update",
        _queue(f"q-{TEAM}", dead_queue="q-system"),
        400,
        f"dead_queue is invalid; 'q-system' is not in the queue's namespace '{TEAM}'",
    )
    # In the same namespace, as before.
    await owner.ok("/v1/queues.create", _queue("dlq", namespace=TEAM))
    await owner.ok("/v1/queues.update", _queue(f"q-{TEAM}", max_attempts=1, dead_queue="dlq"))
    info = await owner.ok("/v1/queues.info", {"queue_name": f"q-{TEAM}"})
    assert info["dead_queue"] == "dlq"
    assert "leaky" not in [
        q["queue_name"] for q in (await admin.ok("/v1/queues.list", {"namespace": TEAM}))["items"]
    ]


@pytest.mark.parametrize("backend", ["sqlite"])  # a restart on the same file
async def test_a_store_with_tenants_started_without_its_key_gets_no_open_door(
    start_server: ServerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Open Door is for a new store (docs/tenancy.md): a store that has users, started once without its
    bootstrap key (a setting lost in a deploy), must not make anonymous its Admin, then or later."""
    api = await tenant_server(start_server, clock)
    ops = await Caller(api, BOOTSTRAP_KEY).member("ops", "_system", "Admin")
    await api.service.shutdown()
    keyless = await tenant_server(start_server, clock, open_door=True)
    ops = Caller(keyless, ops.key)
    await Caller(keyless).fails("/v1/queues.list", {}, 403, "access denied")
    assert "no bootstrap key is configured, but the store already has namespaces, users" in caplog.text
    assert "so no Open Door is made" in caplog.text
    await keyless.service.shutdown()
    again = await tenant_server(start_server, clock)  # the key is back
    ops = Caller(again, ops.key)
    bindings = (await ops.ok("/v1/rolebindings.list"))["items"]
    ops_id = next(u["id"] for u in (await ops.ok("/v1/users.list"))["items"] if u["username"] == "ops")
    assert [b["user_id"] for b in bindings] == [ops_id]
    await Caller(again).fails("/v1/queues.list", {}, 403, "access denied")


Body = Callable[[str], dict[str, Any]]
WAIT = {"request_timeout": "1m"}
# Every route that names a queue, with a body that passes the route's own checks of its fields.
QUEUE_ROUTES: list[tuple[str, Body]] = [
    ("/v1/queue.produce", lambda q: {"queue_name": q, **WAIT}),
    ("/v1/queue.lease", lambda q: {"queue_name": q, **WAIT}),
    ("/v1/queue.complete", lambda q: {"queue_name": q, **WAIT}),
    ("/v1/queue.retry", lambda q: {"queue_name": q}),
    ("/v1/queue.renew", lambda q: {"queue_name": q, **WAIT}),
    ("/v1/queue.stats", lambda q: {"queue_name": q}),
    ("/v1/queue.clear", lambda q: {"queue_name": q, "queue": True}),
    ("/v1/queue.reload", lambda q: {"queue_name": q}),
    ("/v1/queue.redrive", lambda q: {"queue_name": q, "target_queue": f"q-{TEAM}"}),
    ("/v1/queue.redrive", lambda q: {"queue_name": f"q-{TEAM}", "target_queue": q}),
    ("/v1/queues.update", _queue),
    ("/v1/queues.info", lambda q: {"queue_name": q}),
    ("/v1/queues.delete", lambda q: {"queue_name": q}),
    ("/v1/storage/items.list", lambda q: {"queue_name": q}),
    ("/v1/storage/scheduled.list", lambda q: {"queue_name": q}),
    ("/v1/storage/items.import", lambda q: {"queue_name": q}),
    ("/v1/storage/items.delete", lambda q: {"queue_name": q}),
    ("/v1/cluster.info", lambda q: {"queue_name": q}),
    ("/v1/workflows.start", lambda q: {"workflow_id": "w", "name": "flow", "queue_name": q}),
    ("/v1/schedules.create", lambda q: {"name": "s", "cron": "0 2 * * *", "queue_name": q}),
    ("/v1/schedules.update", lambda q: {"name": "mine", "cron": "0 2 * * *", "queue_name": q}),
]
SCHEDULE_ROUTES: list[tuple[str, Body]] = [
    ("/v1/schedules.info", lambda s: {"name": s}),
    ("/v1/schedules.pause", lambda s: {"name": s}),
    ("/v1/schedules.resume", lambda s: {"name": s}),
    ("/v1/schedules.delete", lambda s: {"name": s}),
    ("/v1/schedules.update", lambda s: {"name": s, "cron": "0 2 * * *", "queue_name": f"q-{TEAM}"}),
]
DENIED = (403, {"code": 403, "code_text": "Forbidden", "message": "access denied"})


async def test_a_caller_refused_in_a_namespace_learns_nothing_of_its_names(admin: Caller) -> None:
    """A queue or schedule of another namespace and one that exists nowhere get the same 403: before,
    the one that did not exist got 400 "does not exist", which told a tenant which names another
    namespace uses. Only a caller who may see every namespace (here the admin) learns that one does
    not exist."""
    owner = await admin.member("owner", TEAM, "NamespaceOwner")
    await admin.ok(
        "/v1/schedules.create", {"name": "theirs", "cron": "0 2 * * *", "queue_name": f"q-{OTHER}"}
    )
    await owner.ok("/v1/schedules.create", {"name": "mine", "cron": "0 2 * * *", "queue_name": f"q-{TEAM}"})
    for routes, foreign in ((QUEUE_ROUTES, f"q-{OTHER}"), (SCHEDULE_ROUTES, "theirs")):
        for path, body in routes:
            assert await owner.call(path, body(foreign)) == DENIED, (path, foreign)
            assert await owner.call(path, body("nowhere")) == DENIED, (path, "nowhere")
    await admin.fails(
        "/v1/queues.info",
        {"queue_name": "nowhere"},
        400,
        "queue does not exist; no such queue named 'nowhere'",
    )
    await admin.fails(
        "/v1/schedules.info",
        {"name": "nowhere"},
        400,
        "schedule does not exist; no such schedule named 'nowhere'",
    )
    # What the owner may see still answers as before.
    assert (await owner.call("/v1/queue.stats", {"queue_name": f"q-{TEAM}"}))[0] == 200
    assert (await owner.call("/v1/schedules.info", {"name": "mine"}))[0] == 200
