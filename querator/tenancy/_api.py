"""``Tenancy``: the v1 routes of namespaces, users, API keys, roles and role bindings, and the bootstrap
of a store (docs/tenancy.md). Each route validates, then authorizes, then acts, as the reference does."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry

from querator import _tasks
from querator.auth import DEFAULT_TAG, generate_key
from querator.clock import Clock, from_datetime, sleep_until, to_datetime
from querator.errors import InvalidOption, QueratorError, RequestFailed
from querator.ksuid import KSUID_MAX_VALUE, KsuidGenerator, format_ksuid
from querator.storage.base import Store
from querator.tenancy import _permissions as p
from querator.tenancy._access import Access, Principal, RequestContext, hash_key
from querator.tenancy._directory import Directory, namespace_missing
from querator.tenancy._model import ApiKey, Binding, Namespace, Role, User
from querator.tenancy._validation import (
    check_binding,
    check_description,
    check_key,
    check_namespace_name,
    check_reserved,
    check_role,
    check_tag,
    check_user,
    check_user_id,
    list_limit,
    or_system,
)
from querator.wire import messages as m

log = logging.getLogger(__name__)

ANONYMOUS: Final = "anonymous"
FLUSH_INTERVAL_US: Final = 10_000_000
"""Microseconds between two writes of keys' ``last_used_at``."""
OPEN_DOOR: Final = "open-door"
"""The bootstrap step that decides, once per store, whether Open Door is made."""
PREFIX_ENTROPY: Final = 8
"""Characters of a key's random part its ``prefix`` shows."""


