"""Proxy: hands a request to the node that owns what it asks for, over one pooled HTTP session.

A forwarded request carries the raw body the client sent (never re-encoded), ``X-Querator-Forwarded-By``
with this node's id, and a deadline a little past the client's request_timeout. With a cluster secret it
is signed, and a reply without the owner's valid signature is never passed on (``ClusterAuth``).
The receiving node serves it itself or answers 454: a forwarded request is never forwarded again, so a
moment of ring disagreement costs one retry, never a loop. The proxy also makes the node-to-node calls
the service needs decoded (stats of every owner, a queue's settings changed, dead items for another
node's dead queue).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from querator.auth import FORWARDED_HEADER, REPLY_SIGNATURE_HEADER, SIGNATURE_HEADER, ClusterAuth
from querator.errors import error_for, try_again
from querator.wire import messages as m
from querator.wire.codec import JSON, DecodeError, decode_json, encode_json

log = logging.getLogger(__name__)

M = TypeVar("M", bound=m.Message)

CONNECTIONS = 256
"""Pooled connections to all other nodes together, for everything but forwarded leases: bounds what one
node asks of the others."""
POLL_CONNECTIONS = 4096
"""Pooled connections for forwarded leases, apart: long polls held for minutes must not starve the
pool that completes, produces and dead-letters."""


class Forward(Exception):
    """Raised by the service when another node must serve the request: the HTTP layer forwards it."""

    def __init__(self, node_id: str, address: str, timeout: float) -> None:
        """``timeout``: seconds the whole exchange may take."""
        super().__init__(f"forward to {node_id} at {address}")
        self.node_id = node_id
        self.address = address
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class Reply:
    """The owner's answer, passed back to the client as it came."""

    status: int
    content_type: str
    body: bytes


class Proxy:
    """The HTTP session to the other nodes (opened lazily, closed by ``close``)."""

    def __init__(
        self, node_id: str, auth: ClusterAuth | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        """``tls``: forward over HTTPS, verifying the owners (and presenting a client certificate) with it."""
        self._headers = {FORWARDED_HEADER: node_id}
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

    async def forward(self, target: Forward, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        """Sends ``body`` (with the client's ``headers`` that shape the reply: Content-Type, Accept...)
        to the owner as the client sent it; its reply comes back unchanged.

        Raises:
            RetryRequest: the owner could not be reached or did not answer in time, or its reply is not
                signed by it (454).
        """
        headers = {**headers, **self._headers}
        signature = ""
        if self._auth is not None:
            headers[SIGNATURE_HEADER], signature = self._auth.sign(target.node_id, "POST", path, body)
        url = f"{self._scheme}://{target.address}{path}"
        session = self._client(poll=path == "/v1/queue.lease")
        try:
            async with session.post(
                url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=target.timeout)
            ) as resp:
                content_type = resp.headers.get("Content-Type", "")
                reply = Reply(resp.status, content_type or JSON, await resp.read())
                presented = resp.headers.get(REPLY_SIGNATURE_HEADER, "")
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            log.warning("forwarding %s to %s failed: %s", path, target.node_id, e)
            # Once the request could have reached the owner, the owner may have carried it out.
            sent = not isinstance(e, aiohttp.ClientConnectorError)
            raise try_again(f"node {target.node_id} did not answer", outcome_unknown=sent) from e
        if self._auth is not None and not self._auth.reply_is_authentic(
            signature, reply.status, content_type, reply.body, presented
        ):
            # Whoever answered is not a node holding the secret (or refused our signature): its word
            # cannot acknowledge anything, and whether the owner got the request is unknown.
            log.warning(
                "forwarding %s to %s: the reply is not signed by a node of this cluster", path, target.node_id
            )
            raise try_again(f"node {target.node_id} did not sign its reply", outcome_unknown=True)
        return reply

    async def call(self, target: Forward, path: str, request: m.Message, reply_type: type[M]) -> M:
        """A node-to-node call with a decoded reply; the owner's errors are raised as ours."""
        reply = await self.forward(target, path, encode_json(request), {"Content-Type": JSON, "Accept": JSON})
        try:
            if reply.status != 200:
                raise error_for(reply.status, decode_json(reply.body, m.Reply).message)
            return decode_json(reply.body, reply_type)
        except DecodeError as e:
            raise try_again(f"node {target.node_id} answered {reply.status}") from e
