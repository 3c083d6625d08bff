"""The tenancy methods of ``AsyncClient`` (docs/tenancy.md): namespaces, users, API keys, roles and role
bindings. A mixin, so the client's module stays about queues; every method is one call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from querator.client._caller import Caller
from querator.wire import messages as m


class TenancyMethods(Caller):
    """Mixed into ``AsyncClient``, which provides ``call``. Lists are idempotent; the rest is not retried
    after a reply that leaves the outcome unknown."""

    # -- namespaces -------------------------------------------------------------------------------------

    async def create_namespace(self, name: str, description: str = "", api_key_tag: str = "") -> None:
        msg = m.NamespaceInfo(name=name, description=description, api_key_tag=api_key_tag)
        await self.call("/v1/namespaces.create", msg, m.Reply)

    async def update_namespace(self, name: str, description: str = "", api_key_tag: str = "") -> None:
        """Replaces the namespace's description and key tag (both: an empty one clears it)."""
        msg = m.NamespaceInfo(name=name, description=description, api_key_tag=api_key_tag)
        await self.call("/v1/namespaces.update", msg, m.Reply, idempotent=True)

    async def list_namespaces(self, pivot: str = "", limit: int = 0) -> m.NamespacesListResponse:
        msg = m.NamespacesListRequest(pivot=pivot, limit=limit)
        return await self.call("/v1/namespaces.list", msg, m.NamespacesListResponse, idempotent=True)

    async def delete_namespace(self, name: str) -> None:
        await self.call("/v1/namespaces.delete", m.NamespacesDeleteRequest(name=name), m.Reply)

    # -- users ------------------------------------------------------------------------------------------

    async def create_user(self, username: str, email: str = "", external_id: str = "") -> str:
        """The new user's id."""
        msg = m.UserCreateRequest(username=username, email=email, external_id=external_id)
        return (await self.call("/v1/users.create", msg, m.UserCreateResponse)).id

    async def list_users(self, pivot: str = "", limit: int = 0) -> m.UsersListResponse:
        msg = m.UsersListRequest(pivot=pivot, limit=limit)
        return await self.call("/v1/users.list", msg, m.UsersListResponse, idempotent=True)

    async def delete_user(self, user_id: str) -> None:
        await self.call("/v1/users.delete", m.UsersDeleteRequest(id=user_id), m.Reply)

    # -- API keys ---------------------------------------------------------------------------------------

    async def create_api_key(
        self,
        user_id: str,
        name: str = "",
        namespace_scope: str = "",
        expires_at: datetime | None = None,
        key_tag: str = "",
    ) -> m.APIKeyCreateResponse:
        """A new key of ``user_id``: the reply's ``key`` is shown this once, the server keeps its hash."""
        msg = m.APIKeyCreateRequest(
            user_id=user_id,
            name=name,
            namespace_scope=namespace_scope,
            expires_at=expires_at,
            key_tag=key_tag,
        )
        return await self.call("/v1/apikeys.create", msg, m.APIKeyCreateResponse)

    async def list_api_keys(
        self, user_id: str = "", pivot: str = "", limit: int = 0
    ) -> m.APIKeysListResponse:
        msg = m.APIKeysListRequest(user_id=user_id, pivot=pivot, limit=limit)
        return await self.call("/v1/apikeys.list", msg, m.APIKeysListResponse, idempotent=True)

    async def delete_api_key(self, key_id: str) -> None:
        await self.call("/v1/apikeys.delete", m.APIKeysDeleteRequest(id=key_id), m.Reply)

    # -- roles and role bindings ------------------------------------------------------------------------

    async def create_role(self, namespace: str, name: str, permissions: Sequence[str]) -> str:
        """The new role's id."""
        msg = m.RoleCreateRequest(namespace=namespace, name=name, permissions=list(permissions))
        return (await self.call("/v1/roles.create", msg, m.RoleCreateResponse)).id

    async def update_role(self, namespace: str, name: str, permissions: Sequence[str]) -> None:
        msg = m.RoleUpdateRequest(namespace=namespace, name=name, permissions=list(permissions))
        await self.call("/v1/roles.update", msg, m.Reply, idempotent=True)

    async def list_roles(self, namespace: str = "", pivot: str = "", limit: int = 0) -> m.RolesListResponse:
        msg = m.RolesListRequest(namespace=namespace, pivot=pivot, limit=limit)
        return await self.call("/v1/roles.list", msg, m.RolesListResponse, idempotent=True)

    async def delete_role(self, namespace: str, name: str) -> None:
        await self.call("/v1/roles.delete", m.RolesDeleteRequest(namespace=namespace, name=name), m.Reply)

    async def create_role_binding(self, namespace: str, role_name: str, user_id: str) -> str:
        """The new binding's id."""
        msg = m.RoleBindingCreateRequest(namespace=namespace, role_name=role_name, user_id=user_id)
        return (await self.call("/v1/rolebindings.create", msg, m.RoleBindingCreateResponse)).id

    async def list_role_bindings(
        self, namespace: str = "", pivot: str = "", limit: int = 0
    ) -> m.RoleBindingsListResponse:
        msg = m.RoleBindingsListRequest(namespace=namespace, pivot=pivot, limit=limit)
        return await self.call("/v1/rolebindings.list", msg, m.RoleBindingsListResponse, idempotent=True)

    async def delete_role_binding(self, namespace: str, role_name: str, user_id: str) -> None:
        msg = m.RoleBindingDeleteRequest(namespace=namespace, role_name=role_name, user_id=user_id)
        await self.call("/v1/rolebindings.delete", msg, m.Reply)
