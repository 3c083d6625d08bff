"""etcd through its JSON gateway (``/v3/...``), with aiohttp: the few calls that membership needs.

Why not etcd3-py, the client the design names: see ADR 0008 and docs/cluster.md ("The etcd client"). In
short, its clients cannot be constructed while etcd is unreachable and block the event loop in their
constructor, its asyncio watch is broken with aiohttp >= 3.10 and its asyncio keep-alive is not
implemented; what is left (four unary calls) is a few lines of JSON over the aiohttp session we already
have.

The gateway speaks protobuf-JSON: int64 fields travel as strings (the decoders run with
``strict=False`` so msgspec turns them into ints), bytes as base64 (msgspec's own encoding of
``bytes``), and fields at their zero value are left out (a PUT event has no ``type``, a failed txn no
``succeeded``, a keep-alive of an unknown lease no ``TTL``). Streaming calls answer one JSON object per
line, each ``{"result": ...}`` or ``{"error": ...}``.

With a user name, the client authenticates (``/v3/auth/authenticate``) before its first call and sends
the token on every call; a call refused for its token (expired, or etcd restarted) authenticates again
and is repeated once. TLS (CA, client certificate) is the session's connector's business.

Errors, all ``EtcdError``:

- ``EtcdUnavailable``: no endpoint answered in time (refused, reset, timed out) or etcd said it cannot
  serve right now (gRPC UNAVAILABLE); the call may or may not have been applied.
- ``EtcdCompacted``: a watch started at a revision etcd no longer keeps; list again.
- ``LeaseNotFound``: the lease expired or was revoked.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

import aiohttp
import msgspec

log = logging.getLogger(__name__)

_GRPC_NOT_FOUND = 5
_GRPC_OUT_OF_RANGE = 11
_GRPC_UNAVAILABLE = 14
_GRPC_UNAUTHENTICATED = 16


class EtcdError(Exception):
    """etcd refused a call or could not be reached."""


class EtcdUnavailable(EtcdError):
    """No etcd endpoint answered; whether the call was applied is unknown."""


class EtcdCompacted(EtcdError):
    """The requested revision was compacted away; list again and watch from the listed revision."""

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message)
        self.compact_revision = compact_revision


class LeaseNotFound(EtcdError):
    """The lease expired or was revoked (and every key attached to it is gone)."""


class _TokenRefused(EtcdError):
    """etcd refused the auth token: authenticate again."""


class Header(msgspec.Struct):
    revision: int = 0


class KeyValue(msgspec.Struct):
    key: bytes
    value: bytes = b""
    create_revision: int = 0
    mod_revision: int = 0
    lease: int = 0


class Event(msgspec.Struct):
    kv: KeyValue
    type: str = "PUT"
    """``PUT`` or ``DELETE`` (the gateway leaves out PUT, the zero value)."""


class WatchResponse(msgspec.Struct):
    header: Header = msgspec.field(default_factory=Header)
    events: list[Event] = msgspec.field(default_factory=list)
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""


class Lease(msgspec.Struct):
    id: int = msgspec.field(name="ID")
    ttl: int = msgspec.field(default=0, name="TTL")
    """Seconds; 0 when etcd no longer knows the lease."""


class LeaseTimeToLive(Lease):
    granted_ttl: int = msgspec.field(default=0, name="grantedTTL")


class RangeResult(msgspec.Struct):
    header: Header = msgspec.field(default_factory=Header)
    kvs: list[KeyValue] = msgspec.field(default_factory=list)


class _ResponseOp(msgspec.Struct):
    response_range: RangeResult | None = None


class TxnResult(msgspec.Struct):
    header: Header = msgspec.field(default_factory=Header)
    succeeded: bool = False
    responses: list[_ResponseOp] = msgspec.field(default_factory=list)


class _Status(msgspec.Struct):
    code: int = 0
    message: str = ""


class _AuthResult(msgspec.Struct):
    token: str = ""


class _LeaseLine(msgspec.Struct):
    result: Lease | None = None
    error: _Status | None = None


class _WatchLine(msgspec.Struct):
    result: WatchResponse | None = None
    error: _Status | None = None


T = TypeVar("T")

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decode(kind: type[T], data: bytes) -> T:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind, strict=False)
    result: T = decoder.decode(data)
    return result


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range or watch cover every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _error(status: _Status, http_status: int) -> EtcdError:
    if status.code == _GRPC_UNAVAILABLE or http_status == 503:
        return EtcdUnavailable(status.message or f"etcd answered HTTP {http_status}")
    if status.code == _GRPC_NOT_FOUND and "lease not found" in status.message:
        return LeaseNotFound(status.message)
    if status.code == _GRPC_UNAUTHENTICATED or "invalid auth token" in status.message:
        return _TokenRefused(status.message)
    if status.code == _GRPC_OUT_OF_RANGE and "compacted" in status.message:
        return EtcdCompacted(status.message, 0)
    return EtcdError(status.message or f"etcd answered HTTP {http_status}")


class EtcdClient:
    """Calls etcd's JSON gateway at ``endpoints`` (``http://host:port``), moving to the next on failure.

    The session is borrowed: the caller closes it. Every unary call takes ``timeout`` seconds in all,
    shared evenly by the endpoints it tries, so a stopped (SIGSTOP) endpoint cannot eat the whole budget.
    """

    def __init__(
        self, endpoints: Sequence[str], session: aiohttp.ClientSession, username: str = "", password: str = ""
    ) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = list(endpoints)
        self._current = 0
        self._session = session
        self._credentials = {"name": username, "password": password} if username else None
        self._token = ""

    @property
    def endpoint(self) -> str:
        """The endpoint the next call tries first."""
        return self._endpoints[self._current]

    async def _call(self, path: str, body: dict[str, Any], timeout: float) -> bytes:
        if self._credentials is not None and not self._token:
            await self._authenticate(timeout)
        try:
            return await self._send(path, body, timeout)
        except _TokenRefused:
            if self._credentials is None:
                raise
            await self._authenticate(timeout)
            return await self._send(path, body, timeout)

    async def _authenticate(self, timeout: float) -> None:
        self._token = ""
        assert self._credentials is not None
        reply = await self._send("/v3/auth/authenticate", self._credentials, timeout)
        self._token = _decode(_AuthResult, reply).token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._token} if self._token else {}

    async def _send(self, path: str, body: dict[str, Any], timeout: float) -> bytes:
        payload = msgspec.json.encode(body)
        per_endpoint = aiohttp.ClientTimeout(total=timeout / len(self._endpoints))
        failure: Exception | None = None
        for _ in self._endpoints:
            url = self.endpoint + path
            try:
                async with self._session.post(
                    url, data=payload, headers=self._headers(), timeout=per_endpoint
                ) as resp:
                    data = await resp.read()
                    if resp.status == 200:
                        return data
                    error = _error(_status(data), resp.status)
            except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError) as e:
                error = EtcdUnavailable(f"{url}: {_describe(e)}")
            if not isinstance(error, EtcdUnavailable):
                raise error
            failure = error
            self._current = (self._current + 1) % len(self._endpoints)
        raise failure or EtcdUnavailable("no etcd endpoint")

    async def grant(self, ttl: int, timeout: float) -> Lease:
        """A new lease of ``ttl`` seconds (etcd may round it up to its minimum)."""
        return _decode(Lease, await self._call("/v3/lease/grant", {"TTL": str(ttl)}, timeout))

    async def keepalive(self, lease_id: int, timeout: float) -> int:
        """Renews the lease once; returns its new TTL in seconds. Raises LeaseNotFound if it is gone."""
        data = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)}, timeout)
        # A stream of one reply: the request body holds a single keep-alive and then ends.
        line = _decode(_LeaseLine, data.split(b"\n", 1)[0])
        if line.error is not None:
            error = _error(line.error, 200)
            if isinstance(error, _TokenRefused):
                self._token = ""  # the next call authenticates again
            raise error
        if line.result is None or line.result.ttl <= 0:
            raise LeaseNotFound(f"lease {lease_id:x} not found")
        return line.result.ttl

    async def time_to_live(self, lease_id: int, timeout: float) -> LeaseTimeToLive:
        """The lease's remaining and granted TTL (remaining is -1 once it expired)."""
        return _decode(
            LeaseTimeToLive, await self._call("/v3/lease/timetolive", {"ID": str(lease_id)}, timeout)
        )

    async def revoke(self, lease_id: int, timeout: float) -> None:
        """Revokes the lease, deleting its keys; LeaseNotFound if it was already gone."""
        await self._call("/v3/lease/revoke", {"ID": str(lease_id)}, timeout)

    async def create(self, key: bytes, value: bytes, lease_id: int, timeout: float) -> TxnResult:
        """Puts ``key`` only if it does not exist (``create_revision == 0``), in one txn.

        On failure the txn returns the existing key, so the caller sees who holds it.
        """
        body = {
            "compare": [{"target": "CREATE", "key": key, "create_revision": "0", "result": "EQUAL"}],
            "success": [{"request_put": {"key": key, "value": value, "lease": str(lease_id)}}],
            "failure": [{"request_range": {"key": key}}],
        }
        return _decode(TxnResult, await self._call("/v3/kv/txn", body, timeout))

    async def get_prefix(self, prefix: bytes, timeout: float) -> RangeResult:
        """Every key under ``prefix``, with the revision the listing was taken at."""
        body = {"key": prefix, "range_end": prefix_end(prefix)}
        return _decode(RangeResult, await self._call("/v3/kv/range", body, timeout))

    async def watch_prefix(
        self, prefix: bytes, start_revision: int, connect_timeout: float
    ) -> AsyncGenerator[WatchResponse, None]:
        """Every change under ``prefix`` from ``start_revision`` on, as etcd sends them.

        Runs until the caller stops iterating; raises EtcdCompacted if ``start_revision`` is gone and
        EtcdUnavailable when the stream breaks (etcd restarted, connection reset) or cannot be opened.
        A silent stream (etcd stopped but the connection open) simply yields nothing: liveness is the
        lease keep-alive's job, not the watch's.
        """
        body = {
            "create_request": {
                "key": prefix,
                "range_end": prefix_end(prefix),
                "start_revision": str(start_revision),
            }
        }
        url = self.endpoint + "/v3/watch"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=None)
        if self._credentials is not None:
            # A fresh token: the stream lives long, and one refused at its start is not retried here.
            await self._authenticate(connect_timeout)
        data, headers = msgspec.json.encode(body), self._headers()
        try:
            async with self._session.post(url, data=data, headers=headers, timeout=timeout) as resp:
                if resp.status != 200:
                    raise _error(_status(await resp.read()), resp.status)
                # Lines can be long (a big event batch); aiohttp's readline() has a size limit, so
                # split the chunks ourselves.
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for raw in lines:
                        if raw.strip():
                            yield _watch_response(raw)
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError) as e:
            self._current = (self._current + 1) % len(self._endpoints)
            raise EtcdUnavailable(f"watch {url}: {_describe(e)}") from e
        self._current = (self._current + 1) % len(self._endpoints)
        raise EtcdUnavailable(f"watch {url}: the stream ended")


def _status(data: bytes) -> _Status:
    """A refusal's status; etcd answers some (its gateway's own) in plain text."""
    try:
        return _decode(_Status, data)
    except msgspec.DecodeError:
        return _Status(message=data[:300].decode(errors="replace").strip())


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _watch_response(raw: bytes) -> WatchResponse:
    line = _decode(_WatchLine, raw)
    if line.error is not None:
        raise _error(line.error, 200)
    if line.result is None:
        raise EtcdError(f"watch: unexpected line {raw[:200]!r}")
    result = line.result
    if result.canceled:
        if result.compact_revision:
            raise EtcdCompacted(
                f"watch: revision compacted up to {result.compact_revision}", result.compact_revision
            )
        raise EtcdUnavailable(f"watch canceled by etcd: {result.cancel_reason or 'no reason given'}")
    return result
