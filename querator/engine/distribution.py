"""Opportunistic distribution (spec §3.2): which partition a produce or a lease request goes to.

Partitions are kept sorted by (failures, un-leased items), ascending, and re-sorted after every single
assignment with a stable sort, so ties keep their previous order. A produce goes whole to the first
healthy partition (fewest un-leased items); a lease goes to the last healthy one (most un-leased items).
Because ties keep their order, consecutive leases of one batch land on the same partition, which is what
lets five waiting consumers share one ten-item produce two items each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class Counted(Protocol):
    """What distribution needs to know about a partition."""

    failures: int
    estimate: int
    """Un-leased items as far as this batch's assignments know."""


P = TypeVar("P", bound=Counted)


def _key(p: Counted) -> tuple[bool, int]:
    return (p.failures > 0, p.estimate)


class Distribution(Generic[P]):
    """The sorted view of a logical queue's partitions for one batch of assignments."""

    def __init__(self, partitions: Iterable[P]) -> None:
        self._sorted = sorted(partitions, key=_key)

    def produce(self, count: int) -> P | None:
        """The partition for a produce of ``count`` items, or None when every partition is failing."""
        if not self._sorted or self._sorted[0].failures:
            return None
        p = self._sorted[0]
        p.estimate += count
        self._sorted.sort(key=_key)
        return p

    def lease(self, batch_size: int) -> P | None:
        """The partition for a lease of up to ``batch_size`` items, or None when every one is failing."""
        for p in reversed(self._sorted):
            if not p.failures:
                p.estimate -= min(p.estimate, batch_size)
                self._sorted.sort(key=_key)
                return p
        return None
