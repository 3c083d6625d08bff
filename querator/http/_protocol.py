"""The protocol of each connection: aiohttp's, without inflating bodies, and answering a request it
cannot parse with the error body of docs/semantics.md §1.4."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from querator.errors import CODE_TEXT, InvalidOption
from querator.http._replies import error_reply, message_reply
from querator.wire import JSON
from querator.wire import messages as m

log = logging.getLogger("querator.http")


def protocol_factory(server: web.Server, **settings: Any) -> Callable[[], web.RequestHandler]:
    """The protocol of each connection accepted for ``server`` (an AppRunner's): aiohttp's, with
    ``settings`` (its RequestHandler options), except that

    - it inflates no request body: aiohttp would inflate ``Content-Encoding: gzip``/``deflate`` bodies in
      its parser, on the event loop, before any handler could refuse them (even a request without an
      API key), counting compressed bytes against the body limit. Go's net/http does not inflate either,
      so a compressed body was never a valid request; ``read_body`` refuses one unread;
    - it answers a request it cannot parse with the error body of docs/semantics.md §1.4, not
      aiohttp's text/plain, and logs it briefly (``_ProtocolErrors``), not at ERROR with a traceback
      quoting the raw bytes (headers, API keys).
    """
    loop = asyncio.get_running_loop()
    # access_log None: no access log (aiohttp takes None there; its annotation does not say so).
    options: dict[str, Any] = {"auto_decompress": False, "access_log": None, **settings}
    return lambda: _Protocol(server, loop=loop, **options)


PROTOCOL_LOG_INTERVAL = 10.0
"""Seconds between two log lines about malformed requests: a flood of them must not flood the log."""


class _ProtocolErrors:
    """Logs malformed requests at WARNING, at most once per ``PROTOCOL_LOG_INTERVAL``, counting the rest."""

    def __init__(self) -> None:
        self._last = -PROTOCOL_LOG_INTERVAL
        self._unlogged = 0

    def report(self, remote: str | None, exc: BaseException | None) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._last < PROTOCOL_LOG_INTERVAL:
            self._unlogged += 1
            return
        # The exception's class only: its message quotes the request's raw bytes.
        log.warning(
            "malformed request from %s (%s); answered 400 and closed%s",
            remote,
            type(exc).__name__ if exc is not None else "unknown error",
            f"; {self._unlogged} more since the last report" if self._unlogged else "",
        )
        self._last = now
        self._unlogged = 0


_protocol_errors = _ProtocolErrors()


class _Protocol(web.RequestHandler):
    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The reply to a request aiohttp could not parse (a 4xx) or whose handler raised (a 5xx)."""
        if request.writer.output_size > 0:  # as aiohttp's own: a reply is under way, the connection is lost
            raise ConnectionError("a reply was being sent when its request failed")
        if status >= 500:
            # A fault of ours (the handlers answer every error they expect): worth a traceback.
            log.error("%s %s failed", request.method, request.path, exc_info=exc)
            reply = message_reply(
                m.Reply(code=500, code_text=CODE_TEXT[500], message="Internal Error"), JSON, 500
            )
        else:
            _protocol_errors.report(request.remote, exc)
            # Any parse error is a plain 400: clients know duh's codes only (docs/semantics.md §1.4).
            reply = error_reply(InvalidOption("request is invalid; malformed HTTP request"), JSON)
        reply.force_close()
        return reply
