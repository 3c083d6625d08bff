"""``Task``: a function the worker runs for each item of its queue, and how callers enqueue it."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from querator.client import AsyncClient, Duration, seconds_of
from querator.wire import messages as m
from querator.worker._envelope import pack
from querator.worker._priority import NORMAL, check_level, level_queue
from querator.worker._rate import RateLimit
from querator.worker._serializer import Serializer, Signature
from querator.worker._trace import outgoing
from querator.worker.backoff import Policy

if TYPE_CHECKING:
    from querator.worker._worker import Worker

P = ParamSpec("P")
R = TypeVar("R")

MAX_BATCH = 1000
"""The server's limit on the items of one produce, lease or complete (docs/semantics.md §2)."""

Call = tuple[Sequence[Any], dict[str, Any]]
"""The arguments and keyword arguments of one call, for ``Task.enqueue_many``."""


class Permanent(Exception):
    """Raise it (or a subclass) from a task to dead-letter the item at once: trying again cannot help."""


class RetryLater(Exception):
    """Raise it from a task to have its item run again in ``after`` (a duration), whatever the task's
    back-off says. The run still counts as an attempt."""

    def __init__(self, after: Duration) -> None:
        super().__init__(f"run again in {seconds_of(after):g}s")
        self.after_s = seconds_of(after)


class Leaser(Protocol):
    """How a queue's items are leased, when not by ``AsyncClient.lease`` (``Worker.leasers``): a
    ``Durable`` app's lease also claims the workflows of its activations (docs/adr/0071)."""

    async def lease(
        self,
        client: AsyncClient,
        queue: str,
        batch_size: int,
        client_id: str,
        request_timeout: str,
        startable: int,
    ) -> m.QueueLeaseResponse:
        """``client.lease``'s reply; ``startable``: items the worker could start at once now."""
        ...

    async def given_back(self, client: AsyncClient, queue: str, item: m.QueueLeaseItem) -> None:
        """``item``, leased and never run (held ahead at a warm stop), is about to go back to ``queue``."""
        ...


@dataclass(slots=True)
class Lease:
    """Where the item a task run works on is leased. A task whose item another request completed (a
    durable turn's ending, docs/adr/0070) sets ``settled``, and its worker sends no complete of its own."""

    queue: str
    partition: int
    item: m.QueueLeaseItem
    settled: bool = False


CURRENT_LEASE: contextvars.ContextVar[Lease | None] = contextvars.ContextVar(
    "querator_current_lease", default=None
)
"""The lease of the item the running task works on: ``current_lease``, ``current_item``,
``current_attempt``, ``current_job_id``."""


def current_lease() -> Lease | None:
    """The lease of the item the calling task run works on; None outside a run."""
    return CURRENT_LEASE.get()


def current_item() -> m.QueueLeaseItem | None:
    """The leased item the calling task run works on (its id, ``attempts``, ``reference``, ``kind``...);
    None outside a run."""
    lease = CURRENT_LEASE.get()
    return lease.item if lease is not None else None


def current_job_id() -> str:
    """The id of the job the calling task run works on: the id ``enqueue`` returned, the same on every
    attempt, though a retried item comes back under a new id. Use it as the idempotency key of what the
    task does outside (a payment, an email, a webhook); "" outside a run."""
    item = current_item()
    if item is None:
        return ""
    return item.job_id or item.id


def current_attempt() -> int:
    """The attempt number of the item the calling task run works on (1 for its first run; 0 outside a
    run): a task can tell its last attempt by comparing it with its ``max_attempts``."""
    item = current_item()
    return item.attempts if item is not None else 0


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """What ``Worker.task`` was told; see its documentation."""

    name: str
    queue: str
    max_attempts: int
    retry: Policy
    lease_timeout: str
    expire_timeout: str
    """For ``create_queue`` ("": the client's default, 60 times the lease timeout)."""
    timeout_s: float | None
    concurrency: int | None
    permanent: tuple[type[BaseException], ...]
    create_queue: bool
    dead_queue: str
    rate_limit: RateLimit | None = None
    rate_key: Callable[..., str] | None = None
    rate_scope: str = "process"
    """Where ``rate_limit`` is kept: in this process, or by the server for the cluster."""
    priority: str | None = None
    """The level of an ``enqueue`` that names none; None: the task has no levels, only its queue."""
    partitions: int | None = None
    """For ``create_queue`` (None: the server's default)."""

    def queue_of(self, priority: str | None) -> str:
        """The queue an item of ``priority`` (None: the task's default) goes to.

        Raises:
            ValueError: an unknown level, or a level for a task declared without ``priority``.
        """
        if priority is None:
            return level_queue(self.queue, self.priority or NORMAL)
        if self.priority is None:
            raise ValueError(f"worker: task {self.name} has no priority levels; declare it with priority=")
        return level_queue(self.queue, check_level(priority))


