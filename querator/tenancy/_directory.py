"""The rules of tenancy's records over ``Records``: uniqueness, lookups and cascades, written once for
every backend (docs/tenancy.md "Storage").

Every entity is one record under its id, plus index records under other keys. A write that makes an
index claims it first with ``add_record`` (which fails when the key is taken: the uniqueness rule), then
writes the entity; a delete removes the entity first, then its indexes. A crash between two writes
leaves at worst an index without its entity, which every reader skips and the next write of the same
key repairs. Namespace names and role names cannot contain ':', and ids are KSUIDs, so keys joined with
':' never collide, and a ':'-terminated prefix is one key range: ``[p, p[:-1] + ';')``.
"""

from __future__ import annotations

from typing import Final

from querator.errors import InvalidOption, RequestFailed, Unauthorized
from querator.storage.base import Store
from querator.tenancy._model import ApiKey, Binding, Namespace, R, Record, Role, User, decode, encode

NAMESPACE: Final = "namespace"
USER: Final = "user"
USERNAME: Final = "user.name"
APIKEY: Final = "apikey"
APIKEY_HASH: Final = "apikey.hash"
APIKEY_USER: Final = "apikey.user"
APIKEY_USE: Final = "apikey.use"
"""The stamps (``Records.raise_stamps``) of keys' last use, by key id: apart from the key's record, so
that noting a use is a blind write (docs/adr/0041)."""
ROLE: Final = "role"
ROLE_NAME: Final = "role.name"
BINDING: Final = "binding"
BINDING_USER: Final = "binding.user"
BINDING_ROLE: Final = "binding.role"
BINDING_UNIQUE: Final = "binding.unique"
BOOTSTRAP: Final = "bootstrap"

MAX_BINDINGS_READ: Final = 100
"""Bindings of one user in one namespace an authorization reads at most (as the reference)."""
CASCADE_PAGE: Final = 1000


def _range(prefix: str) -> tuple[str, str]:
    """The key range of every key that starts with ``prefix`` (which ends with ':')."""
    return prefix, prefix[:-1] + ";"


