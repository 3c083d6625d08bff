"""Signed forwards (querator.auth.ClusterAuth), checked without a server: docs/security.md, "Between
nodes"."""

from __future__ import annotations

import pytest

from querator.auth import FORWARDED_HEADER, SIGNATURE_HEADER, ClusterAuth
from querator.clock import FakeClock
from querator.errors import Unauthorized

SECRET = b"s" * 40
PATH, BODY = "/v1/queues.list", b"{}"
STARTED_US = 1_700_000_000_000_000


def forward(clock: FakeClock) -> dict[str, str]:
    """The headers of a forward node-1 signs for node-0 at ``clock``'s time."""
    signature, _ = ClusterAuth(SECRET, "node-1", clock).sign("node-0", "POST", PATH, BODY)
    return {FORWARDED_HEADER: "node-1", SIGNATURE_HEADER: signature}


def test_a_forward_signed_before_the_owner_started_is_refused() -> None:
    """The nonces a restarted owner saw went with its previous process: a forward recorded then, within
    the 30 s of clock skew the time check allows, would be served a second time."""
    earlier = FakeClock(STARTED_US - 5_000_000)
    recorded = forward(earlier)
    owner = ClusterAuth(SECRET, "node-0", FakeClock(STARTED_US))
    with pytest.raises(Unauthorized) as refused:
        owner.check("POST", PATH, recorded)
    assert refused.value.message == "forwarded request is invalid; it was signed before this node started"


def test_a_forward_signed_once_the_owner_started_is_accepted() -> None:
    owner = ClusterAuth(SECRET, "node-0", FakeClock(STARTED_US))
    for signed_at_us in (STARTED_US, STARTED_US + 1_000):
        assert owner.check("POST", PATH, forward(FakeClock(signed_at_us))).by == "node-1"
