"""Checks of tenancy's requests, in the reference's order and words (docs/tenancy.md "Validation")."""

from __future__ import annotations

import re
from typing import Final

from querator.errors import InvalidOption
from querator.names import check_new_name_characters
from querator.tenancy._permissions import KNOWN, SYSTEM

MAX_NAMESPACE: Final = 256
MAX_USERNAME: Final = 128
MAX_EMAIL: Final = 256
MAX_EXTERNAL_ID: Final = 256
MAX_KEY_NAME: Final = 128
MAX_ROLE_NAME: Final = 128
MAX_TAG: Final = 16
MAX_DESCRIPTION: Final = 2000
"""Not a limit of the reference, which has none: a bound on what one record may hold."""
MAX_PERMISSIONS: Final = 1000
TOO_MANY_PERMISSIONS: Final = f"permissions is invalid; cannot hold more than {MAX_PERMISSIONS} permissions"
DEFAULT_LIMIT: Final = 1000
MAX_LIMIT: Final = 65536

_TAG = re.compile(r"[a-z0-9]*")


def check_namespace_name(name: str, *, created: bool = False) -> None:
    """A namespace's name; the rule of new names only on create, so an older namespace stays usable."""
    if len(name) > MAX_NAMESPACE:
        raise InvalidOption(f"namespace name is invalid; cannot be greater than '{MAX_NAMESPACE}' characters")
    if not name.strip():
        raise InvalidOption("namespace name is invalid; cannot be empty")
    if any(c.isspace() for c in name):
        raise InvalidOption(f"namespace name is invalid; '{name}' cannot contain whitespace")
    if "~" in name:
        raise InvalidOption(f"namespace name is invalid; '{name}' cannot contain '~' character")
    if ":" in name:
        raise InvalidOption(f"namespace name is invalid; '{name}' cannot contain ':' character")
    if created:
        check_new_name_characters("namespace name", name)


def check_reserved(name: str) -> None:
    if name.startswith("_"):
        raise InvalidOption(f"namespace name is reserved; '{name}' names starting with '_' are reserved")


def check_tag(field: str, value: str) -> None:
    if len(value) > MAX_TAG:
        raise InvalidOption(f"{field} is invalid; cannot be greater than {MAX_TAG} characters")
    if not _TAG.fullmatch(value):
        raise InvalidOption(f"{field} is invalid; must be lowercase alphanumeric only")


def check_description(description: str) -> None:
    if len(description) > MAX_DESCRIPTION:
        raise InvalidOption(f"description is invalid; cannot be greater than '{MAX_DESCRIPTION}' characters")


def check_user(username: str, email: str, external_id: str) -> None:
    if len(username) > MAX_USERNAME:
        raise InvalidOption(f"username is invalid; cannot be greater than '{MAX_USERNAME}' characters")
    if not username:
        raise InvalidOption("username is invalid; cannot be empty")
    check_new_name_characters("username", username)
    if len(email) > MAX_EMAIL:
        raise InvalidOption(f"email is invalid; cannot be greater than '{MAX_EMAIL}' characters")
    if len(external_id) > MAX_EXTERNAL_ID:
        raise InvalidOption(f"external_id is invalid; cannot be greater than '{MAX_EXTERNAL_ID}' characters")


def check_key(user_id: str, name: str, key_tag: str) -> None:
    if not user_id:
        raise InvalidOption("user_id is invalid; cannot be empty")
    if len(name) > MAX_KEY_NAME:
        raise InvalidOption(f"name is invalid; cannot be greater than '{MAX_KEY_NAME}' characters")
    check_new_name_characters("name", name)
    check_tag("key_tag", key_tag)


def check_role(namespace: str, name: str, permissions: list[str], created: bool) -> None:
    """A role's create (``created``) or update: the update skips the name's length and ':' checks, as
    the reference's does (a name it could not have created is simply not found)."""
    if not namespace:
        raise InvalidOption("namespace is invalid; cannot be empty")
    if not name:
        raise InvalidOption("name is invalid; cannot be empty")
    if created and len(name) > MAX_ROLE_NAME:
        raise InvalidOption(f"name is invalid; cannot be greater than '{MAX_ROLE_NAME}' characters")
    if created and ":" in name:
        raise InvalidOption(f"name is invalid; '{name}' cannot contain ':' character")
    if created:
        check_new_name_characters("name", name)
    if len(permissions) > MAX_PERMISSIONS:
        raise InvalidOption(TOO_MANY_PERMISSIONS)
    for permission in permissions:
        if permission not in KNOWN:
            raise InvalidOption(f"permission is invalid; '{permission}' is not a recognized permission")


def check_binding(namespace: str, role_name: str, user_id: str) -> None:
    if not namespace:
        raise InvalidOption("namespace is invalid; cannot be empty")
    if not role_name:
        raise InvalidOption("role_name is invalid; cannot be empty")
    if not user_id:
        raise InvalidOption("user_id is invalid; cannot be empty")
    check_user_id(user_id)


def check_user_id(user_id: str) -> None:
    if ":" in user_id:
        raise InvalidOption(f"user_id is invalid; '{user_id}' cannot contain ':' character")


def list_limit(limit: int) -> int:
    """A list's page size: 0 is the default; negative or over ``MAX_LIMIT`` is refused (the reference
    allocates whatever it is asked for)."""
    if limit < 0:
        raise InvalidOption("limit is invalid; limit cannot be negative")
    if limit > MAX_LIMIT:
        raise InvalidOption(f"limit is invalid; cannot be greater than {MAX_LIMIT}")
    return limit or DEFAULT_LIMIT


def or_system(namespace: str) -> str:
    return namespace or SYSTEM
