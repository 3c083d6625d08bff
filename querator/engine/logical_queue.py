"""LogicalQueue: the single writer of a set of partitions of one queue (docs/semantics.md §8.1; the
reference's ADR 0003).

Callers never touch a partition. They put a request on the logical queue's bounded request list and
await its future; one asyncio task drains every waiting hot request (produce, lease, complete, retry)
into one batch, places produces and leases with the distribution, makes one storage transaction per
partition, and settles each partition's futures as its transaction ends. Lease requests that got
nothing stay parked until items arrive or their request_timeout passes. Cold requests (stats, clear,
storage listing...) run one at a time between batches. The lifecycle runs in the same task from
per-partition timers armed at the earliest deadline, so nothing else ever mutates partition state and
no lock is needed. (The deadline timers of the requests waiting, ``_waiting``, only answer requests and
take them off the lists, never while the task is walking one.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol, TypeVar

from querator import _tasks
from querator.clock import MICROS, Clock
from querator.engine._batch import BatchPlan, Transaction
from querator.engine._moves import PARTITION_MOVED, Move, Moves
from querator.engine._partition import PartitionState
from querator.engine._requests import (
    Cold,
    Complete,
    Lease,
    Produce,
    Release,
    Renew,
    Request,
    Retry,
    fail_future,
    settle,
)
from querator.engine._stats import ItemCounters, LogicalStats
from querator.engine._waiting import LEASE_GRACE_US, Waiting
from querator.engine._wake import Wake
from querator.engine._watchers import Watchers
from querator.engine.backlog import Backlog
from querator.engine.distribution import Distribution
from querator.engine.run_bytes import RUN_PAYLOAD_BYTES, produced_bytes
from querator.errors import (
    InvalidOption,
    QueratorError,
    RetryRequest,
    StaleOwnerError,
    StorageError,
    shutting_down,
    try_again,
)
from querator.ksuid import KsuidGenerator
from querator.storage.base import Deadlines, Item, Partition, PartitionTx, QueueRecord
from querator.storage.operations import (
    BatchResult,
    CompleteOp,
    LifecycleResult,
    PartitionBatch,
    ReleaseOp,
    RenewOp,
    RetryEntry,
    RetryOp,
    apply_batch,
    lease_token_key,
    lifecycle,
)

__all__ = [  # the logical queue and the counts it reports (defined in _stats)
    "LEASE_GRACE_US",
    "PARTITION_MOVED",
    "DeadLetter",
    "ItemCounters",
    "LogicalQueue",
    "LogicalStats",
    "Settings",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class Settings(Protocol):
    """Where the logical queue reads its queue's current settings (they change on queues.update)."""

    @property
    def settings(self) -> QueueRecord: ...


DeadLetter = Callable[[QueueRecord, list[Item]], Awaitable[None]]
"""Copies dead items of a queue (its settings) into its dead queue; InvalidOption when it has none any
more (the items are then deleted)."""
"""Stores copies of dead items in the named dead queue; raises if it cannot."""


