"""Workflow ids per namespace with tenancy on (docs/durable.md, "Namespaces", docs/adr/0031): two tenants,
the attacks an outside probe made when ids were global, and the same id in two namespaces."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from querator.clock import FakeClock
from tests.api.tenancy import BOOTSTRAP_KEY, Caller, tenant_server
from tests.conftest import ServerFactory

ALPHA, BETA = "alpha", "beta"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def start_body(namespace: str, workflow_id: str, **fields: Any) -> dict[str, Any]:
    return {"workflow_id": workflow_id, "name": "flow", "queue_name": f"q-{namespace}", **fields}


@pytest.fixture
async def admin(start_server: ServerFactory, clock: FakeClock) -> Caller:
    admin = Caller(await tenant_server(start_server, clock), BOOTSTRAP_KEY)
    for namespace in (ALPHA, BETA):
        await admin.namespace(namespace)
        await admin.create_queue(f"q-{namespace}", namespace=namespace)
    return admin


@pytest.fixture
async def alice(admin: Caller) -> Caller:
    return await admin.member("alice", ALPHA, "NamespaceOwner")


@pytest.fixture
async def bob(admin: Caller) -> Caller:
    return await admin.member("bob", BETA, "NamespaceOwner")


async def activations(caller: Caller, namespace: str) -> list[str]:
    """The references of the activations waiting in a namespace's queue."""
    body = {"queue_name": f"q-{namespace}", "partition": 0}
    return [i["reference"] for i in (await caller.ok("/v1/storage/items.list", body)).get("items", [])]


async def test_a_foreign_parent_id_records_nothing_in_the_parent(alice: Caller, bob: Caller) -> None:
    """A child names a parent of its own namespace, at the id the parent gives it. Before, another
    tenant started a 'child' of any workflow and, by completing it, wrote a forged result into it."""
    await alice.ok("/v1/workflows.start", start_body(ALPHA, "order"))
    claimed = await alice.ok("/v1/workflows.claim", {"workflow_id": "order", "namespace": ALPHA})
    pending = {"seq": 1, "kind": "child", "name": "flow", "state": "pending"}
    body = {"workflow_id": "order", "namespace": ALPHA, "fence": claimed["workflow"]["fence"]}
    await alice.ok("/v1/workflows.append", {**body, "entries": [pending], "then": "suspend"})
    forged = start_body(BETA, "order/1", parent_id="order", parent_seq=1)
    await bob.fails("/v1/workflows.start", forged, 400, "workflow does not exist; no parent workflow 'order'")
    await bob.fails(
        "/v1/workflows.start",
        {**forged, "workflow_id": "anything"},
        400,
        "parent id is invalid; a child's workflow id is '<parent id>/<parent seq>', 'order/1', not"
        " 'anything'",
    )
    info = await alice.ok("/v1/workflows.info", {"workflow_id": "order", "namespace": ALPHA})
    assert [(e["seq"], e["state"]) for e in info["entries"]] == [(1, "pending")]


async def test_another_tenant_cannot_take_a_childs_id(alice: Caller, bob: Caller) -> None:
    """A child's id is in its parent's namespace: another tenant starting '<parent>/<seq>' first starts
    a workflow of its own. Before, the parent's child start found that one and took it for its child."""
    await alice.ok("/v1/workflows.start", start_body(ALPHA, "order"))
    squatter = await bob.ok("/v1/workflows.start", start_body(BETA, "order/1", input=b64(b"[666]")))
    assert squatter["created"] is True
    child = start_body(ALPHA, "order/1", parent_id="order", parent_seq=1, input=b64(b"[1]"))
    started = await alice.ok("/v1/workflows.start", child)
    assert started["created"] is True
    assert (started["workflow"]["namespace"], started["workflow"]["parent_id"]) == (ALPHA, "order")
    assert base64.b64decode(started["workflow"]["input"]) == b"[1]"


async def test_starting_an_existing_id_reveals_nothing_of_another_namespace(
    admin: Caller, alice: Caller, bob: Caller
) -> None:
    """Start is idempotent by id within a namespace only, and returns an existing run only to a caller
    who may read it (queue.stats). Before, any tenant read any workflow's input and result by starting
    its id."""
    secret = start_body(ALPHA, "payroll", input=b64(b'["secret"]'))
    await alice.ok("/v1/workflows.start", secret)
    mine = await bob.ok("/v1/workflows.start", start_body(BETA, "payroll", input=b64(b"[0]")))
    assert mine["created"] is True and base64.b64decode(mine["workflow"]["input"]) == b"[0]"
    for namespace in (ALPHA, ""):  # alpha's, and the default _system, are not bob's to read
        await bob.fails(
            "/v1/workflows.info", {"workflow_id": "payroll", "namespace": namespace}, 403, "access denied"
        )
    producer = await admin.user("alpha-producer")
    await admin.role(ALPHA, "producer", ["queue.produce"])
    await admin.bind(ALPHA, "producer", producer)
    blind = Caller(alice.api, await admin.new_key(producer))
    await blind.fails("/v1/workflows.start", secret, 403, "access denied")  # exists: a read
    assert (await blind.ok("/v1/workflows.start", start_body(ALPHA, "new")))["created"] is True


