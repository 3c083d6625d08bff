"""``workflows.lease`` over real HTTP (docs/adr/0071): a lease of a durable app's task queue that claims
the workflows of the activations it leases, for the caller, in the same reply."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from querator.clock import FakeClock
from querator.errors import StorageError
from querator.service import _workflows
from querator.service._workflows import activation_payload, is_activation
from querator.storage.workflows import SYSTEM_NAMESPACE, stored_id
from querator.wire import messages as m
from tests.api.test_workflows import ACTIVATION, activations, append, b64, claim, start, step
from tests.conftest import Api, eventually


@pytest.fixture
async def durable(api: Api) -> Api:
    await api.create("durable")
    return api


async def lease(api: Api, batch_size: int = 10, claims: int = 10, **kw: Any) -> dict[str, Any]:
    body = {
        "queue_name": "durable",
        "batch_size": batch_size,
        "client_id": "worker-1",
        "request_timeout": "1s",
        "claims": claims,
        "claim_timeout": "30s",
        **kw,
    }
    return await api.post("/v1/workflows.lease", body)


async def test_a_lease_claims_the_workflows_of_its_activations(durable: Api) -> None:
    await start(durable)
    await activations(durable)  # its first turn, played by hand: a step, then a wait for a signal
    await append(durable, (await claim(durable))["workflow"]["fence"], entries=[step(1)], then="suspend")
    await durable.post("/v1/workflows.signal", {"workflow_id": "wf-1", "name": "go", "signal_id": "s"})
    reply = await lease(durable)
    [item] = reply["items"]
    [claimed] = reply["claims"]
    assert (item["kind"], item["reference"]) == (ACTIVATION, "wf-1")
    assert (claimed["id"], claimed["outcome"]) == (item["id"], "claimed")
    # As a claim's reply: the next fence, and the whole journal to replay.
    assert claimed["workflow"]["fence"] == 2
    assert [e["seq"] for e in claimed["workflow"]["entries"]] == [1]
    assert (await claim(durable))["outcome"] == "busy"  # the lease's claim holds
    await append(durable, 2, then="complete")
    info = await durable.post("/v1/workflows.info", {"workflow_id": "wf-1"})
    assert info["status"] == "completed"


async def test_a_lease_claims_as_many_as_it_is_asked_and_only_activations(durable: Api) -> None:
    for n in range(3):
        await start(durable, f"wf-{n}")
    # Another producer's items: of another kind, and of the activations' kind with another payload.
    other = {"kind": "x", "reference": "wf-0", "bytes": "e30="}
    forged = {"kind": ACTIVATION, "reference": "wf-1", "bytes": "e30="}
    body = {"queue_name": "durable", "request_timeout": "5s", "items": [other, forged]}
    await durable.post("/v1/queue.produce", body)
    reply = await lease(durable, claims=2)
    assert len(reply["items"]) == 5
    activations = [i["id"] for i in reply["items"] if i.get("bytes") != "e30="]
    assert [c["id"] for c in reply["claims"]] == activations[:2]
    assert (await claim(durable, "wf-2"))["outcome"] == "claimed"  # not claimed by the lease


async def test_a_lease_claims_only_among_the_items_the_worker_starts_first(durable: Api) -> None:
    """A claim is made only for an activation among the first ``claims`` items, which the worker starts
    at once: one behind another item could wait for a slot past its claim timeout and count a worker
    lost."""
    other = {"kind": "x", "reference": "r", "bytes": "e30="}
    await durable.post(
        "/v1/queue.produce", {"queue_name": "durable", "request_timeout": "5s", "items": [other]}
    )
    await start(durable)
    reply = await lease(durable, claims=1)
    assert [i["kind"] for i in reply["items"]] == ["x", ACTIVATION]
    assert reply.get("claims", []) == []
    assert (await claim(durable))["outcome"] == "claimed"


async def test_a_claim_whose_journal_cannot_be_read_is_let_go(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the claim was made (its journal's read) leaves the item to its worker without a
    claim, and the claim let go: not held until it runs out."""
    await start(durable)
    workflows = durable.service.workflows

    async def unreadable(key: str, claimed: Any) -> m.WorkflowsClaimResponse:
        raise StorageError("storage failed; rows unreadable")

    monkeypatch.setattr(workflows, "_claim_reply", unreadable)
    reply = await lease(durable)
    assert len(reply["items"]) == 1 and reply.get("claims", []) == []
    monkeypatch.undo()
    assert (await claim(durable))["outcome"] == "claimed"


def test_a_reference_that_is_no_workflow_id_is_no_activation() -> None:
    """A producer's item of the activations' kind and payload whose reference holds the stored ids'
    separator would name a workflow of another namespace: a lease does not claim it."""
    reference = "beta\x1fsecret"
    item = m.QueueLeaseItem(id="i", kind=ACTIVATION, reference=reference, bytes=activation_payload(reference))
    assert not is_activation(item)
    fine = m.QueueLeaseItem(id="i", kind=ACTIVATION, reference="wf-1", bytes=activation_payload("wf-1"))
    assert is_activation(fine)


