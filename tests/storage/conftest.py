"""The Cassandra backend's ``store`` for the module-level tests of its own (the contract's classes bind
their own ``store``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from querator.storage.cassandra import CassandraSettings, CassandraStore, Segments
from tests.storage.test_cassandra import opened_store


@pytest.fixture
def sizes() -> Segments:
    """The segment sizes of the test's stores: a test makes them small, or lowers ``rows`` between runs
    to make the next run open a new tail."""
    return Segments()


@pytest.fixture
async def store(cassandra_settings: CassandraSettings, sizes: Segments) -> AsyncIterator[CassandraStore]:
    async with opened_store(cassandra_settings, segments=sizes) as store:
        yield store
