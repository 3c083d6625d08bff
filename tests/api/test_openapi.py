"""``querator/openapi.yaml`` against the code it describes.

Everything is derived from the code, so that a route, a field or a body limit added on one side only
fails here: the routes ``create_app`` registers, the request type, body limit and reply type of each
RPC (read from its handler), the msgspec wire structs (field names, JSON keys and types), the bytes
``GET /openapi.yaml`` serves, and the replies of a live in-process server to the document's examples
(validated against the document's schemas). For each request example, every field the document lists
as required is checked to be required by the server: the example without it is refused with a 400.
"""

from __future__ import annotations

import importlib.resources
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

import aiohttp
import jsonschema_rs
import msgspec
import pytest
import yaml
from aiohttp import web

import querator
from querator.auth import ApiKeys, generate_key, key_hash, parse_hash
from querator.http import (
    OPEN_PATHS,
    OPENAPI_CONTENT_TYPE,
    OPENAPI_PATH,
    create_admin_app,
    create_app,
    openapi_document,
)
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.wire import messages as m
from tests.conftest import Api, serving

DOCUMENT = Path(querator.__file__).with_name("openapi.yaml")
DOC: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text(encoding="utf-8"))
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
STRUCTS: dict[str, type[m.Message]] = {
    name: cls
    for name, cls in vars(m).items()
    if isinstance(cls, type) and issubclass(cls, m.Message) and cls is not m.Message
}
RPC_STATUSES = {"200", "400", "401", "403", "453", "454", "455", "500"}
CONFLICTS = {"/v1/workflows.append", "/v1/workflows.start", "/v1/workflows.resume", "/v1/workflows.fork"}
"""The routes that also answer 409: a write that lost to another writer, a start (or fork) to an id
another workflow holds, a resume of a workflow that cannot be (docs/durable.md)."""
BODY_TYPES = {"application/json", "application/protobuf"}
INT32 = (-(2**31), 2**31 - 1)
CATCH_ALL = "/{tail}"
CONSOLE_PATHS = {"/ui", "/ui/{file}"}


def _app() -> web.Application:
    return create_app(Service(MemoryStore()), console=True)


def _routes(app: web.Application) -> dict[str, Callable[..., Any]]:
    """Path -> handler of every route but the catch-all; every route takes any method ("*")."""
    routes = {}
    for resource in app.router.resources():
        for route in resource:
            assert route.method == "*", resource.canonical
            if resource.canonical != CATCH_ALL:
                routes[resource.canonical] = route.handler
    return routes


