"""The authentication middleware: who a request is (an API key, a tenant's caller, a signed forward from
another node), before any routing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from querator.auth import FORWARDED_HEADER, REPLY_SIGNATURE_HEADER, ApiKeys, ClusterAuth, Forwarded
from querator.errors import QueratorError
from querator.http._replies import Reply, accept_or_json, error_reply
from querator.tenancy import SERVER, SYSTEM, Access, Principal, RequestContext
from querator.tenancy import permissions as perm

READY_DETAILS = web.RequestKey("ready_details", bool)
"""False when ``/ready`` must not say why the node is not ready (it may name queues) because
the caller has no key. A probe needs no key to read the status."""


@dataclass(frozen=True, slots=True)
class VerifiedForward:
    """A forwarded request whose signature checked out: its body is still to check, its reply to sign."""

    auth: ClusterAuth
    forwarded: Forwarded

    def check_body(self, body: bytes) -> None:
        ClusterAuth.check_body(self.forwarded, body)

    def sign(self, response: web.StreamResponse) -> None:
        """Signs the owner's reply, so the forwarder can tell it from a stranger's."""
        # Every route answers a Reply (its body bytes); anything else goes unsigned, and the forwarder
        # refuses it rather than pass it on.
        if isinstance(response, Reply):
            content_type = response.headers.get("Content-Type", "")
            signature = self.auth.sign_reply(self.forwarded, response.status, content_type, response.body)
            response.headers[REPLY_SIGNATURE_HEADER] = signature


UNAUTHENTICATED = web.RequestKey("unauthenticated", bool)
"""True on a request the authentication middleware refused (or let through to an open path) without a
valid key, or whose key is still being checked: the connection limits (querator.connections) close its
connection rather than read its body, and let a new connection take its place meanwhile."""


def unauthenticated(request: web.BaseRequest) -> bool:
    """Whether ``request`` was refused by the authentication middleware, or is waiting for it. Looked up
    on the rare paths only (a body left unread, a full listener): a request's ``get`` of a missing key
    raises and catches a KeyError."""
    return request.get(UNAUTHENTICATED) is True


CALLER: web.RequestKey[Principal | None] = web.RequestKey("caller")
"""Set by the authentication middleware on every request it lets through: who the request is (None for
no one: without tenancy, a request that is not a forward). The route's handler builds the request's
``RequestContext`` from it (docs/adr/0056)."""

VERIFIED_FORWARD: web.RequestKey[VerifiedForward] = web.RequestKey("verified_forward")
"""Set by the authentication middleware on a verified forward; a handler that writes its reply itself
(``_handler._deliver``) signs it first."""


def authentication(
    keys: ApiKeys | None,
    access: Access | None,
    open_paths: frozenset[str],
    open_prefix: str | None,
    ready_details: bool,
) -> Any:
    """The middleware that checks who a request is: ``keys`` checks forwards (and, without tenancy, the
    configured keys); with tenancy, ``access`` finds the caller (docs/tenancy.md), set as the request's
    ``CALLER`` for the route's handler, whose context the service authorizes (docs/adr/0056). A
    verified forward is the server's own call: its first node authorized it. GETs of ``open_paths``
    and of the console's files (under ``open_prefix``) pass without a key."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        # Before routing, as the reference does: a caller without a key learns nothing, not even which
        # paths exist. Only the GETs of probes (and of the console's files, which hold no data) pass
        # (POST /health is an ordinary 501).
        forwarded = None
        caller = None
        try:
            if keys:
                forwarded = keys.authenticate(
                    request.method, request.path, request.headers, _certified(request)
                )
            if access is not None and forwarded is None:
                request[UNAUTHENTICATED] = True  # until the key is found (it may take a storage read)
                caller = await access.authenticate(request.headers.get("Authorization"))
                request[UNAUTHENTICATED] = False
                if request.method == "GET":
                    await _check_get(request, access, caller)
        except QueratorError as e:
            request[UNAUTHENTICATED] = True
            path = request.path
            if request.method != "GET" or not (
                path in open_paths
                or (open_prefix is not None and (path.startswith(open_prefix) or path == open_prefix[:-1]))
            ):
                return error_reply(e, accept_or_json(request))
            request[READY_DETAILS] = ready_details
        verified = None
        if forwarded is not None:
            caller = SERVER
            if keys is not None and keys.cluster is not None:
                verified = request[VERIFIED_FORWARD] = VerifiedForward(keys.cluster, forwarded)
        request[CALLER] = caller
        response = await handler(request)
        if verified is not None and not response.prepared:  # (a reply written early signed itself)
            verified.sign(response)
        return response

    return authenticate


async def _check_get(request: web.Request, access: Access, caller: Principal) -> None:
    """The GET routes the service does not serve: /metrics needs ``system.metrics`` in ``_system``,
    and /ready says why a node is not ready only to holders of ``system.health``."""
    if request.path == "/metrics":
        await access.authorize(RequestContext(caller), SYSTEM, perm.SYSTEM_METRICS)
    if request.path == "/ready":
        request[READY_DETAILS] = await access.may(caller, SYSTEM, perm.SYSTEM_HEALTH)


def _certified(request: web.Request) -> bool:
    """Whether a forwarded request came with a verified client certificate (TLS with
    --tls-client-ca-file); only forwards are asked, so other requests skip the look-up."""
    if FORWARDED_HEADER not in request.headers:
        return False
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


def verified_forward(request: web.Request) -> VerifiedForward | None:
    """The forward's signature check, if the request is a signed forward. Looked up only when the
    forwarded header is there: a request's ``get`` of a missing key raises and catches a KeyError."""
    return request.get(VERIFIED_FORWARD) if FORWARDED_HEADER in request.headers else None