class Tenancy:
    """Tenancy over a store; ``enabled`` (``--tenancy``) turns on authorization and these routes."""

    def __init__(self, store: Store, clock: Clock, registry: CollectorRegistry | None = None) -> None:
        self.directory = Directory(store)
        self.clock = clock
        self.enabled = False
        self.access = Access(self.directory, clock, registry=registry)
        self._ids = KsuidGenerator(clock.now() // 1_000_000)
        self.flusher: _tasks.Supervised | None = None

    def enable(self, bootstrap_hashes: Iterable[bytes] = ()) -> None:
        """Turns tenancy on; ``bootstrap_hashes`` (``--api-keys``) are the keys of the bootstrap admin."""
        self.enabled = True
        self.access.bootstrap_hashes = tuple(bootstrap_hashes)

    async def start(self) -> None:
        """Bootstraps the store (``_system``, the anonymous user, the standard roles) and starts writing
        keys' ``last_used_at``; nothing when tenancy is off."""
        if not self.enabled:
            return
        await self._bootstrap()
        self.flusher = _tasks.Supervised(self._flush_forever, "tenancy-flush", self.clock)

    async def stop(self) -> None:
        if self.flusher is not None:
            await self.flusher.stop()
            with contextlib.suppress(QueratorError):
                await self.access.flush()

    async def authorize(self, ctx: RequestContext, namespace: str, permission: str) -> None:
        """403 unless the caller of ``ctx`` may (``Access.authorize``); nothing when tenancy is off."""
        if self.enabled:
            await self.access.authorize(ctx, namespace, permission)

    async def check_namespace(self, namespace: str) -> None:
        """453 when tenancy is on and ``namespace`` does not exist (a queue's, on create)."""
        if self.enabled and await self.directory.get_namespace(namespace) is None:
            raise namespace_missing(namespace)

    def _new_id(self) -> str:
        return self._ids.next()

    def _require(self, what: str) -> None:
        if not self.enabled:
            raise RequestFailed(f"{what} storage not configured; tenancy is off (start with --tenancy)")

    # -- namespaces -------------------------------------------------------------------------------------

    async def create_namespace(self, ctx: RequestContext, req: m.NamespaceInfo) -> None:
        self._require("namespace")
        self._check_namespace(req, created=True)
        await self.authorize(ctx, p.SYSTEM, p.NAMESPACE_CREATE)
        check_reserved(req.name)
        await self.directory.add_namespace(
            Namespace(
                name=req.name,
                description=req.description,
                api_key_tag=req.api_key_tag,
                created_at=self.clock.now(),
            )
        )

    async def update_namespace(self, ctx: RequestContext, req: m.NamespaceInfo) -> None:
        self._require("namespace")
        self._check_namespace(req)
        await self.authorize(ctx, p.SYSTEM, p.NAMESPACE_UPDATE)
        check_reserved(req.name)
        await self.directory.update_namespace(
            Namespace(name=req.name, description=req.description, api_key_tag=req.api_key_tag)
        )

    @staticmethod
    def _check_namespace(req: m.NamespaceInfo, created: bool = False) -> None:
        check_namespace_name(req.name, created=created)
        check_tag("api_key_tag", req.api_key_tag)
        check_description(req.description)

    async def list_namespaces(
        self, ctx: RequestContext, req: m.NamespacesListRequest
    ) -> m.NamespacesListResponse:
        self._require("namespace")
        limit = list_limit(req.limit)
        await self.authorize(ctx, p.SYSTEM, p.NAMESPACE_LIST)
        found = await self.directory.list_namespaces(req.pivot, limit)
        return m.NamespacesListResponse(
            items=[
                m.NamespaceInfo(
                    name=n.name,
                    description=n.description,
                    created_at=to_datetime(n.created_at),
                    api_key_tag=n.api_key_tag,
                )
                for n in found
            ]
        )

    async def delete_namespace(self, ctx: RequestContext, req: m.NamespacesDeleteRequest) -> None:
        self._require("namespace")
        check_namespace_name(req.name)
        await self.authorize(ctx, p.SYSTEM, p.NAMESPACE_DELETE)
        check_reserved(req.name)
        await self.directory.delete_namespace(req.name)

    # -- users ------------------------------------------------------------------------------------------

    async def create_user(self, ctx: RequestContext, req: m.UserCreateRequest) -> m.UserCreateResponse:
        self._require("user")
        check_user(req.username, req.email, req.external_id)
        await self.authorize(ctx, p.SYSTEM, p.USER_CREATE)
        now = self.clock.now()
        user = User(
            id=self._new_id(),
            username=req.username,
            email=req.email,
            external_id=req.external_id,
            created_at=now,
            updated_at=now,
        )
        await self.directory.add_user(user)
        return m.UserCreateResponse(id=user.id)

    async def list_users(self, ctx: RequestContext, req: m.UsersListRequest) -> m.UsersListResponse:
        self._require("user")
        limit = list_limit(req.limit)
        await self.authorize(ctx, p.SYSTEM, p.USER_LIST)
        return m.UsersListResponse(
            items=[
                m.User(
                    id=u.id,
                    username=u.username,
                    external_id=u.external_id,
                    email=u.email,
                    created_at=to_datetime(u.created_at),
                    updated_at=to_datetime(u.updated_at),
                )
                for u in await self.directory.list_users(req.pivot, limit)
            ]
        )

    async def delete_user(self, ctx: RequestContext, req: m.UsersDeleteRequest) -> None:
        self._require("user")
        await self.authorize(ctx, p.SYSTEM, p.USER_DELETE)
        try:
            await self.directory.delete_user(req.id)
        finally:
            self.access.forget_user()

    # -- API keys ---------------------------------------------------------------------------------------

    async def create_key(self, ctx: RequestContext, req: m.APIKeyCreateRequest) -> m.APIKeyCreateResponse:
        self._require("api key")
        check_key(req.user_id, req.name, req.key_tag)
        await self.authorize(ctx, p.SYSTEM, p.APIKEY_CREATE)
        if await self.directory.get_user(req.user_id) is None:
            raise RequestFailed(f"user does not exist; '{req.user_id}' was not found")
        tag = req.key_tag
        if not tag and req.namespace_scope:
            scope = await self.directory.get_namespace(req.namespace_scope)
            tag = scope.api_key_tag if scope is not None else ""
        tag = tag or DEFAULT_TAG
        key = generate_key(tag)
        prefix = key[: len(f"qtr-{tag}-") + PREFIX_ENTROPY]
        stored = ApiKey(
            id=self._new_id(),
            user_id=req.user_id,
            key_hash=hash_key(key),
            prefix=prefix,
            name=req.name,
            namespace_scope=req.namespace_scope,
            expires_at=from_datetime(req.expires_at) if req.expires_at is not None else 0,
            created_at=self.clock.now(),
        )
        await self.directory.add_key(stored)
        return m.APIKeyCreateResponse(id=stored.id, key=key, prefix=prefix)

    async def list_keys(self, ctx: RequestContext, req: m.APIKeysListRequest) -> m.APIKeysListResponse:
        self._require("api key")
        limit = list_limit(req.limit)
        await self.authorize(ctx, p.SYSTEM, p.APIKEY_LIST)
        return m.APIKeysListResponse(
            items=[
                m.APIKeyMetadata(
                    id=k.id,
                    user_id=k.user_id,
                    namespace_scope=k.namespace_scope,
                    name=k.name,
                    prefix=k.prefix,
                    expires_at=to_datetime(k.expires_at) if k.expires_at else None,
                    last_used_at=to_datetime(k.last_used_at) if k.last_used_at else None,
                    created_at=to_datetime(k.created_at),
                )
                for k in await self.directory.list_keys(req.user_id, req.pivot, limit)
            ]
        )

    async def delete_key(self, ctx: RequestContext, req: m.APIKeysDeleteRequest) -> None:
        self._require("api key")
        await self.authorize(ctx, p.SYSTEM, p.APIKEY_DELETE)
        key = await self.directory.delete_key(req.id)
        self.access.forget_key(key.key_hash)

    # -- roles ------------------------------------------------------------------------------------------

    async def create_role(self, ctx: RequestContext, req: m.RoleCreateRequest) -> m.RoleCreateResponse:
        self._require("role")
        check_role(req.namespace, req.name, req.permissions, created=True)
        await self.authorize(ctx, req.namespace, p.ROLE_CREATE)
        _refuse_standard(req.name)
        if await self.directory.get_namespace(req.namespace) is None:
            raise namespace_missing(req.namespace)
        role = Role(
            id=self._new_id(),
            namespace=req.namespace,
            name=req.name,
            permissions=list(req.permissions),
            created_at=self.clock.now(),
        )
        await self.directory.add_role(role)
        return m.RoleCreateResponse(id=role.id)

    async def list_roles(self, ctx: RequestContext, req: m.RolesListRequest) -> m.RolesListResponse:
        self._require("role")
        limit = list_limit(req.limit)
        namespace = or_system(req.namespace)
        await self.authorize(ctx, namespace, p.ROLE_LIST)
        return m.RolesListResponse(
            items=[
                m.Role(
                    id=r.id,
                    namespace=r.namespace,
                    name=r.name,
                    permissions=r.permissions,
                    created_at=to_datetime(r.created_at),
                )
                for r in await self.directory.list_roles(namespace, req.pivot, limit)
            ]
        )

    async def update_role(self, ctx: RequestContext, req: m.RoleUpdateRequest) -> None:
        self._require("role")
        check_role(req.namespace, req.name, req.permissions, created=False)
        await self.authorize(ctx, req.namespace, p.ROLE_UPDATE)
        _refuse_standard(req.name)
        role = await self._role(req.namespace, req.name)
        role.permissions = list(req.permissions)
        await self.directory.update_role(role)
        self.access.forget_grants()

    async def delete_role(self, ctx: RequestContext, req: m.RolesDeleteRequest) -> None:
        self._require("role")
        namespace = or_system(req.namespace)
        await self.authorize(ctx, namespace, p.ROLE_DELETE)
        _refuse_standard(req.name)
        role = await self._role(namespace, req.name)
        await self.directory.delete_role(role)
        self.access.forget_grants()

    async def _role(self, namespace: str, name: str) -> Role:
        role = await self.directory.role_named(namespace, name)
        if role is None:
            raise RequestFailed(f"role does not exist; '{namespace}:{name}' was not found")
        return role

    async def _bound_role(self, namespace: str, name: str) -> Role:
        """The role a binding in ``namespace`` names: the namespace's own, or a standard role (they live in
        ``_system``, and no namespace can have a role of their names), so that "NamespaceOwner of team-a"
        needs no copy of NamespaceOwner in team-a (docs/compatibility.md)."""
        return await self._role(p.SYSTEM if name in p.STANDARD_ROLES else namespace, name)

    # -- role bindings ----------------------------------------------------------------------------------

    async def create_binding(
        self, ctx: RequestContext, req: m.RoleBindingCreateRequest
    ) -> m.RoleBindingCreateResponse:
        self._require("role binding")
        check_binding(req.namespace, req.role_name, req.user_id)
        await self.authorize(ctx, req.namespace, p.ROLEBINDING_CREATE)
        role = await self._bound_role(req.namespace, req.role_name)
        if await self.directory.get_user(req.user_id) is None:
            raise RequestFailed(f"user does not exist; '{req.user_id}' was not found")
        binding = Binding(
            id=self._new_id(),
            namespace=req.namespace,
            user_id=req.user_id,
            role_id=role.id,
            created_at=self.clock.now(),
        )
        await self.directory.add_binding(binding)
        self.access.forget_grants()
        return m.RoleBindingCreateResponse(id=binding.id)

    async def list_bindings(
        self, ctx: RequestContext, req: m.RoleBindingsListRequest
    ) -> m.RoleBindingsListResponse:
        self._require("role binding")
        limit = list_limit(req.limit)
        namespace = or_system(req.namespace)
        await self.authorize(ctx, namespace, p.ROLEBINDING_LIST)
        return m.RoleBindingsListResponse(
            items=[
                m.RoleBinding(
                    id=b.id,
                    namespace=b.namespace,
                    user_id=b.user_id,
                    role_id=b.role_id,
                    created_at=to_datetime(b.created_at),
                )
                for b in await self.directory.list_bindings(namespace, req.pivot, limit)
            ]
        )

    async def delete_binding(self, ctx: RequestContext, req: m.RoleBindingDeleteRequest) -> None:
        self._require("role binding")
        check_user_id(req.user_id)
        namespace = or_system(req.namespace)
        await self.authorize(ctx, namespace, p.ROLEBINDING_DELETE)
        role = await self._bound_role(namespace, req.role_name)
        await self.directory.delete_binding(namespace, req.user_id, role.id)
        self.access.forget_grants()

    # -- bootstrap and upkeep ---------------------------------------------------------------------------

    async def _bootstrap(self) -> None:
        """Idempotent: ``_system``, the user ``anonymous``, the standard roles (their permissions reset to
        the code's), and the Open Door binding of anonymous to Admin when ``_door_opens``."""
        now = self.clock.now()
        with contextlib.suppress(InvalidOption):
            await self.directory.add_namespace(Namespace(name=p.SYSTEM, created_at=now))
        anonymous = await self.directory.user_named(ANONYMOUS)
        if anonymous is None:
            anonymous = User(id=_fixed_id(ANONYMOUS), username=ANONYMOUS, created_at=now, updated_at=now)
            await self.directory.add_user(anonymous)
        self.access.anonymous = Principal(user_id=anonymous.id)
        roles = {}
        for name, permissions in p.STANDARD_ROLES.items():
            role = await self.directory.role_named(p.SYSTEM, name)
            if role is None:
                role = Role(id=_fixed_id(name), namespace=p.SYSTEM, name=name, created_at=now)
                role.permissions = list(permissions)
                await self.directory.add_role(role)
            elif role.permissions != list(permissions):
                role.permissions = list(permissions)
                await self.directory.update_role(role)
            roles[name] = role
        if await self._door_opens(anonymous, roles.values()):
            log.warning(
                "tenancy: no bootstrap key is configured and the store is new, so anonymous callers are "
                "bound to Admin ('Open Door'); delete that binding once you have an admin key "
                "(docs/tenancy.md)"
            )
            binding = Binding(
                id=self._new_id(),
                namespace=p.SYSTEM,
                user_id=anonymous.id,
                role_id=roles[p.ADMIN].id,
                created_at=now,
            )
            with contextlib.suppress(InvalidOption):
                await self.directory.add_binding(binding)

    async def _door_opens(self, anonymous: User, standard: Iterable[Role]) -> bool:
        """Open Door is for a new store only (docs/tenancy.md): started without bootstrap keys, holding
        nothing but what the bootstrap makes, and never started before with a key or an Open Door. A
        store with tenants started once without its key (a lost setting) must not hand them to anyone.
        The first start of a store, keys or not, takes the step, so it is decided once per store."""
        if self.access.bootstrap_hashes:
            await self.directory.first_time(OPEN_DOOR)
            return False
        if not await self._only_bootstrapped(anonymous, standard):
            reason = "the store already has namespaces, users, roles, keys or role bindings"
        elif not await self.directory.first_time(OPEN_DOOR):
            reason = "the store was started before, with a bootstrap key or an Open Door"
        else:
            return True
        log.warning(
            "tenancy: no bootstrap key is configured, but %s, so no Open Door is made (it is for a new "
            "store only; one made before stays until deleted): configure a bootstrap key (--api-keys) "
            "to administer the store (docs/tenancy.md)",
            reason,
        )
        return False

    async def _only_bootstrapped(self, anonymous: User, standard: Iterable[Role]) -> bool:
        """Whether the store holds no tenancy record but the bootstrap's own: the namespace ``_system``,
        the user ``anonymous``, the standard roles; no key and no role binding."""
        directory = self.directory
        roles = await directory.list_roles(p.SYSTEM, "", len(p.STANDARD_ROLES) + 1)
        return (
            [n.name for n in await directory.list_namespaces("", 2)] == [p.SYSTEM]
            and [u.id for u in await directory.list_users("", 2)] == [anonymous.id]
            and {r.id for r in roles} <= {r.id for r in standard}
            and not await directory.list_keys("", "", 1)
            and not await directory.has_bindings()
        )

    async def _flush_forever(self) -> None:
        while True:
            await sleep_until(self.clock, self.clock.now() + FLUSH_INTERVAL_US)
            try:
                await self.access.flush()
            except QueratorError as e:
                log.warning("writing api keys' last use failed (tried again later): %s", e.message)


def _fixed_id(label: str) -> str:
    """The id of what every node's bootstrap makes (the anonymous user, the standard roles): the same on
    every node, so nodes bootstrapping one store at once write the same records, never two of each."""
    digest = hashlib.sha256(f"querator bootstrap {label}".encode()).digest()
    return format_ksuid(int.from_bytes(digest[:20]) & KSUID_MAX_VALUE)


def _refuse_standard(name: str) -> None:
    """A standard role's name is refused by name before any lookup, in every namespace, as the reference
    does: no other role can carry it, since creating one is refused too."""
    if name in p.STANDARD_ROLES:
        raise InvalidOption(f"cannot modify or delete standard role; '{name}' is a standard role")
