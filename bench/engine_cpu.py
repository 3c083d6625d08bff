"""CPU per call of the service and the engine alone: no HTTP, no sockets, no client process.

    python bench/engine_cpu.py                     # 1 and 24 concurrent callers
    python bench/engine_cpu.py --callers 1 --calls 24000
    python bench/engine_cpu.py --callers 24 --batch 10   # per-item costs: 10 items per call

``--callers`` tasks call ``Service.produce`` (then ``lease``, then ``complete``) with ``--batch`` 1 KiB
items each (one by default) on a memory store, in this process, on uvloop; the CPU this process spent
over each phase, divided by the calls, is what the queue's own code costs per request. With one caller
every call is a batch of its own, so this shows the engine's cost per batch (waking its task, planning,
answering); with many, the batches grow and that cost is shared. Being one process with no network, it
resolves changes of a microsecond where bench/load.py cannot; alternate runs of two checkouts to
compare them. It tunes the garbage collector as a node does (``querator.server``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time

import uvloop

from querator.server import GC_THRESHOLD
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.tenancy import AS_SERVER
from querator.wire import messages as m

PAYLOAD = os.urandom(1024)


async def measure(callers: int, calls: int, batch: int) -> dict[str, float]:
    """CPU microseconds per produce, lease and complete of ``batch`` items with ``callers`` concurrent
    callers."""
    service = Service(MemoryStore(), max_requests_per_queue=1000)
    await service.start()
    info = m.QueueInfo(queue_name="b", lease_timeout="5m", expire_timeout="24h", requested_partitions=1)
    await service.create_queue(AS_SERVER, info)
    each = calls // callers
    leased: list[list[tuple[int, list[str]]]] = [[] for _ in range(callers)]

    async def produce(_: int) -> None:
        items = [m.QueueProduceItem(bytes=PAYLOAD)] * batch
        for _ in range(each):
            await service.produce(
                AS_SERVER, m.QueueProduceRequest(queue_name="b", request_timeout="1m", items=items)
            )

    async def lease(k: int) -> None:
        for _ in range(each):
            req = m.QueueLeaseRequest(
                queue_name="b", batch_size=batch, client_id=f"c{k}", request_timeout="5s"
            )
            reply = await service.lease(AS_SERVER, req)
            leased[k].append((reply.partition, [i.id for i in reply.items]))

    async def complete(k: int) -> None:
        for partition, ids in leased[k]:
            req = m.QueueCompleteRequest(queue_name="b", partition=partition, ids=ids, request_timeout="1m")
            await service.complete(AS_SERVER, req)

    costs = {}
    try:
        for name, call in (("produce", produce), ("lease", lease), ("complete", complete)):
            started = time.process_time()
            await asyncio.gather(*(call(k) for k in range(callers)))
            costs[name] = (time.process_time() - started) / (each * callers) * 1e6
    finally:
        await service.shutdown()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--callers", type=int, action="append", help="repeatable; default 1 and 24")
    parser.add_argument("--calls", type=int, default=24_000, help="calls of each kind per run")
    parser.add_argument("--batch", type=int, default=1, help="items per produce, lease and complete")
    args = parser.parse_args()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    for callers in args.callers or [1, 24]:
        costs = uvloop.run(measure(callers, args.calls, args.batch))
        print(f"{callers:3} callers: " + ", ".join(f"{name} {us:5.2f} us" for name, us in costs.items()))


if __name__ == "__main__":
    main()
