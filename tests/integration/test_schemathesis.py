"""schemathesis against a live ``querator serve``, driven by the server's own ``GET /openapi.yaml``.

For every operation of the document, schemathesis sends the document's examples, boundary values of
every field and wrong methods (coverage phase: valid and invalid requests) and ``MAX_EXAMPLES``
generated requests (fuzzing phase), JSON and binary protobuf bodies, and checks every reply: no 5xx, a
documented status code and content type, a body that matches the documented schema (a binary protobuf
reply too, decoded: ``protobuf_reply_conformance``). A hang fails too: each request may take at most
``REQUEST_TIMEOUT`` seconds. The server runs on sqlite with ``QUEUES`` holding items, some of them
leased; ``schemathesis_hooks.py`` makes part of the generated requests name those queues and their
leased ids, asks for protobuf replies, and bounds lease long-polls and partition counts.

The CLI runs in a process of its own (schemathesis's pytest integration, ``from_fixture``, fails under
pytest 9.2); on failure its report, with a ``curl`` line to reproduce each failing request and the
seed, is the assertion message.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from querator.client import Client
from querator.wire import messages as m

from .conftest import Servers, server_env

pytestmark = pytest.mark.integration

HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
MAX_EXAMPLES = 20
"""Generated requests per operation in the fuzzing phase (the coverage phase adds its own)."""
REQUEST_TIMEOUT = 20
"""Seconds schemathesis waits for one reply before it reports the request as failed."""
RUN_DEADLINE = 90
"""Seconds the whole schemathesis run may take (pytest's own timeout, 120, covers the server start too)."""
CONFIG = """
[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_schema_conformance.enabled = true
protobuf_reply_conformance.enabled = true

[phases.coverage]
# Every method but POST on every path: POST to a GET-only path is a 501 (docs/semantics.md §1.1, as the
# reference).
unexpected-methods = ["get", "put", "delete", "options", "patch", "trace"]
"""
QUEUES: dict[str, dict[str, Any]] = {
    "jobs-dead": {"lease_timeout": "1m", "expire_timeout": "24h", "requested_partitions": 1},
    "jobs": {
        "lease_timeout": "1m",
        "expire_timeout": "24h",
        "requested_partitions": 2,
        "dead_queue": "jobs-dead",
    },
    "other": {"lease_timeout": "10s", "expire_timeout": "1h", "requested_partitions": 1, "max_attempts": 2},
}
"""Made before the run, in this order (``jobs`` is also the document's example queue name)."""


def prepare(url: str) -> None:
    """``QUEUES`` with 20 items each, five of ``jobs`` leased."""
    with Client(url) as client:
        for name, settings in QUEUES.items():
            client.create_queue(m.QueueInfo(queue_name=name, **settings))
        for name in QUEUES:
            client.produce(name, [f"{name}-{n}" for n in range(20)])
        assert client.lease("jobs", 5, "prepare", "5s").items


def test_the_live_server_keeps_its_openapi_contract(servers: Servers, tmp_path: Path) -> None:
    server = servers.start("--storage", "sqlite", "--data-dir", str(tmp_path / "data"))
    prepare(server.url)
    seed = random.getrandbits(32)
    env = server_env(
        {
            "SCHEMATHESIS_HOOKS": str(HOOKS),
            "SCHEMATHESIS_QUERATOR_QUEUES": msgspec.json.encode(QUEUES).decode(),
            "COLUMNS": "160",
        }
    )
    # Only what the test sets: its own config file (no other is looked for), no example database.
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color",
        "run", server.url + "/openapi.yaml",
        "--url", server.url,
        "--phases", "examples,coverage,fuzzing",
        "--mode", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(seed),
        "--workers", "1",
        "--request-timeout", str(REQUEST_TIMEOUT),
        "--generation-database", "none",
        "--suppress-health-check", "all",  # Hypothesis's "too slow" is about the machine, not the server
    ]  # fmt: skip
    try:
        run = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_DEADLINE, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"schemathesis (seed {seed}) ran over {RUN_DEADLINE}s:\n{e.stdout!s}") from None
    assert server.running(), server.describe()
    report = f"seed {seed}, exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, report
