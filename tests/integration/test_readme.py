"""The README's "Try it" steps, as a newcomer follows them: its curl calls, then its Python script,
against a real ``querator serve`` on the embedded default (sqlite)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import msgspec
import pytest

from .conftest import ROOT, Servers, server_env, wait_until

pytestmark = pytest.mark.integration

README = (ROOT / "README.md").read_text()
README_ADDRESS = "localhost:2319"


def curl_calls() -> list[tuple[str, bytes]]:
    """(path, body) of each ``curl -s localhost:2319/<path> ... -d '<body>'`` of "Try it"."""
    section = README.split("## Try it", 1)[1].split("\n## ", 1)[0]
    calls = re.findall(r"curl -s localhost:2319(/\S+) .*?\\\n\s+-d '([^']*)'", section)
    return [(path, body.encode()) for path, body in calls]


def python_blocks() -> list[str]:
    """The README's Python blocks: the client script of "Try it", the worker of "Background tasks", the
    workflow of "Durable workflows"."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    assert len(blocks) == 3
    return [str(block) for block in blocks]


def python_script() -> str:
    return python_blocks()[0]


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


def test_the_readme_worker_runs_as_written(servers: Servers, tmp_path: Path) -> None:
    """The "Background tasks" module, run with the command the README gives, runs an enqueued call."""
    server = servers.start()
    module = python_blocks()[1].replace(f"http://{README_ADDRESS}", server.url)
    (tmp_path / "tasks.py").write_text(module)
    command = re.search(r"Run it with `(querator worker [^`]*)`", README)
    enqueue = re.search(r"enqueue from any code that imports it: `await ([^`]*)`", README)
    blocking = re.search(r"where no event loop runs [^:]*: `([^`]*)`", README)
    assert command is not None and enqueue is not None and blocking is not None
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-m", "querator.cli", *command[1].split()[1:]],
            cwd=tmp_path,
            env=server_env(),
            stdout=stdout,
            stderr=stderr,
        )
    try:
        wait_until(lambda: "worker started" in err.read_text() or worker.poll() is not None, 30, "worker up")
        assert worker.poll() is None, err.read_text()
        for producer in (
            f"import asyncio, tasks\nasyncio.run(tasks.{enqueue[1]})\n",
            f"import tasks\ntasks.{blocking[1]}\n",  # a script that runs no event loop
        ):
            run = subprocess.run(
                [sys.executable, "-c", producer],
                check=False,
                cwd=tmp_path,
                env=server_env(),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert (run.returncode, run.stderr) == (0, ""), run.stderr
        wait_until(lambda: err.read_text().count("outcome=completed") == 2, 30, "both tasks ran")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, err.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
    assert sorted(out.read_text().splitlines()) == [
        "sending 'hi' to a@example.com",
        "sending 'hi' to b@example.com",
    ]


def test_the_readme_workflow_runs_as_written(servers: Servers, tmp_path: Path) -> None:
    """The "Durable workflows" module, run by the command the README gives, completes a started workflow."""
    server = servers.start()
    (tmp_path / "shop.py").write_text(python_blocks()[2].replace(f"http://{README_ADDRESS}", server.url))
    command = re.search(r"Run workers with `(querator worker [^`]*)`", README)
    start = re.search(r"start a workflow from any code that imports it:\s+`await ([^`]*)`", README)
    assert command is not None and start is not None
    err = tmp_path / "worker.err"
    with err.open("wb") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-m", "querator.cli", *command[1].split()[1:]],
            cwd=tmp_path,
            env=server_env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until(lambda: "worker started" in err.read_text() or worker.poll() is not None, 30, "worker up")
        assert worker.poll() is None, err.read_text()
        caller = "\n".join(
            [
                "import asyncio",
                "from shop import *",
                "async def main():",
                f"    print(await {start[1]})",
                "asyncio.run(main())",
            ]
        )
        run = subprocess.run(
            [sys.executable, "-c", caller],
            check=False,
            cwd=tmp_path,
            env=server_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (run.returncode, run.stdout, run.stderr) == (0, "receipt for 500 cents\n", "")
    finally:
        worker.kill()
        worker.wait(30)
