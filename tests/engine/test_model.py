"""Model-based check of one partition against the FIFO model (docs/semantics.md §9), with Hypothesis.

The model: an ordered list of available items and the leased ones in lease order. Produce appends;
lease takes exactly the head; complete removes leased items; retry and lease expiry append to the tail
(expired items in the order they were leased). Items are named by payload, since ids change. Random
sequences of these run against a LogicalQueue on the memory and sqlite backends with a FakeClock.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from querator.clock import MICROS, FakeClock
from querator.engine.logical_queue import LogicalQueue
from querator.storage.base import Item, QueueRecord, Store
from querator.storage.memory import MemoryStore
from querator.storage.operations import RetryEntry
from querator.storage.sqlite import SqliteStore

T = TypeVar("T")
LEASE_TIMEOUT = 30 * MICROS


@dataclass
class Settings:
    settings: QueueRecord


async def no_dead_queue(name: str, items: list[Item]) -> None:
    raise AssertionError("no dead-lettering expected")


class PartitionModel(RuleBasedStateMachine):
    make_store: Callable[[], Store] = MemoryStore

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.store = self.make_store()
        self.run(self.store.open())
        record = QueueRecord(name="q", lease_timeout=LEASE_TIMEOUT, expire_timeout=3600 * MICROS)
        self.queue = self.run(self._start(record))
        self.available: list[bytes] = []
        self.leased: dict[bytes, str] = {}  # payload -> id, in lease order
        self.attempts: dict[bytes, int] = {}
        self.counter = 0

    async def _start(self, record: QueueRecord) -> LogicalQueue:
        return LogicalQueue(Settings(record), [(0, self.store.partition("q", 0))], self.clock, no_dead_queue)

    def run(self, aw: Awaitable[T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(aw, 10))  # type: ignore[arg-type]

    def teardown(self) -> None:
        self.run(self.queue.shutdown())
        self.run(self.store.close())
        self.loop.close()

    @rule(n=st.integers(1, 5))
    def produce(self, n: int) -> None:
        payloads = [f"item-{self.counter + i}".encode() for i in range(n)]
        self.counter += n
        self.run(self.queue.produce([Item(payload=p) for p in payloads], 60 * MICROS))
        self.available.extend(payloads)
        self.attempts.update(dict.fromkeys(payloads, 0))

    @precondition(lambda self: bool(self.available))
    @rule(batch=st.integers(1, 6))
    def lease(self, batch: int) -> None:
        _, items = self.run(self.queue.lease("consumer", batch, 60 * MICROS))
        expected = self.available[:batch]
        assert [i.payload for i in items] == expected  # exactly the head, in order
        del self.available[: len(items)]
        for item in items:
            self.attempts[item.payload] += 1
            assert item.attempts == self.attempts[item.payload]
            self.leased[item.payload] = item.id

    @precondition(lambda self: bool(self.leased))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(self.leased)), min_size=1, max_size=3, unique=True)
        )
        self.run(self.queue.complete(0, [self.leased[p] for p in chosen]))
        for p in chosen:
            del self.leased[p]

    @precondition(lambda self: bool(self.leased))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(self.leased)), min_size=1, max_size=3, unique=True)
        )
        self.run(self.queue.retry(0, [RetryEntry(self.leased[p]) for p in chosen]))
        for p in chosen:
            del self.leased[p]
        self.available.extend(chosen)

    @precondition(lambda self: bool(self.leased))
    @rule()
    def expire(self) -> None:
        self.run(self._expire(len(self.available) + len(self.leased)))
        self.available.extend(self.leased)  # in the order they were leased
        self.leased.clear()

    async def _expire(self, count: int) -> None:
        self.clock.advance(LEASE_TIMEOUT / MICROS + 1)
        part = self.store.partition("q", 0)
        for _ in range(1000):
            if len(await part.run(lambda tx: tx.head(1000))) == count:
                return
            await asyncio.sleep(0.001)
        raise AssertionError("expired leases did not come back")

    @invariant()
    def storage_matches(self) -> None:
        part = self.store.partition("q", 0)
        head = self.run(part.run(lambda tx: tx.head(1000)))
        assert [i.payload for i in head] == self.available
        stats = self.run(part.run(lambda tx: tx.stats(0)))
        assert (stats.total, stats.leased) == (len(self.available) + len(self.leased), len(self.leased))


def sqlite_store() -> Store:
    return SqliteStore(Path(tempfile.mkdtemp(prefix="querator-model-")) / "model.db")


@pytest.mark.parametrize(
    ("make_store", "examples"), [(MemoryStore, 150), (sqlite_store, 30)], ids=["memory", "sqlite"]
)
def test_partition_follows_the_fifo_model(make_store: Callable[[], Store], examples: int) -> None:
    machine: Any = type("Machine", (PartitionModel,), {"make_store": staticmethod(make_store)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
