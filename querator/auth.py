"""API-key authentication (extensions.md): off unless keys are configured.

Keys look like the reference's, ``qtr-<tag>-<43 base62 characters>`` (32 random bytes), and the server
only ever holds their SHA-256 hashes, configured in a file or an environment variable, as hex or as the
reference's unpadded URL-safe base64. A request presents ``Authorization: Bearer <key>``; the key is
hashed and compared with every configured hash in constant time, so neither the answer's timing nor its
message tells a caller anything beyond "not a valid key". Authentication runs before routing: an
unauthenticated caller cannot learn which queues (or routes) exist.

Nodes of a cluster sign the requests they forward to each other, and the owner signs its reply
(``ClusterAuth``, docs/cluster.md "Authenticating forwards"): the cluster secret itself never travels.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from querator.clock import Clock, SystemClock
from querator.errors import Unauthorized, try_again

EXTENSIONS_HEADER = "X-Querator-Extensions"
"""Sent by clients that accept our extension fields in JSON replies (reference clients reject them); its
value is the level of extensions the client knows (``EXTENSIONS_LEVEL``)."""
EXTENSIONS_LEVEL = 3
"""The extension fields this version knows: 1, those of queues (``dedup_window``); 2, the ids of a
produce's reply too; 3, an item's job and failures (lease and storage replies). A client of level 1
decodes a produce's reply as a ``Reply``, which rejects unknown keys, so it must not get the ids
(docs/extensions.md)."""
FORWARDED_HEADER = "X-Querator-Forwarded-By"
"""Set by a node that forwards a request to the partition's owner; its value is the node id."""
SIGNATURE_HEADER = "X-Querator-Signature"
"""A forwarded request's signature: ``t=<unix ms>,n=<nonce>,d=<body sha256>,s=<hmac>`` (all hex)."""
REPLY_SIGNATURE_HEADER = "X-Querator-Reply-Signature"
"""The owner's HMAC of its reply to a signed forwarded request, checked by the forwarding node."""
LEGACY_SECRET_HEADER = "X-Querator-Cluster-Secret"
"""Where nodes before signed forwarding sent the cluster secret in clear; never read, only recognised."""
MAX_CLOCK_SKEW = 30_000
"""Milliseconds a forwarded request's time may differ from the receiving node's clock: older requests
are refused as stale, and replays are refused by remembering every nonce this long."""
MAX_NONCES = 1_000_000
"""Nonces remembered at most (about 100 MB): over 30,000 forwards a second to one node. Past it, a
forward is answered 454 rather than accepted unchecked for replay."""
MIN_SECRET = 32
SECRET_PATTERN = re.compile(rb"[\x20-\x7e]+")
KEY_PATTERN = re.compile(r"qtr-[a-z0-9]{1,16}-[0-9A-Za-z]{43}")
BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
DEFAULT_TAG = "live"


class ApiKeyError(ValueError):
    """A configured key hash that is neither 64 hex digits nor 43 characters of URL-safe base64."""


def generate_key(tag: str = DEFAULT_TAG) -> str:
    """A new API key (32 random bytes) in the reference's format."""
    if not re.fullmatch(r"[a-z0-9]{1,16}", tag):
        raise ValueError("key tag is invalid; must be 1 to 16 lowercase letters or digits")
    value = int.from_bytes(secrets.token_bytes(32))
    digits = []
    while value:
        value, digit = divmod(value, 62)
        digits.append(BASE62[digit])
    return f"qtr-{tag}-{''.join(reversed(digits)).rjust(43, '0')}"


def key_hash(key: str) -> str:
    """The hex SHA-256 of a key: what the server is configured with."""
    return hashlib.sha256(key.encode()).hexdigest()


def parse_hash(text: str) -> bytes:
    """A configured hash as its 32 bytes."""
    text = text.strip()
    try:
        if len(text) == 64:
            return bytes.fromhex(text)
        if len(text) == 43:
            return base64.urlsafe_b64decode(text + "=")
    except (ValueError, binascii.Error):
        pass
    raise ApiKeyError(f"api key hash is invalid; '{text[:12]}...' is not a hex or base64 SHA-256")


def read_hashes(file: str, listed: str) -> list[bytes]:
    """Hashes from a file (one per line, ``#`` comments) and from a comma-separated list."""
    lines: list[str] = []
    if file:
        lines.extend(Path(file).read_text().splitlines())
    lines.extend(listed.split(","))
    return [parse_hash(line) for line in (raw.split("#", 1)[0].strip() for raw in lines) if line]


