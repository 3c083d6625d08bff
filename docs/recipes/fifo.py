"""Strict FIFO processing: one partition, one consumer (docs/recipes/README.md).

A queue with one partition hands out items in the order they were produced (ids increase within a
partition, docs/semantics.md §3.2). One consumer that leases, processes and completes a batch before
leasing the next therefore processes them in order. Two consumers do not: each leases a different part
of the head, and the faster one finishes its later items first. Nor does a retry: a retried item goes
to the tail (docs/semantics.md §4.4), behind everything produced since. So a strict FIFO consumer does
not retry: it keeps its lease (``leased`` renews it) and tries the item again itself.

Run it against a node: ``QUERATOR_ENDPOINT=http://localhost:2319 python docs/recipes/fifo.py``.
"""

from __future__ import annotations

import asyncio
import os

from querator.client import AsyncClient

ENDPOINT = os.environ.get("QUERATOR_ENDPOINT", "http://localhost:2319")


async def one_consumer(client: AsyncClient) -> list[str]:
    done: list[str] = []
    while len(done) < 20:
        async with client.leased("ledger", batch_size=5, request_timeout="5s") as lease:
            done += [item.bytes.decode() for item in lease.items]  # completed, in order, on exit
    return done


async def two_consumers(client: AsyncClient) -> list[str]:
    done: list[str] = []
    # Consumers A and B lease at about the same time: A gets the head, B the five after it.
    async with (
        client.leased("ledger", batch_size=5, request_timeout="5s") as a,
        client.leased("ledger", batch_size=5, request_timeout="5s") as b,
    ):
        done += [item.bytes.decode() for item in b.items]  # B is quicker (A hit a slow item, a pause)
        done += [item.bytes.decode() for item in a.items]
    return done


async def main() -> None:
    async with AsyncClient(ENDPOINT) as client:
        await client.create_queue("ledger", partitions=1)
        await client.produce("ledger", [f"entry-{n:02}" for n in range(20)])
        print("one consumer: ", " ".join(e[-2:] for e in await one_consumer(client)))
        await client.produce("ledger", [f"entry-{n:02}" for n in range(10)])
        print("two consumers:", " ".join(e[-2:] for e in await two_consumers(client)))


if __name__ == "__main__":
    asyncio.run(main())
