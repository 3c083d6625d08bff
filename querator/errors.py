"""The error tree: every failure a caller can see, each with its wire code and a stable message prefix.

Messages follow the reference's convention ``<stable prefix>; <details>`` so clients can split on ``;``
and match the prefix. The HTTP layer maps these to replies in one place; anything else is a 500.

    QueratorError
     +-- InvalidOption      400  bad request, unknown queue, item not leased, body too large
     +-- Unauthorized       401  missing, malformed or unknown API key
     +-- Forbidden          403  the caller may not do this (tenancy: docs/tenancy.md)
     +-- Conflict           409  a workflow's journal refused a write: another worker claimed it since
     +-- RequestFailed      453  valid request that cannot succeed: shutting down, missing resource
     +-- RetryRequest       454  try again: overloaded, storage hiccup, partition moved
     |    |                      (``outcome_unknown``: the failed request may have been carried out)
     |    +-- LeaseTimedOut      nothing to lease before the request's timeout
     +-- ClientContentError 455  unsupported content type, undecodable body
     +-- NotImplementedRoute 501 unknown path
     +-- StorageError       (internal) a backend failed; the engine turns it into a RetryRequest
"""

from __future__ import annotations

CODE_TEXT: dict[int, str] = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    452: "Client Error",
    453: "Request Failed",
    454: "Retry Request",
    455: "Client Content Error",
    500: "Internal Service Error",
    501: "Not Implemented",
    512: "Server Error",
}


class QueratorError(Exception):
    """Base of every error the service reports to a caller; ``code`` is the wire status."""

    code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidOption(QueratorError):
    """The request is wrong and retrying it unchanged will fail again."""

    code = 400


class Unauthorized(QueratorError):
    """The caller did not prove who it is."""

    code = 401


class Forbidden(QueratorError):
    """The caller is known but lacks the permission (tenancy)."""

    code = 403


class Conflict(QueratorError):
    """A write lost to another writer: a durable workflow's append after another worker claimed it
    (docs/durable.md). Sending it again cannot succeed; the sender stops."""

    code = 409


class RequestFailed(QueratorError):
    """The request was valid but cannot succeed here (shutting down, resource missing)."""

    code = 453


class RetryRequest(QueratorError):
    """A transient condition: the same request may succeed if sent again. ``outcome_unknown``: the failed
    request may have been carried out all the same (see ``try_again``)."""

    code = 454

    def __init__(self, message: str, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


LEASE_TIMED_OUT = "request timeout; no items are in the queue, try again"


class LeaseTimedOut(RetryRequest):
    """A lease found nothing to lease before its deadline: the ordinary end of a long poll."""

    def __init__(self, message: str = LEASE_TIMED_OUT) -> None:
        super().__init__(message)


class ClientContentError(QueratorError):
    """The body or its declared content type cannot be understood."""

    code = 455


class NotImplementedRoute(QueratorError):
    """No such method."""

    code = 501


class StorageError(QueratorError):
    """A storage backend failed. Nothing of the failed call was applied, unless ``maybe_applied``: then
    its write was sent and its answer lost (a timeout, a connection cut), so it may have been."""

    code = 500

    def __init__(self, message: str, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class StaleOwnerError(StorageError):
    """The storage refused a write because another owner (a newer epoch) has claimed the partition."""


TRY_AGAIN = "internal error, try your request again"
"""The reference's message prefix of a 454 caused by a failure inside the server."""
OUTCOME_UNKNOWN = "outcome unknown"
"""The first detail of a 454 whose request may have been carried out anyway."""


def try_again(detail: str = "", outcome_unknown: bool = False) -> RetryRequest:
    """The 454 of a failure inside the server. With ``outcome_unknown`` the request may have been carried
    out all the same (its write or its forwarded copy was sent, the answer was lost): a client retries a
    produce with the same dedup ids to store it once, and a repeated complete may find its items gone."""
    details = [OUTCOME_UNKNOWN] if outcome_unknown else []
    details += [detail] if detail else []
    return RetryRequest("; ".join([TRY_AGAIN, *details]), outcome_unknown)


def outcome_unknown(error: QueratorError) -> bool:
    """True for an error that does not say whether the request was carried out (see ``try_again``)."""
    return isinstance(error, RetryRequest) and error.outcome_unknown


def no_such_queue(name: str) -> InvalidOption:
    """The 400 of a request naming a queue that does not exist."""
    return InvalidOption(f"queue does not exist; no such queue named '{name}'")


def shutting_down(what: str = "queue") -> RequestFailed:
    """The 453 every request gets once its queue or the service has begun to stop."""
    return RequestFailed(f"{what} is shutting down")


_BY_CODE: dict[int, type[QueratorError]] = {
    cls.code: cls
    for cls in (
        InvalidOption,
        Unauthorized,
        Forbidden,
        Conflict,
        RequestFailed,
        RetryRequest,
        ClientContentError,
        NotImplementedRoute,
    )
}


def error_for(code: int, message: str) -> QueratorError:
    """The typed error for a reply's ``code``; a plain ``QueratorError`` carrying the code if none fits.

    A reply carries only a code and a text, so this is the one place that reads a message's meaning: a
    lease's timeout and an unknown outcome by their stable prefixes."""
    if code == RetryRequest.code:
        if message == LEASE_TIMED_OUT:
            return LeaseTimedOut()
        return RetryRequest(message, message.startswith(f"{TRY_AGAIN}; {OUTCOME_UNKNOWN}"))
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else plain_error(code, message)


def plain_error(code: int, message: str) -> QueratorError:
    """A ``QueratorError`` with ``code`` but no type: for replies that did not come from a Querator server."""
    error = QueratorError(message)
    error.code = code
    return error
