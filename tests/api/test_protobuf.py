"""A client speaking binary protobuf (as the official Go client does) gets correct replies, on the
reference's routes and on the workflow routes (docs/durable.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from querator.wire import decode_json, decode_protobuf, encode_protobuf
from querator.wire import messages as m
from tests.conftest import Api

PB = {"Content-Type": "application/protobuf"}
R = TypeVar("R", bound=m.Message)


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


async def _pb(api: Api, path: str, msg: m.Message, reply_type: type[R], status: int = 200) -> R:
    """POSTs ``msg`` as binary protobuf and decodes the binary protobuf reply."""
    headers = {**PB, "Accept": "application/protobuf"}
    async with api.session.post(api.base + path, data=encode_protobuf(msg), headers=headers) as r:
        assert r.headers["Content-Type"] == "application/protobuf"
        body = await r.read()
        assert r.status == status, decode_protobuf(body, m.Reply)
        return decode_protobuf(body, reply_type)


BINARY = bytes(range(256))
"""Bytes that are not UTF-8: they survive only as protobuf bytes fields (base64 in JSON)."""


async def test_the_workflow_routes_speak_protobuf(api: Api) -> None:
    """A workflow's life in binary protobuf both ways: bytes fields round-trip as they are, and the
    WorkflowInfo nested in the replies of start and claim arrives whole."""
    create = m.QueueInfo(queue_name="pq", lease_timeout="1m", expire_timeout="1h", requested_partitions=1)
    await _pb(api, "/v1/queues.create", create, m.Reply)
    start = m.WorkflowsStartRequest(
        workflow_id="wf-pb", name="checkout", queue_name="pq", input=BINARY, encoding="octets"
    )
    started = await _pb(api, "/v1/workflows.start", start, m.WorkflowsStartResponse)
    assert started.created and started.workflow is not None
    assert (started.workflow.workflow_id, started.workflow.status) == ("wf-pb", "running")
    assert (started.workflow.input, started.workflow.encoding) == (BINARY, "octets")
    assert started.workflow.created_at is not None
    signal = m.WorkflowsSignalRequest(
        workflow_id="wf-pb", name="approval", payload=BINARY[::-1], signal_id="s1"
    )
    assert (await _pb(api, "/v1/workflows.signal", signal, m.Reply)).code == 200

    claim = m.WorkflowsClaimRequest(workflow_id="wf-pb", claim_timeout="30s")
    claimed = await _pb(api, "/v1/workflows.claim", claim, m.WorkflowsClaimResponse)
    assert claimed.outcome == "claimed" and claimed.workflow is not None
    assert (claimed.workflow.fence, claimed.workflow.input) == (1, BINARY)
    assert claimed.workflow.claim_deadline is not None
    [sent] = claimed.workflow.signals
    assert (sent.id, sent.name, sent.payload, sent.taken_by) == ("s1", "approval", BINARY[::-1], 0)
    assert sent.sent_at is not None

    wake_at = datetime(2030, 1, 1, tzinfo=UTC)
    entries = [
        m.WorkflowEntry(seq=1, kind="signal", name="approval", state="done"),
        m.WorkflowEntry(seq=2, kind="step", name="charge", state="done", value=b"\x00\x01", attempts=2),
        m.WorkflowEntry(seq=3, kind="sleep", name="sleep", state="pending", wake_at=wake_at),
    ]
    append = m.WorkflowsAppendRequest(workflow_id="wf-pb", fence=1, entries=entries, claim_timeout="1m")
    assert (
        await _pb(api, "/v1/workflows.append", append, m.WorkflowsAppendResponse)
        == m.WorkflowsAppendResponse()
    )
    info = await _pb(api, "/v1/workflows.info", m.WorkflowsInfoRequest(workflow_id="wf-pb"), m.WorkflowInfo)
    assert [(e.seq, e.kind, e.state, e.value) for e in info.entries] == [
        (1, "signal", "done", BINARY[::-1]),  # the signal's payload, filled in by the server
        (2, "step", "done", b"\x00\x01"),
        (3, "sleep", "pending", b""),
    ]
    assert (info.entries[1].attempts, info.entries[2].wake_at) == (2, wake_at)
    assert info.signals[0].taken_by == 1

    finish = m.WorkflowsAppendRequest(workflow_id="wf-pb", fence=1, then="complete", result=BINARY)
    await _pb(api, "/v1/workflows.append", finish, m.WorkflowsAppendResponse)
    wait = m.WorkflowsResultRequest(workflow_id="wf-pb", request_timeout="1s")
    result = await _pb(api, "/v1/workflows.result", wait, m.WorkflowInfo)
    assert (result.status, result.result, result.entries) == ("completed", BINARY, [])
    assert result.finished_at is not None and result.expires_at is not None
    listed = await _pb(
        api, "/v1/workflows.list", m.WorkflowsListRequest(status="completed"), m.WorkflowsListResponse
    )
    assert [(w.workflow_id, w.result) for w in listed.workflows] == [("wf-pb", BINARY)]
    cancel = m.WorkflowsCancelRequest(workflow_id="wf-pb")
    assert (await _pb(api, "/v1/workflows.cancel", cancel, m.Reply)).code == 200  # finished: no change

    # The 409 of a stale fence comes back in protobuf too.
    stale = m.WorkflowsAppendRequest(workflow_id="wf-pb", fence=7, then="suspend")
    conflict = await _pb(api, "/v1/workflows.append", stale, m.Reply, status=409)
    assert (conflict.code, conflict.code_text) == (409, "Conflict")
    assert conflict.message.startswith("workflow claimed elsewhere; fence 7")
