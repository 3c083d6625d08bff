"""The wire under ``AsyncClient``: one pooled aiohttp session, request encoding and reply decoding."""

from __future__ import annotations

import io
import ssl
from typing import TypeVar

import aiohttp
import msgspec

from querator import __version__, wire
from querator.auth import EXTENSIONS_HEADER, EXTENSIONS_LEVEL
from querator.client._errors import connection_failed, snippet
from querator.duration import SECOND, DurationError, parse_duration
from querator.errors import QueratorError, error_for, plain_error
from querator.wire import messages as m

LARGE_BODY_BYTES = 2**20
"""A request body above this goes as a buffer, not as bytes: aiohttp warns (``ResourceWarning``) that a
large bytes body may hold the event loop while it is written."""

R = TypeVar("R", bound=m.Message)

_MAX_TIMEOUTS = 64
"""Distinct ``aiohttp.ClientTimeout`` objects kept for reuse (one per total seconds)."""


class Transport:
    """A pooled aiohttp session that POSTs wire messages and decodes the replies.

    The session is created on first use, in the running loop, and must be used from that loop only.

    Args:
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        protobuf: send binary protobuf bodies and ask for protobuf replies instead of JSON.
        limit: the pool's maximum number of connections.
        limit_per_host: the pool's maximum number of connections per host (0: only ``limit`` applies).
        ssl_context: the TLS context of ``https://`` URLs (None: the system's CAs verify the server).
    """

    def __init__(
        self,
        api_key: str | None,
        protobuf: bool,
        *,
        limit: int,
        limit_per_host: int,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._ssl = ssl_context
        media = wire.PROTOBUF if protobuf else wire.JSON
        self._headers = {
            "Content-Type": media,
            "Accept": media,
            "User-Agent": f"querator-python/{__version__}",
            # This client knows the extension fields: the server may put them in JSON replies.
            EXTENSIONS_HEADER: str(EXTENSIONS_LEVEL),
        }
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._encode = wire.encode_protobuf if protobuf else wire.encode_json
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def close(self) -> None:
        """Closes the session and its pooled connections; later calls raise ``RuntimeError``. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("querator client is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limit, limit_per_host=self._limit_per_host, ssl=self._ssl or True
            )
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def _timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(total_s)
        if timeout is None:
            if len(self._timeouts) > _MAX_TIMEOUTS:
                self._timeouts.clear()
            timeout = self._timeouts[total_s] = aiohttp.ClientTimeout(total=total_s)
        return timeout

    async def post(self, url: str, msg: m.Message, reply_type: type[R], timeout_s: float) -> R:
        """POSTs ``msg`` and decodes a 200 reply as ``reply_type``; any other reply raises its error.

        Raises:
            QueratorError: the typed error of a non-200 reply, or a plain ``QueratorError`` with the HTTP
                status as code when the reply cannot be decoded.
            ConnectionFailed: no reply was received within ``timeout_s``.
            RuntimeError: the transport is closed.
        """
        session = self._get_session()
        encoded = self._encode(msg)
        # A large one is sent from a buffer, in parts, as aiohttp asks.
        body = io.BytesIO(encoded) if len(encoded) > LARGE_BODY_BYTES else encoded
        try:
            async with session.post(
                url, data=body, headers=self._headers, timeout=self._timeout(timeout_s)
            ) as resp:
                status = resp.status
                media = _media_type(resp.headers.get("Content-Type"))
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise connection_failed(url, e) from e
        if status == 200:
            return _decode(body, media, reply_type, status)
        reply = _decode(body, media, m.Reply, status)
        raise error_for(reply.code or status, reply.message)

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        """GETs ``url``: the reply's status and body, whatever the status.

        Raises:
            ConnectionFailed: no reply was received within ``timeout_s``.
            RuntimeError: the transport is closed.
        """
        session = self._get_session()
        try:
            async with session.get(url, headers=self._headers, timeout=self._timeout(timeout_s)) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise connection_failed(url, e) from e


def http_timeout_s(request_timeout: str) -> float | None:
    """Seconds of a Go duration, or None if the text is not a positive duration (the server will say why)."""
    try:
        nanos = parse_duration(request_timeout)
    except DurationError:
        return None
    return nanos / SECOND if nanos > 0 else None


def _media_type(header: str | None) -> str:
    """A Content-Type cut at the first ``;`` or ``,``, trimmed and lower-cased (the server's rule too)."""
    if not header:
        return ""
    for sep in ";,":
        header = header.partition(sep)[0]
    return header.strip().lower()


def _decode(body: bytes, media: str, type_: type[R], status: int) -> R:
    """A reply body by its Content-Type; anything undecodable is a QueratorError carrying ``status``."""
    try:
        if media == wire.JSON:
            return wire.decode_json(body, type_)
        if media == wire.PROTOBUF:
            return wire.decode_protobuf(body, type_)
    except (msgspec.DecodeError, msgspec.ValidationError, QueratorError, ValueError) as e:
        raise plain_error(
            status, f"undecodable reply; HTTP {status} {media or 'no content type'}: {e}"
        ) from None
    raise plain_error(
        status, f"unexpected reply; HTTP {status} {media or 'no content type'}: {snippet(body)}"
    )
