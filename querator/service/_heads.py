"""The workflow heads this node wrote last, so that its next write to one skips the read (docs/adr/0046).

A write of a workflow reads its head, runs a rule and stores the result by compare-and-set. A worker's
appends to the workflow it claimed mostly reach the node that wrote the head before (its own last
append), and on Cassandra the read is a round trip ahead of a Paxos round. The head kept here is only a
guess: the compare-and-set refuses it if another write came in between, and the writer then reads. A
rule that writes nothing on a kept head (a busy claim, a refusal) may have decided on an old head, so
that outcome is never trusted either: the writer reads and runs the rule again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from querator.storage import journal
from querator.storage.workflows import Workflow

KEPT_HEADS: Final = 4096
"""Heads kept, the least recently written dropped first."""
KEPT_HEAD_BYTES: Final = 64 * 1024
"""A larger head is not kept: ``KEPT_HEADS`` of them stay within a few hundred MiB at most."""


class Heads:
    """Workflow heads by stored id, as this node last wrote them."""

    def __init__(self, size: int = KEPT_HEADS) -> None:
        self._size = size
        self._heads: OrderedDict[str, Workflow] = OrderedDict()

    def get(self, key: str) -> Workflow | None:
        return self._heads.get(key)

    def wrote(self, key: str, head: Workflow) -> None:
        """``head`` is stored now (its compare-and-set succeeded)."""
        if journal.head_bytes(head) > KEPT_HEAD_BYTES:
            self._heads.pop(key, None)
            return
        self._heads[key] = head
        self._heads.move_to_end(key)
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def forget(self, key: str) -> None:
        """The kept head was not the stored one (or the workflow changed otherwise)."""
        self._heads.pop(key, None)
