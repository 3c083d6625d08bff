"""The client's tenancy methods and ``querator namespaces|users|apikeys|roles|rolebindings`` against a
real ``querator serve --tenancy on --api-keys <hash>`` (docs/tenancy.md, the worked example)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient
from querator.errors import Forbidden, Unauthorized
from tests.api.test_client_cli import cli, ok, serving

ADMIN_KEY = generate_key("admin")


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("tenancy") / "server.log"
    with serving(log, "--tenancy", "on", "--api-keys", key_hash(ADMIN_KEY)) as url:
        yield url


async def test_two_teams_two_namespaces(endpoint: str) -> None:
    """The worked example of docs/tenancy.md, through the async client."""
    async with AsyncClient(endpoint, api_key=ADMIN_KEY) as admin:
        for team in ("payments", "search"):
            await admin.create_namespace(team, description=f"the {team} team")
            owner = await admin.create_user(f"{team}-lead")
            await admin.create_role_binding(team, "NamespaceOwner", owner)
        lead = (await admin.create_api_key(owner, name="laptop", namespace_scope="search")).key
        assert [n.name for n in (await admin.list_namespaces()).items] == ["_system", "payments", "search"]
        assert {k.name for k in (await admin.list_api_keys(owner)).items} == {"laptop"}
    async with AsyncClient(endpoint, api_key=lead) as search:
        await search.create_queue("search-index", namespace="search")
        with pytest.raises(Forbidden):
            await search.create_queue("payments-ledger", namespace="payments")
        with pytest.raises(Forbidden):
            await search.list_queues(namespace="payments")
        assert await search.create_role("search", "indexer", ["queue.lease", "queue.complete"])
        assert [r.name for r in (await search.list_roles("search")).items] == ["indexer"]
        assert [q.queue_name for q in (await search.list_queues(namespace="search")).items] == [
            "search-index"
        ]
    async with AsyncClient(endpoint, api_key=generate_key()) as stranger:
        with pytest.raises(Unauthorized):
            await stranger.list_queues()


def test_cli_tenancy_commands(endpoint: str, tmp_path: Path) -> None:
    env = {"QUERATOR_API_KEY": ADMIN_KEY}
    assert ok(cli(endpoint, "namespaces", "create", "cli-team", "--api-key-tag", "cli", env=env)) == {
        "code": 200
    }
    user_id = ok(cli(endpoint, "users", "create", "cli-user", "--email", "u@example.com", env=env))["id"]
    role_id = ok(cli(endpoint, "roles", "create", "cli-team", "producer", "queue.produce", env=env))["id"]
    binding = ok(cli(endpoint, "rolebindings", "create", "cli-team", "producer", user_id, env=env))
    listed = ok(cli(endpoint, "rolebindings", "list", "--namespace", "cli-team", env=env))["items"]
    assert listed == [{**listed[0], "id": binding["id"], "user_id": user_id, "role_id": role_id}]
    created = ok(cli(endpoint, "apikeys", "create", user_id, "--namespace-scope", "cli-team", env=env))
    assert created["key"].startswith("qtr-cli-")
    assert ok(cli(endpoint, "apikeys", "list", "--user", user_id, env=env))["items"][0]["id"] == created["id"]
    ok(cli(endpoint, "roles", "update", "cli-team", "producer", "queue.produce", "queue.stats", env=env))
    denied = cli(endpoint, "namespaces", "list", env={"QUERATOR_API_KEY": created["key"]})
    assert (denied.returncode, denied.stderr.strip()) == (1, "querator: 403 access denied")
    ok(cli(endpoint, "apikeys", "delete", created["id"], env=env))
    ok(cli(endpoint, "rolebindings", "delete", "cli-team", "producer", user_id, env=env))
    ok(cli(endpoint, "roles", "delete", "cli-team", "producer", env=env))
    ok(cli(endpoint, "users", "delete", user_id, env=env))
    ok(cli(endpoint, "namespaces", "delete", "cli-team", env=env))
    assert "cli-team" not in {n["name"] for n in ok(cli(endpoint, "namespaces", "list", env=env))["items"]}
