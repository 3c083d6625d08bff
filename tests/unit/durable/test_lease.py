"""A ``Durable`` app's claims that come with its leases (docs/adr/0071), in the worker: how a claim is
named, and when one held a while is run on, renewed or claimed afresh."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest

from querator.clock import FakeClock
from querator.durable._activation import _fresh
from querator.durable._lease import Claims, claimant
from querator.errors import Conflict, StorageError
from querator.wire import messages as m
from querator.wire.workflows import CLAIMED
from querator.worker import Lease, RetryLater


class Appends:
    """A client whose ``append_workflow`` records its requests and raises ``error`` if given."""

    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[m.WorkflowsAppendRequest] = []
        self.error = error

    async def append_workflow(self, req: m.WorkflowsAppendRequest) -> m.WorkflowsAppendResponse:
        self.sent.append(req)
        if self.error is not None:
            raise self.error
        return m.WorkflowsAppendResponse()


def claimed(deadline: datetime) -> m.WorkflowsClaimResponse:
    return m.WorkflowsClaimResponse(
        outcome=CLAIMED, workflow=m.WorkflowInfo(workflow_id="wf", fence=2, claim_deadline=deadline)
    )


def test_a_claimant_names_the_process_start_not_only_its_host_and_id() -> None:
    """A container restarted keeps its host name and runs as PID 1 again: a claimant of host and id
    alone would be the one whose lapsed claims already counted, and a step that kills its worker would
    never be counted again."""
    name = claimant()
    host_and_pid, _, token = name.rpartition("-")
    assert host_and_pid.endswith(f"-{os.getpid()}") and len(token) == 8
    assert claimant() == name


async def test_a_fresh_claim_is_told_by_this_process_s_clock_not_the_server_s_deadline() -> None:
    """A worker whose wall clock runs ahead sees the server's deadline as past: the claim that came a
    moment ago is still run on at once, with no renewal."""
    client = Appends()
    past = datetime.now(UTC) - timedelta(hours=1)
    assert await _fresh(client, claimed(past), 0.5, "30s") is True  # type: ignore[arg-type]
    assert client.sent == []


async def test_a_claim_held_a_third_of_its_timeout_is_renewed_first() -> None:
    client = Appends()
    future = datetime.now(UTC) + timedelta(hours=1)  # a clock far behind: still renewed
    assert await _fresh(client, claimed(future), 10.0, "30s") is True  # type: ignore[arg-type]
    assert [r.fence for r in client.sent] == [2]


async def test_a_renewal_refused_as_claimed_elsewhere_claims_afresh_and_others_wait() -> None:
    """Only a 409 says another worker claimed it: then the worker claims again. Any other failure leaves
    the claim's fate unknown, and the turn waits rather than replay a journal that may lack steps."""
    late = datetime.now(UTC)
    lost = Appends(Conflict("workflow claimed elsewhere; fence 2 is not 3"))
    assert await _fresh(lost, claimed(late), 20.0, "30s") is False  # type: ignore[arg-type]
    failing = Appends(StorageError("storage failed; try again"))
    with pytest.raises(RetryLater):
        await _fresh(failing, claimed(late), 20.0, "30s")  # type: ignore[arg-type]


async def test_a_held_claim_s_age_is_counted_from_its_lease_s_reply() -> None:
    class Leases:
        async def lease_workflows(self, *_: object, **__: object) -> m.WorkflowsLeaseResponse:
            item = m.QueueLeaseItem(id="i-1", reference="wf")
            claim = m.WorkflowsLeaseClaim(
                id="i-1", outcome=CLAIMED, workflow=m.WorkflowInfo(workflow_id="wf")
            )
            return m.WorkflowsLeaseResponse(queue_name="q", items=[item], claims=[claim])

    clock = FakeClock()
    claims = Claims("30s", "", clock)
    reply = await claims.lease(Leases(), "q", 1, "c", "1s", 1)  # type: ignore[arg-type]
    clock.advance(12.0)
    held = claims.take(Lease("q", 0, reply.items[0]), "wf")
    assert held is not None and held[1] == 12.0
