"""The examples of docs/examples/ run as a reader runs them, against a fresh ``querator serve`` node."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT, ServerProcess, Servers, server_env

pytestmark = pytest.mark.integration

DEADLINE = 60.0


def test_the_durable_checkout_completes_one_order_and_compensates_the_other(servers: Servers) -> None:
    server: ServerProcess = servers.start("--storage", "sqlite")
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "durable_checkout.py")],
        env=server_env({"QUERATOR_ENDPOINT": server.url}),
        capture_output=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert sorted(lines[:3]) == ["o-1: charged 500 cents", "o-2: charged 700 cents", "receipt-o-2: refunded"]
    parts = ["o-1-part-0", "o-1-part-1", "o-1-part-2"]
    assert lines[3:] == [
        str({"receipt": "receipt-o-1", "parts": parts, "shipped": "o-1-parcel"}),
        "checkout-o-2 failed: ValueError: o-2 was not approved",
    ]
