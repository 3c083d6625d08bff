"""Replies: encoding a message or an error in the negotiated format, and the view of a reply that an
older JSON client can read. Errors are mapped to replies in exactly one place (``error_reply``)."""

from __future__ import annotations

import msgspec
from aiohttp import web

from querator.auth import EXTENSIONS_HEADER
from querator.errors import CODE_TEXT, ClientContentError, InvalidOption, NotImplementedRoute, QueratorError
from querator.wire import JSON, encode, negotiate_accept
from querator.wire import messages as m


def message_reply(msg: m.Message, accept: str, status: int) -> web.Response:
    body, content_type = encode(msg, accept)
    # Our own codes (453-455) have no standard reason phrase: proxies, logs and `curl -i` show this one.
    return web.Response(
        body=body,
        status=status,
        reason=CODE_TEXT.get(status),
        headers={"Content-Type": content_type, "X-Content-Type-Options": "nosniff"},
    )


def error_reply(error: QueratorError, accept: str) -> web.Response:
    reply = m.Reply(code=error.code, code_text=CODE_TEXT.get(error.code, ""), message=error.message)
    return message_reply(reply, accept, error.code)


def method_not_allowed(request: web.Request) -> web.Response:
    return error_reply(InvalidOption(f"http method '{request.method}' not allowed; only POST"), JSON)


async def unknown(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        return method_not_allowed(request)
    return error_reply(NotImplementedRoute(f"no such method; {request.path}"), JSON)


def accept_or_json(request: web.Request) -> str:
    try:
        return negotiate_accept(request.headers.get("Accept"))
    except ClientContentError:
        return JSON


def extensions_level(request: web.Request) -> int:
    """The level of extension fields a JSON client knows (``EXTENSIONS_LEVEL``): 0 without the header;
    a value that is not a number counts as 1, the level of the clients that sent "1" before levels."""
    value = request.headers.get(EXTENSIONS_HEADER)
    if value is None:
        return 0
    try:
        return max(int(value), 1)
    except ValueError:
        return 1


def reference_view(msg: m.Message, level: int) -> m.Message:
    """``msg`` with only the extension fields a JSON client of extensions ``level`` knows: the reference's
    Go client (level 0) rejects fields it does not know, and so does our client of level 1 in a produce's
    reply and a lease's items. (Binary protobuf decoders skip unknown fields.) Level 1 knows
    ``dedup_window``; level 2 the produce reply's ``ids`` and lease tokens."""
    if isinstance(msg, m.QueueProduceResponse):
        return m.OK_REPLY
    if isinstance(msg, m.QueueLeaseResponse):
        # One queue's items: all carry a lease token, or none does.
        if msg.items and msg.items[0].lease_token:
            return msgspec.structs.replace(
                msg, items=[msgspec.structs.replace(i, lease_token="") for i in msg.items]
            )
        return msg
    if isinstance(msg, m.QueueInfo):
        return _info_view(msg, level)
    if isinstance(msg, m.QueuesListResponse):
        items = [_info_view(i, level) for i in msg.items]
        if any(view is not i for view, i in zip(items, msg.items, strict=True)):
            return msgspec.structs.replace(msg, items=items)
    return msg


def _info_view(info: m.QueueInfo, level: int) -> m.QueueInfo:
    """A queue's settings for a JSON client of extensions ``level`` below ``EXTENSIONS_LEVEL``."""
    dedup_window = info.dedup_window if level >= 1 else ""
    if dedup_window == info.dedup_window and not info.lease_token:
        return info
    return msgspec.structs.replace(info, dedup_window=dedup_window, lease_token="")
