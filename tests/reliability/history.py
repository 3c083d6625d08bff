"""Histories of queue operations as clients saw them, and the workload that records them.

Every operation is recorded with its call and return time (``time.monotonic`` in the client process)
and its outcome: ``ok``, ``fail`` (the server answered an error: the operation did not happen) or
``unknown`` (no answer, or a 454 saying the outcome is unknown: it may or may not have happened). Items
are identified by their payload, which the workload makes unique; ids change whenever an item re-enters
the queue.

``drain`` ends a history: it leases and completes through the same history until the queue is empty, so
the checker sees every item's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from querator.client import AsyncClient, ConnectionFailed
from querator.errors import LeaseTimedOut, QueratorError, RetryRequest, outcome_unknown
from tests.integration.conftest import Held, held

Outcome = Literal["ok", "fail", "unknown"]
Kind = Literal["produce", "lease", "complete", "retry", "renew"]

MAX_BACKLOG = 1.0
"""Seconds of production a rate-limited producer may fall behind and then catch up on."""
DRAIN_DEADLINE = 60.0


@dataclass(slots=True)
class Op:
    """One operation: what was asked, what came back."""

    kind: Kind
    client: str
    called: float
    returned: float = 0.0
    outcome: Outcome = "unknown"
    payloads: tuple[str, ...] = ()
    """produce: what was sent; lease: what came back; complete/retry/renew: the items concerned."""
    partition: int = 0
    ids: tuple[str, ...] = ()
    error: str = ""


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    limit: int = 0
    full: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when ``limit`` operations were recorded."""

    async def record(self, op: Op, action: Callable[[], Awaitable[None]]) -> Op:
        """Runs ``action`` as ``op``: stamps the times and the outcome, keeps the op, re-raises nothing."""
        self.ops.append(op)
        if self.limit and len(self.ops) >= self.limit:
            self.full.set()
        try:
            await action()
        except ConnectionFailed as e:
            op.outcome, op.error = "unknown", e.message
        except QueratorError as e:
            op.outcome, op.error = "unknown" if outcome_unknown(e) else "fail", f"{e.code} {e.message}"
        else:
            op.outcome = "ok"
        op.returned = time.monotonic()
        return op

    def of(self, kind: Kind, outcome: Outcome | None = None) -> list[Op]:
        return [o for o in self.ops if o.kind == kind and (outcome is None or o.outcome == outcome)]


