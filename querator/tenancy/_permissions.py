"""The reference's 29 permissions and its three standard roles (docs/tenancy.md "Permissions")."""

from __future__ import annotations

from typing import Final

SYSTEM: Final = "_system"
"""The namespace of queues created without one, of the standard roles, and of administration."""

NAMESPACE_CREATE: Final = "namespace.create"
NAMESPACE_DELETE: Final = "namespace.delete"
NAMESPACE_LIST: Final = "namespace.list"
NAMESPACE_UPDATE: Final = "namespace.update"
QUEUE_CREATE: Final = "queue.create"
QUEUE_DELETE: Final = "queue.delete"
QUEUE_UPDATE: Final = "queue.update"
QUEUE_LIST: Final = "queue.list"
QUEUE_PRODUCE: Final = "queue.produce"
QUEUE_LEASE: Final = "queue.lease"
QUEUE_COMPLETE: Final = "queue.complete"
QUEUE_RETRY: Final = "queue.retry"
QUEUE_STATS: Final = "queue.stats"
QUEUE_CLEAR: Final = "queue.clear"
USER_CREATE: Final = "user.create"
USER_DELETE: Final = "user.delete"
USER_LIST: Final = "user.list"
APIKEY_CREATE: Final = "apikey.create"
APIKEY_DELETE: Final = "apikey.delete"
APIKEY_LIST: Final = "apikey.list"
ROLE_CREATE: Final = "role.create"
ROLE_UPDATE: Final = "role.update"
ROLE_DELETE: Final = "role.delete"
ROLE_LIST: Final = "role.list"
ROLEBINDING_CREATE: Final = "rolebinding.create"
ROLEBINDING_DELETE: Final = "rolebinding.delete"
ROLEBINDING_LIST: Final = "rolebinding.list"
SYSTEM_HEALTH: Final = "system.health"
SYSTEM_METRICS: Final = "system.metrics"

PERMISSIONS: Final = (
    NAMESPACE_CREATE,
    NAMESPACE_DELETE,
    NAMESPACE_LIST,
    NAMESPACE_UPDATE,
    QUEUE_CREATE,
    QUEUE_DELETE,
    QUEUE_UPDATE,
    QUEUE_LIST,
    QUEUE_PRODUCE,
    QUEUE_LEASE,
    QUEUE_COMPLETE,
    QUEUE_RETRY,
    QUEUE_STATS,
    QUEUE_CLEAR,
    USER_CREATE,
    USER_DELETE,
    USER_LIST,
    APIKEY_CREATE,
    APIKEY_DELETE,
    APIKEY_LIST,
    ROLE_CREATE,
    ROLE_UPDATE,
    ROLE_DELETE,
    ROLE_LIST,
    ROLEBINDING_CREATE,
    ROLEBINDING_DELETE,
    ROLEBINDING_LIST,
    SYSTEM_HEALTH,
    SYSTEM_METRICS,
)
KNOWN: Final = frozenset(PERMISSIONS)

ADMIN: Final = "Admin"
NAMESPACE_OWNER: Final = "NamespaceOwner"
PUBLIC_VIEWER: Final = "PublicViewer"

STANDARD_ROLES: Final[dict[str, tuple[str, ...]]] = {
    ADMIN: PERMISSIONS,
    NAMESPACE_OWNER: tuple(
        p for p in PERMISSIONS if p.startswith(("queue.", "role.", "rolebinding.", "system."))
    ),
    PUBLIC_VIEWER: (SYSTEM_HEALTH, SYSTEM_METRICS),
}
"""Permissions of each standard role: they live in ``_system``, and the API cannot change them."""