class LogicalQueue:
    """One asyncio task that owns ``partitions`` of a queue. See the module docstring."""

    def __init__(
        self,
        queue: Settings,
        partitions: list[tuple[int, Partition]],
        clock: Clock,
        dead_letter: DeadLetter,
        max_requests: int = 100,
        claim: bool = False,
        on_stale: Callable[[int], None] | None = None,
        on_claim: Callable[[], None] | None = None,
    ) -> None:
        """``claim``: take each partition over in storage before serving it (a node the ring just made
        its owner). ``on_stale``: called with the partition's number each time storage refuses a write
        because another node has taken that partition over. ``on_claim``: called for each claim made
        (a Paxos round on Cassandra)."""
        self._queue = queue
        self._clock = clock
        self._claim = claim
        self._on_stale = on_stale
        self._on_claim = on_claim
        self._stop_error: QueratorError = shutting_down()
        self._dead_letter_to = dead_letter
        self._max_requests = max_requests
        self.partitions = {n: PartitionState(n, storage) for n, storage in partitions}
        self._waiting = Waiting(clock)
        self._clients: set[str] = set()
        self._in_flight = 0
        self._loop = asyncio.get_running_loop()  # every request makes a future on it
        self._wake = Wake(self._loop)
        self._watchers = Watchers(clock, self._loop)
        self._closing = False
        self.counters = ItemCounters()
        self._moves = Moves()
        self._task = _tasks.start(self._run(), f"logical-queue:{queue.settings.name}")

    # -- the API: each call validates nothing (the service did), queues a request and waits ------------

    def produce(self, items: list[Item], request_timeout_us: int) -> Awaitable[list[str]]:
        """Stores the items in one partition; the awaitable returned is done once they are committed,
        with the id of each item in order ("" for one not stored because its dedup_id was seen within
        the queue's window).

        A produce not yet taken into a batch when ``request_timeout_us`` passes is answered 454 and was not
        stored. Once its write has started it is always waited for: "454 but stored" would make the
        client produce the items twice.

        The calls of the queue API that only queue a request return ``_submit``'s awaitable rather
        than await it: a coroutine per step costs a small request measurably (docs/benchmarks-log.md,
        "Small requests").
        """
        request = Produce(self._future(), items=items, deadline=self._clock.now() + request_timeout_us)
        return self._submit(request, deadline=request.deadline)

    async def lease(self, client_id: str, batch_size: int, request_timeout_us: int) -> tuple[int, list[Item]]:
        """Leases up to ``batch_size`` items from one partition, waiting up to ``request_timeout_us``."""
        if client_id in self._clients:
            raise InvalidOption(
                "duplicate client id; a client cannot make multiple leased requests to the same queue"
            )
        self._clients.add(client_id)
        deadline = self._clock.now() + request_timeout_us
        request = Lease(self._future(), client_id=client_id, batch_size=batch_size, deadline=deadline)
        try:
            result: tuple[int, list[Item]] = await self._submit(request, deadline=deadline)
            return result
        except asyncio.CancelledError:
            # The caller went away (its client disconnected): the lease stops waiting now, so that it is
            # not counted and no later batch serves it. Items leased to it before it could take them
            # are nobody's. (Cancelled earlier, the future is cancelled and the batch that leases to it
            # gives them back: Transaction.answer.)
            self._waiting.withdraw(request)
            future = request.future
            if future.done() and not future.cancelled() and future.exception() is None:
                partition, items = future.result()
                self.release(partition, [i.id for i in items])
            raise
        finally:
            if request.timer is not None:
                request.timer.cancel()
            self._clients.discard(client_id)

    def until_items(self, timeout_us: int) -> Awaitable[bool]:
        """True once a healthy partition holds items a lease could take (at once if one does), False
        when none came within ``timeout_us``; leases nothing (``Watchers``)."""
        if self._closing or self._task.done():
            raise self._stop_error
        has_items = self.has_items()
        if not has_items:
            self._check_room()
            self._wake.set()  # a load in progress (the watch may have started the engine) may find some
        return self._watchers.add(has_items, timeout_us)

    def complete(self, partition: int, ids: list[str], tokens: list[str] | None = None) -> Awaitable[None]:
        """Completes leased items of one partition (docs/semantics.md §4.3); ``tokens``: their lease
        tokens, if given (``operations.lease_token``)."""
        op = CompleteOp(ids, tokens or [])
        return self._submit(Complete(self._future(), self.partitions[partition], op=op))

    def retry(self, partition: int, entries: list[RetryEntry]) -> Awaitable[None]:
        """Retries leased items of one partition (docs/semantics.md §4.4)."""
        return self._submit(Retry(self._future(), self.partitions[partition], op=RetryOp(entries)))

    def release(self, partition: int, ids: list[str]) -> None:
        """Gives back leased items whose lease never reached its client, without counting the attempt
        (see ``ReleaseOp``). Does not wait: whoever calls it has nobody to answer."""
        request = Release(self._future(), self.partitions[partition], op=ReleaseOp(ids))
        request.future.add_done_callback(_log_release_failure)
        if self._closing or self._task.done():
            # No batch will run: the items come back when their lease expires, attempt counted.
            fail_future(request.future, self._stop_error)
            return
        self._waiting.add(request)
        self._wake.set()

    async def renew(
        self, partition: int, ids: list[str], lease_deadline: int, tokens: list[str] | None = None
    ) -> list[Item]:
        """Moves the lease deadline of leased items of one partition; returns them as renewed."""
        op = RenewOp(ids, lease_deadline, tokens or [])
        await self._submit(Renew(self._future(), self.partitions[partition], op=op))
        return op.renewed

    async def call(self, fn: Callable[[], Awaitable[T]], limited: bool = True) -> T:
        """Runs ``fn`` inside the loop, between batches (cold requests: stats, clear, storage API).

        ``limited`` False lets the server's own reads (metrics) in when clients have filled the queue's
        request limit: they must neither be refused nor take a client's place.
        """
        result: T = await self._submit(Cold(self._future(), fn=fn), limited)
        return result

    async def run_on(self, number: int, fn: Callable[[PartitionTx], T], limited: bool = True) -> T:
        """Runs a storage function on one partition inside the loop; a storage failure is a 454."""
        return await self.call(functools.partial(self._run_on, self._served(number), fn), limited)

    async def reload(self, number: int) -> None:
        """Re-reads one partition's counts and deadlines from storage; also revives a failed partition."""
        await self.call(functools.partial(self._reload, self._served(number)))

    async def _run_on(self, p: PartitionState, fn: Callable[[PartitionTx], T]) -> T:
        self._check_served(p)
        if p.failures or p.ids is None:
            raise p.unavailable()
        try:
            result = await p.storage.run(fn)
            p.deadlines = await p.storage.run(p.read_deadlines)
        except StorageError as e:
            self._fail(p, e)
            raise try_again(outcome_unknown=e.maybe_applied) from e
        self._arm(p)
        self._serve_parked_soon()
        return result

    async def _reload(self, p: PartitionState) -> None:
        self._check_served(p)  # a reload of a partition given away would claim it back
        await self._load(p)
        if p.failures:
            raise p.unavailable()
        self._serve_parked_soon()

    def move(self, give: Collection[int], take: list[tuple[int, Partition]]) -> asyncio.Future[None]:
        """Stops serving the partitions ``give`` and starts serving ``take`` (claimed first), leaving the
        others alone: their requests, parked leases included, carry on (docs/adr/0039). The future is
        done once this queue no longer writes to ``give`` (after the batch in progress)."""
        move = Move(set(give), take, self._future())
        if self._closing or self._task.done():
            settle(move.done, None)  # the engine is stopping: its shutdown stands for the move
        else:
            self._moves.queued.append(move)
            self._wake.set()
        return move.done

    def waiting(self) -> LogicalStats:
        """The counts of requests waiting on this logical queue."""
        return self._waiting.counts(self._in_flight)

    def stop_accepting(self, moved: bool = False) -> None:
        """From now on takes no request and starts no batch: what waits is answered 453 (454 when the
        partitions ``moved`` to another node: the client's retry reaches the new owner) once the batch
        in progress is done."""
        if moved:
            self._stop_error = RetryRequest(PARTITION_MOVED)
        self._closing = True
        self._wake.set()

    async def shutdown(self) -> None:
        """Finishes the batch in progress, answers everything still waiting, stops the task."""
        self.stop_accepting()
        # A task that died has already been logged (querator._tasks); shutting down must still complete.
        if not self._task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    # -- the loop ---------------------------------------------------------------------------------------

    def _future(self) -> asyncio.Future[Any]:
        return self._loop.create_future()

    async def _submit(self, request: Request, limited: bool = True, deadline: int = 0) -> Any:
        """Queues ``request`` and waits for its answer (see ``Waiting.add`` for ``deadline``)."""
        if self._closing or self._task.done():
            raise self._stop_error
        if limited:
            self._check_room()
        self._waiting.add(request, deadline)
        self._wake.set()
        self._in_flight += 1
        try:
            return await request.future
        finally:
            self._in_flight -= 1

    def _check_room(self) -> None:
        """Refuses a request beyond ``max_requests`` waiting on the queue, watches included (a watch
        holds a timer and a connection as a waiting lease does)."""
        if len(self._waiting.pending) + len(self._watchers) >= self._max_requests:
            raise RetryRequest("queue is overloaded; try again later")

    async def _run(self) -> None:
        try:
            await asyncio.gather(*(self._load(p) for p in self.partitions.values()))
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._closing:
                    break
                if self._moves.queued:
                    self._apply_moves()
                await self._process_pending()
                if self._closing:  # shutdown asked during the batch: no new work after it
                    break
                await self._run_lifecycles()
                if self._waiting.leases:
                    await self._serve_parked()
                    self._waiting.expire_parked()
                if self._watchers and self.has_items():  # what this node's leases left
                    self._watchers.notify()
        finally:
            # Whatever ends the loop, nobody is left waiting on a future that will never settle.
            self._closing = True
            self._stop()

    def _served(self, number: int) -> PartitionState:
        """The partition, or 454 when it was given to another node since the caller looked."""
        p = self.partitions.get(number)
        if p is None:
            raise RetryRequest(PARTITION_MOVED)
        return p

    def _check_served(self, p: PartitionState) -> None:
        """454 for a request that was queued for a partition since given to another node."""
        if self.partitions.get(p.number) is not p:
            raise RetryRequest(PARTITION_MOVED)

    def _apply_moves(self) -> None:
        """Between batches: nothing is in flight on any partition, so one given away is written no more."""
        moves = self._moves
        applying, moves.queued = moves.queued, []
        for move in applying:
            for number in move.give:
                moves.give(self.partitions, self._waiting, number)
            for number, storage in move.take:
                if number not in self.partitions:
                    p = self.partitions[number] = PartitionState(number, storage)
                    moves.claims[number] = _tasks.start(self._take(p), f"claim:{p.number}")
            settle(move.done, None)

    async def _take(self, p: PartitionState) -> None:
        """Claims a partition the ring gave this queue beside the task, so that a claim (a Paxos round
        on Cassandra, or a storage timeout) holds up no request of the other partitions; the task then
        reads it (``_run_lifecycles``: it is due and not loaded) and serves it."""
        try:
            await self._claim_partition(p)
        except Exception as e:
            if self.partitions.get(p.number) is p:
                self._fail(p, e)  # its retry claims it in the task (``_load``)
            return
        finally:
            self._moves.claim_ended(p.number)
        p.due = True
        self._wake.set()

    async def _claim_partition(self, p: PartitionState) -> None:
        await p.storage.claim()
        p.claimed = True
        if self._on_claim is not None:
            self._on_claim()

    async def _process_pending(self) -> None:
        pending = self._waiting.pending
        while pending:
            hot: list[Request] = []
            payload_bytes = 0
            while pending and not isinstance(pending[0], Cold):
                # Produces merged into one run are bounded by their payloads' bytes (run_bytes).
                size = produced_bytes(pending[0])
                if hot and payload_bytes + size > RUN_PAYLOAD_BYTES:
                    break
                payload_bytes += size
                hot.append(pending.popleft())
            if hot:
                try:
                    await self._batch(hot)
                except Exception as e:
                    # A bug must cost the requests of this batch, never the loop that serves the queue.
                    log.exception("queue %s: batch failed", self._queue.settings.name)
                    for req in hot:
                        fail_future(req.future, e)
            # Hot requests that arrived while the batch awaited storage go first, in the next batch.
            if pending and isinstance(pending[0], Cold):
                cold = pending.popleft()
                assert isinstance(cold, Cold) and cold.fn is not None
                try:
                    settle(cold.future, await cold.fn())
                except QueratorError as e:
                    fail_future(cold.future, e)
                except Exception as e:
                    log.exception("queue %s: request failed", self._queue.settings.name)
                    fail_future(cold.future, e)

    async def _serve_parked(self) -> None:
        # Parked leases get another chance whenever some partition may have items for them.
        waiting = self._waiting
        while waiting.leases and self.has_items():
            counts = [p.un_leased for p in self.partitions.values()]
            try:
                # Nothing leased and no count put right (a lease found its partition emptier than
                # counted): nothing more to try until something changes.
                if not await self._batch([]) and counts == [p.un_leased for p in self.partitions.values()]:
                    break
            except Exception as e:
                log.exception("queue %s: serving parked leases failed", self._queue.settings.name)
                for lease in waiting.leases:
                    fail_future(lease.future, e)
                waiting.leases = []

    def has_items(self) -> bool:
        """Whether a healthy partition holds items a lease could take now (the engine's estimate)."""
        return any(p.un_leased > 0 and not p.failures for p in self.partitions.values())

    def _serve_parked_soon(self) -> None:
        if self._waiting.leases:
            self._wake.set()

    async def _batch(self, hot: list[Request]) -> int:
        """Processes one batch; returns how many items it leased."""
        now = self._clock.now()
        settings = self._queue.settings
        at = self._monotonic()
        for p in self.partitions.values():
            p.estimate = p.un_leased
            p.backlog.sync(p.un_leased, at)  # counts set since by a load, an import, a stats read
        dist = Distribution((p for p in self.partitions.values() if p.ids is not None), at)
        plan = BatchPlan(dist, settings, now)
        plan.place(hot, self._waiting.leases)
        has_dead_queue = bool(settings.dead_queue)
        # One transaction per partition, all in flight together: a networked store (Cassandra) spends
        # most of a transaction waiting for a round trip, and sqlite commits waiting ones as a group.
        # Each partition's requests are answered as soon as its own transaction ends. Every transaction
        # ends before the batch does, even when one raised: none may outlive it into the next batch.
        transactions = list(plan.transactions.values())
        if len(transactions) == 1:  # the usual batch: no task to create for it (docs/benchmarks-log.md)
            applied: list[int | BaseException] = [await self._transact(transactions[0], now, has_dead_queue)]
        else:
            applied = await asyncio.gather(
                *(self._transact(t, now, has_dead_queue) for t in transactions), return_exceptions=True
            )
        self._waiting.settled()
        for outcome in applied:
            if isinstance(outcome, BaseException):
                raise outcome
        return sum(n for n in applied if isinstance(n, int))

    async def _transact(self, transaction: Transaction, now: int, has_dead_queue: bool) -> int:
        """Runs one partition's transaction of a batch and answers its requests; returns how many items
        it leased."""
        p = transaction.partition
        started_s = self._clock.monotonic()
        try:
            result = await self._apply(p, transaction.ops, now, has_dead_queue)
        finally:
            transaction.written()
        counters = self.counters
        counters.batch_runs += 1
        counters.batch_run_requests += len(transaction.requests)
        counters.batch_run_s += self._clock.monotonic() - started_s
        leased, undelivered = transaction.answer(result)
        if undelivered:
            self.release(p.number, undelivered)
        return leased

    # Long on purpose: one batch's write and everything it changes on this node, in the order it happens.
    async def _apply(  # noqa: C901
        self, p: PartitionState, batch: PartitionBatch, now: int, has_dead_queue: bool
    ) -> BatchResult | StorageError:
        settings = self._queue.settings
        try:
            result = await p.storage.run(
                lambda tx: apply_batch(
                    tx,
                    batch,
                    now,
                    p.new_id,
                    has_dead_queue,
                    settings.dedup_window,
                    settings.max_attempts,
                    lease_token_key(settings),
                    settings.expire_timeout,
                )
            )
        except StorageError as e:
            self._fail(p, e)
            return e
        delta = result.queued_delta
        if result.drained_at is not None:
            # The storage found nothing left to lease: whatever the count said (a write whose answer was
            # lost, say, leaves it too high), it is what the batch added since.
            p.un_leased, delta = 0, delta - result.drained_at
            p.backlog = Backlog()
        p.recount(delta, self._monotonic(), result.leased)
        counters = self.counters
        counters.produced += result.produced
        counters.leased += result.leased
        counters.completed += result.completed
        counters.retried += result.retried
        counters.released += result.released
        counters.dead += result.dropped
        if any(op.items for op in batch.lease):
            _sooner(p.deadlines, "lease_deadline", now + settings.lease_timeout)
        if batch.produce:
            _sooner(p.deadlines, "expire_deadline", now + settings.expire_timeout)
        for renewal in batch.renew:
            if renewal.renewed:  # a renewal may shorten a lease: expiry must come on time
                _sooner(p.deadlines, "lease_deadline", renewal.lease_deadline)
        if result.next_enqueue_at:
            _sooner(p.deadlines, "enqueue_at", result.next_enqueue_at)
        self._arm(p)
        if result.dead and not await self._dead_letter(p, result.dead):
            # The dead items are still stored and leased: the client may retry them again.
            for op in batch.retry:
                if op.error is None and any(e.dead for e in op.items):
                    op.error = try_again()
        return result

    # -- lifecycle --------------------------------------------------------------------------------------

    async def _load(self, p: PartitionState) -> None:
        now = self._clock.now()
        try:
            if self._claim and not p.claimed:
                # Only an engine's first load takes the partition over: a reload must not take it back
                # from an owner that claimed it since (this engine is then stale, and handed off).
                await self._claim_partition(p)
            last_id, deadlines = await p.storage.run(lambda tx: (tx.last_id(), p.read_deadlines(tx)))
        except Exception as e:
            self._fail(p, e)
            return
        p.ids = KsuidGenerator(now // MICROS, after=last_id or None)
        p.failures, p.error = 0, ""
        p.deadlines = deadlines
        self._arm(p)

    async def _run_lifecycles(self) -> None:
        # Concurrently, as batches: one partition waiting out a storage timeout (a reload after a
        # failure, say) must not hold up the others for as long.
        due = [p for p in self.partitions.values() if p.due]
        if not due:  # after most batches: gather() of nothing still costs a future per wake
            return
        for p in due:
            p.due = False
        await asyncio.gather(*(self._lifecycle(p) if p.ids is not None else self._load(p) for p in due))

    async def _lifecycle(self, p: PartitionState) -> None:
        now = self._clock.now()
        settings = self._queue.settings
        try:
            result: LifecycleResult = await p.storage.run(
                lambda tx: lifecycle(tx, now, p.new_id, settings.max_attempts, bool(settings.dead_queue))
            )
        except Exception as e:
            self._fail(p, e)
            return
        p.failures, p.error = 0, ""
        p.recount(
            result.queued_delta, self._monotonic(), result.requeued + result.enqueued - result.queued_delta
        )
        p.deadlines = result.deadlines
        self.counters.lease_expired += result.requeued
        self.counters.dead += result.deleted
        if result.dead and not await self._dead_letter(p, result.dead):
            # The delta counted the dead items as gone; they stay stored until the next attempt (the
            # backlog has them as new until then).
            p.recount(sum(1 for i in result.dead if not i.is_leased), self._monotonic())
            return
        if result.more:
            p.due = True
            self._wake.set()
        else:
            self._arm(p)
        if result.queued_delta > 0:
            self._serve_parked_soon()

    async def _dead_letter(self, p: PartitionState, items: list[Item]) -> bool:
        """Copies dead items into the dead queue, then deletes them here; False (items kept) on failure."""
        dead_queue = self._queue.settings.dead_queue
        if dead_queue:
            try:
                await self._dead_letter_to(self._queue.settings, [i.copy() for i in items])
            except InvalidOption as e:
                log.warning(
                    "queue %s: deleting %d dead items, the dead queue %s cannot take them: %s",
                    self._queue.settings.name,
                    len(items),
                    dead_queue,
                    e.message,
                )
            except Exception as e:
                log.warning(
                    "queue %s: dead-lettering into %s failed: %s", self._queue.settings.name, dead_queue, e
                )
                self._retry_later(p)
                return False
        ids = [i.id for i in items]
        try:
            await p.storage.run(lambda tx: tx.delete(ids))
        except Exception as e:
            self._fail(p, e)
            return False
        self.counters.dead += len(items)
        return True

    def _monotonic(self) -> int:
        """Microseconds for the backlog's arrival times: a wall clock stepped back would make the
        items queued before the step look newer than the ones after it."""
        return int(self._clock.monotonic() * MICROS)

    def _fail(self, p: PartitionState, error: Exception) -> None:
        if isinstance(error, StaleOwnerError) and self._on_stale is not None:
            # Another node owns the partition now: hand the queue back rather than retry in vain. Told
            # of every refused write (each is counted), the hand-off itself happens once.
            self._on_stale(p.number)
        p.failures += 1
        p.error = str(error) or type(error).__name__
        log.warning(
            "queue %s partition %d failed (%d): %s",
            self._queue.settings.name,
            p.number,
            p.failures,
            error,
            exc_info=not isinstance(error, StorageError),
        )
        self._retry_later(p)

    def _retry_later(self, p: PartitionState) -> None:
        self._arm_at(p, self._clock.now() + p.backoff_us())

    def _arm(self, p: PartitionState) -> None:
        d = p.deadlines
        # Scans select deadlines strictly before now, so fire just after the earliest one.
        when = min((t for t in (d.lease_deadline, d.expire_deadline, d.enqueue_at) if t), default=0)
        if when:
            self._arm_at(p, when + 1)

    def _arm_at(self, p: PartitionState, when: int) -> None:
        if p.timer is not None:
            if p.timer_at <= when:
                return
            p.timer.cancel()
        p.timer = self._clock.call_at(when, functools.partial(self._timer_fired, p))
        p.timer_at = when

    def _timer_fired(self, p: PartitionState) -> None:
        p.timer = None
        p.due = True
        self._wake.set()

    def _stop(self) -> None:
        self._waiting.stop(self._stop_error)
        self._watchers.stop(self._stop_error)
        for p in self.partitions.values():
            if p.timer is not None:
                p.timer.cancel()
        self._moves.stop()


def _sooner(d: Deadlines, name: str, when: int) -> None:
    current = getattr(d, name)
    if not current or when < current:
        setattr(d, name, when)


def _log_release_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and (error := future.exception()) is not None:
        log.info("leased items could not be given back (they return when their lease expires): %s", error)
