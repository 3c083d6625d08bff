"""The README's "Try it" steps, as a newcomer follows them: its curl calls, then its Python script,
against a real ``querator serve`` on the embedded default (sqlite)."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

import msgspec
import pytest

from .conftest import ROOT, Servers, server_env

pytestmark = pytest.mark.integration

README = (ROOT / "README.md").read_text()
README_ADDRESS = "localhost:2319"


def curl_calls() -> list[tuple[str, bytes]]:
    """(path, body) of each ``curl -s localhost:2319/<path> ... -d '<body>'`` of "Try it"."""
    section = README.split("## Try it", 1)[1].split("\n## ", 1)[0]
    calls = re.findall(r"curl -s localhost:2319(/\S+) .*?\\\n\s+-d '([^']*)'", section)
    return [(path, body.encode()) for path, body in calls]


def python_script() -> str:
    (script,) = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    return str(script)


def test_the_readme_steps_work_as_written(servers: Servers) -> None:
    server = servers.start()  # the embedded default: sqlite in the working directory
    calls = curl_calls()
    assert [path for path, _ in calls] == [
        "/v1/queues.create", "/v1/queue.produce", "/v1/queue.lease", "/v1/queue.complete",
    ]  # fmt: skip
    leased: dict[str, object] = {}
    for path, body in calls[:3]:
        request = urllib.request.Request(
            server.url + path, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 200, path
            leased = msgspec.json.decode(reply.read())
    # The complete, filled in as the README says: the partition (absent means 0) and the ids.
    path, body = calls[3]
    complete = msgspec.json.decode(body)
    complete["partition"] = leased.get("partition", 0)
    complete["ids"] = [item["id"] for item in leased["items"]]
    request = urllib.request.Request(
        server.url + path, data=msgspec.json.encode(complete), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200

    script = python_script().replace(f"http://{README_ADDRESS}", server.url)
    run = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, "hello\n", "")
