"""An item's history across its attempts, pure: the job it belongs to and the failures it met.

A retry or an expired lease gives an item a new id (the reference's rule: an id never queues twice), so
the first item's id is carried along as ``job_id``: the one name of the job through retries, re-queues
and dead-lettering, which a consumer uses as its idempotency key. Each failed attempt (a retry, an
expired lease, the expiry that ended it) is recorded with its time and error, newest last, so a
dead-lettered item says why it died (docs/extensions.md, "Jobs and failures").
"""

from __future__ import annotations

from typing import Final

import msgspec

MAX_FAILURES: Final = 10
"""Failures an item keeps, the newest: a job retried without limit must not grow without limit."""
MAX_ERROR_CHARS: Final = 4096
"""The longest error a retry may record: a message and a traceback's last frames."""
LEASE_EXPIRED: Final = "lease expired"
"""The error of an attempt whose consumer neither completed nor retried it in time (a crash)."""
EXPIRED: Final = "expired"
"""The error of an item that outlived its queue's expire_timeout."""


class Failure(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One failed attempt."""

    at_us: int
    attempt: int
    """The item's ``attempts`` when it failed (0: never leased)."""
    error: str
    """What the consumer said, or ``LEASE_EXPIRED`` / ``EXPIRED``; "" when a retry gave no reason."""


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(list[Failure])


def job_id(item_id: str, carried: str) -> str:
    """The job of an item: the id it carries, or its own when it is the job's first item."""
    return carried or item_id


def failures_of(data: bytes) -> list[Failure]:
    """The failures ``data`` records, oldest first."""
    return _DECODER.decode(data) if data else []


def encode_failures(failures: list[Failure]) -> bytes:
    """``failures`` as an item stores them ("" for none), the newest ``MAX_FAILURES``."""
    return _ENCODER.encode(failures[-MAX_FAILURES:]) if failures else b""


def with_failure(data: bytes, failure: Failure) -> bytes:
    """``data`` with ``failure`` recorded after the others, keeping the newest ``MAX_FAILURES``."""
    return encode_failures([*failures_of(data), failure])