def read_secret(file: str) -> bytes:
    """The cluster secret from its file ("" when none), checked for length."""
    if not file:
        return b""
    secret = Path(file).read_bytes().strip()
    if len(secret) < MIN_SECRET:
        raise ApiKeyError(f"cluster secret is invalid; it must be at least {MIN_SECRET} characters")
    if not SECRET_PATTERN.fullmatch(secret):
        # It travels in a header: a line break or a control character there made every forward a 500.
        raise ApiKeyError(
            "cluster secret is invalid; it must be one line of printable ASCII characters (a header value)"
        )
    return secret


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A forwarded request whose headers were verified; its body and reply are still to check and sign."""

    by: str
    """The id of the node that forwarded it."""
    digest: bytes
    """The SHA-256 its body must have."""
    signature: str
    """Its HMAC (hex), which the owner's reply signature covers: a reply answers this request only."""


_SIGNATURE = re.compile(r"t=([0-9]{1,15}),n=([0-9a-f]{32}),d=([0-9a-f]{64}),s=([0-9a-f]{64})")
_encode = msgspec.json.encode


class ClusterAuth:
    """Signs and checks what the nodes of a cluster send each other, keyed by the cluster secret.

    A forwarding node signs (method, path, body SHA-256, time, nonce, its own id, the owner's id); the
    owner refuses a request whose signature does not match, whose time is more than ``MAX_CLOCK_SKEW``
    from its own clock or before this process started, or whose nonce it has seen (a replay), then signs
    (the request's signature, status, Content-Type, body SHA-256) of its reply, which the forwarder
    checks before passing the reply on. The body's digest travels in the signature header, so the
    headers are authenticated before the body is read (``check_body`` checks the body then). Every
    comparison is constant-time.
    """

    def __init__(self, secret: bytes, node_id: str, clock: Clock | None = None) -> None:
        self._key = hashlib.sha256(b"querator cluster secret\n" + secret).digest()
        self.node_id = node_id
        self._clock = clock or SystemClock()
        self._nonces: dict[bytes, int] = {}
        """Nonce -> when it may be forgotten (ms): by then its request is refused as stale anyway."""
        self._started_ms = self._millis()
        """Forwards signed before this are refused: the nonces they were checked against were lost with
        the process before this one, so a forward recorded then could be played back now."""

    def _mac(self, *fields: str | int) -> str:
        return hmac.new(self._key, _encode(fields), hashlib.sha256).hexdigest()

    def _millis(self) -> int:
        return self._clock.now() // 1000

    def sign(self, to: str, method: str, path: str, body: bytes) -> tuple[str, str]:
        """The signature header of a request to node ``to``, and the signature its reply must cover."""
        at, nonce, digest = self._millis(), secrets.token_hex(16), hashlib.sha256(body).hexdigest()
        mac = self._mac("request", method, path, digest, at, nonce, self.node_id, to)
        return f"t={at},n={nonce},d={digest},s={mac}", mac

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> Forwarded:
        """The verified forward of a request that carries ``X-Querator-Forwarded-By``.

        Raises:
            Unauthorized: no signature, a wrong one, a stale time or a replay.
            RetryRequest: a forward of a node that sends the secret in clear (an older version, mid
                rolling upgrade): its client may retry, reaching a node of the same version.
        """
        by = headers.get(FORWARDED_HEADER, "")
        found = _SIGNATURE.fullmatch(headers.get(SIGNATURE_HEADER, ""))
        if found is None:
            if LEGACY_SECRET_HEADER in headers:
                raise try_again(
                    "forwarded request is invalid; it carries the cluster secret in clear, as nodes of "
                    "older versions do, instead of a signature"
                )
            raise Unauthorized("forwarded request is invalid; it has no signature")
        at, nonce, digest, mac = found.groups()
        now = self._millis()
        if abs(now - int(at)) > MAX_CLOCK_SKEW:
            raise Unauthorized(
                f"forwarded request is invalid; its time is more than {MAX_CLOCK_SKEW // 1000}s away "
                "from this node's clock"
            )
        if int(at) < self._started_ms:
            raise Unauthorized("forwarded request is invalid; it was signed before this node started")
        expected = self._mac("request", method, path, digest, int(at), nonce, by, self.node_id)
        if not hmac.compare_digest(expected, mac):
            raise Unauthorized("forwarded request is invalid; its signature does not match")
        self._remember(bytes.fromhex(nonce), int(at) + MAX_CLOCK_SKEW, now)
        return Forwarded(by, bytes.fromhex(digest), mac)

    def _remember(self, nonce: bytes, until: int, now: int) -> None:
        nonces = self._nonces
        # Insertion order is about expiry order (nodes' clocks agree within the skew): dropping from the
        # front until an entry still counts keeps the dict to the last window, at O(1) a request.
        for old in list(itertools.islice(nonces, 2)):
            if nonces[old] >= now:
                break
            del nonces[old]
        if nonce in nonces:
            raise Unauthorized("forwarded request is invalid; it was received before (a replay)")
        if len(nonces) >= MAX_NONCES:
            raise try_again("this node is checking too many forwarded requests for replays")
        nonces[nonce] = until

    @staticmethod
    def check_body(forwarded: Forwarded, body: bytes) -> None:
        """Raises Unauthorized unless ``body`` is the one the forward was signed with."""
        if not hmac.compare_digest(hashlib.sha256(body).digest(), forwarded.digest):
            raise Unauthorized("forwarded request is invalid; its body does not match its signature")

    def sign_reply(self, forwarded: Forwarded, status: int, content_type: str, body: bytes) -> str:
        """The reply signature header of the owner's answer to ``forwarded``."""
        return self._reply_mac(forwarded.signature, status, content_type, body)

    def reply_is_authentic(
        self, signature: str, status: int, content_type: str, body: bytes, presented: str
    ) -> bool:
        """Whether ``presented`` is the owner's signature of this reply to the request ``signature``."""
        return hmac.compare_digest(self._reply_mac(signature, status, content_type, body), presented)

    def _reply_mac(self, signature: str, status: int, content_type: str, body: bytes) -> str:
        return self._mac("reply", signature, status, content_type, hashlib.sha256(body).hexdigest())


