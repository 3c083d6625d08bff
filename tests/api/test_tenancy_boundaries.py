"""What one namespace's callers can reach of another's with tenancy on (docs/tenancy.md, "Boundaries"):
dead queues stay in their queue's namespace, and a caller refused in a namespace learns nothing of what
is in it."""

from __future__ import annotations

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
