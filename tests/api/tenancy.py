"""Helpers of the tenancy tests (docs/tenancy.md): servers with tenancy on, callers with keys."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from querator.auth import generate_key
from tests.conftest import JSON, Api, ServerFactory

BOOTSTRAP_KEY = generate_key("boot")


async def tenant_server(start_server: ServerFactory, clock: Any, open_door: bool = False) -> Api:
    """A server with tenancy on: with the bootstrap admin key ``BOOTSTRAP_KEY``, or none (Open Door)."""
    keys = [] if open_door else [hashlib.sha256(BOOTSTRAP_KEY.encode()).digest()]
    return await start_server(clock, tenancy=True, bootstrap_keys=keys)


class Caller:
    """One caller of a server: its key ("" for none) on every request."""

    def __init__(self, api: Api, key: str = "") -> None:
        self.api = api
        self.key = key

    async def call(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        headers = dict(JSON)
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        async with self.api.session.post(
            self.api.base + path, data=msgspec.json.encode(body or {}), headers=headers
        ) as resp:
            reply = msgspec.json.decode(await resp.read())
            assert isinstance(reply, dict)
            return resp.status, reply

    async def ok(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        status, reply = await self.call(path, body)
        assert status == 200, (path, body, reply)
        return reply

    async def fails(self, path: str, body: dict[str, Any] | None, status: int, message: str) -> None:
        got, reply = await self.call(path, body)
        assert (got, reply.get("code"), reply.get("message")) == (status, status, message), (path, body)

    # -- shortcuts ----------------------------------------------------------------------------------------

    async def user(self, username: str) -> str:
        return str((await self.ok("/v1/users.create", {"username": username}))["id"])

    async def new_key(self, user_id: str, **fields: Any) -> str:
        return str((await self.ok("/v1/apikeys.create", {"user_id": user_id, **fields}))["key"])

    async def namespace(self, name: str, **fields: Any) -> None:
        await self.ok("/v1/namespaces.create", {"name": name, **fields})

    async def role(self, namespace: str, name: str, permissions: list[str]) -> str:
        body = {"namespace": namespace, "name": name, "permissions": permissions}
        return str((await self.ok("/v1/roles.create", body))["id"])

    async def bind(self, namespace: str, role_name: str, user_id: str) -> str:
        body = {"namespace": namespace, "role_name": role_name, "user_id": user_id}
        return str((await self.ok("/v1/rolebindings.create", body))["id"])

    async def member(self, username: str, namespace: str, role_name: str, **key_fields: Any) -> Caller:
        """A new user bound to ``role_name`` in ``namespace``, calling with a key of its own."""
        user_id = await self.user(username)
        await self.bind(namespace, role_name, user_id)
        return Caller(self.api, await self.new_key(user_id, **key_fields))

    async def create_queue(self, name: str, **fields: Any) -> None:
        body = {"queue_name": name, "lease_timeout": "1m", "expire_timeout": "1h", "requested_partitions": 1}
        await self.ok("/v1/queues.create", {**body, **fields})