class ApiKeys:
    """The configured key hashes and the cluster's ``ClusterAuth``; ``authenticate`` checks a request.

    A request forwarded by another node (``X-Querator-Forwarded-By``) is the node's, not the client's: it
    must carry the forwarding node's signature, and then needs no key (the first node checked the
    client's). Without a cluster secret, a forwarded request is checked like any other, so forging the
    header gains a client nothing. With ``forwards_need_certificate`` (mutual TLS between nodes) a
    forwarded request must also have come over a connection whose client certificate verified.
    """

    def __init__(
        self,
        hashes: Iterable[bytes],
        cluster: ClusterAuth | None = None,
        forwards_need_certificate: bool = False,
    ) -> None:
        self._hashes = tuple(hashes)
        self.cluster = cluster
        self._forwards_need_certificate = forwards_need_certificate

    def __bool__(self) -> bool:
        return bool(self._hashes or self.cluster or self._forwards_need_certificate)

    def take_hashes(self) -> tuple[bytes, ...]:
        """The configured hashes, which stop being checked here: with tenancy they are the bootstrap
        admin's keys, checked by ``querator.tenancy`` (docs/tenancy.md "Migration")."""
        hashes, self._hashes = self._hashes, ()
        return hashes

    def authenticate(
        self, method: str, path: str, headers: Mapping[str, str], certified: bool = False
    ) -> Forwarded | None:
        """The verified forward, if the request is one; raises QueratorError unless it may proceed.

        ``certified``: the connection presented a client certificate that verified.
        """
        if FORWARDED_HEADER in headers and self._forwards_need_certificate and not certified:
            raise Unauthorized("forwarded request is invalid; it came without a client certificate")
        if FORWARDED_HEADER in headers and self.cluster is not None:
            return self.cluster.check(method, path, headers)
        if self._hashes:
            self.check(headers.get("Authorization"))
        return None

    def check(self, authorization: str | None) -> None:
        """Raises Unauthorized (401, the reference's messages) unless the header carries a known key."""
        if authorization is None:
            raise Unauthorized("api key is invalid; an 'Authorization: Bearer <api-key>' header is required")
        if not authorization.startswith("Bearer "):
            raise Unauthorized("invalid authorization header format")
        key = authorization[len("Bearer ") :].strip()
        if not KEY_PATTERN.fullmatch(key):
            raise Unauthorized("api key is invalid")
        digest = hashlib.sha256(key.encode()).digest()
        found = False
        for known in self._hashes:  # every hash, every time: no early exit to time
            found |= hmac.compare_digest(digest, known)
        if not found:
            raise Unauthorized("api key does not exist")
