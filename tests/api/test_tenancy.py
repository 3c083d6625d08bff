"""The tenancy routes over HTTP (docs/tenancy.md): each route, its replies, and every validation message
of the reference's tenancy (its namespace_test.go, users_test.go and roles_test.go), in order."""

from __future__ import annotations

import re
from typing import Any

import pytest

from querator.clock import FakeClock
from querator.tenancy import STANDARD_ROLES
from querator.wire import PROTOBUF, decode, encode_protobuf
from querator.wire import messages as m
from tests.api.tenancy import BOOTSTRAP_KEY, Caller, tenant_server
from tests.conftest import IGNORABLE, ODD, Api, ServerFactory

KEY = re.compile(r"qtr-([a-z0-9]{1,16})-[0-9A-Za-z]{43}")


def _tag(key: str) -> str:
    """The tag of an API key, which must have the reference's form."""
    found = KEY.fullmatch(key)
    assert found is not None, key
    return found.group(1)


@pytest.fixture
async def admin(start_server: ServerFactory, clock: FakeClock) -> Caller:
    return Caller(await tenant_server(start_server, clock), BOOTSTRAP_KEY)


async def test_tenancy_off_answers_453(api: Api) -> None:
    """Without --tenancy the routes exist but have no storage, as the reference's without stores."""
    caller = Caller(api)
    await caller.fails(
        "/v1/namespaces.list",
        {},
        453,
        "namespace storage not configured; tenancy is off (start with --tenancy)",
    )
    await caller.fails(
        "/v1/users.create",
        {"username": "a"},
        453,
        "user storage not configured; tenancy is off (start with --tenancy)",
    )


async def test_bootstrap_makes_system_anonymous_and_the_standard_roles(admin: Caller) -> None:
    namespaces = (await admin.ok("/v1/namespaces.list"))["items"]
    assert [n["name"] for n in namespaces] == ["_system"]
    assert [u["username"] for u in (await admin.ok("/v1/users.list"))["items"]] == ["anonymous"]
    roles = (await admin.ok("/v1/roles.list", {"namespace": "_system"}))["items"]
    assert {r["name"]: r["permissions"] for r in roles} == {n: list(p) for n, p in STANDARD_ROLES.items()}
    assert len(STANDARD_ROLES["Admin"]) == 29
    # With a bootstrap key there is no Open Door: anonymous is bound to nothing.
    assert (await admin.ok("/v1/rolebindings.list")) == {}


# -- namespaces --------------------------------------------------------------------------------------------


async def test_namespaces_are_created_listed_by_name_updated_and_deleted(
    admin: Caller, clock: FakeClock
) -> None:
    await admin.namespace("team-b", description="B")
    await admin.namespace("team-a", api_key_tag="alpha")
    listed = (await admin.ok("/v1/namespaces.list"))["items"]
    assert [n["name"] for n in listed] == ["_system", "team-a", "team-b"]
    assert listed[1]["api_key_tag"] == "alpha" and listed[2]["description"] == "B"
    assert listed[1]["created_at"].startswith("20")
    page = await admin.ok("/v1/namespaces.list", {"pivot": "team-a", "limit": 1})
    assert [n["name"] for n in page["items"]] == ["team-a"]  # the pivot is inclusive
    assert await admin.ok("/v1/namespaces.list", {"pivot": "zzz"}) == {}
    # update replaces description and tag entirely
    await admin.ok("/v1/namespaces.update", {"name": "team-a", "description": "A"})
    listed = (await admin.ok("/v1/namespaces.list", {"pivot": "team-a", "limit": 1}))["items"]
    assert listed == [{"name": "team-a", "description": "A", "created_at": listed[0]["created_at"]}]
    await admin.ok("/v1/namespaces.delete", {"name": "team-b"})
    assert [n["name"] for n in (await admin.ok("/v1/namespaces.list"))["items"]] == ["_system", "team-a"]


