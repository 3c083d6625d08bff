"""Content negotiation as duh does it: ``Content-Type`` picks the request body's decoder, ``Accept`` the
reply's encoding; anything but JSON or binary protobuf is a ``ClientContentError`` (455)."""

from __future__ import annotations

import re
from typing import Final, TypeVar

from querator.errors import ClientContentError
from querator.wire._bounds import Bounds, check_json_bounds, check_protobuf_bounds
from querator.wire._errors import DecodeError
from querator.wire._json import decode_json, encode_json
from querator.wire._protobuf import decode_protobuf, encode_protobuf
from querator.wire.messages import Message

__all__ = ["JSON", "PROTOBUF", "decode", "encode", "negotiate_accept"]

JSON: Final = "application/json"
PROTOBUF: Final = "application/protobuf"

T = TypeVar("T", bound=Message)

_JSON_MEDIA: Final = frozenset({"", "*/*", "application/*", JSON})
_CUT_RE: Final = re.compile(r"[;,]")


def _cut(header: str) -> str:
    m = _CUT_RE.search(header)
    return header if m is None else header[: m.start()]


def _media(header: str | None) -> str | None:
    """JSON or PROTOBUF for a Content-Type/Accept value, None when unrecognized."""
    if not header or header == JSON:
        return JSON
    if header == PROTOBUF:
        return PROTOBUF
    media = _cut(header).strip().lower()
    if media in _JSON_MEDIA:
        return JSON
    if media == PROTOBUF:
        return PROTOBUF
    return None


def negotiate_accept(accept: str | None) -> str:
    """The reply content type for an ``Accept`` header; raises ``ClientContentError`` (455)."""
    media = _media(accept)
    if media is None:
        assert accept is not None
        raise ClientContentError(
            f"Accept header '{_cut(accept)}' is invalid format or unrecognized content type, "
            f"only [{JSON},{PROTOBUF}] are supported by this method"
        )
    return media


def decode(body: bytes, content_type: str | None, type: type[T], bounds: Bounds | None = None) -> T:
    """Decode a request body as the ``Content-Type`` says; raises ``ClientContentError`` (455), or the
    ``InvalidOption`` of the first field of ``bounds`` with more elements than it allows, found before
    any element is built."""
    media = _media(content_type)
    try:
        if media == JSON:
            if bounds:
                check_json_bounds(body, type, bounds)
            return decode_json(body, type)
        if media == PROTOBUF:
            if bounds:
                check_protobuf_bounds(body, type, bounds)
            return decode_protobuf(body, type)
    except DecodeError as exc:
        raise ClientContentError(str(exc)) from None
    raise ClientContentError(
        f"Content-Type header '{content_type}' is invalid format or unrecognized content type"
    )


def encode(msg: Message, accept: str | None) -> tuple[bytes, str]:
    """Encode a reply as the ``Accept`` header asks: (body, Content-Type); raises ``ClientContentError``."""
    if negotiate_accept(accept) == PROTOBUF:
        return encode_protobuf(msg), PROTOBUF
    return encode_json(msg), JSON
