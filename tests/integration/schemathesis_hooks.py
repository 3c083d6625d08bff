"""schemathesis hooks for ``test_schemathesis.py``, loaded by the ``schemathesis`` CLI process it starts
(``SCHEMATHESIS_HOOKS``), never by pytest.

Generated requests mostly name queues and ids that do not exist; these hooks make part of them reach
real state, and keep the run bounded. None of them hides a reply: every request is still sent and its
reply checked.

- Binary protobuf request bodies are any bytes (most do not parse, some parse into odd messages).
- Half of the generated bodies with a ``queue_name`` (but those of queues.create) name one of
  ``QUEUES`` (made by the test, which passes them in ``SCHEMATHESIS_QUERATOR_QUEUES``), and so does a
  redrive's ``target_queue``; half of those of complete, retry, renew and storage delete then carry
  ids the hook has just leased from that queue (with their partition), so these calls can succeed.
- A ``queues.delete`` or ``queue.clear`` that emptied one of ``QUEUES`` is followed by a refill.
- One request in ``PROTOBUF_EVERY`` asks for a binary protobuf reply; the check
  ``protobuf_reply_conformance`` decodes it and validates it against the JSON schema of its status.
- The ``request_timeout`` of a lease and of a workflows.result is capped at ``LEASE_WAIT``: a valid
  lease on an empty queue, or a wait for a workflow nobody runs, long-polls until its timeout, up to
  15 minutes. ``requested_partitions`` of create and update is capped at
  ``MAX_PARTITIONS``: thousands of sqlite partitions per generated queue would only make the run slow.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import jsonschema_rs
import msgspec
import requests
import schemathesis
from hypothesis import strategies as st

from querator.duration import DurationError, parse_duration
from querator.wire import decode_protobuf, encode_json
from querator.wire import messages as m

QUEUES: dict[str, dict[str, Any]] = msgspec.json.decode(os.environ["SCHEMATHESIS_QUERATOR_QUEUES"])
"""The queues the test made (name: queues.create fields), in creation order."""
REFILL = 10
"""Items produced into each queue by a refill."""
LEASE_WAIT = "200ms"
LONG_POLLS = ("/v1/queue.lease", "/v1/workflows.lease", "/v1/workflows.result")
MAX_PARTITIONS = 8
LEASED = "leased-by-the-hook"
"""Placeholder id, replaced by a leased item's id just before the request is sent."""
ID_FIELDS = {
    "/v1/queue.complete": "ids",
    "/v1/queue.renew": "ids",
    "/v1/storage/items.delete": "ids",
    "/v1/queue.retry": "items",
}
PROTOBUF_EVERY = 3
"""One request in this many asks for a binary protobuf reply (Accept: application/protobuf)."""
CALL_TIMEOUT = 10.0
STRUCTS = {name: cls for name, cls in vars(m).items() if isinstance(cls, type) and issubclass(cls, m.Message)}
_clients = itertools.count()
_calls = itertools.count()

schemathesis.openapi.media_type("application/protobuf", st.binary(max_size=64))


def refill(base_url: str) -> None:
    """Makes those of ``QUEUES`` that are missing and produces ``REFILL`` items into each (the replies
    are not checked here: these requests are not under test)."""
    for name, settings in QUEUES.items():
        _post(base_url, "/v1/queues.create", {"queue_name": name, **settings})
    for name in QUEUES:
        items = [{"utf8": f"{name}-{n}"} for n in range(REFILL)]
        _post(base_url, "/v1/queue.produce", {"queue_name": name, "request_timeout": "5s", "items": items})


