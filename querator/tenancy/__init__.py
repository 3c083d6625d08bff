"""Multi-tenancy (docs/tenancy.md): namespaces, users, API keys, roles and role bindings, and the
authorization of every route by them. Off unless the server runs with ``--tenancy``.

- ``_permissions`` (re-exported as ``permissions``): the 29 permissions and the standard roles;
- ``_model``: the records as stored; ``_directory``: their rules over ``storage.base.Records``
  (uniqueness, lookups, cascades), the same for every backend;
- ``_validation``: checks of the requests, in the reference's order and words;
- ``_access``: authentication of keys and the authorization cascade, with short-lived caches
  (docs/adr/0021), and ``RequestContext``, the caller (and deadline) every service call is passed
  (docs/adr/0056);
- ``_api``: ``Tenancy``, the routes and the bootstrap of a store.
"""

from querator.tenancy import _permissions as permissions
from querator.tenancy._access import (
    AS_SERVER,
    CACHE_TTL_S,
    NOBODY,
    SERVER,
    Access,
    NoRequestContext,
    Principal,
    RequestContext,
)
from querator.tenancy._api import Tenancy
from querator.tenancy._permissions import STANDARD_ROLES, SYSTEM
from querator.tenancy._validation import MAX_PERMISSIONS, TOO_MANY_PERMISSIONS

__all__ = [
    "AS_SERVER",
    "CACHE_TTL_S",
    "MAX_PERMISSIONS",
    "NOBODY",
    "SERVER",
    "STANDARD_ROLES",
    "SYSTEM",
    "TOO_MANY_PERMISSIONS",
    "Access",
    "NoRequestContext",
    "Principal",
    "RequestContext",
    "Tenancy",
    "permissions",
]
