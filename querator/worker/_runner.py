"""Running one queue's tasks: the lease loop, each item's run, and its outcome.

The lease loop asks for as many items as the process has free slots plus its ``prefetch``
(``Reservations``), so one queue never leases more than the worker can run and hold ahead. A slot is
free once its run ended, before its outcome is stored: the next lease goes out while the last batch's
completes are in flight, not after them. With several queues, each asks for what is free when it leases.
An item takes one of the worker's slots first (``Slots``): until one is free it is held ahead,
renewed, holding nothing else (no task slot, no rate-limit start), and a warm stop gives it back unrun
(docs/adr/0053). Then the task's own ``concurrency`` bounds it. A queue whose tasks have priority levels
is leased level by level, highest first (``_lease_levels``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec.structs import replace

from querator import backoff
from querator.client import AsyncClient, absolute, keep_renewed, new_client_id
from querator.errors import QueratorError
from querator.wire import messages as m
from querator.worker._envelope import EnvelopeError, unpack
from querator.worker._observe import Metrics, log_run
from querator.worker._priority import level_queues
from querator.worker._rate import take_shared
from querator.worker._settle import Settler
from querator.worker._slots import Slots
from querator.worker._task import CURRENT_LEASE, MAX_BATCH, Lease, Leaser, Permanent, RetryLater, Task
from querator.worker._trace import current_traceparent, span

log = logging.getLogger("querator.worker")

LEASE_POLL = "30s"
"""How long one lease waits for items; a stopping worker cancels it (the server gives back at once what
a cancelled lease would have taken: docs/adr/0005)."""
LEVEL_LOOK = "10ms"
"""How long a look at one priority level waits for items: the server's shortest request timeout."""
LEASE_FAILED_WAIT_S = (0.1, 10.0)
"""Seconds a lease loop waits after a failed lease: the first, and the most after repeated failures."""
MAX_ERROR_CHARS = 4096
"""The longest error a retry may carry: the server refuses longer ones (docs/extensions.md)."""
GIVEN_BACK = "given back unrun: held ahead of the worker's slots when it stopped"
"""The error a held item's retry records at a warm stop (a retry records one with the item)."""
UNKNOWN_KIND_WAIT_S = 60.0
"""Seconds before an item whose kind names no task of this worker is offered again (another worker, or
this one after a deploy, may know it)."""


_NO_LIMIT = contextlib.nullcontext()
"""What a task without a concurrency of its own enters instead of a semaphore (``async with`` works)."""