def _post(base_url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = requests.post(base_url + path, json=body, timeout=CALL_TIMEOUT)
    return response.status_code, response.json()


@st.composite
def _real_state(draw: st.DrawFn, path: str, body: Any) -> Any:
    if (
        path == "/v1/queues.create"
        or not isinstance(body, dict)
        or not isinstance(body.get("queue_name"), str)
        or draw(st.booleans())
    ):
        return body
    body = {**body, "queue_name": draw(st.sampled_from(sorted(QUEUES)))}
    if isinstance(body.get("target_queue"), str):
        body["target_queue"] = draw(st.sampled_from(sorted(QUEUES)))
    field = ID_FIELDS.get(path)
    ids = body.get(field) if field else None
    if field is None or not isinstance(ids, list) or not ids or draw(st.booleans()):
        return body
    if field == "items":
        body[field] = [{**i, "id": LEASED} if isinstance(i, dict) else i for i in ids[:10]]
    else:
        body[field] = [LEASED] * min(len(ids), 10)
    return body


@schemathesis.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    path = context.operation.path if context.operation is not None else ""
    return _real_state(path, body)


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    # Here rather than in map_body: the requests of every phase pass through before_call.
    body = case.body
    if not isinstance(body, dict):
        return
    path = case.operation.path
    if path in LONG_POLLS and _longer_than(body.get("request_timeout"), LEASE_WAIT):
        body["request_timeout"] = LEASE_WAIT
    partitions = body.get("requested_partitions")
    if path in ("/v1/queues.create", "/v1/queues.update") and isinstance(partitions, int):
        body["requested_partitions"] = min(partitions, MAX_PARTITIONS)
    field = ID_FIELDS.get(path)
    if field is not None:
        _use_leased_ids(case.operation.schema.get_base_url(), body, field)
    if next(_calls) % PROTOBUF_EVERY == 0:
        case.headers = {**(case.headers or {}), "Accept": "application/protobuf"}


@schemathesis.hook
def after_call(context: schemathesis.HookContext, case: schemathesis.Case, response: Any) -> None:
    body = case.body
    if (
        response.status_code == 200
        and case.operation.path in ("/v1/queues.delete", "/v1/queue.clear")
        and isinstance(body, dict)
        and body.get("queue_name") in QUEUES
    ):
        refill(case.operation.schema.get_base_url())


@schemathesis.check
def protobuf_reply_conformance(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """A binary protobuf reply matches the JSON schema of its status once decoded (as the message that
    schema names) and written as JSON. The document describes protobuf bodies only as bytes."""
    if response.headers.get("content-type", [""])[0] != "application/protobuf":
        return None
    operation = case.operation
    raw = operation.schema.raw_schema
    response_definition = raw["paths"][operation.path][operation.method.lower()]["responses"].get(
        str(response.status_code)
    )
    if response_definition is None:
        return None  # status_code_conformance reports it
    struct, validator = _reply_schema(raw, operation.path, response.status_code, response_definition)
    as_json = msgspec.json.decode(encode_json(decode_protobuf(response.content, struct)))
    errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(as_json)]
    if errors:
        raise AssertionError(f"protobuf reply {as_json!r} does not match its schema: {errors}")
    return None


_REPLY_SCHEMAS: dict[tuple[str, int], tuple[type[m.Message], jsonschema_rs.Validator]] = {}


def _reply_schema(
    raw: dict[str, Any], path: str, status: int, definition: dict[str, Any]
) -> tuple[type[m.Message], jsonschema_rs.Validator]:
    """The struct a reply's JSON schema names (directly or through ``allOf``), and a validator of it."""
    found = _REPLY_SCHEMAS.get((path, status))
    if found is None:
        schema = _resolve(raw, definition)["content"]["application/json"]["schema"]
        node = schema
        while node.get("$ref", "").rpartition("/")[2] not in STRUCTS:
            node = _resolve(raw, node)["allOf"][0]
        validator = jsonschema_rs.Draft202012Validator({**schema, "components": raw["components"]})
        found = _REPLY_SCHEMAS[(path, status)] = (STRUCTS[node["$ref"].rpartition("/")[2]], validator)
    return found


def _resolve(raw: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = raw
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def _use_leased_ids(base_url: str, body: dict[str, Any], field: str) -> None:
    entries = body.get(field)
    if not isinstance(entries, list):
        return
    slots = [n for n, e in enumerate(entries) if LEASED in (e, e.get("id") if isinstance(e, dict) else None)]
    if not slots:
        return
    queue = body.get("queue_name")
    lease = {
        "queue_name": queue,
        "batch_size": len(slots),
        "client_id": f"hook-{next(_clients)}",
        "request_timeout": "100ms",
    }
    status, reply = _post(base_url, "/v1/queue.lease", lease)
    if status == 454 and queue in QUEUES:  # drained by earlier requests: refill once
        refill(base_url)
        status, reply = _post(base_url, "/v1/queue.lease", lease)
    leased = [i["id"] for i in reply.get("items", [])] if status == 200 else []
    if leased:
        body["partition"] = reply.get("partition", 0)
    for n, slot in enumerate(slots):
        item_id = leased[n % len(leased)] if leased else "2aZmrBYs1JSP4HGWpOxSG2UzKxV"
        if field == "items":
            entries[slot]["id"] = item_id
        else:
            entries[slot] = item_id


def _longer_than(value: Any, limit: str) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return parse_duration(value) > parse_duration(limit)
    except DurationError:
        return False
