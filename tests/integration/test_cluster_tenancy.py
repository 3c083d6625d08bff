"""Tenancy across a cluster (docs/tenancy.md "Across a cluster", docs/adr/0021): three
``querator serve --cluster --tenancy on`` processes on one etcd and one Cassandra keyspace or PostgreSQL
schema. A key created through node 0 is used through node 2 (and its requests forwarded to owners keep
working), and once deleted through node 0 it is refused by every node within the documented delay."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient
from querator.errors import Forbidden, Unauthorized
from querator.tenancy import CACHE_TTL_S

from .conftest import Servers, eventually
from .etcd_server import EtcdServer
from .test_cluster_routing import member_args, retried

pytestmark = pytest.mark.integration

DELAY_MARGIN_S = 5.0
"""Beyond the cache TTL: the time the test itself and the store take to show the deletion."""


async def test_a_key_made_on_one_node_works_on_all_and_its_deletion_reaches_all(
    servers: Servers, etcd: EtcdServer, shared_storage: tuple[str, ...], tmp_path: Path
) -> None:
    admin_key = generate_key("admin")
    secret = tmp_path / "cluster-secret"
    secret.write_text(secrets.token_hex(32))
    tenancy = ("--tenancy", "on", "--api-keys", key_hash(admin_key), "--cluster-secret-file", str(secret))
    nodes = [
        await servers.astart(*member_args(etcd, shared_storage, "/tenancy", n), *tenancy) for n in range(3)
    ]

    async def three_members() -> bool:
        for node in nodes:
            async with AsyncClient(node.url, api_key=admin_key) as client:
                if len((await client.cluster_info()).members) != 3:
                    return False
        return True

    await eventually(three_members, 60, "every node sees three members")
    async with AsyncClient(nodes[0].url, api_key=admin_key) as admin:
        await admin.create_namespace("team")
        user_id = await admin.create_user("worker")
        await admin.create_role_binding("team", "NamespaceOwner", user_id)
        created = await admin.create_api_key(user_id, namespace_scope="team")
    async with AsyncClient(nodes[2].url, api_key=created.key) as worker:
        await worker.create_queue("jobs", partitions=6, namespace="team")
        # Six partitions over three nodes: node 2 forwards most of these to their owners.
        for n in range(12):
            await retried(lambda n=n: worker.produce("jobs", [f"item-{n}"]))
        with pytest.raises(Forbidden):
            await worker.list_queues()  # _system: the scoped key has nothing there
    for node in nodes:
        async with AsyncClient(node.url, api_key=created.key) as worker:
            assert [q.queue_name for q in (await worker.list_queues(namespace="team")).items] == ["jobs"]
    async with AsyncClient(nodes[0].url, api_key=admin_key) as admin:
        await admin.delete_api_key(created.id)
    deleted_at = time.monotonic()
    for node in nodes:
        async with AsyncClient(node.url, api_key=created.key) as worker:

            async def refused(worker: AsyncClient = worker) -> bool:
                try:
                    await worker.list_queues(namespace="team")
                except Unauthorized:
                    return True
                return False

            await eventually(refused, CACHE_TTL_S + DELAY_MARGIN_S, "the deleted key is refused")
    assert time.monotonic() - deleted_at < CACHE_TTL_S + DELAY_MARGIN_S