class Reservations:
    """Items leased whose run has not ended yet, against the worker's concurrency and prefetch: the lease
    loops lease only what is free."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._freed = asyncio.Event()

    def free(self) -> int:
        return self.capacity - self.used

    async def wait_free(self) -> None:
        while self.used >= self.capacity:
            self._freed.clear()
            await self._freed.wait()

    def take(self, n: int) -> None:
        self.used += n

    def give(self) -> None:
        self.used -= 1
        self._freed.set()


@dataclass(slots=True)
class Runtime:
    """What every queue's runner of one ``Worker.run`` shares."""

    client: AsyncClient
    settler: Settler
    metrics: Metrics
    reservations: Reservations
    running: Slots
    """The worker's slots (its ``concurrency``): an item leased waits for one before anything else."""
    pool: ThreadPoolExecutor
    runs: set[asyncio.Task[None]] = field(default_factory=set)
    renewals: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a warm stop: items held ahead, and runs still waiting for their rate limit's slot, give
    their items back."""
    lowest_first_every: int = 0
    """With priority levels: every n-th lease takes the lowest level first (0: never)."""
    leasers: dict[str, Leaser] = field(default_factory=dict)
    """``Worker.leasers``."""


async def _rate_limited(
    task: Task[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rt: Runtime
) -> _Failure | None:
    """Waits for the task's next free start (its ``rate_limit``, per ``rate_key``; kept in this process,
    or by the server with ``rate_scope="cluster"``), holding the task's own slot and one of the worker's
    (every item past its hold ahead holds one: docs/adr/0053), the item's lease renewed. A warm stop
    ends the wait and gives the item back to the queue at once (its attempt spent); a ``rate_key`` that
    raises, or a limit the server refuses, fails the run as the task would."""
    options = task.options
    rate = options.rate_limit
    if rate is None:
        return None
    try:
        key = "" if options.rate_key is None else str(options.rate_key(*args, **kwargs))
    except Exception as e:
        return _Failure("error", e)
    if options.rate_scope == "cluster":
        waiting = asyncio.ensure_future(take_shared(rt.client, options.queue, rate, key, task.name))
    else:
        waiting = asyncio.ensure_future(rate.take(key))
    stopped = asyncio.ensure_future(rt.stopping.wait())
    try:
        await asyncio.wait([waiting, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        waiting.cancel()
    if not waiting.done() or waiting.cancelled():
        return _Failure("later", RetryLater(0))
    error = waiting.exception()
    return None if error is None else _Failure("error", error)


def error_record(error: BaseException) -> str:
    """What a failed run records with its item (docs/worker.md, "What happens to an item"): the error's
    ``Type: message`` line, then its traceback's last lines, within the server's ``MAX_ERROR_CHARS``."""
    head = f"{type(error).__name__}: {error}"[: MAX_ERROR_CHARS // 4]
    trace = "".join(traceback.format_exception(error)).rstrip()
    room = MAX_ERROR_CHARS - len(head) - 1
    if len(trace) > room:
        trace = "..." + trace[len(trace) - room + 3 :]
    return f"{head}\n{trace}"


def _last_attempt(task: Task[..., Any], item: m.QueueLeaseItem) -> bool:
    """Whether this lease of ``item`` spent the last attempt its task allows: a retry dead-letters it."""
    limit = task.options.max_attempts
    return bool(limit) and item.attempts >= limit


@dataclass(slots=True)
class _Failure:
    reason: str
    """error, timeout, permanent or undecodable (the metric's label)."""
    error: BaseException


class QueueRunner:
    """Leases the items of ``queue`` and runs each with the task its ``kind`` names (or the queue's only
    task, for an item without a kind)."""

    def __init__(self, runtime: Runtime, queue: str, tasks: list[Task[..., Any]]) -> None:
        self._rt = runtime
        self.queue = queue
        self._by_kind = {t.name: t for t in tasks}
        self._only = tasks[0] if len(tasks) == 1 else None
        self._limits = {
            t.name: asyncio.Semaphore(t.options.concurrency) for t in tasks if t.options.concurrency
        }
        self._lease_timeout = next((t.options.lease_timeout for t in tasks if t.options.lease_timeout), "")
        self._leaser = runtime.leasers.get(queue)
        leveled = any(t.options.priority is not None for t in tasks)
        self._levels = level_queues(queue) if leveled else [queue]
        """The queues leased, highest level first."""
        self._rounds = 0
        capacity = runtime.reservations.capacity
        partitions = max((t.options.partitions or 1 for t in tasks), default=1)
        self.leasers = min(partitions, capacity)
        """Lease loops run at once: a lease takes from one partition, and each partition's storage runs
        one transaction at a time, so a queue of several partitions is leased from as many at once."""
        self._share = -(-capacity // self.leasers)
        """The most one loop leases at a time, so that the loops together lease about the capacity."""

    async def lease_loop(self) -> None:
        """Leases and starts items until cancelled."""
        rt, client_id, failures = self._rt, new_client_id(), 0
        while True:
            await rt.reservations.wait_free()
            wanted = min(rt.reservations.free(), MAX_BATCH, self._share)
            try:
                if len(self._levels) > 1:
                    await self._lease_levels(client_id, wanted)
                else:
                    self._start(self.queue, await self._lease(self.queue, wanted, client_id, LEASE_POLL))
            except QueratorError as e:
                failures += 1
                wait_s = backoff.wait_s(failures, *LEASE_FAILED_WAIT_S)
                log.warning("leasing from %s failed, again in %.1fs: %s", self.queue, wait_s, e)
                await asyncio.sleep(wait_s)
                continue
            failures = 0

    async def _lease(self, queue: str, wanted: int, client_id: str, timeout: str) -> m.QueueLeaseResponse:
        rt = self._rt
        if self._leaser is None:
            return await rt.client.lease(queue, wanted, client_id, timeout)
        return await self._leaser.lease(rt.client, queue, wanted, client_id, timeout, rt.running.free())

    async def _lease_levels(self, client_id: str, wanted: int) -> None:
        """Fills ``wanted`` slots level by level, highest first (lowest first every
        ``lowest_first_every``-th time), each level looked at without waiting; when every level is
        empty, waits for the first to have items. Levels are strict: a lower one is leased only when the
        higher ones had fewer items than free slots."""
        self._rounds += 1
        every = self._rt.lowest_first_every
        order = self._levels[::-1] if every and self._rounds % every == 0 else self._levels
        found = False
        for queue in order:
            reply = await self._lease(queue, wanted, client_id, LEVEL_LOOK)
            self._start(queue, reply)
            wanted -= len(reply.items)
            found = found or bool(reply.items)
            if wanted <= 0:
                return
        if found:
            return
        polls = [asyncio.ensure_future(self._lease(q, wanted, client_id, LEASE_POLL)) for q in order]
        try:
            await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # The server gives back what a cancelled lease would have taken (docs/adr/0005).
            for poll in polls:
                poll.cancel()
            replies = await asyncio.gather(*polls, return_exceptions=True)
        failed = None
        for queue, outcome in zip(order, replies, strict=True):
            if isinstance(outcome, m.QueueLeaseResponse):
                self._start(queue, outcome)  # two levels' replies may arrive at once: both run
            elif isinstance(outcome, QueratorError):
                failed = outcome
        if failed is not None:
            raise failed

    def _start(self, queue: str, reply: m.QueueLeaseResponse) -> None:
        if not reply.items:
            return
        rt = self._rt
        rt.reservations.take(len(reply.items))
        rt.metrics.in_flight.inc(len(reply.items))
        live = {i.id for i in reply.items}

        def lost(item_id: str) -> None:
            live.discard(item_id)
            log.warning("lease of %s on %s lost while it ran: it will run again", item_id, queue)

        renewal = asyncio.create_task(
            keep_renewed(
                rt.client,
                queue,
                reply.partition,
                live,
                reply.items[0].lease_deadline,
                self._lease_timeout,
                lost,
                {i.id: i.lease_token for i in reply.items if i.lease_token},
            )
        )
        rt.renewals.add(renewal)
        renewal.add_done_callback(rt.renewals.discard)
        for item in reply.items:
            run = asyncio.create_task(self._run(queue, reply.partition, item, live))
            rt.runs.add(run)
            run.add_done_callback(rt.runs.discard)

    async def _run(self, queue: str, partition: int, item: m.QueueLeaseItem, live: set[str]) -> None:
        """Runs ``item``, leased from ``queue`` (this runner's, or one of its priority levels)."""
        rt = self._rt
        task = self._by_kind.get(item.kind) or (self._only if not item.kind else None)
        fields: dict[str, Any] = {
            "task": task.name if task is not None else item.kind,
            "queue": queue,
            "item_id": item.id,
            "attempt": item.attempts,
        }
        lease = Lease(queue, partition, item)
        CURRENT_LEASE.set(lease)  # this run's own task: the run's code sees it, nothing after
        try:
            try:
                admitted = await self._admitted(task, item)
                if admitted:
                    try:
                        failure, outcome, retry = await self._outcome(task, item, fields)
                    finally:
                        rt.running.give()
            finally:
                rt.reservations.give()  # the run ended: its settlement overlaps the next lease
            if admitted:
                await self._settle(lease, fields, failure, outcome, retry)
            else:
                await self._give_back(queue, partition, item)
        finally:
            live.discard(item.id)
            rt.metrics.in_flight.dec()

    async def _admitted(self, task: Task[..., Any] | None, item: m.QueueLeaseItem) -> bool:
        """Takes one of the worker's slots for ``item``; False when a warm stop came first. Meanwhile the
        item is held ahead (``prefetch``): renewed with its batch, holding nothing else. An item on its
        last attempt waits on through a stop, since a retry would dead-letter it unrun (docs/semantics.md
        §4.4)."""
        return await self._rt.running.take(through_stop=task is not None and _last_attempt(task, item))

    async def _give_back(self, queue: str, partition: int, item: m.QueueLeaseItem) -> None:
        """Retries ``item``, held ahead and never run, at once (to the queue's tail) at a warm stop; when
        that cannot be stored, it comes back when its lease ends."""
        back = m.QueueRetryItem(id=item.id, error=GIVEN_BACK, lease_token=item.lease_token)
        try:
            if self._leaser is not None:
                await self._leaser.given_back(self._rt.client, queue, item)
            await self._rt.settler.retry(queue, partition, back)
        except QueratorError as e:
            log.warning(
                "%s on %s, held ahead, not given back (back when its lease ends): %s", item.id, queue, e
            )
        else:
            log.info("%s on %s held ahead: given back unrun", item.id, queue)

    async def _outcome(
        self, task: Task[..., Any] | None, item: m.QueueLeaseItem, fields: dict[str, Any]
    ) -> tuple[_Failure | None, str, m.QueueRetryItem | None]:
        """Runs ``item`` with ``task``: how it failed (None: it did not), the outcome's name, and the
        retry to store (None: complete it)."""
        if task is None:
            log.error(
                "no task named %r on queue %s in this worker: offered again later", item.kind, fields["queue"]
            )
            retry = m.QueueRetryItem(
                id=item.id,
                retry_at=absolute(UNKNOWN_KIND_WAIT_S),
                error=f"no task named {item.kind!r} in this worker"[:MAX_ERROR_CHARS],
            )
            return None, "retried", retry
        failure = await self._execute(task, item, fields)
        if failure is None:
            return None, "completed", None
        self._rt.metrics.failures.labels(task.name, failure.reason).inc()  # rare: no cached child
        fields["error"] = f"{type(failure.error).__name__}: {failure.error}"
        recorded = error_record(failure.error)
        if failure.reason in ("permanent", "undecodable") or _last_attempt(task, item):
            return failure, "dead_lettered", m.QueueRetryItem(id=item.id, dead=True, error=recorded)
        wait_s = task.options.retry(item.attempts)
        if isinstance(failure.error, RetryLater):
            wait_s = failure.error.after_s
        at = absolute(wait_s) if wait_s > 0 else None
        fields["retry_in_s"] = round(wait_s, 3)
        return failure, "retried", m.QueueRetryItem(id=item.id, retry_at=at, error=recorded)

    async def _execute(
        self, task: Task[..., Any], item: m.QueueLeaseItem, fields: dict[str, Any]
    ) -> _Failure | None:
        """Runs the task function on the item's arguments within the limits; the failure, if it failed."""
        try:
            args, kwargs, trace = unpack(task.serializer, item.bytes)
            call = task.signature.convert(args, kwargs)
        except (EnvelopeError, TypeError, ValueError, msgspec.ValidationError) as e:
            return _Failure("undecodable", e)
        limit = self._limits.get(task.name) or _NO_LIMIT
        async with limit:
            failure = await _rate_limited(task, call.args, call.kwargs, self._rt)
            if failure is not None:
                return failure
            return await self._run_in_slot(task, fields, call, trace)

    async def _run_in_slot(
        self,
        task: Task[..., Any],
        fields: dict[str, Any],
        call: inspect.BoundArguments,
        trace: dict[str, str],
    ) -> _Failure | None:
        """The run itself, in the worker's slot its item took."""
        loop = asyncio.get_running_loop()
        attributes = {"messaging.system": "querator", "messaging.destination.name": self.queue}
        with span(f"{task.name} process", attributes, trace):
            fields["traceparent"] = current_traceparent()
            started_s = loop.time()
            try:
                await self._call(task, call.args, call.kwargs)
            except RetryLater as e:
                return _Failure("later", e)
            except TimeoutError as e:
                return _Failure("timeout", e)
            except Exception as e:
                permanent = isinstance(e, (Permanent, *task.options.permanent))
                return _Failure("permanent" if permanent else "error", e)
            finally:
                duration_s = loop.time() - started_s
                fields["duration_s"] = round(duration_s, 6)
                self._rt.metrics.of(task.name).duration.observe(duration_s)
        return None

    async def _call(self, task: Task[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The function's result: a coroutine awaited here, a plain function in the thread pool (with this
        context, so the trace goes with it). A timed-out thread runs on to its end; only its result is
        dropped (Python cannot stop a thread)."""
        timeout_s = task.options.timeout_s
        if task.is_async:
            if timeout_s is None:
                return await task.fn(*args, **kwargs)
            async with asyncio.timeout(timeout_s):
                return await task.fn(*args, **kwargs)
        context = contextvars.copy_context()
        future = asyncio.get_running_loop().run_in_executor(
            self._rt.pool, context.run, functools.partial(task.fn, *args, **kwargs)
        )
        return await asyncio.wait_for(future, timeout_s)

    async def _settle(
        self,
        lease: Lease,
        fields: dict[str, Any],
        failure: _Failure | None,
        outcome: str,
        retry: m.QueueRetryItem | None,
    ) -> None:
        """Stores the run's outcome (complete, unless the run's own request did, or ``retry``), counts it
        and logs it."""
        rt = self._rt
        queue, partition, item = lease.queue, lease.partition, lease.item
        try:
            if retry is None:
                if not lease.settled:
                    await rt.settler.complete(queue, partition, item.id, item.lease_token)
            else:
                # The lease's proof goes with it, for a queue that requires lease tokens.
                await rt.settler.retry(queue, partition, replace(retry, lease_token=item.lease_token))
        except QueratorError as e:
            outcome = "lost"
            fields["error"] = f"{fields.get('error', '')} (not settled: {e.message})".lstrip()
        fields["outcome"] = outcome
        rt.metrics.of(fields["task"]).runs[outcome].inc()
        level = logging.INFO if outcome == "completed" else logging.WARNING
        # A retry is expected: its error fits the run's one line, and its traceback is for debugging. A
        # run that ends its item (dead-lettered) or whose outcome was lost keeps the traceback.
        quiet = outcome == "retried" and not log.isEnabledFor(logging.DEBUG)
        log_run(fields, level, None if failure is None or quiet else failure.error)
