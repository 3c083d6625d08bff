"""The blocking ``Client`` is ``AsyncClient`` made blocking: the same methods, signatures and documents.

Its methods are generated from ``AsyncClient``'s, one line each (querator/client/_sync.py); these tests
fail when an ``AsyncClient`` method has no blocking twin, or a twin no longer matches its original. How
they behave against a server is tested in tests/api/test_client_cli.py.
"""

from __future__ import annotations

import inspect
import pickle
from typing import Any

from querator.client import AsyncClient, Client

HAND_WRITTEN = {"close"}
"""Methods ``Client`` defines itself: its ``close`` also stops its loop and thread."""


def _is_async_api(attr: Any) -> bool:
    function = inspect.unwrap(attr) if callable(attr) else attr
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def _public(cls: type) -> dict[str, Any]:
    """The public attributes of ``cls`` and its bases (``AsyncClient``'s workflow calls live in one)."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):
        found.update((name, attr) for name, attr in vars(klass).items() if not name.startswith("_"))
    return found


def test_every_async_method_has_a_blocking_twin_and_no_more() -> None:
    async_api = {name for name, attr in _public(AsyncClient).items() if _is_async_api(attr)} - HAND_WRITTEN
    sync_api = {name for name, attr in _public(Client).items() if callable(attr)} - HAND_WRITTEN
    assert async_api, "AsyncClient has no API?"
    assert sync_api == async_api


def test_twins_keep_the_name_signature_and_documents() -> None:
    for name, original in _public(AsyncClient).items():
        if name in HAND_WRITTEN or not _is_async_api(original):
            continue
        twin = getattr(Client, name)
        assert not inspect.iscoroutinefunction(twin), name
        assert (twin.__name__, twin.__qualname__, twin.__module__) == (
            name,
            f"Client.{name}",
            "querator.client._sync",
        )
        assert twin.__doc__ == original.__doc__, name
        assert inspect.signature(twin).parameters == inspect.signature(original).parameters, name
        assert pickle.loads(pickle.dumps(twin)) is twin, name


def test_return_annotations_are_the_awaited_values_and_leased_claims_none() -> None:
    # A coroutine method's annotation is already what the blocking twin returns; leased's (an
    # AsyncIterator) is not what Client.leased returns, so it shows none.
    assert inspect.signature(Client.stats).return_annotation == "m.QueueStatsResponse"
    assert inspect.signature(Client.leased).return_annotation is inspect.Signature.empty