NAMESPACE_ERRORS = [
    ({"name": ""}, 400, "namespace name is invalid; cannot be empty"),
    ({"name": "  "}, 400, "namespace name is invalid; cannot be empty"),
    ({"name": "a" * 257}, 400, "namespace name is invalid; cannot be greater than '256' characters"),
    ({"name": "a b"}, 400, "namespace name is invalid; 'a b' cannot contain whitespace"),
    ({"name": "a~b"}, 400, "namespace name is invalid; 'a~b' cannot contain '~' character"),
    ({"name": "a:b"}, 400, "namespace name is invalid; 'a:b' cannot contain ':' character"),
    (
        {"name": "ok", "api_key_tag": "a" * 17},
        400,
        "api_key_tag is invalid; cannot be greater than 16 characters",
    ),
    (
        {"name": "ok", "api_key_tag": "Prod"},
        400,
        "api_key_tag is invalid; must be lowercase alphanumeric only",
    ),
    ({"name": "_x"}, 400, "namespace name is reserved; '_x' names starting with '_' are reserved"),
]


@pytest.mark.parametrize(("body", "status", "message"), NAMESPACE_ERRORS)
async def test_namespace_create_errors(
    admin: Caller, body: dict[str, Any], status: int, message: str
) -> None:
    await admin.fails("/v1/namespaces.create", body, status, message)


HIDDEN = ODD + IGNORABLE


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
async def test_new_names_with_control_or_invisible_characters_are_refused(admin: Caller, char: str) -> None:
    """A new namespace, username, API key or role name with a control, format or default-ignorable
    character (querator/names.py); an existing one may still be named, as queues' (docs/tenancy.md)."""
    await admin.namespace("ns")
    user_id = await admin.user("u")
    odd = f"a{char}b"
    found = f"cannot contain control or invisible characters, found U+{ord(char):04X}"
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/namespaces.create", {"name": odd}, "namespace name"),
        ("/v1/users.create", {"username": odd}, "username"),
        ("/v1/apikeys.create", {"user_id": user_id, "name": odd}, "name"),
        ("/v1/roles.create", {"namespace": "ns", "name": odd, "permissions": []}, "name"),
    ]
    for path, body, what in cases:
        await admin.fails(path, body, 400, f"{what} is invalid; {found}")
    assert [n["name"] for n in (await admin.ok("/v1/namespaces.list"))["items"]] == ["_system", "ns"]
    assert sorted(u["username"] for u in (await admin.ok("/v1/users.list"))["items"]) == ["anonymous", "u"]
    assert await admin.ok("/v1/apikeys.list", {"user_id": user_id}) == {}
    assert await admin.ok("/v1/roles.list", {"namespace": "ns"}) == {}
    # Lookups keep the older rules: no such namespace or role, not a refused name.
    await admin.fails(
        "/v1/namespaces.delete", {"name": odd}, 453, f"namespace does not exist; '{odd}' was not found"
    )


async def test_namespace_duplicate_unknown_and_reserved(admin: Caller) -> None:
    await admin.namespace("dup")
    await admin.fails(
        "/v1/namespaces.create", {"name": "dup"}, 400, "namespace already exists; 'dup' already exists"
    )
    await admin.fails(
        "/v1/namespaces.update", {"name": "nope"}, 453, "namespace does not exist; 'nope' was not found"
    )
    await admin.fails(
        "/v1/namespaces.update",
        {"name": "_system"},
        400,
        "namespace name is reserved; '_system' names starting with '_' are reserved",
    )
    await admin.fails(
        "/v1/namespaces.delete", {"name": "nope"}, 453, "namespace does not exist; 'nope' was not found"
    )
    await admin.fails(
        "/v1/namespaces.delete", {"name": ""}, 400, "namespace name is invalid; cannot be empty"
    )
    await admin.fails(
        "/v1/namespaces.delete",
        {"name": "_system"},
        400,
        "namespace name is reserved; '_system' names starting with '_' are reserved",
    )


