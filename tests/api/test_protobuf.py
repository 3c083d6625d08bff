"""A client speaking binary protobuf (as the official Go client does) gets correct replies."""

from __future__ import annotations

from querator.wire import decode_json, decode_protobuf, encode_protobuf
from querator.wire import messages as m
from tests.conftest import Api

PB = {"Content-Type": "application/protobuf"}


async def test_protobuf_requests_json_and_protobuf_replies(api: Api) -> None:
    create = m.QueueInfo(queue_name="pq", lease_timeout="1m", expire_timeout="1h", requested_partitions=1)
    resp = await api.raw("/v1/queues.create", encode_protobuf(create), PB)
    assert resp.status == 200
    produce = m.QueueProduceRequest(
        queue_name="pq", request_timeout="1m", items=[m.QueueProduceItem(bytes=b"\x00\x01binary", kind="k")]
    )
    # No Accept header: the Go client's way; the reply is JSON.
    async with api.session.post(
        api.base + "/v1/queue.produce", data=encode_protobuf(produce), headers=PB
    ) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "application/json"
        assert decode_json(await r.read(), m.Reply).code == 200
    lease = m.QueueLeaseRequest(queue_name="pq", batch_size=5, client_id="go", request_timeout="5s")
    headers = {**PB, "Accept": "application/protobuf"}
    async with api.session.post(
        api.base + "/v1/queue.lease", data=encode_protobuf(lease), headers=headers
    ) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "application/protobuf"
        reply = decode_protobuf(await r.read(), m.QueueLeaseResponse)
    [item] = reply.items
    assert (item.bytes, item.kind, item.attempts) == (b"\x00\x01binary", "k", 1)
    assert item.lease_deadline is not None
    complete = m.QueueCompleteRequest(queue_name="pq", request_timeout="5s", ids=[item.id])
    async with api.session.post(
        api.base + "/v1/queue.complete", data=encode_protobuf(complete), headers=headers
    ) as r:
        assert r.status == 200
        assert decode_protobuf(await r.read(), m.Reply).code == 200
    # Errors come back in the negotiated encoding too.
    bad = m.QueueLeaseRequest(queue_name="nope", batch_size=1, client_id="go", request_timeout="5s")
    async with api.session.post(
        api.base + "/v1/queue.lease", data=encode_protobuf(bad), headers=headers
    ) as r:
        assert r.status == 400
        error = decode_protobuf(await r.read(), m.Reply)
    assert (error.code, error.code_text, error.message) == (
        400,
        "Bad Request",
        "queue does not exist; no such queue named 'nope'",
    )


async def test_garbage_protobuf_is_455(api: Api) -> None:
    resp = await api.raw("/v1/queue.stats", b"\xff\xff\xff", PB)
    assert resp.status == 455
