"""One route's handler: check the request, read and decode its body, call the service, and map what it
returns or raises to the reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from querator.auth import EXTENSIONS_LEVEL, FORWARDED_HEADER
from querator.cluster.proxy import CLIENT_GONE as FORWARD_CLIENT_GONE
from querator.errors import (
    CODE_TEXT,
    ClientContentError,
    InvalidOption,
    QueratorError,
    StorageError,
    try_again,
)
from querator.http._auth import CALLER, verified_forward
from querator.http._body import read_body
from querator.http._replies import (
    Reply,
    error_reply,
    extensions_level,
    message_reply,
    method_not_allowed,
    reference_view,
)
from querator.service import REQUEST_BOUNDS, deadline_us
from querator.tenancy import NOBODY, RequestContext
from querator.wire import JSON, decode, negotiate_accept
from querator.wire import messages as m

log = logging.getLogger("querator.http")

M = TypeVar("M", bound=m.Message)
R = TypeVar("R", bound=m.Message)


@dataclass(frozen=True, slots=True)
class Route(Generic[M, R]):
    """What one route does: ``call`` the service with the request's context and the decoded ``type_``
    (a body of at most ``limit`` bytes). ``undelivered`` is told of a reply that could not be written
    (the client went away); ``shield`` lets the call run to its end when the client disconnects."""

    call: Callable[[RequestContext, M], Awaitable[R | None]]
    type_: type[M]
    limit: int
    undelivered: Callable[[R], None] | None = None
    shield: bool = False


Timed = Callable[[int, float], None]
"""Counts one request of a route: ``timed(status, started_s)``, the reply's status code and when handling
began (``monotonic_s``)."""

CLIENT_GONE = int(FORWARD_CLIENT_GONE)
"""The status a request is counted under when its client went away before the answer (nginx's 499, as
a forward abandoned for the same reason is counted)."""


def route_handler(  # noqa: C901 -- its handler maps every failure in one place
    route: Route[M, R],
    monotonic_s: Callable[[], float],
    timed: Timed,
    now_us: Callable[[], int],
    authenticated: bool,
) -> Handler:
    """The handler of ``route``; a request a browser sent for another site is refused
    (``_check_forgery``). The call gets the request's one ``RequestContext``: its caller as the
    authentication middleware found it (``authenticated``: one runs before), the node that forwarded
    it, and its deadline, ``request_timeout`` from ``now_us`` (docs/adr/0056). Every request is ``timed``
    here, by its reply's status (``CLIENT_GONE`` for none, 500 for an error aiohttp answers) rather than
    by a wrapper: a coroutine per step is a measurable part of a small request (docs/benchmarks-log.md,
    "Small requests")."""
    call, type_, limit = route.call, route.type_, route.limit
    bounds = REQUEST_BOUNDS.get(type_)  # checked before the body's repeated fields are built
    undelivered, shield = route.undelivered, route.shield

    # Long on purpose: each failure is mapped to its reply here, in one place, and every reply is
    # counted in ``finally`` (hence ``return (response := ...)``).
    async def handler(request: web.Request) -> web.StreamResponse:  # noqa: PLR0911
        started_s = monotonic_s()
        response: web.StreamResponse | None = None
        unanswered = CLIENT_GONE  # the status counted when no reply came
        try:
            if request.method != "POST":
                return (response := method_not_allowed(request))
            try:
                accept = negotiate_accept(request.headers.get("Accept"))
            except ClientContentError as e:
                return (response := error_reply(e, JSON))
            try:
                _check_forgery(request)
                content_type = request.headers.get("Content-Type")
                body = await read_body(request, limit)
                if (verified := verified_forward(request)) is not None:
                    verified.check_body(body)
                message = decode(body, content_type, type_, bounds)
                caller = (request[CALLER] or NOBODY) if authenticated else NOBODY
                forwarded_by = request.headers.get(FORWARDED_HEADER, "")
                ctx = RequestContext(caller, forwarded_by, deadline_us(message, now_us()))
                pending = call(ctx, message)
                result = await (asyncio.shield(pending) if shield else pending)
            except StorageError as e:
                # Queue metadata reads and writes reach storage outside the engine: a storage outage is
                # a "try again" for them too, never a 500 (the engine does the same for partition work).
                log.warning("%s failed: %s", request.path, e.message)
                return (response := error_reply(try_again(outcome_unknown=e.maybe_applied), accept))
            except QueratorError as e:
                return (response := error_reply(e, accept))
            except Exception:
                log.exception("%s failed", request.path)
                reply = m.Reply(code=500, code_text=CODE_TEXT[500], message="Internal Error")
                return (response := message_reply(reply, accept, 500))
            if result is None:
                return (response := message_reply(m.OK_REPLY, accept, 200))
            level = EXTENSIONS_LEVEL if accept != JSON else extensions_level(request)
            reply_of = reference_view(result, level) if level < EXTENSIONS_LEVEL else result
            if undelivered is None:
                return (response := message_reply(reply_of, accept, 200))
            written = message_reply(reply_of, accept, 200)
            await _deliver(request, written, lambda: undelivered(result))
            return (response := written)
        except Exception:  # past the mapping above (a reply that failed to encode): aiohttp answers 500
            unanswered = 500
            raise
        finally:
            timed(unanswered if response is None else response.status, started_s)

    return handler


async def _deliver(request: web.Request, response: Reply, undelivered: Callable[[], None]) -> None:
    """Writes the reply now rather than after the handler, to learn whether it could be written."""
    if (verified := verified_forward(request)) is not None:
        verified.sign(response)
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionError:  # the client left: aiohttp expects this of a reply and logs nothing
        undelivered()
    except asyncio.CancelledError:
        undelivered()
        raise


CROSS_SITE = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values of a request another site's page made the browser send."""


def _check_forgery(request: web.Request) -> None:
    """Refuses a cross-site request forgery: a page of another site making a user's browser POST to a
    node it can reach, which without API keys needs no credential, console or not. Browsers mark every
    request with the site that made it (``Sec-Fetch-Site``); clients and curl send no such header, and
    no other site can call the API legitimately (the node grants no CORS), so every request marked
    as another site's is refused, whatever its Content-Type
    (docs/adr/0032-keyless-nodes-check-the-site-and-the-host.md)."""
    if request.headers.get("Sec-Fetch-Site") in CROSS_SITE:
        raise InvalidOption("request is invalid; a browser sent it for another site (Sec-Fetch-Site)")
