"""Every repeated field of a request is bounded before its elements are built (docs/semantics.md §1.3):
a small body of empty elements would otherwise become millions of messages."""

from __future__ import annotations

import io

import msgspec
import pytest

from querator.wire import PROTOBUF, encode_protobuf
from querator.wire import messages as m
from tests.conftest import JSON, Api

IMPORT_CAP = "items is invalid; max_import_batch_size is 1000 but received more than 1000"


async def test_an_import_holds_at_most_the_cap(api: Api) -> None:
    await api.create("q")
    reply = await api.post("/v1/storage/items.import", {"queue_name": "q", "items": [{}] * 1000})
    assert len(reply["items"]) == 1000
    e = await api.error("/v1/storage/items.import", {"queue_name": "q", "items": [{}] * 1001})
    assert (e.status, e.message) == (400, IMPORT_CAP)


@pytest.mark.parametrize("media", [JSON["Content-Type"], PROTOBUF])
@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/storage/items.import", IMPORT_CAP),
        ("/v1/queue.produce", "items is invalid; max_produce_batch_size is 1000 but received more than 1000"),
        ("/v1/queue.retry", "items is invalid; max_complete_batch_size is 1000 but received more than 1000"),
        ("/v1/workflows.append", "entries is invalid; at most 1000 entries to an append"),
    ],
)
async def test_many_empty_elements_are_refused_unbuilt(api: Api, path: str, message: str, media: str) -> None:
    """The probe's body shape: 80,000 empty elements (within even queue.retry's 256,000-byte body) on
    every route with a repeated field of messages; the refusal names the route's limit."""
    await api.create("q")
    field = b"entries" if path == "/v1/workflows.append" else b"items"
    if media == PROTOBUF:
        body = b"\x1a\x00" * 80_000  # field 3 (items, entries), length 0
    else:
        body = b'{"queue_name":"q","' + field + b'":[' + b",".join([b"{}"] * 80_000) + b"]}"
    assert await _refusal(api, path, body, media) == (400, message)


async def test_an_import_item_keeps_at_most_ten_failures_over_protobuf(api: Api) -> None:
    await api.create("q")
    item = m.StorageItem(failures=[m.ItemFailure(error="e")] * 10_000)
    body = encode_protobuf(m.StorageItemsImportRequest(queue_name="q", items=[item]))
    refusal = await _refusal(api, "/v1/storage/items.import", body, PROTOBUF)
    assert refusal == (400, "failures is invalid; an item keeps at most 10")


async def _refusal(api: Api, path: str, body: bytes, media: str) -> tuple[int, str]:
    """The status and message of the reply to ``body``, sent as ``media``."""
    headers = {"Content-Type": media}
    async with api.session.post(api.base + path, data=io.BytesIO(body), headers=headers) as resp:
        return resp.status, msgspec.json.decode(await resp.read())["message"]