class Directory:
    """Namespaces, users, API keys, roles and role bindings in a store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- helpers ----------------------------------------------------------------------------------------

    async def _get(self, kind: str, key: str, type_: type[R]) -> R | None:
        value = await self.store.get_record(kind, key)
        return None if value is None else decode(value, type_)

    async def _list(self, kind: str, start: str, end: str, limit: int, type_: type[R]) -> list[R]:
        return [decode(v, type_) for _, v in await self.store.list_records(kind, start, end, limit)]

    async def _put(self, kind: str, key: str, record: Record) -> None:
        await self.store.put_record(kind, key, encode(record))

    # -- namespaces -------------------------------------------------------------------------------------

    async def add_namespace(self, ns: Namespace) -> None:
        if not await self.store.add_record(NAMESPACE, ns.name, encode(ns)):
            raise InvalidOption(f"namespace already exists; '{ns.name}' already exists")

    async def get_namespace(self, name: str) -> Namespace | None:
        return await self._get(NAMESPACE, name, Namespace)

    async def update_namespace(self, ns: Namespace) -> None:
        """Replaces description and api_key_tag; created_at stays."""
        current = await self.get_namespace(ns.name)
        if current is None:
            raise namespace_missing(ns.name)
        ns.created_at = current.created_at
        await self._put(NAMESPACE, ns.name, ns)

    async def list_namespaces(self, pivot: str, limit: int) -> list[Namespace]:
        return await self._list(NAMESPACE, pivot, "", limit, Namespace)

    async def delete_namespace(self, name: str) -> None:
        """Refused while the namespace has role bindings, then roles, then queues (in that order, so the
        message names what to delete first)."""
        if await self.get_namespace(name) is None:
            raise namespace_missing(name)
        if await self.store.list_records(BINDING, *_range(f"{name}:"), 1):
            raise InvalidOption(
                f"namespace has role bindings; '{name}' has role bindings, delete role bindings first"
            )
        if await self.store.list_records(ROLE, *_range(f"{name}:"), 1):
            raise InvalidOption(f"namespace has roles; '{name}' has roles, delete roles first")
        if await self.store.list_queues("", 1, name):
            raise InvalidOption(f"namespace has queues; '{name}' has queues, delete queues first")
        await self.store.delete_record(NAMESPACE, name)

    # -- users ------------------------------------------------------------------------------------------

    async def add_user(self, user: User) -> None:
        """Stores a new user; adding the same id again is not an error (every node's bootstrap adds
        the anonymous user under one id)."""
        if not await self.store.add_record(USERNAME, user.username, user.id.encode()):
            owner = await self.store.get_record(USERNAME, user.username)
            owner_id = owner.decode() if owner is not None else user.id
            if owner_id != user.id and await self.get_user(owner_id) is not None:
                raise InvalidOption(f"username is already taken; '{user.username}' is already taken")
            await self.store.put_record(USERNAME, user.username, user.id.encode())  # a stale index
        await self._put(USER, user.id, user)

    async def get_user(self, user_id: str) -> User | None:
        return await self._get(USER, user_id, User) if user_id else None

    async def user_named(self, username: str) -> User | None:
        user_id = await self.store.get_record(USERNAME, username)
        user = None if user_id is None else await self.get_user(user_id.decode())
        return user if user is not None and user.username == username else None

    async def list_users(self, pivot: str, limit: int) -> list[User]:
        return await self._list(USER, pivot, "", limit, User)

    async def delete_user(self, user_id: str) -> None:
        """Deletes the user first (its keys stop working at once), then its bindings and keys."""
        user = await self.get_user(user_id)
        if user is None:
            raise RequestFailed(f"user does not exist; '{user_id}' was not found")
        await self.store.delete_record(USER, user_id)
        await self.store.delete_record(USERNAME, user.username)
        while bindings := await self._list(BINDING_USER, *_range(f"{user_id}:"), CASCADE_PAGE, Binding):
            for binding in bindings:
                await self._delete_binding(binding)
        while keys := await self.store.list_records(APIKEY_USER, *_range(f"{user_id}:"), CASCADE_PAGE):
            for key, _ in keys:
                await self.delete_key(key.split(":", 1)[1], user_id)

    # -- API keys ---------------------------------------------------------------------------------------

    async def add_key(self, key: ApiKey) -> None:
        await self.store.put_record(APIKEY_HASH, key.key_hash, key.id.encode())
        await self.store.put_record(APIKEY_USER, f"{key.user_id}:{key.id}", b"")
        await self._put(APIKEY, key.id, key)

    async def get_key(self, key_id: str) -> ApiKey | None:
        return await self._get(APIKEY, key_id, ApiKey) if key_id else None

    async def key_with_hash(self, key_hash: str) -> ApiKey | None:
        key_id = await self.store.get_record(APIKEY_HASH, key_hash)
        key = None if key_id is None else await self.get_key(key_id.decode())
        return key if key is not None and key.key_hash == key_hash else None

    async def list_keys(self, user_id: str, pivot: str, limit: int) -> list[ApiKey]:
        """Keys by id from ``pivot``: every key, or only ``user_id``'s, with their last use."""
        if not user_id:
            keys = await self._list(APIKEY, pivot, "", limit, ApiKey)
        else:
            start, end = _range(f"{user_id}:")
            keys = []
            for index, _ in await self.store.list_records(APIKEY_USER, max(start, start + pivot), end, limit):
                key = await self.get_key(index.split(":", 1)[1])
                if key is not None:
                    keys.append(key)
        # A key written before stamps kept its last use in its record: the later of the two counts.
        used = await self.store.get_stamps(APIKEY_USE, [k.id for k in keys])
        for key in keys:
            key.last_used_at = max(key.last_used_at, used.get(key.id, 0))
        return keys

    async def delete_key(self, key_id: str, user_id: str = "") -> ApiKey:
        """Deletes a key; 401 ``api key does not exist`` when there is none (the reference's answer)."""
        key = await self.get_key(key_id)
        if key is None:
            if user_id:  # a stale index of a cascade
                await self.store.delete_record(APIKEY_USER, f"{user_id}:{key_id}")
            raise Unauthorized("api key does not exist")
        await self.store.delete_record(APIKEY, key.id)
        await self.store.delete_record(APIKEY_HASH, key.key_hash)
        await self.store.delete_record(APIKEY_USER, f"{key.user_id}:{key.id}")
        await self.store.delete_stamp(APIKEY_USE, key.id)
        return key

    async def note_key_uses(self, used_at: dict[str, int]) -> None:
        """Records when keys were last used, by key id (batched by the caller: not a write per request):
        blind writes that keep the latest, never a read of the keys."""
        if used_at:
            await self.store.raise_stamps(APIKEY_USE, used_at)

    # -- roles ------------------------------------------------------------------------------------------

    async def add_role(self, role: Role) -> None:
        name_key = f"{role.namespace}:{role.name}"
        if not await self.store.add_record(ROLE_NAME, name_key, role.id.encode()):
            existing = await self.role_named(role.namespace, role.name)
            if existing is not None and existing.id != role.id:  # the same id: a bootstrap again
                raise InvalidOption(f"role already exists; '{role.namespace}:{role.name}' already exists")
            await self.store.put_record(ROLE_NAME, name_key, role.id.encode())  # a stale index
        await self._put(ROLE, f"{role.namespace}:{role.id}", role)

    async def get_role(self, namespace: str, role_id: str) -> Role | None:
        return await self._get(ROLE, f"{namespace}:{role_id}", Role)

    async def role_named(self, namespace: str, name: str) -> Role | None:
        role_id = await self.store.get_record(ROLE_NAME, f"{namespace}:{name}")
        role = None if role_id is None else await self.get_role(namespace, role_id.decode())
        return role if role is not None and role.name == name else None

    async def update_role(self, role: Role) -> None:
        await self._put(ROLE, f"{role.namespace}:{role.id}", role)

    async def list_roles(self, namespace: str, pivot: str, limit: int) -> list[Role]:
        start, end = _range(f"{namespace}:")
        return await self._list(ROLE, start + pivot, end, limit, Role)

    async def delete_role(self, role: Role) -> None:
        if await self.store.list_records(BINDING_ROLE, *_range(f"{role.id}:"), 1):
            raise InvalidOption(
                f"role has active bindings; '{role.name}' has active bindings, delete bindings first"
            )
        await self.store.delete_record(ROLE, f"{role.namespace}:{role.id}")
        await self.store.delete_record(ROLE_NAME, f"{role.namespace}:{role.name}")

    # -- role bindings ----------------------------------------------------------------------------------

    async def add_binding(self, binding: Binding) -> None:
        unique = f"{binding.namespace}:{binding.user_id}:{binding.role_id}"
        if not await self.store.add_record(BINDING_UNIQUE, unique, binding.id.encode()):
            existing = await self.store.get_record(BINDING_UNIQUE, unique)
            live = existing is not None and await self._get(
                BINDING, f"{binding.namespace}:{existing.decode()}", Binding
            )
            if live:
                raise InvalidOption(
                    f"role binding already exists; binding for user '{binding.user_id}' to role "
                    f"'{binding.role_id}' in namespace '{binding.namespace}' already exists"
                )
            await self.store.put_record(BINDING_UNIQUE, unique, binding.id.encode())  # a stale index
        # The index that grants (BINDING_USER) is written last and deleted first: a binding cut short
        # by a crash may be listed without granting anything, never grant without being listed.
        value = encode(binding)
        await self.store.put_record(BINDING_ROLE, f"{binding.role_id}:{binding.id}", b"")
        await self.store.put_record(BINDING, f"{binding.namespace}:{binding.id}", value)
        await self.store.put_record(
            BINDING_USER, f"{binding.user_id}:{binding.namespace}:{binding.id}", value
        )

    async def list_bindings(self, namespace: str, pivot: str, limit: int) -> list[Binding]:
        start, end = _range(f"{namespace}:")
        return await self._list(BINDING, start + pivot, end, limit, Binding)

    async def bindings_of(self, user_id: str, namespace: str) -> list[Binding]:
        """The user's bindings in one namespace (at most ``MAX_BINDINGS_READ``): what authorizes it."""
        return await self._list(BINDING_USER, *_range(f"{user_id}:{namespace}:"), MAX_BINDINGS_READ, Binding)

    async def has_bindings(self) -> bool:
        """Whether any role binding exists, in any namespace."""
        return bool(await self.store.list_records(BINDING, "", "", 1))

    async def delete_binding(self, namespace: str, user_id: str, role_id: str) -> None:
        unique = f"{namespace}:{user_id}:{role_id}"
        binding_id = await self.store.get_record(BINDING_UNIQUE, unique)
        binding = (
            None
            if binding_id is None
            else await self._get(BINDING, f"{namespace}:{binding_id.decode()}", Binding)
        )
        if binding is None:
            raise RequestFailed(f"role binding does not exist; '{unique}' was not found")
        await self._delete_binding(binding)

    async def _delete_binding(self, binding: Binding) -> None:
        await self.store.delete_record(BINDING_USER, f"{binding.user_id}:{binding.namespace}:{binding.id}")
        await self.store.delete_record(BINDING, f"{binding.namespace}:{binding.id}")
        await self.store.delete_record(BINDING_ROLE, f"{binding.role_id}:{binding.id}")
        await self.store.delete_record(
            BINDING_UNIQUE, f"{binding.namespace}:{binding.user_id}:{binding.role_id}"
        )

    # -- bootstrap --------------------------------------------------------------------------------------

    async def first_time(self, step: str) -> bool:
        """True once per store for ``step``: bootstrap steps an operator may undo stay undone."""
        return await self.store.add_record(BOOTSTRAP, step, b"")


def namespace_missing(name: str) -> RequestFailed:
    return RequestFailed(f"namespace does not exist; '{name}' was not found")
