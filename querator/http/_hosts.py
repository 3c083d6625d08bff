"""The Host check of a node without API keys, against DNS rebinding.

A page of another site can point its own name at a node's address (DNS rebinding): the user's browser
then takes the node for that site, and the page reads and writes the node's queues as its own, past
the same-origin policy. Without keys nothing else stops it; the ``Host`` header still carries the
page's name, so a node answers only the names it knows as its own (docs/configuration.md,
``--allowed-hosts``; docs/adr/0032-keyless-nodes-check-the-site-and-the-host.md).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Iterable

from aiohttp import web

from querator.errors import Forbidden
from querator.http._auth import UNAUTHENTICATED
from querator.http._replies import error_reply
from querator.wire import JSON

log = logging.getLogger("querator.http")

MAX_REMEMBERED = 256
"""Host values whose answer is remembered: the names a node is reached by, and then some; past it each
new value is checked again (a flood of made-up names must not grow memory, nor the log)."""


class AllowedHosts:
    """Which ``Host`` values a keyless node answers: no ``Host`` at all (HTTP/1.0), IP literals (a
    rebinding page is always reached by a name), ``localhost`` and names under ``.localhost``, names
    without a dot (a network's own, no page can own one), the node's own names, and ``names``: exact
    names, ``.domain`` for the domain and every name under it, or ``*`` for any."""

    def __init__(self, names: Iterable[str]) -> None:
        cleaned = {_name(n) for n in names if n.strip()}
        self._any = "*" in cleaned
        self._exact = frozenset(n for n in cleaned if not n.startswith("."))
        self._domains = tuple(n for n in cleaned if n.startswith("."))
        self._answers: dict[str, bool] = {}

    def allows(self, host: str | None) -> bool:
        if host is None or self._any:
            return True
        answer = self._answers.get(host)
        if answer is None:
            answer = self._allows(host)
            if len(self._answers) < MAX_REMEMBERED:
                self._answers[host] = answer
                if not answer:  # once per name: the operator learns which name to allow
                    log.warning(
                        "refusing requests for host %r: not a name of this node (see --allowed-hosts)",
                        host[:100],
                    )
        return answer

    def _allows(self, host: str) -> bool:
        if host.startswith("["):  # [IPv6]:port
            return _is_ip(host[1 : host.find("]")])
        if host.count(":") > 1:  # a bare IPv6 address, no port
            return _is_ip(host)
        name = _name(host.partition(":")[0])
        if _is_ip(name) or "." not in name or name == "localhost" or name.endswith(".localhost"):
            return True
        return name in self._exact or any(name.endswith(d) or name == d[1:] for d in self._domains)


def _name(host: str) -> str:
    """A host name as compared: lower case, without the root's trailing dot."""
    return host.strip().lower().rstrip(".")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_hosts(runner: web.AppRunner, allowed: AllowedHosts) -> None:
    """Makes the server of ``runner`` (set up) refuse a request whose ``Host`` ``allowed`` does not
    allow: 403 from its headers, its body unread (marked as unauthenticated, its connection is closed
    rather than drained). A function, not a coroutine, around the server's handler: an allowed request
    costs one dict look-up, no coroutine of its own."""
    assert runner.server is not None, "set the runner up first"
    handler = runner.server.request_handler

    def checked(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        if allowed.allows(request.headers.get("Host")):
            return handler(request)
        return _refuse(request)

    runner.server.request_handler = checked


async def _refuse(request: web.BaseRequest) -> web.StreamResponse:
    request[UNAUTHENTICATED] = True
    host = request.headers.get("Host", "")[:100]
    return error_reply(
        Forbidden(f"host is not allowed; '{host}' is not a name of this node (--allowed-hosts)"), JSON
    )
