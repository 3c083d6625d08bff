"""Replies: encoding a message or an error in the negotiated format, and the view of a reply that an
older JSON client can read. Errors are mapped to replies in exactly one place (``error_reply``)."""

from __future__ import annotations

import re
from http import HTTPStatus

import msgspec
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from multidict import CIMultiDict

from querator.auth import EXTENSIONS_HEADER
from querator.errors import CODE_TEXT, ClientContentError, InvalidOption, NotImplementedRoute, QueratorError
from querator.wire import JSON, encode, negotiate_accept
from querator.wire import messages as m

LARGE_BODY = 16_384
"""Bytes from which a reply's body is written after its headers, not copied into one buffer with them."""

_REASONS = {status.value: status.phrase for status in HTTPStatus}
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Characters no header name or value may hold (aiohttp's rule: control characters but tab)."""


class Reply(web.StreamResponse):
    """A reply of the API: an encoded message, written with its headers in one write when aiohttp
    prepares it.

    ``web.Response`` fills a headers multidict and goes through about ten coroutines to write bytes
    already in hand: about 9 us of a small request (docs/benchmarks-log.md, "Small requests"). This writes
    the same status line and headers from a template (``Content-Type``, ``X-Content-Type-Options``,
    ``Content-Length``, ``Date``, and ``Connection`` as aiohttp would; no ``Server`` naming the
    versions), and makes the multidict only for a caller that asks for ``headers`` (a forwarded
    request's signature). Its ``body`` is bytes, as a ``web.Response``'s; it honours ``force_close``,
    the request's keep-alive and HEAD, counts what it wrote in the request's writer (aiohttp looks
    there to tell whether a reply is under way), and waits for a slow reader as aiohttp's writer does.
    """

    def __init__(self, body: bytes, content_type: str, status: int) -> None:
        # Not StreamResponse.__init__: the headers multidict it fills would go unused.
        self._state = {}
        self._status = status
        # Our own codes (453-455) have no standard reason phrase: proxies, logs and `curl -i` show this.
        self._reason = CODE_TEXT.get(status) or _REASONS.get(status, "")
        self.body = body
        self._media_type = content_type
        self._fields: CIMultiDict[str] | None = None

    @property
    def headers(self) -> CIMultiDict[str]:
        if self._fields is None:
            self._fields = CIMultiDict(
                {"Content-Type": self._media_type, "X-Content-Type-Options": "nosniff"}
            )
        return self._fields

    _headers = headers  # what aiohttp's own header properties read

    async def prepare(self, request: web.BaseRequest) -> None:
        if self._eof_sent:
            return
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("cannot write to a closing transport")  # as aiohttp's writer
        if self._keep_alive is None:
            self._keep_alive = request.keep_alive
        version = request.version
        if self._fields is None:
            fields = f"Content-Type: {self._media_type}\r\nX-Content-Type-Options: nosniff\r\n"
        else:
            fields = "".join(_field(name, value) for name, value in self._fields.items())
        if version.minor == 0:  # HTTP/1.0 closes unless told to keep the connection
            fields += "Connection: keep-alive\r\n" if self._keep_alive else ""
        elif not self._keep_alive:
            fields += "Connection: close\r\n"
        head = (
            f"HTTP/{version.major}.{version.minor} {self._status} {self._reason}\r\n{fields}"
            f"Content-Length: {len(self.body)}\r\nDate: {rfc822_formatted_time()}\r\n\r\n"
        ).encode()
        body = b"" if request.method == "HEAD" else self.body
        if len(body) < LARGE_BODY:
            transport.write(head + body)
        else:
            # Two writes rather than a copy of a large body; not writelines, which some asyncio loops
            # ran without flow control (CVE-2024-12254).
            transport.write(head)
            transport.write(body)
        self._eof_sent = True
        self._body_length = len(body)
        request.writer.output_size += len(head) + len(body)
        if request.protocol.writing_paused:
            await request.writer.drain()


def _field(name: str, value: str) -> str:
    if _CONTROL.search(name) or _CONTROL.search(value):
        raise ValueError(f"header {name!r} holds a control character")
    return f"{name}: {value}\r\n"


def message_reply(msg: m.Message, accept: str, status: int) -> Reply:
    body, content_type = encode(msg, accept)
    return Reply(body, content_type, status)


def error_reply(error: QueratorError, accept: str) -> Reply:
    reply = m.Reply(code=error.code, code_text=CODE_TEXT.get(error.code, ""), message=error.message)
    return message_reply(reply, accept, error.code)


def method_not_allowed(request: web.Request) -> Reply:
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
    ``dedup_window``; level 2 the produce reply's ``ids`` and lease tokens; level 3 items' ``job_id``
    and ``failures``."""
    if isinstance(msg, m.QueueProduceResponse):
        return m.OK_REPLY if level < 2 else msg
    if isinstance(msg, m.QueueLeaseResponse):
        return _lease_view(msg, level)
    if isinstance(msg, m.StorageItemsListResponse):
        return _storage_view(msg)
    if isinstance(msg, m.QueueInfo):
        return _info_view(msg, level)
    if isinstance(msg, m.QueuesListResponse):
        items = [_info_view(i, level) for i in msg.items]
        if any(view is not i for view, i in zip(items, msg.items, strict=True)):
            return msgspec.structs.replace(msg, items=items)
    return msg


def _lease_view(msg: m.QueueLeaseResponse, level: int) -> m.QueueLeaseResponse:
    # One queue's items: all carry a lease token, or none does.
    tokens = level < 2 and bool(msg.items) and bool(msg.items[0].lease_token)
    if not tokens and not any(i.job_id for i in msg.items):
        return msg
    keep_tokens = level >= 2
    items = [
        msgspec.structs.replace(i, job_id="", lease_token=i.lease_token if keep_tokens else "")
        for i in msg.items
    ]
    return msgspec.structs.replace(msg, items=items)


def _storage_view(msg: m.StorageItemsListResponse) -> m.StorageItemsListResponse:
    if not any(i.job_id or i.failures for i in msg.items):
        return msg
    items = [msgspec.structs.replace(i, job_id="", failures=[]) for i in msg.items]
    return msgspec.structs.replace(msg, items=items)


def _info_view(info: m.QueueInfo, level: int) -> m.QueueInfo:
    """A queue's settings for a JSON client of extensions ``level`` below ``EXTENSIONS_LEVEL``."""
    dedup_window = info.dedup_window if level >= 1 else ""
    lease_token = info.lease_token if level >= 2 else ""
    if dedup_window == info.dedup_window and lease_token == info.lease_token:
        return info
    return msgspec.structs.replace(info, dedup_window=dedup_window, lease_token=lease_token)
