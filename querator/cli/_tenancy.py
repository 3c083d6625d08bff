"""``querator namespaces|users|apikeys|roles|rolebindings <action> ...``: the tenancy routes from the
command line (docs/tenancy.md). Each action is one client call; its reply is printed as JSON."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeAlias

from querator.client import AsyncClient
from querator.wire import messages as m

Action = Callable[[AsyncClient, argparse.Namespace], Awaitable[m.Message | None]]
Parsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _page(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: the server's, 1000)")
    p.add_argument("--pivot", default="", help="start here (inclusive)")


async def _created(value: Awaitable[str]) -> m.Message:
    """A create's new id as a message (``{"id": ...}``)."""
    return m.UserCreateResponse(id=await value)


ACTIONS: dict[tuple[str, str], Action] = {
    ("namespaces", "create"): lambda c, a: c.create_namespace(a.name, a.description, a.api_key_tag),
    ("namespaces", "update"): lambda c, a: c.update_namespace(a.name, a.description, a.api_key_tag),
    ("namespaces", "list"): lambda c, a: c.list_namespaces(a.pivot, a.limit),
    ("namespaces", "delete"): lambda c, a: c.delete_namespace(a.name),
    ("users", "create"): lambda c, a: _created(c.create_user(a.username, a.email, a.external_id)),
    ("users", "list"): lambda c, a: c.list_users(a.pivot, a.limit),
    ("users", "delete"): lambda c, a: c.delete_user(a.id),
    ("apikeys", "create"): lambda c, a: c.create_api_key(
        a.user_id, a.name, a.namespace_scope, a.expires_at, a.tag
    ),
    ("apikeys", "list"): lambda c, a: c.list_api_keys(a.user, a.pivot, a.limit),
    ("apikeys", "delete"): lambda c, a: c.delete_api_key(a.id),
    ("roles", "create"): lambda c, a: _created(c.create_role(a.namespace, a.name, a.permissions)),
    ("roles", "update"): lambda c, a: c.update_role(a.namespace, a.name, a.permissions),
    ("roles", "list"): lambda c, a: c.list_roles(a.namespace, a.pivot, a.limit),
    ("roles", "delete"): lambda c, a: c.delete_role(a.namespace, a.name),
    ("rolebindings", "create"): lambda c, a: _created(c.create_role_binding(a.namespace, a.role, a.user_id)),
    ("rolebindings", "list"): lambda c, a: c.list_role_bindings(a.namespace, a.pivot, a.limit),
    ("rolebindings", "delete"): lambda c, a: c.delete_role_binding(a.namespace, a.role, a.user_id),
}


async def run(client: AsyncClient, args: argparse.Namespace) -> m.Message | None:
    return await ACTIONS[(args.command, args.action)](client, args)


# Long on purpose: a table of actions and their flags, one statement each.
def add_parsers(
    sub: Parsers, common: Sequence[argparse.ArgumentParser], timestamp: Callable[[str], datetime]
) -> None:
    """The five groups of actions; ``timestamp`` is the CLI's argparse type of a time."""

    def group(name: str, help_text: str) -> Parsers:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=common)
        return p.add_subparsers(dest="action", required=True)

    def action(actions: Parsers, name: str, help_text: str) -> argparse.ArgumentParser:
        return actions.add_parser(name, help=help_text, description=help_text, parents=common)

    namespaces = group("namespaces", "manage namespaces (tenancy)")
    for name in ("create", "update"):
        p = action(
            namespaces, name, f"{name} a namespace" + (" (replaces both fields)" if name == "update" else "")
        )
        p.add_argument("name")
        p.add_argument("--description", default="")
        p.add_argument(
            "--api-key-tag", default="", help="tag of keys scoped to it (lowercase letters, digits)"
        )
    _page(action(namespaces, "list", "list namespaces by name"))
    action(namespaces, "delete", "delete an empty namespace").add_argument("name")

    users = group("users", "manage users (tenancy)")
    p = action(users, "create", "create a user; prints its id")
    p.add_argument("username")
    p.add_argument("--email", default="")
    p.add_argument("--external-id", default="")
    _page(action(users, "list", "list users by id"))
    action(users, "delete", "delete a user, its role bindings and its API keys").add_argument("id")

    keys = group("apikeys", "manage API keys (tenancy)")
    p = action(keys, "create", "create an API key for a user; prints the key, shown only this once")
    p.add_argument("user_id")
    p.add_argument("--name", default="")
    p.add_argument("--namespace-scope", default="", help="the one namespace the key may act in")
    p.add_argument("--expires-at", type=timestamp, default=None, help="RFC 3339 time the key stops working")
    p.add_argument("--tag", default="", help="tag shown in the key (default: the scope's, else live)")
    p = action(keys, "list", "list API keys (never the keys themselves)")
    p.add_argument("--user", default="", help="only this user's keys")
    _page(p)
    action(keys, "delete", "delete an API key").add_argument("id")

    roles = group("roles", "manage roles (tenancy)")
    for name in ("create", "update"):
        p = action(
            roles, name, f"{name} a custom role" + (" (replaces its permissions)" if name == "update" else "")
        )
        p.add_argument("namespace")
        p.add_argument("name")
        p.add_argument("permissions", nargs="*", help="e.g. queue.produce queue.lease")
    p = action(roles, "list", "list the roles of a namespace")
    p.add_argument("--namespace", default="", help="default _system")
    _page(p)
    p = action(roles, "delete", "delete a custom role")
    p.add_argument("namespace")
    p.add_argument("name")

    bindings = group("rolebindings", "manage role bindings (tenancy)")
    for name, help_text in (
        ("create", "bind a user to a role in a namespace"),
        ("delete", "remove a binding"),
    ):
        p = action(bindings, name, help_text)
        p.add_argument("namespace")
        p.add_argument("role", help="the role's name (a standard role in any namespace)")
        p.add_argument("user_id")
    p = action(bindings, "list", "list the role bindings of a namespace")
    p.add_argument("--namespace", default="", help="default _system")
    _page(p)


GROUPS = ("namespaces", "users", "apikeys", "roles", "rolebindings")
