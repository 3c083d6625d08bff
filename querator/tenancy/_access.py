"""Who a request is (authentication) and what it may do (authorization), with tenancy on
(docs/tenancy.md "Authentication" and "Authorization", docs/adr/0021).

A request's caller is a ``Principal`` in a ``RequestContext``, which the HTTP layer builds once per
request and passes to the service method it calls, as the first parameter (``AS_SERVER`` for the
server's own calls); the service asks ``authorize`` before it acts, and a call with no context is
refused (docs/adr/0056).

Lookups are cached for ``cache_ttl_s`` (a few seconds): a key or binding written on another node is
honoured here, and a deleted one refused, within that delay. What this node itself deletes is forgotten
at once. ``last_used_at`` is kept in memory and written in batches (``flush``), never once per request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import msgspec
from prometheus_client import CollectorRegistry, Counter

from querator.auth import KEY_PATTERN
from querator.clock import Clock
from querator.errors import Forbidden, QueratorError, Unauthorized
from querator.tenancy._directory import Directory
from querator.tenancy._model import ApiKey
from querator.tenancy._permissions import SYSTEM

log = logging.getLogger(__name__)
T = TypeVar("T")

CACHE_TTL_S: Final = 5.0
"""Seconds a key lookup or a user's permissions in a namespace are reused: the longest a change made on
another node takes to be honoured here (docs/adr/0021)."""
MAX_CACHED: Final = 100_000
"""Entries a cache holds at most; past it, it starts afresh (a flood of distinct keys must not grow it)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is. ``bootstrap``: a key of ``--api-keys``, the bootstrap admin, allowed anything."""

    user_id: str
    scope: str = ""
    """The namespace the key is scoped to ("" for none)."""
    key_id: str = ""
    bootstrap: bool = False
    server: bool = False
    """The server itself: its background tasks, the work a route causes beyond what it asked (a
    workflow's activation), and a verified forward, which its first node authorized."""


BOOTSTRAP_ADMIN: Final = Principal(user_id="", bootstrap=True)
SERVER: Final = Principal(user_id="", server=True)


class RequestContext(msgspec.Struct, frozen=True, gc=False):
    """Who a call of the service is for, and until when: built once per request (or once by a task of
    the server's own), passed to every service method as its first parameter and read by
    ``Access.authorize``, the one check (docs/adr/0051, docs/adr/0056). A frozen msgspec struct
    rather than a frozen dataclass: one is built per request, in a fifth of the time (the dataclass's
    ``__init__`` sets each field through ``object.__setattr__``)."""

    caller: Principal
    forwarded_by: str = ""
    """The node that forwarded the request ("" for none)."""
    deadline_us: int = 0
    """When the caller stops waiting (the request's ``request_timeout`` from its arrival; 0 for none):
    what the call waits for, it waits for no longer."""

    def within_us(self, timeout_us: int, now_us: int) -> int:
        """``timeout_us``, cut to what is left until the deadline (never below 1: the wait then ends at
        once, as the request's own timeout would)."""
        if not self.deadline_us:
            return timeout_us
        return max(1, min(timeout_us, self.deadline_us - now_us))


AS_SERVER: Final = RequestContext(SERVER)
"""The context of the server's own calls: its background tasks, and the work a route causes beyond what
it asked."""
NOBODY: Final = Principal(user_id="")
"""The caller of a request no key names where nothing is checked (tenancy off): with tenancy on, it holds
no permission."""


class NoRequestContext(RuntimeError):
    """A service call with tenancy on that names no caller (neither a request's nor ``AS_SERVER``): a
    programming error, answered 500 by the HTTP layer and never let through."""

    def __init__(self, namespace: str, permission: str) -> None:
        super().__init__(
            f"no request context; {permission} in {namespace!r} was asked outside of a request "
            "and not as the server (pass AS_SERVER or a RequestContext)"
        )


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256 as unpadded URL-safe base64 (the reference's)."""
    return _stored(hashlib.sha256(key.encode()).digest())


def _stored(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class _Cache(Generic[T]):
    """Values with an expiry on the clock's monotonic seconds."""

    def __init__(self, clock: Clock, ttl_s: float) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self._entries: dict[object, tuple[float, T]] = {}

    def get(self, key: object) -> T | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] < self._clock.monotonic():
            return None
        return entry[1]

    def put(self, key: object, value: T) -> None:
        if len(self._entries) >= MAX_CACHED:
            self._entries.clear()
        self._entries[key] = (self._clock.monotonic() + self._ttl_s, value)

    def drop(self, key: object) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()


class Access:
    """Authenticates keys and authorizes callers against the directory."""

    def __init__(
        self,
        directory: Directory,
        clock: Clock,
        bootstrap_hashes: Iterable[bytes] = (),
        registry: CollectorRegistry | None = None,
        cache_ttl_s: float = CACHE_TTL_S,
    ) -> None:
        self._directory = directory
        self._clock = clock
        self.bootstrap_hashes = tuple(bootstrap_hashes)
        self._keys: _Cache[ApiKey] = _Cache(clock, cache_ttl_s)
        self._grants: _Cache[frozenset[str]] = _Cache(clock, cache_ttl_s)
        self._used: dict[str, int] = {}
        self.anonymous = Principal(user_id="")
        self._failures = Counter(
            "querator_auth_failures",
            "Requests refused 401 because of their Authorization header, by reason.",
            ["reason"],
            registry=registry,
        )

    # -- authentication ---------------------------------------------------------------------------------

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller of a request with this Authorization header (None: anonymous).

        Raises:
            Unauthorized: a malformed header, or a key that is malformed, unknown or expired.
        """
        if authorization is None:
            return self.anonymous
        if not authorization.startswith("Bearer "):
            raise self._refuse("header", "invalid authorization header format")
        key = authorization[len("Bearer ") :].strip()
        if not KEY_PATTERN.fullmatch(key):
            raise self._refuse("malformed", "api key is invalid")
        digest = hashlib.sha256(key.encode()).digest()
        bootstrap = False
        for known in self.bootstrap_hashes:  # every hash, every time: no early exit to time
            bootstrap |= hmac.compare_digest(digest, known)
        if bootstrap:
            return BOOTSTRAP_ADMIN
        key_hash = _stored(digest)
        stored = await self._key(key_hash)
        if stored is None or not hmac.compare_digest(stored.key_hash, key_hash):
            raise self._refuse("unknown", "api key does not exist")
        now = self._clock.now()
        if stored.expires_at and stored.expires_at <= now:
            raise self._refuse("expired", "api key has expired")
        self._used[stored.id] = now
        return Principal(user_id=stored.user_id, scope=stored.namespace_scope, key_id=stored.id)

    async def _key(self, key_hash: str) -> ApiKey | None:
        """The live key with this hash whose user exists; cached, failures included (briefly), so an
        unknown key costs the store once per TTL."""
        cached = self._keys.get(key_hash)
        if cached is not None:
            return cached if cached.id else None
        try:
            key = await self._directory.key_with_hash(key_hash)
            if key is not None and await self._directory.get_user(key.user_id) is None:
                key = None  # its user was deleted: the cascade may not have reached the key yet
        except QueratorError as e:
            log.warning("api key lookup failed: %s", e.message)
            raise self._refuse("storage", "api key is invalid") from None
        self._keys.put(key_hash, key or _NO_KEY)
        return key

    def _refuse(self, reason: str, message: str) -> Unauthorized:
        """A 401, counted by ``reason`` in /metrics (``querator_auth_failures_total``)."""
        self._failures.labels(reason).inc()
        return Unauthorized(message)

    def forget_key(self, key_hash: str) -> None:
        self._keys.drop(key_hash)
        self._grants.clear()

    def forget_user(self) -> None:
        """A user was deleted here: every cached key and grant may be theirs."""
        self._keys.clear()
        self._grants.clear()

    def forget_grants(self) -> None:
        """A role or binding changed here."""
        self._grants.clear()

    async def flush(self) -> None:
        """Writes the last use of every key used since the previous flush."""
        used, self._used = self._used, {}
        try:
            await self._directory.note_key_uses(used)
        except BaseException:
            for key_id, used_at in used.items():  # written next time, unless a later use was meanwhile
                self._used[key_id] = max(used_at, self._used.get(key_id, 0))
            raise

    # -- authorization ----------------------------------------------------------------------------------

    async def authorize(self, ctx: RequestContext | None, namespace: str, permission: str) -> None:
        """The one authorization of every route: raises 403 ``access denied`` unless ``ctx``'s caller
        holds ``permission`` in ``namespace``, and ``NoRequestContext`` without a context."""
        if ctx is None:
            raise NoRequestContext(namespace, permission)
        if not await self.may(ctx.caller, namespace, permission):
            raise Forbidden("access denied")

    async def may(self, caller: Principal, namespace: str, permission: str) -> bool:
        """The cascade (docs/tenancy.md "Authorization"): a key scoped to another namespace reaches only
        ``_system``, with what the user holds there; otherwise what the user holds in the namespace, then
        in ``_system`` (its admins administer every namespace)."""
        if caller.bootstrap or caller.server:
            return True
        if caller.scope and caller.scope != namespace:
            return namespace == SYSTEM and permission in await self._granted(caller.user_id, SYSTEM)
        if permission in await self._granted(caller.user_id, namespace):
            return True
        return namespace != SYSTEM and permission in await self._granted(caller.user_id, SYSTEM)

    async def _granted(self, user_id: str, namespace: str) -> frozenset[str]:
        cached = self._grants.get((user_id, namespace))
        if cached is not None:
            return cached
        granted: set[str] = set()
        for binding in await self._directory.bindings_of(user_id, namespace):
            role = await self._directory.get_role(binding.namespace, binding.role_id)
            if role is None and namespace != SYSTEM:  # a standard role, bound in another namespace
                role = await self._directory.get_role(SYSTEM, binding.role_id)
            if role is not None:
                granted.update(role.permissions)
        result = frozenset(granted)
        self._grants.put((user_id, namespace), result)
        return result


_NO_KEY: Final = ApiKey(id="", user_id="", key_hash="", prefix="")
