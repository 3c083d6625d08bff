"""Connection-level limits of a listening address: how many connections, how long a request may take
to arrive, and how long its reply may wait for the client to read it.

Why this module exists: aiohttp (3.14) bounds the size of request headers, not the time a client takes to
send them or the body. Its only timer is keep-alive, which closes an idle connection; since it also runs
while a request's headers are arriving, a slow header lasts as long as the idle timeout, and nothing at
all bounds a slow body. A client trickling a byte at a time (slow loris) holds a connection, its file
descriptor and its buffers as long as it likes, and enough of them exhaust the process's descriptors. The
reference's Go server has the same gap; it bounds only the number of connections (``MaxConcurrentRequests``).

``Listener.protocol_factory`` wraps aiohttp's protocol factory. Each connection's protocol is a
``_Connection`` that passes every event through to aiohttp's own and adds:

- a cap: at ``max_connections`` a new connection takes the place of one that holds no request being
  handled: first one whose request was refused for want of a valid key, then one kept alive between
  requests (or whose refused body is being discarded), then one silent or stalled in its request's
  headers or still sending the body of a request whose key is being checked; within each, one of the
  address holding the most connections, then the oldest. When every connection is busy with a request
  the new one is closed as soon as it is accepted, before aiohttp sees it, so descriptors stay bounded
  whatever clients do, and idle connections (a thousand kept alive after one ``/health`` each) or
  unauthenticated ones cannot lock other clients out;
- no body read for a request refused without a valid key: its reply is written and its connection closed
  (aiohttp would read and discard the body for up to 10 s, holding the connection busy);
- a cap per client address (``max_connections_per_client``, off by default: a load balancer brings many
  clients from one address), with the same eviction among that address's own connections;
- a header deadline: a request's line and headers must arrive within ``header_timeout`` of its first byte,
  or of the accept for a connection's first request (Go's ``ReadHeaderTimeout`` and nginx's
  ``client_header_timeout`` count from there too, so a connection that never sends a byte is not "idle");
- a body deadline: the whole body within ``body_timeout`` of the headers. A total, not a per-read
  inactivity timer, because a trickle of one byte a second never trips the latter.

- a write deadline: a connection whose replies stop flowing (the transport's buffer over its high-water
  mark: the client stopped reading) for ``write_timeout`` is closed, as nginx's ``send_timeout`` does;
  otherwise a client that sends requests and never reads the replies holds its connection and the
  handlers blocked writing to it for ever.

A connection past a deadline is aborted, without a reply: a client that slow is not reading one
either. The deadlines are checked by one sweep per listener, a few times per shortest timeout, rather
than by a timer per request: setting a deadline costs the request path one clock read, and a deadline
is enforced within a quarter of the shorter timeout (a second at most) of passing. Between requests
aiohttp's keep-alive timer (``idle_timeout``) closes an idle connection. Handling a request is never
timed: a lease may wait its full request_timeout.

Only aiohttp's public surface is used: ``runner.server`` is the protocol factory, and ``tracked`` wraps
its request handler to tell the connection when a request's headers are in (aiohttp calls the handler
only then) and when its handling is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from querator.config import ListenerConfig

log = logging.getLogger(__name__)

RequestHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
"""What an aiohttp ``web.Server`` calls with each request."""


class _Phase(enum.Enum):
    HEADERS = "headers"  # a request's line and headers are due (header deadline armed)
    BODY = "body"  # the handler runs; its body is due (body deadline armed)
    HANDLING = "handling"  # the handler runs with the whole body in: no deadline
    IDLE = "idle"  # between requests: aiohttp's keep-alive timer applies
    DRAINING = "draining"  # the handler left part of the body unread: aiohttp discards it, then closes
    REFUSED = "refused"  # refused for want of a valid key: its reply is written, then it closes


SWEEPS_PER_TIMEOUT = 4
MAX_SWEEP_INTERVAL = 1.0


def _never(request: web.BaseRequest) -> bool:
    return False


class Listener:
    """The limits of one listening address, shared by its connections. ``unauthenticated`` tells a
    request refused for want of a valid key, or whose key is still being checked (the application's
    authentication marks them)."""

    def __init__(
        self, config: ListenerConfig, unauthenticated: Callable[[web.BaseRequest], bool] = _never
    ) -> None:
        self.config = config
        self._unauthenticated = unauthenticated
        self.open = 0
        """Connections being served (refused ones are not counted)."""
        self._refusing = False
        # aiohttp's protocol object -> ours, so ``tracked`` finds the connection of a request.
        self._connections: dict[asyncio.BaseProtocol, _Connection] = {}
        self._per_client: dict[str, int] = {}
        """Connections being served, by client address."""
        shortest = min(config.header_timeout, config.body_timeout, config.write_timeout)
        self._interval = min(MAX_SWEEP_INTERVAL, shortest / SWEEPS_PER_TIMEOUT)
        self._sweep: asyncio.TimerHandle | None = None

    def protocol_factory(self, inner: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.Protocol]:
        """A factory for ``loop.create_server``: aiohttp's protocols (from ``inner``), under these limits."""
        return lambda: _Connection(self, inner)

    def tracked(self, handler: RequestHandler) -> RequestHandler:
        """``handler`` (an aiohttp server's ``request_handler``), marking where each request's headers end
        and its handling ends. Wrapping the server's handler rather than being the application's
        outermost middleware spares every request aiohttp's middleware chain when the application has
        no other middleware (docs/benchmarks-log.md, "Small requests")."""

        async def track(request: web.BaseRequest) -> web.StreamResponse:
            connection = self._connections.get(request.protocol)
            if connection is None:  # already closed
                return await handler(request)
            connection.headers_received(request)
            try:
                response = await handler(request)
                if not request.content.is_eof():
                    # The handler answered without reading the whole body (too large, say): close after
                    # the reply, as Go does, rather than read the rest to find the next request.
                    response.force_close()
                    if self._unauthenticated(request):
                        await connection.refuse(request, response)
                return response
            finally:
                connection.request_done(request.content.is_eof())

        return track

    def _admit(self, client: str) -> bool:
        """Whether a connection from ``client`` may be served, after making room for it if need be."""
        per_client = self.config.max_connections_per_client
        crowded = per_client and self._per_client.get(client, 0) >= per_client
        if crowded and not self._evict(lambda c: c.client == client):
            self._refuse("connection limit reached for client %s (max-connections-per-client)", client)
            return False
        if self.open >= self.config.max_connections and not self._evict(lambda c: True):
            self._refuse(
                "connection limit reached: %d connections open, all busy; closing new ones until some end "
                "(max-connections)",
                self.open,
            )
            return False
        self.open += 1
        self._per_client[client] = self._per_client.get(client, 0) + 1
        return True

    def _refuse(self, message: str, *args: object) -> None:
        if not self._refusing:  # once per episode: a flood must not flood the log as well
            self._refusing = True
            log.warning(message, *args)

    def _evict(self, eligible: Callable[[_Connection], bool]) -> bool:
        """Closes the eligible connection that gives way first (``_Connection.precedence``): of the
        address holding the most connections among those of its rank, so that a flood from one address
        evicts its own, and the oldest of them; False when every eligible connection is busy."""
        per_client, unauthenticated = self._per_client, self._unauthenticated
        ranked = []
        for c in self._connections.values():
            if eligible(c) and (precedence := c.precedence(unauthenticated)) is not None:
                rank, since = precedence
                ranked.append((rank, -per_client[c.client], since, c))
        if not ranked:
            return False
        min(ranked, key=lambda r: r[:3])[3].evict()
        return True

    def _register(self, inner: asyncio.BaseProtocol, connection: _Connection) -> None:
        self._connections[inner] = connection
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self._interval, self._sweep_deadlines)

    def _sweep_deadlines(self) -> None:
        """Aborts the connections whose deadline passed; runs while any connection is open."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for connection in list(self._connections.values()):
            if connection.deadline is not None and connection.deadline <= now:
                connection.expired()
            if connection.write_deadline is not None and connection.write_deadline <= now:
                connection.write_stalled()
        self._sweep = loop.call_later(self._interval, self._sweep_deadlines) if self._connections else None

    def _release(self, inner: asyncio.BaseProtocol, client: str) -> None:
        del self._connections[inner]
        self.open -= 1
        left = self._per_client[client] - 1
        if left:
            self._per_client[client] = left
        else:
            del self._per_client[client]
        if self.open < self.config.max_connections:
            self._refusing = False


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol inside, deadlines around it."""

    def __init__(self, listener: Listener, inner_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._listener = listener
        self._inner_factory = inner_factory
        self._inner: Any = None  # aiohttp's RequestHandler, once admitted
        self._transport: asyncio.Transport | None = None
        self.phase = _Phase.HEADERS
        self._request: web.BaseRequest | None = None
        self._loop = asyncio.get_running_loop()
        self.client = ""
        """The client's address (host only)."""
        self._since = self._loop.time()
        """Loop time the phase began."""
        self._evicted = False
        self.deadline: float | None = None
        """Loop time by which the request's headers or body must be in; None: nothing is due."""
        self.write_deadline: float | None = None
        """Loop time by which paused writing must resume; None: writing is not paused."""

    # -- asyncio.Protocol: everything goes through to aiohttp

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._listener._admit(self.client):
            transport.close()
            return
        self._transport = cast(asyncio.Transport, transport)
        self._inner = self._inner_factory()
        self._listener._register(self._inner, self)
        self._inner.connection_made(transport)
        self._arm(self._listener.config.header_timeout)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self.phase is _Phase.IDLE:  # the first byte of the next request
            self._enter(_Phase.HEADERS)
            self._arm(self._listener.config.header_timeout)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is None:
            return None
        result: bool | None = self._inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:
            return
        self._disarm()
        self._request = None
        self._listener._release(self._inner, self.client)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self.write_deadline = self._loop.time() + self._listener.config.write_timeout
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self.write_deadline = None
            self._inner.resume_writing()

    # -- from ``tracked``

    def headers_received(self, request: web.BaseRequest) -> None:
        self._enter(_Phase.BODY)
        self._request = request
        self._arm(self._listener.config.body_timeout)

    async def refuse(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Writes the reply to a request refused without a valid key, then closes the connection without
        reading the rest of its body: nobody is owed that, and aiohttp would read and discard it for up
        to 10 s, a connection held for nothing. Bytes of the body still in the socket make the close a
        reset, which may cost the client the reply: a client that sends a body without a valid key gets
        no more than its headers earned."""
        self._enter(_Phase.REFUSED)
        with contextlib.suppress(ConnectionError):  # the client left: nothing to write to
            await response.prepare(request)
            await response.write_eof()
        request.protocol.force_close()  # aiohttp's: closes without lingering for the body

    def request_done(self, body_read: bool) -> None:
        # Bytes that arrive from now on start the next request (IDLE) or are the unread rest of this
        # body, which aiohttp discards for a bounded time before closing (DRAINING): no deadline for those,
        # an abort would reset the connection before the client had read its reply.
        if self.phase is not _Phase.REFUSED:
            self._enter(_Phase.IDLE if body_read else _Phase.DRAINING)
        self._request = None
        self._disarm()

    def _enter(self, phase: _Phase) -> None:
        self.phase = phase
        self._since = self._loop.time()

    def precedence(self, unauthenticated: Callable[[web.BaseRequest], bool]) -> tuple[int, float] | None:
        """How readily it gives way to a new connection at the limit: (rank, since when), the lowest
        first; None while it is busy with a request (an authenticated one's body, or its handling), or
        already closing."""
        if self._evicted:
            return None
        phase = self.phase
        if phase is _Phase.REFUSED:
            return 0, self._since
        if phase in (_Phase.IDLE, _Phase.DRAINING):
            return 1, self._since
        if phase is _Phase.HEADERS:
            return 2, self._since
        request = self._request
        if phase is _Phase.BODY and request is not None and not request.content.is_eof():
            # Its body is due and its key not (yet) known good: it holds nothing anyone is owed.
            return (2, self._since) if unauthenticated(request) else None
        return None

    # -- deadlines (checked by the listener's sweep)

    def _arm(self, seconds: float) -> None:
        self.deadline = self._loop.time() + seconds

    def _disarm(self) -> None:
        self.deadline = None

    def expired(self) -> None:
        self.deadline = None
        if self.phase is _Phase.BODY and self._request is not None and self._request.content.is_eof():
            self.phase = _Phase.HANDLING  # the body came in time; the handler may take what it needs
            return
        if self.phase in (_Phase.HEADERS, _Phase.BODY) and self._transport is not None:
            log.debug(
                "closing connection from %s: its request's %s did not arrive in time",
                self._transport.get_extra_info("peername"),
                "headers" if self.phase is _Phase.HEADERS else "body",
            )
            self._transport.abort()

    def evict(self) -> None:
        """Closes the connection to make room for a new one; it holds no request being handled."""
        self._evicted = True  # not chosen twice while its close is under way
        if self._transport is not None:
            log.debug("closing idle connection from %s: the connection limit is reached", self.client)
            self._transport.close()

    def write_stalled(self) -> None:
        self.write_deadline = None
        if self._transport is not None:
            log.debug(
                "closing connection from %s: it has not read its replies for %ss",
                self._transport.get_extra_info("peername"),
                self._listener.config.write_timeout,
            )
            self._transport.abort()