async def test_a_namespace_in_use_is_not_deleted_bindings_then_roles_then_queues(admin: Caller) -> None:
    await admin.namespace("busy")
    await admin.create_queue("q", namespace="busy")
    await admin.role("busy", "worker", ["queue.lease"])
    user_id = await admin.user("u")
    await admin.bind("busy", "worker", user_id)
    await admin.fails(
        "/v1/namespaces.delete",
        {"name": "busy"},
        400,
        "namespace has role bindings; 'busy' has role bindings, delete role bindings first",
    )
    await admin.ok(
        "/v1/rolebindings.delete", {"namespace": "busy", "role_name": "worker", "user_id": user_id}
    )
    await admin.fails(
        "/v1/namespaces.delete",
        {"name": "busy"},
        400,
        "namespace has roles; 'busy' has roles, delete roles first",
    )
    await admin.ok("/v1/roles.delete", {"namespace": "busy", "name": "worker"})
    await admin.fails(
        "/v1/namespaces.delete",
        {"name": "busy"},
        400,
        "namespace has queues; 'busy' has queues, delete queues first",
    )
    await admin.ok("/v1/queues.delete", {"queue_name": "q"})
    await admin.ok("/v1/namespaces.delete", {"name": "busy"})


async def test_queues_belong_to_namespaces_that_exist(admin: Caller) -> None:
    await admin.fails(
        "/v1/queues.create",
        {
            "queue_name": "q",
            "lease_timeout": "1m",
            "expire_timeout": "1h",
            "requested_partitions": 1,
            "namespace": "nope",
        },
        453,
        "namespace does not exist; 'nope' was not found",
    )
    await admin.namespace("a")
    await admin.create_queue("qa", namespace="a")
    await admin.create_queue("qs")
    assert [q["queue_name"] for q in (await admin.ok("/v1/queues.list", {"namespace": "a"}))["items"]] == [
        "qa"
    ]
    assert [q["queue_name"] for q in (await admin.ok("/v1/queues.list"))["items"]] == ["qs"]


# -- users and API keys ------------------------------------------------------------------------------------


async def test_users_are_created_listed_and_deleted_with_their_keys_and_bindings(admin: Caller) -> None:
    first = await admin.user("alice")
    second = (await admin.ok("/v1/users.create", {"username": "bob", "email": "b@x", "external_id": "e1"}))[
        "id"
    ]
    users = (await admin.ok("/v1/users.list"))["items"]
    assert [u["username"] for u in users if u["username"] != "anonymous"] == ["alice", "bob"]
    bob = next(u for u in users if u["id"] == second)
    assert (bob["email"], bob["external_id"]) == ("b@x", "e1") and bob["created_at"] == bob["updated_at"]
    page = await admin.ok("/v1/users.list", {"pivot": first, "limit": 1})
    assert [u["id"] for u in page["items"]] == [first]
    key = await admin.new_key(first)
    await admin.bind("_system", "PublicViewer", first)
    alice = Caller(admin.api, key)
    assert (await alice.call("/v1/queues.list"))[0] == 403  # authenticated, not allowed
    await admin.ok("/v1/users.delete", {"id": first})
    await alice.fails("/v1/queues.list", {}, 401, "api key does not exist")
    assert await admin.ok("/v1/apikeys.list", {"user_id": first}) == {}
    assert await admin.ok("/v1/rolebindings.list") == {}
    await admin.fails("/v1/users.delete", {"id": first}, 453, f"user does not exist; '{first}' was not found")


USER_ERRORS = [
    ({"username": ""}, "username is invalid; cannot be empty"),
    ({"username": "u" * 129}, "username is invalid; cannot be greater than '128' characters"),
    ({"username": "u", "email": "e" * 257}, "email is invalid; cannot be greater than '256' characters"),
    (
        {"username": "u", "external_id": "x" * 257},
        "external_id is invalid; cannot be greater than '256' characters",
    ),
]


