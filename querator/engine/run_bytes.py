"""How many payload bytes one storage run carries. A store caps what one write may hold (Cassandra:
16 MiB for a request, and for a mutation, by default), and a run past the cap would fail again at every
retry of its requests: produces merged into one batch, and an import, are split to stay under it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from querator.engine._requests import Produce, Request


class WithPayload(Protocol):
    """An item as stored (``storage.base.Item``) or sent (``StorageItem``): its payload is its bytes."""

    payload: bytes


P = TypeVar("P", bound=WithPayload)

RUN_PAYLOAD_BYTES = 8_000_000
"""The most payload bytes of one run's items (a lone produce may carry more: its body limit, 5 MB, bounds
it). Half of Cassandra's default 16 MiB: the rest is for the items' other columns and the run's other
writes."""


def produced_bytes(req: Request) -> int:
    """The payload bytes ``req`` adds to its batch's writes: a produce's items'."""
    return sum(len(i.payload) for i in req.items) if isinstance(req, Produce) else 0


def split_by_payload(items: Sequence[P], limit: int) -> list[list[P]]:
    """``items`` in order, in parts of at most ``limit`` bytes of payload (an item larger than that goes
    alone); one empty part for no items."""
    parts: list[list[P]] = [[]]
    total = 0
    for item in items:
        bytes_ = len(item.payload)
        if parts[-1] and total + bytes_ > limit:
            parts.append([])
            total = 0
        parts[-1].append(item)
        total += bytes_
    return parts
