"""The Cassandra backend's ``store`` for the module-level tests of its own (the contract's classes bind
their own ``store``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from querator.storage.cassandra import CassandraSettings, CassandraStore
from tests.storage.test_cassandra import opened_store


@pytest.fixture
async def store(cassandra_settings: CassandraSettings) -> AsyncIterator[CassandraStore]:
    async with opened_store(cassandra_settings) as store:
        yield store
