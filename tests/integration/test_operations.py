"""Operations on a real ``querator serve`` process: a key made by ``querator apikey`` and configured
through the environment, and health, readiness and metrics on a separate admin address."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from querator.client import AsyncClient
from querator.errors import Unauthorized

from .conftest import Servers, free_port, server_env


def apikey() -> tuple[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "querator.cli", "apikey", "--tag", "ci"],
        env=server_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines())
    return fields["key"].strip(), fields["hash"].strip()


async def test_keys_from_the_environment_and_an_admin_address(servers: Servers, tmp_path: Path) -> None:
    key, digest = apikey()
    assert key.startswith("qtr-ci-") and len(digest) == 64
    admin = free_port()
    server = await servers.astart(
        "--storage", "sqlite", "--data-dir", str(tmp_path / "data"), "--admin-address", f"127.0.0.1:{admin}",
        env={"QUERATOR_API_KEYS": digest},
    )  # fmt: skip
    async with AsyncClient(server.url) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.list_queues()
    async with AsyncClient(server.url, api_key=key) as client:
        await client.create_queue("q")
        await client.produce("q", ["a", "b"])
    admin_url = f"http://127.0.0.1:{admin}"
    async with aiohttp.ClientSession() as session:
        async with session.get(admin_url + "/ready") as resp:
            assert resp.status == 200
        async with session.get(admin_url + "/metrics") as resp:
            assert resp.status == 200
            assert 'querator_items_queued{queue="q"} 2.0' in await resp.text()
        async with session.get(admin_url + "/health") as resp:
            assert resp.status == 200
        # The API address keeps /health (reference clients probe it) but not the operator endpoints.
        async with session.get(server.url + "/health") as resp:
            assert resp.status == 200
        # Without a key: /metrics is refused before routing; /ready is unknown (GET: 400) here.
        for path, status in (("/metrics", 401), ("/ready", 400)):
            async with session.get(server.url + path) as resp:
                assert resp.status == status, path
