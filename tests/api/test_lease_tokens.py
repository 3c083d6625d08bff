"""Lease tokens (docs/extensions.md, "Lease tokens"): a queue that opts in needs the proof of each lease
on complete, retry and renew, so that ids that follow each other cannot be completed by a stranger.
Over HTTP on memory and sqlite; the token outlives a restart of the node (its secret is a queue setting
in storage, as every node of a cluster reads it)."""

from __future__ import annotations

from typing import Any

import pytest

from querator.client import AsyncClient
from querator.clock import FakeClock
from tests.conftest import Api, ServerFactory

EXTENSIONS = {"X-Querator-Extensions": "2"}


async def lease(api: Api, queue: str, batch_size: int = 1) -> dict[str, Any]:
    body = {"queue_name": queue, "batch_size": batch_size, "client_id": "c", "request_timeout": "5s"}
    return await api.post("/v1/queue.lease", body, EXTENSIONS)


async def complete(api: Api, queue: str, ids: list[str], tokens: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"queue_name": queue, "request_timeout": "5s", "ids": ids}
    if tokens is not None:
        body["lease_tokens"] = tokens
    return await api.post("/v1/queue.complete", body, EXTENSIONS)


async def test_a_queue_that_requires_tokens_refuses_strangers(api: Api) -> None:
    await api.create("q", lease_token="required")
    info = await api.post("/v1/queues.info", {"queue_name": "q"}, EXTENSIONS)
    assert info["lease_token"] == "required"
    await api.produce_n("q", 3)
    items = (await lease(api, "q", 3))["items"]
    tokens = [i["lease_token"] for i in items]
    assert all(len(t) == 22 for t in tokens) and len(set(tokens)) == 3
    ids = [i["id"] for i in items]

    # The id alone, or with another item's token: refused, and the item stays leased.
    refused = f"item(s) cannot be completed; '{ids[0]}' needs its lease token"
    alone = {"queue_name": "q", "request_timeout": "5s", "ids": ids[:1]}
    assert (await api.error("/v1/queue.complete", alone)).message == refused
    borrowed = {**alone, "lease_tokens": tokens[1:2]}
    assert (await api.error("/v1/queue.complete", borrowed)).message == refused
    retry = {"queue_name": "q", "items": [{"id": ids[1]}]}
    assert (await api.error("/v1/queue.retry", retry)).message == (
        f"item(s) cannot be retried; '{ids[1]}' needs its lease token"
    )
    renew = {"queue_name": "q", "request_timeout": "5s", "ids": ids[2:]}
    assert (await api.error("/v1/queue.renew", renew)).message == (
        f"item(s) cannot be renewed; '{ids[2]}' needs its lease token"
    )

    # With their tokens: served.
    assert await complete(api, "q", ids[:1], tokens[:1]) == {"code": 200}
    retry["items"] = [{"id": ids[1], "lease_token": tokens[1]}]
    assert await api.post("/v1/queue.retry", retry) == {"code": 200}
    renew["lease_tokens"] = tokens[2:]
    assert len((await api.post("/v1/queue.renew", renew))["items"]) == 1
    assert await complete(api, "q", ids[2:], tokens[2:]) == {"code": 200}


async def test_lease_token_settings_and_counts_are_checked(api: Api) -> None:
    error = await api.error(
        "/v1/queues.create",
        {"queue_name": "q", "lease_timeout": "1m", "expire_timeout": "1h", "lease_token": "on"},
    )
    assert error.message == "lease token is invalid; 'on' must be 'required' or 'off'"
    await api.create("q", lease_token="required")
    await api.produce_n("q", 2)
    items = (await lease(api, "q", 2))["items"]
    body = {
        "queue_name": "q",
        "request_timeout": "5s",
        "ids": [i["id"] for i in items],
        "lease_tokens": [items[0]["lease_token"]],
    }
    assert (await api.error("/v1/queue.complete", body)).message == (
        "lease tokens is invalid; 1 given for 2 ids"
    )


async def test_reference_clients_see_no_tokens_and_turning_them_off_frees_the_ids(api: Api) -> None:
    await api.create("q", lease_token="required")
    await api.produce_n("q", 1)
    # A JSON client without X-Querator-Extensions (the reference's Go client) gets the reference's shape.
    plain = await api.lease("q")
    assert "lease_token" not in plain["items"][0]
    assert "lease_token" not in await api.post("/v1/queues.info", {"queue_name": "q"})
    # An update that does not mention lease_token keeps it; "off" turns it off.
    update = {"queue_name": "q", "lease_timeout": "1m", "expire_timeout": "24h"}
    await api.post("/v1/queues.update", update)
    assert (await api.post("/v1/queues.info", {"queue_name": "q"}, EXTENSIONS))["lease_token"] == "required"
    await api.post("/v1/queues.update", {**update, "lease_token": "off"})
    assert "lease_token" not in await api.post("/v1/queues.info", {"queue_name": "q"}, EXTENSIONS)
    assert await api.complete("q", 0, [plain["items"][0]["id"]]) == {"code": 200}


async def test_a_token_outlives_a_restart(
    start_server: ServerFactory, backend: str, clock: FakeClock
) -> None:
    api = await start_server(clock, data="tokens")
    await api.create("q", lease_token="required")
    await api.produce_n("q", 1)
    [item] = (await lease(api, "q"))["items"]
    if backend == "memory":
        assert await complete(api, "q", [item["id"]], [item["lease_token"]]) == {"code": 200}
        return  # nothing outlives a memory node
    await api.service.shutdown()
    again = await start_server(clock, data="tokens")
    assert await complete(again, "q", [item["id"]], [item["lease_token"]]) == {"code": 200}


async def test_the_clients_leased_block_proves_its_leases(api: Api) -> None:
    await api.create("q", lease_token="required")
    await api.produce_n("q", 3)
    async with AsyncClient(api.base) as client:
        async with client.leased("q", 2, "c", request_timeout="5s") as lease:
            assert all(i.lease_token for i in lease.items)
        with pytest.raises(RuntimeError):
            async with client.leased("q", 1, "c", request_timeout="5s"):
                raise RuntimeError("the handler failed")
    # Two completed; the third was retried (back in the queue, not leased).
    [left] = await api.items("q")
    assert "is_leased" not in left
