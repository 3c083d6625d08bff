"""A pytest plugin of ``querator.testing``: ``pytest_plugins = ["querator.testing.fixtures"]`` in a
``conftest.py`` gives tests the ``querator_node`` fixture (it needs pytest-asyncio)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from querator.testing._node import Node


@pytest_asyncio.fixture
async def querator_node() -> AsyncIterator[Node]:
    """A fresh ``Node`` for the test, stopped after it."""
    async with Node() as node:
        yield node