def _rpc(handler: Callable[..., Any]) -> tuple[type[m.Message], int, type[m.Message]]:
    """(request type, body limit, reply type) of an RPC route, read from its handler's closure."""
    rpc = inspect.getclosurevars(handler).nonlocals
    method = rpc["call"]  # the service's method itself
    returned = get_type_hints(method)["return"]
    return rpc["type_"], rpc["limit"], m.Reply if returned is NoneType else returned


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node``, or what its ``$ref`` points to (recursively)."""
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        target: Any = DOC
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    return node


def _base(node: dict[str, Any]) -> dict[str, Any]:
    """The schema that gives ``node`` its type: through ``$ref`` and the first ``allOf`` part."""
    node = _resolve(node)
    while "allOf" in node:
        node = _resolve(node["allOf"][0])
    return node


def _struct_of(node: dict[str, Any]) -> type[m.Message]:
    """The wire struct a schema describes: a schema named after it, or a wrapper (``allOf``) of one."""
    while True:
        name = node.get("$ref", "").rpartition("/")[2]
        if name in STRUCTS:
            return STRUCTS[name]
        node = _resolve(node)
        assert "allOf" in node, f"{node} is not a wire struct's schema"
        node = node["allOf"][0]


def _required(node: dict[str, Any]) -> set[str]:
    """Every ``required`` of a schema and of the ``allOf`` parts it is made of."""
    node = _resolve(node)
    found = set(node.get("required", []))
    for part in node.get("allOf", []):
        found |= _required(part)
    return found


def _examples(node: dict[str, Any]) -> list[Any]:
    node = _resolve(node)
    return list(node.get("examples", [])) or [e for p in node.get("allOf", []) for e in _examples(p)]


# Long on purpose: one branch per kind of Python type a message field has.
def _check_type(tp: Any, node: dict[str, Any], where: str) -> None:  # noqa: C901, PLR0912
    """``node`` (a property's schema) describes a field of Python type ``tp`` as the codec writes it."""
    base = _base(node)
    origin = get_origin(tp)
    if origin is Union or origin is UnionType:
        (inner,) = [a for a in get_args(tp) if a is not NoneType]
        _check_type(inner, node, where)
    elif isinstance(tp, type) and issubclass(tp, m.Message):
        assert _struct_of(node) is tp, where
    elif tp is datetime:
        assert (base["type"], base["format"]) == ("string", "date-time"), where
    elif tp is bool:
        assert base["type"] == "boolean", where
    elif tp is int:
        assert (base["type"], base["format"]) == ("integer", "int32"), where
        for limits in (base, _resolve(node), node):
            assert INT32[0] <= limits.get("minimum", INT32[0]) <= limits.get("maximum", INT32[1]) <= INT32[1]
    elif tp is bytes:
        assert (base["type"], base["format"]) == ("string", "byte"), where
    elif tp is str:
        assert base["type"] == "string" and base.get("format") not in ("byte", "date-time"), where
    elif origin is list:
        assert base["type"] == "array", where
        (element,) = get_args(tp)
        if isinstance(element, type) and issubclass(element, m.Message):
            assert _struct_of(base["items"]) is element, where
        else:
            _check_type(element, base["items"], where + "[]")
    elif origin is dict:
        assert get_args(tp) == (str, str), where
        assert base["type"] == "object" and _base(base["additionalProperties"])["type"] == "string", where
    else:
        raise AssertionError(f"{where}: no JSON mapping for {tp!r}")


def _validator(node: dict[str, Any]) -> jsonschema_rs.Validator:
    """A validator of ``node`` (a schema of the document, refs into its components resolved)."""
    return jsonschema_rs.Draft202012Validator({**node, "components": DOC["components"]})


def _assert_valid(node: dict[str, Any], instance: Any, where: str) -> None:
    errors = [f"{e.instance_path}: {e.message}" for e in _validator(node).iter_errors(instance)]
    assert not errors, f"{where}: {instance!r}\n" + "\n".join(errors)


def _json_schema(response: dict[str, Any]) -> dict[str, Any]:
    return dict(_resolve(response)["content"]["application/json"]["schema"])


# -- the document and the code ---------------------------------------------------------------------------


def test_every_route_is_documented_with_its_method() -> None:
    routes = _routes(_app())
    documented = {path: set(ops) for path, ops in DOC["paths"].items()}
    # The GET routes are the paths open without an API key, and /metrics; every other route is a POST.
    gets = OPEN_PATHS | {"/metrics"} | CONSOLE_PATHS
    assert documented == {path: {"get" if path in gets else "post"} for path in routes}
    assert OPENAPI_PATH in routes
    admin = {r.canonical for r in create_admin_app(Service(MemoryStore())).router.resources()}
    assert admin - {CATCH_ALL} <= gets


def test_the_document_names_this_version_and_shipped_file() -> None:
    assert DOC["openapi"].startswith("3.1.")
    assert DOC["info"]["version"] == querator.__version__
    shipped = importlib.resources.files("querator").joinpath("openapi.yaml").read_bytes()
    assert shipped == openapi_document() == DOCUMENT.read_bytes()


@pytest.mark.parametrize("path", sorted(p for p in DOC["paths"] if p.startswith("/v1/")))
def test_each_rpc_has_its_request_reply_and_limit(path: str) -> None:
    request_type, limit, reply_type = _rpc(_routes(_app())[path])
    op = DOC["paths"][path]["post"]
    assert op["x-querator-body-limit"] == limit
    body = _resolve(op["requestBody"])
    assert body["required"] is True and set(body["content"]) == BODY_TYPES
    assert _struct_of(body["content"]["application/json"]["schema"]) is request_type
    assert set(op["responses"]) == RPC_STATUSES | ({"409"} if path in CONFLICTS else set())
    for status, response in op["responses"].items():
        assert set(_resolve(response)["content"]) == BODY_TYPES, (path, status)
        expected = reply_type if status == "200" else m.Reply
        assert _struct_of(_json_schema(response)) is expected, (path, status)


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_each_wire_struct_has_a_schema_with_its_fields(name: str) -> None:
    schema = SCHEMAS[name]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    fields = {f.encode_name: f for f in msgspec.structs.fields(STRUCTS[name])}
    assert set(schema["properties"]) == set(fields)
    assert set(schema.get("required", [])) <= set(fields)
    for key, field in fields.items():
        _check_type(field.type, schema["properties"][key], f"{name}.{key}")


@pytest.mark.parametrize(
    "name", sorted(n for n, s in SCHEMAS.items() if "allOf" in s and _base(s).get("type") == "object")
)
def test_each_wrapper_only_narrows_its_struct(name: str) -> None:
    struct = _struct_of({"$ref": f"#/components/schemas/{name}"})
    keys = {f.encode_name for f in msgspec.structs.fields(struct)}
    for part in SCHEMAS[name]["allOf"][1:]:
        assert set(part) <= {"required", "properties"}, name
        assert set(part.get("required", [])) | set(part.get("properties", {})) <= keys, name


def test_every_schema_is_valid_json_schema() -> None:
    for name in SCHEMAS:
        _validator({"$ref": f"#/components/schemas/{name}"})  # compiles, and every $ref resolves
    for example in _examples(SCHEMAS["QueueProduceRequest"]):
        _assert_valid({"$ref": "#/components/schemas/QueueProduceRequest"}, example, "example")


# -- the document and a live server ----------------------------------------------------------------------


@asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    server = await serving(app)
    try:
        async with aiohttp.ClientSession() as session:
            yield session, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def test_the_document_is_served_without_a_key() -> None:
    key = generate_key("test")
    service = Service(MemoryStore())
    app = create_app(service, api_keys=ApiKeys([parse_hash(key_hash(key))]))
    async with _serving(app) as (session, base):
        async with session.get(base + OPENAPI_PATH) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == OPENAPI_CONTENT_TYPE
            assert await resp.read() == DOCUMENT.read_bytes()
        async with session.post(base + OPENAPI_PATH) as resp:
            assert resp.status == 401  # only the GET is open


async def test_examples_succeed_and_their_required_fields_are_required(api: Api) -> None:
    """Each documented request example, in a sensible order: without any one of its required fields it is
    a 400, whole it is a 200, and both replies match the document."""
    await api.create("jobs-dead")
    # A workflow's examples follow its life: started, signalled, claimed, then the append that receives
    # the signal and completes it; the others read it or find it finished.
    first = [
        "/v1/queues.create",
        "/v1/queue.produce",
        "/v1/queue.lease",
        "/v1/workflows.start",
        "/v1/workflows.signal",
        "/v1/workflows.claim",
        "/v1/workflows.append",
    ]
    order = sorted(DOC["paths"], key=lambda p: (p not in first, first.index(p) if p in first else 0, p))
    order.append(order.pop(order.index("/v1/queues.delete")))
    tried = []
    for path in order:
        if "post" not in DOC["paths"][path]:
            continue
        op = DOC["paths"][path]["post"]
        request = _resolve(op["requestBody"])["content"]["application/json"]["schema"]
        for example in _examples(request):
            tried.append(path)
            _assert_valid(request, example, f"{path} example")
            for field in sorted(_required(request)):
                partial = {k: v for k, v in example.items() if k != field}
                status, reply = await _post(api, path, partial)
                assert status == 400, (path, field, reply)
                _assert_valid(_json_schema(op["responses"]["400"]), reply, f"{path} without {field}")
            status, reply = await _post(api, path, example)
            # The example workflow completed: a resume of it gets the documented refusal.
            expected = "409" if path == "/v1/workflows.resume" else "200"
            assert str(status) == expected, (path, reply)
            _assert_valid(_json_schema(op["responses"][expected]), reply, path)
    assert set(first) | {"/v1/queues.delete"} <= set(tried)


async def test_undocumented_methods_and_the_get_routes(api: Api) -> None:
    # The console's paths are on a server with the console (tests/api/test_console.py); this one has none.
    for path, ops in DOC["paths"].items():
        if path in CONSOLE_PATHS:
            continue
        (method,) = ops
        other = "POST" if method == "get" else "GET"
        async with api.session.request(other, api.base + path) as resp:
            reply = msgspec.json.decode(await resp.read())
        # The reference's rules (docs/semantics.md §1.1): a POST-only path answers another method with a 400,
        # and a POST to a GET-only path is routed like any unknown POST (501).
        if method == "get":
            assert resp.status == 501, path
            _assert_valid(_json_schema(DOC["components"]["responses"]["NotImplemented"]), reply, path)
        else:
            assert resp.status == 400 and reply["message"] == "http method 'GET' not allowed; only POST"
            _assert_valid(_json_schema(DOC["components"]["responses"]["BadRequest"]), reply, path)
        if method != "get":
            continue
        async with api.session.get(api.base + path) as resp:
            documented = _resolve(ops["get"]["responses"][str(resp.status)])["content"]
            assert resp.content_type in documented, path
            if resp.content_type.endswith("json"):
                schema = documented[resp.content_type]["schema"]
                _assert_valid(schema, msgspec.json.decode(await resp.read()), path)


async def _post(api: Api, path: str, body: Any) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "X-Querator-Extensions": "1"}
    async with api.session.post(api.base + path, data=msgspec.json.encode(body), headers=headers) as resp:
        assert resp.content_type == "application/json"
        return resp.status, msgspec.json.decode(await resp.read())