class Task(Generic[P, R]):
    """A task function registered with a ``Worker``: call it to run it here, ``enqueue`` it to have a
    worker run it."""

    def __init__(
        self, worker: Worker, fn: Callable[P, R], options: TaskOptions, serializer: Serializer
    ) -> None:
        self.fn = fn
        self.options = options
        self.serializer = serializer
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = Signature(fn)
        self._worker = worker
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.options.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Runs the function here and now, as if it were not a task."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} on queue {self.options.queue!r}>"

    async def enqueue(
        self,
        *args: Any,
        delay: Duration | None = None,
        enqueue_at: datetime | None = None,
        dedup_id: str | None = None,
        priority: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueues one call of the task; returns the item's id ("" when ``dedup_id`` was seen within the
        queue's dedup window). ``delay``, ``enqueue_at``, ``dedup_id`` and ``priority`` (``"high"``,
        ``"normal"`` or ``"low"``; default the task's) are the produce's, not the task's (so a task
        cannot take arguments of those names by keyword).

        Raises:
            TypeError: the arguments do not fit the task's parameters (nothing is enqueued).
            ValueError: an unknown priority, or one for a task declared without ``priority``.
            as ``AsyncClient.produce``.
        """
        [item_id] = await self._produce(
            [(args, kwargs)], delay, enqueue_at, None if dedup_id is None else [dedup_id], priority
        )
        return item_id

    async def enqueue_many(
        self,
        calls: Iterable[Call],
        *,
        delay: Duration | None = None,
        enqueue_at: datetime | None = None,
        dedup_ids: Sequence[str] | None = None,
        priority: str | None = None,
    ) -> list[str]:
        """Enqueues many calls, ``(args, kwargs)`` each, 1000 to a request; returns their ids in order.

        Raises:
            TypeError: a call's arguments do not fit the task's parameters (nothing is enqueued).
            ValueError: as ``enqueue``.
            as ``AsyncClient.produce``: the calls of the requests before a failed one stay enqueued.
        """
        batch = list(calls)
        ids: list[str] = []
        for start in range(0, len(batch), MAX_BATCH):
            dedup = None if dedup_ids is None else list(dedup_ids[start : start + MAX_BATCH])
            ids += await self._produce(batch[start : start + MAX_BATCH], delay, enqueue_at, dedup, priority)
        return ids

    def enqueue_sync(
        self,
        *args: Any,
        delay: Duration | None = None,
        enqueue_at: datetime | None = None,
        dedup_id: str | None = None,
        priority: str | None = None,
        **kwargs: Any,
    ) -> str:
        """``enqueue`` for code that has no running event loop (a Django or Flask view, a script, a sync
        task): blocks until the item is stored and returns its id. It runs on the worker's loop thread,
        started by the first call and shared by the later ones; the caller's trace context goes with it.

        Raises:
            RuntimeError: called on a running event loop, which it would block: ``await enqueue()`` there.
            as ``enqueue``.
        """
        return self._worker.block_on(
            self.enqueue(
                *args, delay=delay, enqueue_at=enqueue_at, dedup_id=dedup_id, priority=priority, **kwargs
            )
        )

    def enqueue_many_sync(
        self,
        calls: Iterable[Call],
        *,
        delay: Duration | None = None,
        enqueue_at: datetime | None = None,
        dedup_ids: Sequence[str] | None = None,
        priority: str | None = None,
    ) -> list[str]:
        """``enqueue_many`` for code that has no running event loop, as ``enqueue_sync``."""
        return self._worker.block_on(
            self.enqueue_many(
                calls, delay=delay, enqueue_at=enqueue_at, dedup_ids=dedup_ids, priority=priority
            )
        )

    async def _produce(
        self,
        calls: Sequence[Call],
        delay: Duration | None,
        enqueue_at: datetime | None,
        dedup: list[str] | None,
        priority: str | None,
    ) -> list[str]:
        queue = self.options.queue_of(priority)
        for args, kwargs in calls:
            try:
                self.signature.check(args, kwargs)
            except TypeError as e:
                raise TypeError(f"worker: task {self.name} cannot take these arguments: {e}") from None
        client = await self._worker.client_for(self)
        trace = outgoing()
        payloads = [pack(self.serializer, args, kwargs, trace) for args, kwargs in calls]
        return await client.produce(
            queue,
            payloads,
            kind=self.name,
            encoding=self.serializer.content_type,
            delay=None if delay is None else seconds_of(delay),
            enqueue_at=enqueue_at,
            dedup_id=dedup,
        )
