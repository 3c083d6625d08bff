"""A Querator node on a real PostgreSQL: the restart and fencing scenarios of store_restarts.py (restarts
of either, fencing between two nodes: docs/adr/0045).
"""

from __future__ import annotations

import pytest

from querator.storage.postgres import PostgresSettings
from tests.postgres_node import PostgresNode

from .conftest import Servers
from .store_restarts import (
    a_second_node_fences_the_first,
    restart_keeps_items_leases_and_scheduled,
    store_restart_under_load_loses_nothing,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def postgres_args(settings: PostgresSettings) -> tuple[str, ...]:
    return ("--storage", "postgres", "--postgres-url", settings.url, "--postgres-schema", settings.schema)


async def test_querator_restart_keeps_items_leases_and_scheduled(
    servers: Servers, postgres_settings: PostgresSettings
) -> None:
    await restart_keeps_items_leases_and_scheduled(servers, postgres_args(postgres_settings))


async def test_postgres_restart_under_load_loses_nothing_and_answers_454(
    servers: Servers, postgres_node: PostgresNode, postgres_settings: PostgresSettings
) -> None:
    args = postgres_args(postgres_settings)
    await store_restart_under_load_loses_nothing(servers, args, postgres_node.stop, postgres_node.start)


async def test_a_second_node_fences_the_first(servers: Servers, postgres_settings: PostgresSettings) -> None:
    await a_second_node_fences_the_first(servers, postgres_args(postgres_settings))
