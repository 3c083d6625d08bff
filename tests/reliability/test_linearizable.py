"""Per-partition FIFO is linearizable: concurrent clients against a real server (memory and sqlite in
process, Cassandra behind a server process), and the checker itself refusing histories that break the
model.

Leases ask for one item each: lease requests served in one batch are dealt items round-robin
(docs/semantics.md §4.2, as the reference does), so two concurrent leases of several items may each get
every other item of the head, which no single-operation model of "a lease takes the head" accepts. With
one item per lease, dealing and taking the head are the same thing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from querator.client import AsyncClient
from tests.cassandra_node import CassandraNode
from tests.conftest import Api
from tests.integration.conftest import Servers
from tests.integration.test_cassandra import cassandra_args

from .history import History, Op, Workload
from .linearizability import check

OPS = 24
"""Operations per round (each client finishes the one it is in when the round ends)."""
ROUNDS = 6
"""Separate short histories per backend: the search is exponential in the overlap, so many small
histories test more than one big one."""


def op(kind: str, called: float, returned: float, *payloads: str) -> Op:
    return Op(kind, "c", called, returned, "ok", payloads)  # type: ignore[arg-type]


def test_the_checker_accepts_a_sequential_fifo_history() -> None:
    ops = [
        op("produce", 0, 1, "a", "b"),
        op("lease", 2, 3, "a"),
        op("retry", 4, 5, "a"),
        op("lease", 6, 7, "b", "a"),
        op("complete", 8, 9, "a", "b"),
        op("lease", 10, 11),
    ]
    assert check(ops).linearizable


def test_the_checker_reorders_overlapping_operations() -> None:
    # The lease returned "b" first although its call overlapped both produces: only possible if the
    # produce of b took effect first, which the overlap allows.
    ops = [op("produce", 0, 10, "a"), op("produce", 0, 10, "b"), op("lease", 1, 11, "b")]
    verdict = check(ops)
    assert verdict.linearizable and verdict.order.index(1) < verdict.order.index(2)


@pytest.mark.parametrize(
    "ops",
    [
        # a lease skipping the head
        [op("produce", 0, 1, "a", "b"), op("lease", 2, 3, "b")],
        # a lease of an item produced only afterwards
        [op("lease", 0, 1, "a"), op("produce", 2, 3, "a")],
        # the same item leased twice without a retry in between
        [op("produce", 0, 1, "a"), op("lease", 2, 3, "a"), op("lease", 4, 5, "a")],
        # an empty lease while an item was certainly queued
        [op("produce", 0, 1, "a"), op("lease", 2, 3)],
        # a retried item overtaking an older one
        [
            op("produce", 0, 1, "a", "b"),
            op("lease", 2, 3, "a"),
            op("retry", 4, 5, "a"),
            op("lease", 6, 7, "a"),
        ],
    ],
)
def test_the_checker_refuses_histories_that_break_fifo(ops: list[Op]) -> None:
    assert not check(ops).linearizable


async def test_a_single_partition_is_linearizable(live_api: Api) -> None:
    await rounds(live_api.base, lambda queue: live_api.create(queue, lease_timeout="1h"))


async def test_a_single_partition_on_cassandra_is_linearizable(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    server = await servers.astart(*cassandra_args(cassandra_node, keyspace))
    async with AsyncClient(server.url) as client:
        await rounds(server.url, lambda queue: client.create_queue(queue, lease_timeout="1h"))


async def rounds(endpoint: str, create: Callable[[str], Awaitable[object]]) -> None:
    """``ROUNDS`` histories of concurrent clients, each on a new single-partition queue, each checked."""
    for round_ in range(ROUNDS):
        queue = f"lin-{round_}"
        await create(queue)  # one partition, and no lease may expire during a round
        history = History(limit=OPS)
        workload = Workload(
            [endpoint],
            queue,
            history,
            producers=2,
            consumers=2,
            batch=2,
            lease_batch=1,
            retry=0.3,
            seed=round_,
        )
        running = asyncio.create_task(workload.run())
        await asyncio.wait_for(history.full.wait(), 30)
        workload.stop.set()
        await running
        answered = [o for o in history.ops if o.outcome == "ok" or o.error.startswith("454")]
        for o in answered:
            if o.outcome != "ok":  # a lease that timed out found the queue empty
                o.payloads = ()
        failures = [o for o in history.ops if o.outcome != "ok" and not o.error.startswith("454")]
        assert failures == [], failures
        verdict = check(answered)
        assert verdict.linearizable, [
            (o.kind, o.client, round(o.called, 4), round(o.returned, 4), o.payloads) for o in answered
        ]
