"""A ``Durable`` app's claims that come with its leases (docs/adr/0071), in the worker: how a claim is
named, and when one held a while is run on, renewed or claimed afresh."""

from __future__ import annotations

import asyncio
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
from tests.conftest import eventually


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


async def test_a_claim_is_fresh_only_by_both_clocks() -> None:
    """A claim that came a moment ago, with most of its time left by the server's deadline, is run on at
    once. One the server made long ago (a worker paused while its leases claimed reads their replies
    when it wakes: they look new) is renewed first, and so is one held a while by this process's clock
    (an item waiting for a slot), whatever the wall clock says."""
    timeout = "30s"
    fresh = Appends()
    soon = datetime.now(UTC) + timedelta(seconds=29)
    assert await _fresh(fresh, claimed(soon), 0.5, timeout) is True  # type: ignore[arg-type]
    made_while_paused = Appends()
    past = datetime.now(UTC) - timedelta(seconds=1)
    assert await _fresh(made_while_paused, claimed(past), 0.0, timeout) is True  # type: ignore[arg-type]
    held = Appends()
    far = datetime.now(UTC) + timedelta(hours=1)  # a wall clock far behind the server's
    assert await _fresh(held, claimed(far), 10.0, timeout) is True  # type: ignore[arg-type]
    assert [len(c.sent) for c in (fresh, made_while_paused, held)] == [0, 1, 1]  # renewed first


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


async def test_leases_in_flight_together_ask_for_no_more_claims_than_slots_free() -> None:
    """A worker leases a queue with several loops at once, each seeing the same free slots: the claims
    they ask for together stay within them (a claim past the slots would wait, and might run out and
    count a worker lost)."""
    asked: list[int] = []
    answer = asyncio.Event()

    class Leases:
        async def lease_workflows(self, *_: object, claims: int, **__: object) -> m.WorkflowsLeaseResponse:
            asked.append(claims)
            await answer.wait()
            return m.WorkflowsLeaseResponse(queue_name="q")

    claims = Claims("30s", "")
    loops = [asyncio.ensure_future(claims.lease(Leases(), "q", 4, f"c{n}", "1s", 3)) for n in range(3)]  # type: ignore[arg-type]

    async def all_asked() -> bool:
        return len(asked) == 3

    await eventually(all_asked)
    assert asked == [3, 0, 0]
    answer.set()
    await asyncio.gather(*loops)
    await claims.lease(Leases(), "q", 4, "c", "1s", 3)  # type: ignore[arg-type]
    assert asked[-1] == 3  # the ones in flight are done: free slots are asked for again
