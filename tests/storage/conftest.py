"""The Cassandra backend's ``store`` for the module-level tests of its own (the contract's classes bind
their own ``store``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from querator.storage.cassandra import CassandraSettings, CassandraStore
from tests.storage.test_cassandra import new_store


@pytest.fixture
async def store(cassandra_settings: CassandraSettings) -> AsyncIterator[CassandraStore]:
    store = new_store(cassandra_settings)
    await store.open()
    yield store
    await store.close()