async def test_a_lease_leaves_runs_of_another_version_unclaimed(durable: Api) -> None:
    await start(durable, app_version="v1")
    [left] = (await lease(durable, app_version="v2"))["claims"]
    assert left["outcome"] == "other_version" and "fence" not in left["workflow"]
    assert (await claim(durable))["outcome"] == "claimed"


async def test_bad_leases_are_refused_before_they_wait(durable: Api) -> None:
    """Every field is checked before the lease parks (a request_timeout of 5 minutes would hold the
    test otherwise), and before the queue is looked at."""
    base = {"queue_name": "durable", "batch_size": 1, "client_id": "w", "request_timeout": "5m"}
    for body, message in [
        ({"claims": -1}, "claims is invalid; -1 cannot be negative"),
        ({"claim_timeout": "1ms"}, "claim timeout is invalid"),
        ({"app_version": " "}, "app version is invalid; cannot be empty"),
        ({"batch_size": 0}, "invalid batch size; must be greater than zero"),
        ({"client_id": ""}, "invalid client id; cannot be empty"),
        ({"queue_name": "nosuch"}, "queue does not exist"),
    ]:
        error = await durable.error("/v1/workflows.lease", {**base, **body})
        assert error.status == 400 and error.message.startswith(message), (body, error.message)


async def test_an_undelivered_lease_lets_its_claims_go_uncounted(durable: Api, clock: FakeClock) -> None:
    """A reply that never reached its worker: its items go back, and its claims are let go rather than
    left to run out (which would count a worker lost at the next claim)."""
    await start(durable)
    raw = await lease(durable)
    workflows = durable.service.workflows
    delivered = m.WorkflowsLeaseResponse(
        queue_name=raw["queue_name"],
        partition=raw.get("partition", 0),
        items=[m.QueueLeaseItem(id=i["id"]) for i in raw["items"]],
        claims=[
            m.WorkflowsLeaseClaim(
                id=c["id"],
                outcome=c["outcome"],
                workflow=m.WorkflowInfo(workflow_id="wf-1", fence=c["workflow"]["fence"]),
            )
            for c in raw["claims"]
        ],
    )
    key = stored_id(SYSTEM_NAMESPACE, "wf-1")
    claim_held_when_given_back: list[bool] = []
    give_back = workflows._release

    def given_back(items: m.QueueLeaseResponse) -> None:
        # The head as the node keeps it: a worker leasing the item at once must find it free.
        head = workflows._heads.get(key)
        claim_held_when_given_back.append(head is None or head.claim_deadline != 0)
        give_back(items)

    workflows._release = given_back  # type: ignore[method-assign]
    workflows.lease_undelivered(delivered)

    async def released() -> bool:
        stored = await durable.service.store.workflows.get_workflow(key)
        return stored is not None and stored.claim_deadline == 0 and bool(claim_held_when_given_back)

    await eventually(released)
    assert claim_held_when_given_back == [False]  # the claim let go before the item went back
    again = await lease(durable)  # the item came back, and its workflow is free
    [claimed] = again["claims"]
    assert claimed["outcome"] == "claimed" and "lapsed_claims" not in claimed["workflow"]


async def test_claims_past_the_replys_bytes_are_let_go(durable: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claims' workflows fill at most LEASE_CLAIM_BYTES of a reply: one past them is let go (not
    left to run out) and its item goes without, for its worker to claim alone."""
    monkeypatch.setattr(_workflows, "LEASE_CLAIM_BYTES", 150)
    for n in range(2):
        await start(durable, f"wf-{n}", input=b64(b"x" * 100))
    reply = await lease(durable)
    assert len(reply["items"]) == 2
    [kept] = reply["claims"]
    other = "wf-1" if kept["workflow"]["workflow_id"] == "wf-0" else "wf-0"
    alone = await claim(durable, other)
    assert alone["outcome"] == "claimed" and "lapsed_claims" not in alone["workflow"]


async def test_a_finished_runs_result_counts_in_the_replys_bytes(
    durable: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's reply for a finished run carries its result: it counts as a journal does."""
    monkeypatch.setattr(_workflows, "LEASE_CLAIM_BYTES", 150)
    await start(durable)
    await activations(durable)
    await append(
        durable, (await claim(durable))["workflow"]["fence"], then="complete", result=b64(b"r" * 200)
    )
    payload = base64.b64encode(activation_payload("wf-1")).decode()
    late = {"kind": ACTIVATION, "reference": "wf-1", "bytes": payload}  # a late activation, as after a crash
    await durable.post(
        "/v1/queue.produce", {"queue_name": "durable", "request_timeout": "5s", "items": [late]}
    )
    reply = await lease(durable)
    assert len(reply["items"]) == 1 and "claims" not in reply
