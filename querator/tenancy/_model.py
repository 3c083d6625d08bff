"""Tenancy's records as stored (``querator.storage.base.Records``): small msgspec Structs encoded as
JSON. Times are microseconds since the epoch (0: unset); an API key is kept as its SHA-256 only."""

from __future__ import annotations

from typing import TypeVar

import msgspec


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of the stored records: unknown fields are skipped, so a newer version's records still read."""


class Namespace(Record):
    name: str
    description: str = ""
    api_key_tag: str = ""
    created_at: int = 0


class User(Record):
    id: str
    username: str
    email: str = ""
    external_id: str = ""
    created_at: int = 0
    updated_at: int = 0


class ApiKey(Record):
    id: str
    user_id: str
    key_hash: str
    """Unpadded URL-safe base64 of the key's SHA-256, as the reference stores it."""
    prefix: str
    name: str = ""
    namespace_scope: str = ""
    expires_at: int = 0
    last_used_at: int = 0
    created_at: int = 0


class Role(Record):
    id: str
    namespace: str
    name: str
    permissions: list[str] = []
    created_at: int = 0


class Binding(Record):
    id: str
    namespace: str
    user_id: str
    role_id: str
    created_at: int = 0


R = TypeVar("R", bound=Record)

_encoder = msgspec.json.Encoder()


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(value: bytes, type_: type[R]) -> R:
    return msgspec.json.decode(value, type=type_)