@dataclass
class Workload:
    """Producers and consumers against one queue until ``stop`` is set.

    Consumers complete most items, retry some (now) and abandon a few (their leases expire), so every
    path back into the queue is exercised. ``abandon`` and ``retry`` are probabilities per item. The
    clients take the ``endpoints`` (nodes) in turn: producer n and consumer n talk to endpoint n mod N.
    """

    endpoints: Sequence[str]
    queue: str
    history: History
    producers: int = 2
    consumers: int = 3
    batch: int = 5
    """Most items per produce."""
    lease_batch: int = 5
    retry: float = 0.05
    abandon: float = 0.0
    seed: int = 0
    max_ops: int = 0
    """Stop once the history holds this many operations (0: only when ``stop`` is set)."""
    rate: float = 0.0
    """Items per second over all producers (0: as fast as the server takes them)."""
    keep_ids: bool = True
    """False drops item ids from the history once an item is settled: the checker needs only payloads,
    and over a long run the ids are a fifth of the history's memory."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)

    async def run(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            # retries=None: the history records each call's own outcome, not that of the client's retries.
            clients = [
                await stack.enter_async_context(AsyncClient(endpoint, timeout_margin=2.0, retries=None))
                for endpoint in self.endpoints
            ]
            tasks = [self._producer(clients[n % len(clients)], n) for n in range(self.producers)]
            tasks += [self._consumer(clients[n % len(clients)], n) for n in range(self.consumers)]
            await asyncio.gather(*tasks)

    async def _producer(self, client: AsyncClient, n: int) -> None:
        rng = random.Random(self.seed * 1000 + n)
        share = self.rate / self.producers
        next_at = time.monotonic()
        while not self.stop.is_set():
            payloads = [f"p{n}-{next(self._sequence)}" for _ in range(rng.randint(1, self.batch))]
            op = Op("produce", f"producer-{n}", time.monotonic(), payloads=tuple(payloads))
            await self.history.record(op, partial(client.produce, self.queue, payloads, "5s"))
            if op.outcome != "ok":
                await asyncio.sleep(0.05)  # back off from a failing or unreachable server
            if share:
                # A steady rate, not a catch-up: time lost while the server was down or stopped is
                # forgiven beyond MAX_BACKLOG instead of being sent as one burst.
                next_at = max(next_at + len(payloads) / share, time.monotonic() - MAX_BACKLOG)
                await self._idle(next_at - time.monotonic())

    async def _idle(self, seconds: float) -> None:
        """Waits ``seconds``, or less if ``stop`` is set meanwhile (so a slow rate does not delay it)."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), seconds)

    async def _consumer(self, client: AsyncClient, n: int) -> None:
        rng = random.Random(self.seed * 1000 + 500 + n)
        name = f"consumer-{n}"
        while not self.stop.is_set():
            op = Op("lease", name, time.monotonic())

            async def lease(op: Op = op) -> None:
                reply = await client.lease(self.queue, self.lease_batch, name, "1s")
                if not reply.items:
                    raise LeaseTimedOut()  # recorded as the server's answer: a 454
                op.partition = reply.partition
                op.ids = tuple(i.id for i in reply.items)
                op.payloads = tuple(i.bytes.decode() for i in reply.items)

            await self.history.record(op, lease)
            if op.outcome != "ok":
                if not op.error.startswith(str(RetryRequest.code)):
                    await asyncio.sleep(0.05)
                continue
            keep, again = [], []
            for item_id, payload in zip(op.ids, op.payloads, strict=True):
                roll = rng.random()
                if roll < self.abandon:
                    continue
                (again if roll < self.abandon + self.retry else keep).append((item_id, payload))
            await self._settle(client, name, "complete", op.partition, keep)
            await self._settle(client, name, "retry", op.partition, again)
            if not self.keep_ids:
                op.ids = ()

    async def _settle(
        self, client: AsyncClient, name: str, kind: Kind, partition: int, chosen: list[tuple[str, str]]
    ) -> None:
        if not chosen:
            return
        ids = [i for i, _ in chosen]
        kept = tuple(ids) if self.keep_ids else ()
        op = Op(kind, name, time.monotonic(), payloads=tuple(p for _, p in chosen), ids=kept)

        async def act() -> None:
            if kind == "complete":
                await client.complete(self.queue, partition, ids)
            else:
                await client.retry(self.queue, partition, ids)

        await self.history.record(op, act)


async def drain(endpoint: str, queue: str, history: History, deadline: float = DRAIN_DEADLINE) -> int:
    """Leases and completes until the queue is empty; returns what the server still holds after. A
    partition still failing then fails the test: what it holds is unknown."""
    async with AsyncClient(endpoint, retries=None) as client:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + deadline
        while loop.time() < give_up:
            if await held(client, queue) == Held():
                return 0
            lease = Op("lease", "drain", time.monotonic())

            async def take(op: Op = lease) -> None:
                reply = await client.lease(queue, 100, "drain", "2s")
                if not reply.items:
                    raise LeaseTimedOut()
                op.partition = reply.partition
                op.ids = tuple(i.id for i in reply.items)
                op.payloads = tuple(i.bytes.decode() for i in reply.items)

            await history.record(lease, take)
            if lease.outcome == "ok":
                done = Op("complete", "drain", 0.0, payloads=lease.payloads, ids=lease.ids)
                await history.record(
                    done, lambda op=lease: client.complete(queue, op.partition, list(op.ids))
                )
        left = await held(client, queue)
        assert not left.failing, f"partitions {left.failing} of {queue!r} still failing after the drain"
        return left.items + left.scheduled