@pytest.mark.parametrize(("body", "message"), USER_ERRORS)
async def test_user_create_errors(admin: Caller, body: dict[str, Any], message: str) -> None:
    await admin.fails("/v1/users.create", body, 400, message)


async def test_a_username_is_taken_once(admin: Caller) -> None:
    await admin.user("carol")
    await admin.fails(
        "/v1/users.create", {"username": "carol"}, 400, "username is already taken; 'carol' is already taken"
    )


async def test_api_keys_are_shown_once_and_stored_as_hashes(admin: Caller) -> None:
    user_id = await admin.user("dave")
    other = await admin.user("erin")
    created = await admin.ok("/v1/apikeys.create", {"user_id": user_id, "name": "ci"})
    assert _tag(created["key"]) == "live"
    assert created["prefix"] == created["key"][: len("qtr-live-") + 8]
    await admin.new_key(other)
    listed = (await admin.ok("/v1/apikeys.list", {"user_id": user_id}))["items"]
    assert listed == [
        {
            "id": created["id"],
            "user_id": user_id,
            "name": "ci",
            "prefix": created["prefix"],
            "created_at": listed[0]["created_at"],
        }
    ]
    assert len((await admin.ok("/v1/apikeys.list"))["items"]) == 2
    # The store holds the key's SHA-256 only, never the key.
    records = await admin.api.service.store.list_records("apikey", "", "", 10)
    assert all(created["key"].encode() not in value for _, value in records)
    await admin.ok("/v1/apikeys.delete", {"id": created["id"]})
    await Caller(admin.api, created["key"]).fails("/v1/queues.list", {}, 401, "api key does not exist")
    await admin.fails("/v1/apikeys.delete", {"id": created["id"]}, 401, "api key does not exist")


async def test_a_key_tag_comes_from_the_request_then_the_namespace_then_live(admin: Caller) -> None:
    user_id = await admin.user("f")
    await admin.namespace("tagged", api_key_tag="stage")
    await admin.namespace("plain")
    assert _tag(await admin.new_key(user_id, key_tag="dev", namespace_scope="tagged")) == "dev"
    assert _tag(await admin.new_key(user_id, namespace_scope="tagged")) == "stage"
    assert _tag(await admin.new_key(user_id, namespace_scope="plain")) == "live"


KEY_ERRORS = [
    ({}, 400, "user_id is invalid; cannot be empty"),
    ({"user_id": "x", "name": "n" * 129}, 400, "name is invalid; cannot be greater than '128' characters"),
    ({"user_id": "x", "key_tag": "UP"}, 400, "key_tag is invalid; must be lowercase alphanumeric only"),
    ({"user_id": "x", "key_tag": "t" * 17}, 400, "key_tag is invalid; cannot be greater than 16 characters"),
    ({"user_id": "nobody"}, 453, "user does not exist; 'nobody' was not found"),
]


@pytest.mark.parametrize(("body", "status", "message"), KEY_ERRORS)
async def test_api_key_create_errors(admin: Caller, body: dict[str, Any], status: int, message: str) -> None:
    await admin.fails("/v1/apikeys.create", body, status, message)


# -- roles and role bindings -------------------------------------------------------------------------------


