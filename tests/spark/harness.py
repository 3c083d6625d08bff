"""Helpers of the Spark tests: the pyspark check, draining a queue, reading a write's report.

Importing this module skips the importing test module when pyspark or pyarrow is missing -- unless ``CI``
is set: then the import fails, so the Spark tests never pass by being skipped in CI.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from querator.client import AsyncClient
from querator.errors import RetryRequest
from querator.wire import messages as m

try:
    import pyarrow  # noqa: F401 - the executors need it
    import pyspark  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise ImportError(f"the Spark tests need the 'spark' extra in CI: {e}") from e
    pytest.skip(f"pyspark is not installed ({e}): pip install -e '.[spark]'", allow_module_level=True)

DRAIN_DEADLINE = 180.0
"""Seconds draining one queue may take."""
LEASERS = 4
LEASE_BATCH = 1000

Delivered = list[tuple[int, m.QueueLeaseItem]]


async def _drain(url: str, queue: str) -> Delivered:
    delivered: Delivered = []
    deadline = time.monotonic() + DRAIN_DEADLINE
    async with AsyncClient(url) as client:

        async def empty() -> bool:
            stats = await client.stats(queue)
            return sum(p.total for lq in stats.logical_queues for p in lq.partitions) == 0

        async def leaser(n: int) -> None:
            while True:
                if time.monotonic() > deadline:
                    raise AssertionError(f"draining {queue!r}: not empty after {DRAIN_DEADLINE}s")
                try:
                    reply = await client.lease(queue, LEASE_BATCH, f"drain-{n}", request_timeout="300ms")
                except RetryRequest:
                    continue
                if not reply.items:  # nothing to lease right now: done once nothing is left at all
                    if await empty():
                        return
                    continue
                await client.complete(queue, reply.partition, [item.id for item in reply.items])
                delivered.extend((reply.partition, item) for item in reply.items)

        await asyncio.gather(*(leaser(n) for n in range(LEASERS)))
    return delivered


def drain(url: str, queue: str) -> Delivered:
    """Leases and completes every item of ``queue`` until it is empty; returns them with their partitions."""
    return asyncio.run(_drain(url, queue))


def duplicates(values: Iterable[Any]) -> dict[Any, int]:
    """The values seen more than once, with their counts."""
    return {value: n for value, n in Counter(values).items() if n > 1}


def read_report(path: Path) -> list[dict[str, Any]]:
    """The lines a ``reportFile`` received (one per commit or abort)."""
    if not path.exists():
        return []
    return [msgspec.json.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def write_options(url: str, queue: str, **extra: str) -> dict[str, str]:
    """The options of a ``querator`` write to ``queue``."""
    return {"endpoint": url, "queue": queue, **extra}
