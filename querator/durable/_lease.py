"""A ``Durable`` app's worker leases its task queue with ``workflows.lease``: the claims of the
workflows of the activations it leases come in the lease's reply, and an activation starts its turn
without a claim request of its own (docs/adr/0071)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket

from querator.client import AsyncClient
from querator.clock import Clock, SystemClock
from querator.errors import NotImplementedRoute, QueratorError
from querator.wire import messages as m
from querator.wire.workflows import CLAIMED, SUSPEND
from querator.worker import Lease

log = logging.getLogger("querator.durable")

_STARTED = secrets.token_hex(4)
"""Drawn once per process start: a process restarted with its host name and process id (a container's
PID 1 after a restart) is another claimant."""


class Claims:
    """The ``Leaser`` of a ``Durable`` app's queue (``Worker.leasers``): it asks for the claims of as many
    activations as the worker could start at once (fewer the claims it holds for items not started
    yet, and those its other leases in flight asked for), and keeps each claim until its item's run
    takes it (``take``) or the item goes back unrun."""

    def __init__(self, claim_timeout: str, version: str, clock: Clock | None = None) -> None:
        self._claim_timeout = claim_timeout
        self._version = version
        self._clock = clock or SystemClock()
        self._held: dict[tuple[str, str], tuple[m.WorkflowsLeaseClaim, float]] = {}
        """The claims got with leases, by the queue and id of their items, with when they came
        (``Clock.monotonic``)."""
        self._refused = False
        """The server has no ``workflows.lease`` (older than the worker): leases and claims apart."""
        self._asked = 0
        """Claims asked for by the leases in flight: a worker leases a queue with several loops at once,
        each seeing the same free slots, and claims past them would wait, and might run out."""

    async def lease(
        self,
        client: AsyncClient,
        queue: str,
        batch_size: int,
        client_id: str,
        request_timeout: str,
        startable: int,
    ) -> m.QueueLeaseResponse:
        if not self._refused:
            claims = max(0, startable - len(self._held) - self._asked)
            self._asked += claims
            try:
                reply = await client.lease_workflows(
                    queue,
                    batch_size,
                    client_id,
                    request_timeout,
                    claims=claims,
                    claim_timeout=self._claim_timeout,
                    app_version=self._version,
                    claimant=claimant(),
                )
            except NotImplementedRoute:
                log.info("the server has no workflows.lease: each activation is claimed on its own")
                self._refused = True
            else:
                now_s = self._clock.monotonic()
                for claim in reply.claims:
                    self._held[(queue, claim.id)] = (claim, now_s)
                return m.QueueLeaseResponse(
                    queue_name=reply.queue_name, partition=reply.partition, items=reply.items
                )
            finally:
                self._asked -= claims
        return await client.lease(queue, batch_size, client_id, request_timeout)

    def take(self, lease: Lease | None, workflow_id: str) -> tuple[m.WorkflowsClaimResponse, float] | None:
        """The claim that came with the lease of the running activation of ``workflow_id``, and the
        seconds since it came (by this process's clock, not the server's); None when none did (the
        worker claims it itself)."""
        if lease is None:
            return None
        held = self._held.pop((lease.queue, lease.item.id), None)
        if held is None:
            return None
        claim, received_s = held
        if claim.workflow is None or claim.workflow.workflow_id != workflow_id:
            return None
        reply = m.WorkflowsClaimResponse(outcome=claim.outcome, workflow=claim.workflow)
        return reply, self._clock.monotonic() - received_s

    async def given_back(self, client: AsyncClient, queue: str, item: m.QueueLeaseItem) -> None:
        """An item held ahead goes back unrun at a warm stop: its claim is let go first, so that the
        worker that leases it next claims it at once, and no lost worker is counted (a claim that runs
        out counts one)."""
        held = self._held.pop((queue, item.id), None)
        if held is not None and held[0].outcome == CLAIMED and held[0].workflow is not None:
            await release(client, held[0].workflow)


def claimant() -> str:
    """This worker process, as its leases' claims name it: host, process id and a token drawn when the
    process started (a process forked from another, with the app made before the fork, is another
    claimant by its id; one restarted with the same host name and id, by its token)."""
    return f"{socket.gethostname()[:200]}-{os.getpid()}-{_STARTED}"  # within the server's 256 characters


async def release(client: AsyncClient, wf: m.WorkflowInfo) -> None:
    """Lets go of the claim ``wf`` holds, before any turn under it, with a suspend: one refused because
    something arrived (``resume``: the claim holds) is sent again, which then lets go; the activation
    that goes back replays what arrived. Best effort: a claim not let go runs out."""
    suspend = m.WorkflowsAppendRequest(
        workflow_id=wf.workflow_id, fence=wf.fence, then=SUSPEND, namespace=wf.namespace
    )
    with contextlib.suppress(QueratorError):
        if (await client.append_workflow(suspend)).resume:
            await client.append_workflow(suspend)
