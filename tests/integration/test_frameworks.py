"""querator.contrib's examples (docs/examples/) run as a reader runs them, against a ``querator serve``
node: Django's enqueue on commit and its worker command, FastAPI's lifespan client and dependency."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from querator.client import AsyncClient

from .conftest import ROOT, Servers, free_port, server_env, wait_until

pytestmark = pytest.mark.integration

DEADLINE = 60.0
EXAMPLES = ROOT / "docs" / "examples"
UVICORN = (sys.executable, "-m", "uvicorn", "--log-level", "info")


def test_django_enqueues_on_commit_and_its_command_runs_the_worker(servers: Servers, tmp_path: Path) -> None:
    server = servers.start("--storage", "sqlite")
    db = tmp_path / "signups.sqlite3"
    env = server_env({"QUERATOR_ENDPOINT": server.url, "SIGNUPS_DB": str(db)})
    manage = [sys.executable, str(EXAMPLES / "django_signups" / "manage.py")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*manage, *args], env=env, capture_output=True, text=True, timeout=DEADLINE, check=False
        )

    assert run("migrate", "--run-syncdb").returncode == 0
    done = run("signup", "a@example.com")
    assert (done.returncode, done.stdout.strip()) == (0, "signed up a@example.com"), done.stderr
    failed = run("signup", "b@example.com", "--fail")
    assert failed.returncode != 0
    assert "the signup failed and was rolled back" in failed.stderr
    # The rolled-back signup enqueued nothing: one item waits.
    assert _waiting(server.url, "welcome") == 1

    log = tmp_path / "worker.log"
    with log.open("wb") as err:
        worker = subprocess.Popen([*manage, "querator_worker", "-c", "2"], env=env, stderr=err)
    try:
        wait_until(lambda: _signups(db) == [("a@example.com", 1)], DEADLINE, "the welcome was sent")
        wait_until(lambda: _waiting(server.url, "welcome") == 0, DEADLINE, "the item completed")
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(DEADLINE) == 0, log.read_text()


def test_django_refuses_a_misspelt_setting(tmp_path: Path) -> None:
    settings = tmp_path / "typo_settings.py"
    settings.write_text(
        'SECRET_KEY = "x"\nINSTALLED_APPS = ["querator.contrib.django"]\n'
        'QUERATOR = {"ENDPIONT": "http://localhost:2319"}\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=server_env({"DJANGO_SETTINGS_MODULE": "typo_settings", "PYTHONPATH": f"{ROOT}:{tmp_path}"}),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode != 0
    assert "QUERATOR has unknown keys ['ENDPIONT']" in done.stderr


def test_fastapi_routes_enqueue_and_read_through_the_lifespan_client(
    servers: Servers, tmp_path: Path
) -> None:
    server = servers.start("--storage", "sqlite")
    port = free_port()
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as err:
        app = subprocess.Popen(
            [*UVICORN, "fastapi_signups:app", "--app-dir", str(EXAMPLES), "--port", str(port)],
            env=server_env({"QUERATOR_ENDPOINT": server.url}),
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(f"{url}/backlog") is not None, DEADLINE, "the app is up")
        assert _get(f"{url}/backlog") == {"waiting": 0}
        request = urllib.request.Request(f"{url}/signups?email=a%40example.com", method="POST")
        with urllib.request.urlopen(request, timeout=DEADLINE) as reply:
            job_id = json.load(reply)["job_id"]
        assert _get(f"{url}/backlog") == {"waiting": 1}
        assert asyncio.run(_leased_ids(server.url, "welcome-api")) == [job_id]
    finally:
        app.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then ends by the signal it caught (newer versions) or with 0.
        assert app.wait(DEADLINE) in (0, -signal.SIGTERM), log.read_text()
    # The lifespan ended, closing both clients (the app's and the worker's): no unclosed session.
    assert "Application shutdown complete." in log.read_text()
    assert "Unclosed" not in log.read_text()


def _signups(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT email, welcomed FROM signups_signup ORDER BY email"))


def _waiting(url: str, queue: str) -> int:
    async def count() -> int:
        async with AsyncClient(url) as client:
            stats = await client.stats(queue)
        return sum(p.total for q in stats.logical_queues for p in q.partitions)

    return asyncio.run(count())


async def _leased_ids(url: str, queue: str) -> list[str]:
    async with AsyncClient(url) as client:
        leased = await client.lease(queue, batch_size=10, request_timeout="5s")
    return [item.id for item in leased.items]


def _get(url: str) -> object:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return json.load(reply)
    except OSError:
        return None