async def test_roles_are_created_listed_updated_and_deleted(admin: Caller) -> None:
    await admin.namespace("ns")
    role_id = await admin.role("ns", "reader", ["queue.stats"])
    roles = (await admin.ok("/v1/roles.list", {"namespace": "ns"}))["items"]
    assert roles == [
        {
            "id": role_id,
            "namespace": "ns",
            "name": "reader",
            "permissions": ["queue.stats"],
            "created_at": roles[0]["created_at"],
        }
    ]
    await admin.ok(
        "/v1/roles.update",
        {"namespace": "ns", "name": "reader", "permissions": ["queue.list", "queue.stats"]},
    )
    roles = (await admin.ok("/v1/roles.list", {"namespace": "ns"}))["items"]
    assert roles[0]["permissions"] == ["queue.list", "queue.stats"]
    await admin.fails(
        "/v1/roles.create",
        {"namespace": "ns", "name": "reader"},
        400,
        "role already exists; 'ns:reader' already exists",
    )
    await admin.ok("/v1/roles.delete", {"namespace": "ns", "name": "reader"})
    assert await admin.ok("/v1/roles.list", {"namespace": "ns"}) == {}


ROLE_ERRORS = [
    ({"name": "r"}, 400, "namespace is invalid; cannot be empty"),
    ({"namespace": "ns"}, 400, "name is invalid; cannot be empty"),
    ({"namespace": "ns", "name": "r" * 129}, 400, "name is invalid; cannot be greater than '128' characters"),
    ({"namespace": "ns", "name": "a:b"}, 400, "name is invalid; 'a:b' cannot contain ':' character"),
    (
        {"namespace": "ns", "name": "r", "permissions": ["queue.fly"]},
        400,
        "permission is invalid; 'queue.fly' is not a recognized permission",
    ),
    (
        {"namespace": "ns", "name": "Admin"},
        400,
        "cannot modify or delete standard role; 'Admin' is a standard role",
    ),
    ({"namespace": "nope", "name": "r"}, 453, "namespace does not exist; 'nope' was not found"),
]


@pytest.mark.parametrize(("body", "status", "message"), ROLE_ERRORS)
async def test_role_create_errors(admin: Caller, body: dict[str, Any], status: int, message: str) -> None:
    await admin.namespace("ns")
    await admin.fails("/v1/roles.create", body, status, message)


async def test_standard_roles_cannot_change_and_used_roles_stay(admin: Caller) -> None:
    await admin.fails(
        "/v1/roles.update",
        {"namespace": "_system", "name": "Admin"},
        400,
        "cannot modify or delete standard role; 'Admin' is a standard role",
    )
    await admin.fails(
        "/v1/roles.delete",
        {"name": "NamespaceOwner"},
        400,
        "cannot modify or delete standard role; 'NamespaceOwner' is a standard role",
    )
    # The name is checked before the role is looked up: the reference answers so in any namespace.
    await admin.namespace("ns")
    for route in ("/v1/roles.update", "/v1/roles.delete"):
        await admin.fails(
            route,
            {"namespace": "ns", "name": "PublicViewer"},
            400,
            "cannot modify or delete standard role; 'PublicViewer' is a standard role",
        )
    await admin.fails(
        "/v1/roles.update",
        {"namespace": "_system", "name": "nope"},
        453,
        "role does not exist; '_system:nope' was not found",
    )
    await admin.fails("/v1/roles.update", {"name": "x"}, 400, "namespace is invalid; cannot be empty")
    await admin.fails("/v1/roles.update", {"namespace": "x"}, 400, "name is invalid; cannot be empty")
    await admin.fails(
        "/v1/roles.update",
        {"namespace": "_system", "name": "x", "permissions": ["no"]},
        400,
        "permission is invalid; 'no' is not a recognized permission",
    )
    await admin.role("_system", "ops", ["queue.stats"])
    await admin.bind("_system", "ops", await admin.user("g"))
    await admin.fails(
        "/v1/roles.delete",
        {"name": "ops"},
        400,
        "role has active bindings; 'ops' has active bindings, delete bindings first",
    )


