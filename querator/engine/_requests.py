"""The requests callers put on a logical queue's request list, and how their futures are answered.

Hot requests (produce, lease, complete, retry, release, renew) are drained into one batch; a ``Cold`` one
runs on its own between batches (see ``querator.engine.logical_queue``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from querator.clock import TimerHandle
from querator.engine._partition import PartitionState
from querator.storage.base import Item
from querator.storage.operations import CompleteOp, LeaseOp, ReleaseOp, RenewOp, RetryOp


@dataclass(eq=False)
class Request:
    """One call waiting on the logical queue: ``future`` is its answer; ``partition`` the partition it is
    for (given by the caller, or chosen by the batch for a produce or a lease)."""

    future: asyncio.Future[Any]
    partition: PartitionState | None = None


@dataclass(eq=False)
class Produce(Request):
    items: list[Item] = field(default_factory=list)
    deadline: int = 0


@dataclass(eq=False)
class Lease(Request):
    client_id: str = ""
    batch_size: int = 1
    deadline: int = 0
    op: LeaseOp | None = None
    """Its share of the batch in progress, if that batch placed it on a partition."""
    writing: bool = False
    """A transaction that may lease items to it is in flight."""
    timer: TimerHandle | None = None
    """Answers it at its deadline once it is parked (see ``LogicalQueue._park``); until then the sweep
    does (``LogicalQueue._expire_due``)."""


@dataclass(eq=False)
class Complete(Request):
    op: CompleteOp = field(default_factory=lambda: CompleteOp([]))


@dataclass(eq=False)
class Retry(Request):
    op: RetryOp = field(default_factory=lambda: RetryOp([]))


@dataclass(eq=False)
class Release(Request):
    op: ReleaseOp = field(default_factory=lambda: ReleaseOp([]))


@dataclass(eq=False)
class Renew(Request):
    op: RenewOp = field(default_factory=lambda: RenewOp([], 0))


@dataclass(eq=False)
class Cold(Request):
    """A call run alone between batches (stats, clear, the storage API)."""

    fn: Callable[[], Awaitable[Any]] | None = None


def settle(future: asyncio.Future[Any], value: Any) -> None:
    """Answers ``future`` with ``value`` unless it was answered already (timed out, cancelled)."""
    if not future.done():
        future.set_result(value)


def fail_future(future: asyncio.Future[Any], error: BaseException) -> None:
    """Answers ``future`` with ``error`` unless it was answered already."""
    if not future.done():
        future.set_exception(error)
