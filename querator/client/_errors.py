"""The client's own failure: no reply at all (``ConnectionFailed``), and the texts of failed replies."""

from __future__ import annotations

from querator.errors import QueratorError

_SNIPPET = 200
"""Characters of an unexpected body quoted in an error message."""


class ConnectionFailed(QueratorError):
    """No reply was received: the connection failed, broke, or the call's HTTP timeout elapsed.

    ``code`` is 0 (no HTTP status exists). Retrying is the caller's choice: unless the connection was
    refused outright the server may have received and applied the request.
    """

    code = 0


def connection_failed(url: str, error: BaseException) -> ConnectionFailed:
    """The ``ConnectionFailed`` of an aiohttp error or of the HTTP timeout elapsing."""
    if isinstance(error, TimeoutError):
        return ConnectionFailed(f"request timed out; no reply from {url}")
    return ConnectionFailed(f"connection failed; {url}: {error or type(error).__name__}")


def snippet(body: bytes) -> str:
    """The start of an unexpected reply body, for an error message."""
    text = body[:_SNIPPET].decode("utf-8", "replace").strip()
    return text + ("..." if len(body) > _SNIPPET else "") if text else "<empty body>"
