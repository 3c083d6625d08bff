"""Request bodies: each route's size limit, and reading a body without buffering more than it allows."""

from __future__ import annotations

from aiohttp import web

from querator.errors import InvalidOption
from querator.service import MAX_NAME

MAX_PRODUCE_BODY = 5_000_000
NAME_BODY = 12 * MAX_NAME
"""Bytes of the longest queue name in a JSON body: each character escaped as a surrogate pair
(``\\uXXXX\\uXXXX``, 12 bytes). Protobuf needs at most 4 bytes a character."""
SMALL_BODY = 2 * NAME_BODY + 512
"""The routes whose bodies hold a queue name or two (redrive's source and target) and a few short fields:
any name ``queues.create`` accepts must be usable on every route. (The reference's 512 bytes stranded
names from about 150 CJK characters.)"""
DEFAULT_BODY = 256_000
UPDATE_BODY = 512_000
IMPORT_BODY = 64_000_000


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, refused as soon as it is known to exceed ``limit`` (never buffered whole), or
    to be compressed (see ``protocol_factory``)."""
    encoding = request.headers.get("Content-Encoding")
    if encoding and encoding.strip().lower() not in ("", "identity"):
        # 400 rather than HTTP's 415: clients know duh's codes only (docs/semantics.md §1.4), and for them,
        # as for the reference, a body that cannot be read as it is is a bad request.
        raise InvalidOption(
            f"Content-Encoding header '{encoding}' is invalid; request bodies must not be compressed"
        )
    length = request.content_length
    if length is not None and length > limit:
        raise _too_large(limit)
    try:
        if length is not None:
            return await request.read()
        chunks = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)
    except ConnectionResetError:
        # The client left, or was cut off by the body timeout (querator.connections), mid-body: the
        # client's doing, so a client error (never sent: nobody is listening), not a logged 500.
        raise InvalidOption("request body is incomplete; the connection was closed") from None


def _too_large(limit: int) -> InvalidOption:
    return InvalidOption(f"request body exceeds {human_size(limit)} limit")


def human_size(n: int) -> str:
    """A byte count as the reference prints limits: ``512B``, ``250.0KiB``, ``5.0MB``."""
    if n < 1000:
        return f"{n}B"
    base, units = (1024, ("KiB", "MiB", "GiB")) if n % 1024 == 0 else (1000, ("KB", "MB", "GB"))
    value = n / base
    for unit in units:
        if value < base or unit == units[-1]:
            return f"{value:.1f}{unit}"
        value /= base
    raise AssertionError("unreachable")