async def test_every_workflow_route_checks_the_namespace_it_names(alice: Caller, bob: Caller) -> None:
    """Every route that names a workflow authorizes the caller in the namespace the request names,
    before it reads anything. Before, most looked the id up across every namespace."""
    await alice.ok("/v1/workflows.start", start_body(ALPHA, "wf"))
    wf = {"workflow_id": "wf", "namespace": ALPHA}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("/v1/workflows.info", wf),
        ("/v1/workflows.list", {"namespace": ALPHA}),
        ("/v1/workflows.signal", {**wf, "name": "go"}),
        ("/v1/workflows.cancel", wf),
        ("/v1/workflows.result", {**wf, "request_timeout": "1s"}),
        ("/v1/workflows.claim", wf),
        ("/v1/workflows.append", {**wf, "fence": 1}),
        (
            "/v1/workflows.append",
            {**wf, "entries": [{"seq": 1, "kind": "step", "name": "s", "state": "done"}]},
        ),
    ]
    for path, body in calls:
        await bob.fails(path, body, 403, "access denied")
    info = await alice.ok("/v1/workflows.info", wf)  # untouched: unclaimed, unsignalled, not cancelled
    assert [info.get(k) for k in ("fence", "signals", "entries", "cancel_requested")] == [None] * 4


async def test_the_same_id_in_two_namespaces_is_two_workflows(alice: Caller, bob: Caller) -> None:
    for caller, namespace in ((alice, ALPHA), (bob, BETA)):
        started = await caller.ok("/v1/workflows.start", start_body(namespace, "wf", input=b64(b"[1]")))
        assert started["created"] is True and started["workflow"]["namespace"] == namespace
        assert await activations(caller, namespace) == ["wf"]
    for caller, namespace in ((alice, ALPHA), (bob, BETA)):
        wf = {"workflow_id": "wf", "namespace": namespace}
        claimed = await caller.ok("/v1/workflows.claim", wf)
        assert (claimed["outcome"], claimed["workflow"]["fence"]) == ("claimed", 1)
        end = {**wf, "fence": 1, "then": "complete", "result": b64(namespace.encode())}
        await caller.ok("/v1/workflows.append", end)
    for caller, namespace in ((alice, ALPHA), (bob, BETA)):
        wf = {"workflow_id": "wf", "namespace": namespace, "request_timeout": "1s"}
        result = await caller.ok("/v1/workflows.result", wf)
        assert (result["status"], base64.b64decode(result["result"])) == ("completed", namespace.encode())
        listed = await caller.ok("/v1/workflows.list", {"namespace": namespace})
        assert [(w["workflow_id"], w["queue_name"]) for w in listed["workflows"]] == [
            ("wf", f"q-{namespace}")
        ]


async def test_a_claiming_lease_claims_in_its_queues_namespace_for_its_caller(
    alice: Caller, bob: Caller
) -> None:
    """workflows.lease (docs/adr/0071) needs queue.lease in the queue's namespace, and claims the
    workflows of that namespace: another tenant is refused before anything is leased or claimed."""
    for caller, namespace in ((alice, ALPHA), (bob, BETA)):
        await caller.ok("/v1/workflows.start", start_body(namespace, "wf"))
    lease = {
        "queue_name": f"q-{ALPHA}",
        "batch_size": 5,
        "client_id": "w",
        "request_timeout": "1s",
        "claims": 5,
    }
    await bob.fails("/v1/workflows.lease", lease, 403, "access denied")
    assert await activations(alice, ALPHA) == ["wf"]  # nothing leased
    [claimed] = (await alice.ok("/v1/workflows.lease", lease))["claims"]
    assert (claimed["outcome"], claimed["workflow"]["namespace"]) == ("claimed", ALPHA)
    beta = await bob.ok("/v1/workflows.claim", {"workflow_id": "wf", "namespace": BETA})
    assert beta["outcome"] == "claimed"  # the same id in the other namespace: not claimed by alice's lease
