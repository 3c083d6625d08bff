"""The client's own failure: no reply at all (``ConnectionFailed``), and the texts of failed replies."""

from __future__ import annotations

import aiohttp

from querator.errors import QueratorError

_SNIPPET = 200
"""Characters of an unexpected body quoted in an error message."""


class ConnectionFailed(QueratorError, ConnectionError):
    """No reply was received: the connection failed, broke, or the call's HTTP timeout elapsed.

    ``code`` is 0 (no HTTP status exists). A ``ConnectionError`` too, so code that handles network
    failures of any library handles this one. ``sent``: False when no connection was made (refused, DNS
    failure), so the server never saw the request; True otherwise, when it may have received and applied
    it.
    """

    code = 0

    def __init__(self, message: str, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


def connection_failed(url: str, error: BaseException) -> ConnectionFailed:
    """The ``ConnectionFailed`` of an aiohttp error or of the HTTP timeout elapsing."""
    if isinstance(error, TimeoutError):
        return ConnectionFailed(f"request timed out; no reply from {url}")
    # A connector error is raised before a byte of the request was written.
    sent = not isinstance(error, aiohttp.ClientConnectorError)
    return ConnectionFailed(f"connection failed; {url}: {error or type(error).__name__}", sent)


def snippet(body: bytes) -> str:
    """The start of an unexpected reply body, for an error message."""
    text = body[:_SNIPPET].decode("utf-8", "replace").strip()
    return text + ("..." if len(body) > _SNIPPET else "") if text else "<empty body>"


class LockError(QueratorError):
    """A lock or semaphore could not be acquired or was not held throughout (docs/locks.md). ``code`` is
    0: the client decided this, not a server reply."""

    code = 0


class AcquireTimedOut(LockError, TimeoutError):
    """No token became free before the acquire ``timeout`` (or ``set_limit``'s) passed."""


class LockLost(LockError):
    """The holder's lease on its token ended before the block did (it was not renewed within the ttl: a
    pause, a partition from the server), so another holder may have held the slot meanwhile."""


class LockMismatch(LockError, ValueError):
    """The lock's queue exists with another limit, or is a queue that is not a lock's."""
