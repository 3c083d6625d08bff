"""Proxy: the one way a node talks to another -- a request message to the owner, its reply decoded.

Every node-to-node call goes through ``Proxy.call`` over one pooled HTTP session: the requests
``RemoteQueue`` forwards for clients, and the calls the service makes itself (a queue's settings changed,
dead items for another node's dead queue). A call carries ``X-Querator-Forwarded-By`` with this node's
id; the receiving node serves it itself or answers 454, so a moment of ring disagreement costs one
retry, never a loop. With a cluster secret the request is signed, and a reply without the owner's valid
signature is never believed (``ClusterAuth``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TypeVar

import aiohttp

from querator.auth import (
    EXTENSIONS_HEADER,
    EXTENSIONS_LEVEL,
    FORWARDED_HEADER,
    REPLY_SIGNATURE_HEADER,
    SIGNATURE_HEADER,
    ClusterAuth,
)
from querator.cluster.router import Remote
from querator.errors import error_for, try_again
from querator.wire import JSON, DecodeError, decode_json, encode_json
from querator.wire import messages as m

log = logging.getLogger(__name__)

M = TypeVar("M", bound=m.Message)

CONNECTIONS = 256
"""Pooled connections to all other nodes together, for everything but forwarded leases: bounds what one
node asks of the others."""
LEASE_PATH = "/v1/queue.lease"
WATCH_PATH = "/v1/queue.watch"
POLL_CONNECTIONS = 4096
"""Pooled connections for forwarded leases and watches (``lease_wait``), apart: long polls held for
minutes must not starve the pool that completes, produces and dead-letters."""
NO_REPLY = "none"
"""The code ``Forwarded`` is told of a forward that got no authentic reply."""
CLIENT_GONE = "499"
"""The code ``Forwarded`` is told of a forward abandoned because its client went away."""

Forwarded = Callable[[str, str, float], None]
"""Told of each forward once it ended: its path, the owner's status code (or ``NO_REPLY``, or
``CLIENT_GONE``) and the seconds it took (the metrics)."""


class Proxy:
    """The HTTP session to the other nodes (opened lazily, closed by ``close``)."""

    def __init__(
        self,
        node_id: str,
        auth: ClusterAuth | None = None,
        tls: ssl.SSLContext | None = None,
        forwarded: Forwarded | None = None,
    ) -> None:
        """``tls``: forward over HTTPS, verifying the owners (and presenting a client certificate) with it.
        ``forwarded``: told of each forward once it ended."""
        self._forwarded = forwarded
        # JSON both ways, with our extension fields: the service decodes every reply.
        self._headers = {
            FORWARDED_HEADER: node_id,
            "Content-Type": JSON,
            "Accept": JSON,
            EXTENSIONS_HEADER: str(EXTENSIONS_LEVEL),
        }
        self._auth = auth
        self._tls = tls
        self._scheme = "https" if tls is not None else "http"
        self._sessions: dict[bool, aiohttp.ClientSession] = {}
        self._closed = False

    def _client(self, poll: bool) -> aiohttp.ClientSession:
        if self._closed:
            raise try_again("this node is shutting down")
        session = self._sessions.get(poll)
        if session is None:
            limit = POLL_CONNECTIONS if poll else CONNECTIONS
            connector = aiohttp.TCPConnector(limit=limit, ssl=self._tls if self._tls is not None else True)
            session = self._sessions[poll] = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return session

    async def close(self) -> None:
        self._closed = True
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    async def call(
        self, target: Remote, path: str, request: m.Message, reply_type: type[M], timeout_s: float
    ) -> M:
        """``request`` served at ``target`` within ``timeout_s`` seconds, the whole exchange included;
        the owner's errors are raised as ours.

        Raises:
            RetryRequest: the owner could not be reached or did not answer in time, or its reply is not
                signed by it (454; ``outcome_unknown`` once the request may have reached it).
        """
        status, reply = await self._timed(target, path, encode_json(request), timeout_s)
        try:
            if status != 200:
                raise error_for(status, decode_json(reply, m.Reply).message)
            return decode_json(reply, reply_type)
        except DecodeError as e:
            raise try_again(f"node {target.node_id} answered {status}") from e

    async def _timed(self, target: Remote, path: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        if self._forwarded is None:
            return await self._exchange(target, path, body, timeout_s)
        loop = asyncio.get_running_loop()
        started, code = loop.time(), NO_REPLY
        try:
            status, reply = await self._exchange(target, path, body, timeout_s)
            code = str(status)
            return status, reply
        except asyncio.CancelledError:
            code = CLIENT_GONE
            raise
        finally:
            self._forwarded(path, code, loop.time() - started)

    async def _exchange(self, target: Remote, path: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """The owner's authentic status and reply body."""
        headers = self._headers
        signature = ""
        if self._auth is not None:
            headers = dict(headers)
            headers[SIGNATURE_HEADER], signature = self._auth.sign(target.node_id, "POST", path, body)
        url = f"{self._scheme}://{target.address}{path}"
        session = self._client(poll=path in (LEASE_PATH, WATCH_PATH))
        try:
            async with session.post(
                url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                status = resp.status
                content_type = resp.headers.get("Content-Type", "")
                reply = await resp.read()
                presented = resp.headers.get(REPLY_SIGNATURE_HEADER, "")
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            log.warning("forwarding %s to %s failed: %s", path, target.node_id, e)
            # Once the request could have reached the owner, the owner may have carried it out.
            sent = not isinstance(e, aiohttp.ClientConnectorError)
            raise try_again(f"node {target.node_id} did not answer", outcome_unknown=sent) from e
        if self._auth is not None and not self._auth.reply_is_authentic(
            signature, status, content_type, reply, presented
        ):
            # Whoever answered is not a node holding the secret (or refused our signature): its word
            # cannot acknowledge anything, and whether the owner got the request is unknown.
            log.warning(
                "forwarding %s to %s: the reply is not signed by a node of this cluster", path, target.node_id
            )
            raise try_again(f"node {target.node_id} did not sign its reply", outcome_unknown=True)
        return status, reply