async def test_role_bindings_are_created_listed_and_deleted(admin: Caller) -> None:
    user_id = await admin.user("h")
    binding_id = await admin.bind("_system", "PublicViewer", user_id)
    listed = (await admin.ok("/v1/rolebindings.list", {"namespace": ""}))["items"]
    viewer = next(r for r in (await admin.ok("/v1/roles.list"))["items"] if r["name"] == "PublicViewer")
    assert listed == [
        {
            "id": binding_id,
            "namespace": "_system",
            "user_id": user_id,
            "role_id": viewer["id"],
            "created_at": listed[0]["created_at"],
        }
    ]
    await admin.fails(
        "/v1/rolebindings.create",
        {"namespace": "_system", "role_name": "PublicViewer", "user_id": user_id},
        400,
        f"role binding already exists; binding for user '{user_id}' to role '{viewer['id']}' in namespace "
        "'_system' already exists",
    )
    # An empty namespace means _system.
    await admin.ok("/v1/rolebindings.delete", {"role_name": "PublicViewer", "user_id": user_id})
    assert await admin.ok("/v1/rolebindings.list") == {}
    await admin.fails(
        "/v1/rolebindings.delete",
        {"role_name": "PublicViewer", "user_id": user_id},
        453,
        f"role binding does not exist; '_system:{user_id}:{viewer['id']}' was not found",
    )


BINDING_ERRORS = [
    ({"role_name": "r", "user_id": "u"}, 400, "namespace is invalid; cannot be empty"),
    ({"namespace": "_system", "user_id": "u"}, 400, "role_name is invalid; cannot be empty"),
    ({"namespace": "_system", "role_name": "r"}, 400, "user_id is invalid; cannot be empty"),
    (
        {"namespace": "_system", "role_name": "r", "user_id": "a:b"},
        400,
        "user_id is invalid; 'a:b' cannot contain ':' character",
    ),
    (
        {"namespace": "_system", "role_name": "nope", "user_id": "u"},
        453,
        "role does not exist; '_system:nope' was not found",
    ),
    (
        {"namespace": "_system", "role_name": "Admin", "user_id": "nobody"},
        453,
        "user does not exist; 'nobody' was not found",
    ),
]


@pytest.mark.parametrize(("body", "status", "message"), BINDING_ERRORS)
async def test_role_binding_create_errors(
    admin: Caller, body: dict[str, Any], status: int, message: str
) -> None:
    await admin.fails("/v1/rolebindings.create", body, status, message)


async def test_role_binding_delete_errors(admin: Caller) -> None:
    await admin.fails(
        "/v1/rolebindings.delete",
        {"role_name": "Admin", "user_id": "a:b"},
        400,
        "user_id is invalid; 'a:b' cannot contain ':' character",
    )
    await admin.fails(
        "/v1/rolebindings.delete",
        {"role_name": "nope", "user_id": "u"},
        453,
        "role does not exist; '_system:nope' was not found",
    )


@pytest.mark.parametrize(
    "path",
    ["/v1/namespaces.list", "/v1/users.list", "/v1/apikeys.list", "/v1/roles.list", "/v1/rolebindings.list"],
)
async def test_list_limits_are_bounded(admin: Caller, path: str) -> None:
    await admin.fails(path, {"limit": -1}, 400, "limit is invalid; limit cannot be negative")
    await admin.fails(path, {"limit": 65537}, 400, "limit is invalid; cannot be greater than 65536")


async def test_the_routes_speak_binary_protobuf(admin: Caller) -> None:
    headers = {"Content-Type": PROTOBUF, "Accept": PROTOBUF, "Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    body = encode_protobuf(m.UserCreateRequest(username="pb"))
    async with admin.api.session.post(
        admin.api.base + "/v1/users.create", data=body, headers=headers
    ) as resp:
        assert resp.status == 200
        created = decode(await resp.read(), PROTOBUF, m.UserCreateResponse)
    body = encode_protobuf(m.UsersListRequest())
    async with admin.api.session.post(admin.api.base + "/v1/users.list", data=body, headers=headers) as resp:
        users = decode(await resp.read(), PROTOBUF, m.UsersListResponse)
    assert created.id in {u.id for u in users.items}
