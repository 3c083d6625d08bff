"""API-key authentication (extensions.md): off unless keys are configured.

Keys look like the reference's, ``qtr-<tag>-<43 base62 characters>`` (32 random bytes), and the server
only ever holds their SHA-256 hashes, configured in a file or an environment variable, as hex or as the
reference's unpadded URL-safe base64. A request presents ``Authorization: Bearer <key>``; the key is
hashed and compared with every configured hash in constant time, so neither the answer's timing nor its
message tells a caller anything beyond "not a valid key". Authentication runs before routing: an
unauthenticated caller cannot learn which queues (or routes) exist.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path

from querator.errors import Unauthorized

EXTENSIONS_HEADER = "X-Querator-Extensions"
"""Sent by clients that accept our extension fields in JSON replies (reference clients reject them)."""
FORWARDED_HEADER = "X-Querator-Forwarded-By"
"""Set by a node that forwards a request to the partition's owner; its value is the node id."""
SECRET_HEADER = "X-Querator-Cluster-Secret"
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


class ApiKeys:
    """The configured key hashes and cluster secret; ``authenticate`` checks one request's headers.

    A request forwarded by another node (``X-Querator-Forwarded-By``) is the node's, not the client's: it
    must carry the cluster secret, and then needs no key (the first node checked the client's). Without
    a configured secret, a forwarded request is checked like any other, so forging the header gains a
    client nothing.
    """

    def __init__(self, hashes: Iterable[bytes], cluster_secret: bytes = b"") -> None:
        self._hashes = tuple(hashes)
        self._secret = hashlib.sha256(cluster_secret).digest() if cluster_secret else b""

    def __bool__(self) -> bool:
        return bool(self._hashes or self._secret)

    def authenticate(self, headers: Mapping[str, str]) -> None:
        """Raises Unauthorized unless the request may proceed."""
        if FORWARDED_HEADER in headers and self._secret:
            presented = hashlib.sha256(headers.get(SECRET_HEADER, "").encode()).digest()
            if not hmac.compare_digest(presented, self._secret):
                raise Unauthorized("cluster secret is invalid")
            return
        if self._hashes:
            self.check(headers.get("Authorization"))

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
