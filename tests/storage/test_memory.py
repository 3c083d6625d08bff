"""The storage contract, bound to the memory backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from querator.storage.base import Store
from querator.storage.memory import MemoryStore
from tests.storage.contract import RecordsContract, StoreContract


class TestMemoryStore(StoreContract, RecordsContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Store]:
        store = MemoryStore()
        await store.open()
        yield store
        await store.close()
