"""What one append costs as a workflow's journal grows: ``durable_bench.py --journal-length N``.

For each ``--journal-length`` (repeatable) and each of memory and sqlite, and postgres when named
(``--system``, in process: the service over the store, no HTTP, so that only the store's work grows with
the journal; postgres on the tests' server started for the run, a schema per length), one workflow is
started and claimed, its journal filled to that length by appends of 1,000 steps, and then
``APPENDS`` appends of one step each are timed. Printed per system and length: the mean time per
append, and the bytes it handed the store (the head's record and the journal rows it wrote, encoded as
stored), which docs/adr/0046 says do not grow with the journal. Rounds alternate the systems and lengths.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from bench import start_postgres
from querator.clock import SystemClock
from querator.service import Service
from querator.storage.base import Store
from querator.storage.memory import MemoryStore
from querator.storage.postgres import PostgresSettings, PostgresStore
from querator.storage.sqlite import SqliteStore
from querator.storage.workflows import encode_workflow
from querator.tenancy import AS_SERVER
from querator.wire import messages as m

APPENDS = 200
"""One-step appends timed per system and length."""
FILL = 1000
"""Steps per append while filling the journal (an append's most)."""
QUEUE = "bench-journal"
JOURNAL_SYSTEMS = ("memory", "sqlite", "postgres")
DEFAULT_JOURNAL_SYSTEMS = ("memory", "sqlite")

if TYPE_CHECKING:
    from tests.postgres_node import PostgresNode


def _step(seq: int) -> m.WorkflowEntry:
    return m.WorkflowEntry(seq=seq, kind="step", name=f"s{seq}", state="done", value=b'"ok"')


def _store(system: str, tmp: str, synchronous: str, postgres: PostgresNode | None, schema: str) -> Store:
    if system == "memory":
        return MemoryStore()
    if system == "sqlite":
        return SqliteStore(Path(tmp) / "journal.sqlite", synchronous=synchronous)
    assert postgres is not None
    return PostgresStore(PostgresSettings(url=postgres.url, schema=schema), epoch=SystemClock().now())


async def _appends(
    system: str, length: int, synchronous: str, postgres: PostgresNode | None, schema: str
) -> tuple[float, float]:
    """Mean microseconds and bytes written per one-step append at ``length`` entries."""
    with tempfile.TemporaryDirectory() as tmp:
        store = _store(system, tmp, synchronous, postgres, schema)
        service = Service(store, SystemClock())
        await service.start()
        try:
            await service.create_queue(
                AS_SERVER,
                m.QueueInfo(
                    queue_name=QUEUE, lease_timeout="1m", expire_timeout="10m", requested_partitions=1
                ),
            )
            flows = service.workflows
            await flows.start(
                AS_SERVER, m.WorkflowsStartRequest(workflow_id="wf", name="long", queue_name=QUEUE)
            )
            claim = await flows.claim(
                AS_SERVER, m.WorkflowsClaimRequest(workflow_id="wf", claim_timeout="15m")
            )
            assert claim.workflow is not None
            fence = claim.workflow.fence
            for first in range(1, length + 1, FILL):
                entries = [_step(seq) for seq in range(first, min(first + FILL, length + 1))]
                await flows.append(
                    AS_SERVER, m.WorkflowsAppendRequest(workflow_id="wf", fence=fence, entries=entries)
                )
            written = 0
            rows = store.workflows
            put = rows.put_workflow

            async def counted(wf: Any, version: int, journal: Sequence[Any] = ()) -> bool:
                nonlocal written
                written += len(encode_workflow(wf)) + sum(len(msgspec.msgpack.encode(e)) for e in journal)
                # (Before docs/adr/0046 the store took no rows: the bench measures either version.)
                return await (put(wf, version, journal) if journal else put(wf, version))

            rows.put_workflow = counted  # type: ignore[method-assign]
            began = time.perf_counter()
            for seq in range(length + 1, length + APPENDS + 1):
                await flows.append(
                    AS_SERVER, m.WorkflowsAppendRequest(workflow_id="wf", fence=fence, entries=[_step(seq)])
                )
            spent_s = time.perf_counter() - began
            return spent_s / APPENDS * 1e6, written / APPENDS
        finally:
            await service.shutdown()


async def run_journal(args: argparse.Namespace) -> None:
    systems = [s for s in args.system or DEFAULT_JOURNAL_SYSTEMS if s in JOURNAL_SYSTEMS]
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.node()} {os.cpu_count()} cpus, python "
        f"{platform.python_version()}, {APPENDS} one-step appends per system and length, sqlite "
        f"synchronous {args.sqlite_synchronous}",
        flush=True,
    )
    print(
        "| round | system | journal length | µs per append | bytes written per append |\n"
        "|---|---|---|---|---|"
    )
    postgres = start_postgres() if "postgres" in systems else None
    try:
        for n in range(args.rounds):
            for system in systems:
                for length in args.journal_length:
                    schema = f"journal_{os.getpid()}_{n}_{length}"
                    us, written = await _appends(system, length, args.sqlite_synchronous, postgres, schema)
                    print(f"| {n + 1} | {system} | {length:,} | {us:.0f} | {written:,.0f} |", flush=True)
    finally:
        if postgres is not None:
            postgres.close()
