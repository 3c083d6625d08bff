"""The ``workflows.result`` calls of one node waiting for workflows to end (docs/durable.md, "Waiting
for a result").

The calls waiting for one workflow share a watch: one poller reads the record for them all, at once and
then every ``RESULT_POLL_US`` (another node's finish is seen that way), and a finish on this node ends
the watch at once. Nothing of the record is kept while it runs; its end is converted once and every call
returns that one reply. A record may hold 8 MiB, so a read per call per second made memory and storage
reads grow with the number of callers (issue 42).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Final

from querator.clock import MICROS, Clock, sleep_until
from querator.errors import RetryRequest
from querator.service._conversion import workflow_info
from querator.storage import journal
from querator.storage.workflows import Workflow, WorkflowRows
from querator.wire import messages as m
from querator.wire.workflows import RUNNING

RESULT_POLL_US: Final = MICROS
"""Microseconds between reads of a workflow that ``result`` calls wait for, when another node may end it."""
MAX_RESULT_WAITS: Final = 10_000
"""``workflows.result`` calls one node holds at once: beyond it a call gets 454 (``OVERLOADED``), so a
crowd of callers costs a bounded amount of memory (a few kilobytes each) instead of growing with it."""
OVERLOADED: Final = "workflow results are overloaded"
"""The stable prefix of the 454 of a ``result`` call beyond ``MAX_RESULT_WAITS``."""

Outcome = m.WorkflowInfo | Exception


class _Watch:
    """The calls waiting for one workflow, and what they share."""

    def __init__(self) -> None:
        self.waiters = 0
        self.ended = asyncio.Event()
        self.outcome: Outcome | None = None
        """The ended workflow (or the error of reading it), once for every call."""
        self.poller: asyncio.Task[None] | None = None
        self.reading: asyncio.Task[m.WorkflowInfo] | None = None
        """The read of the workflow as it is, shared by the calls whose deadline passed meanwhile."""

    def end(self, outcome: Outcome) -> None:
        if not self.ended.is_set():
            self.outcome = outcome
            self.ended.set()


class ResultWaits:
    """The ``result`` calls of one node, by the stored id of the workflow each waits for."""

    def __init__(self, rows: WorkflowRows, clock: Clock) -> None:
        self._rows = rows
        self._clock = clock
        self._watches: dict[str, _Watch] = {}
        self._waits = 0

    async def wait(self, key: str, workflow_id: str, deadline: int) -> m.WorkflowInfo:
        """The workflow stored as ``key`` once it ended, or as it is at ``deadline``."""
        if self._waits >= MAX_RESULT_WAITS:
            raise RetryRequest(
                f"{OVERLOADED}; {MAX_RESULT_WAITS} workflows.result calls wait on this node, try again later"
            )
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _Watch()
            watch.poller = asyncio.create_task(self._poll(key, workflow_id, watch))
        watch.waiters += 1
        self._waits += 1
        try:
            await _first(watch.ended.wait(), sleep_until(self._clock, deadline))
            if not watch.ended.is_set():
                return await asyncio.shield(self._reading(key, workflow_id, watch))
            if isinstance(watch.outcome, Exception):
                raise watch.outcome
            assert watch.outcome is not None
            return watch.outcome
        finally:
            # Not before the last call ends (a client may leave mid-wait): the others share the watch.
            watch.waiters -= 1
            self._waits -= 1
            if not watch.waiters:
                del self._watches[key]
                for task in (watch.poller, watch.reading):
                    if task is not None:
                        task.cancel()

    def finished(self, key: str, wf: Workflow) -> None:
        """Ends the watch of ``wf`` (ended on this node, stored as ``key``) with it, without a read."""
        watch = self._watches.get(key)
        if watch is not None and not watch.ended.is_set():
            watch.end(workflow_info(wf, journal=False))

    async def _poll(self, key: str, workflow_id: str, watch: _Watch) -> None:
        """Reads the workflow for every call waiting for it until it ended."""
        try:
            while (info := await self._ended(key, workflow_id)) is None:
                await _first(watch.ended.wait(), sleep_until(self._clock, self._clock.now() + RESULT_POLL_US))
                if watch.ended.is_set():
                    return  # ended on this node (``finished``)
            watch.end(info)
        except Exception as e:  # a storage failure, say: each call answers it as its own read would
            watch.end(e)

    async def _ended(self, key: str, workflow_id: str) -> m.WorkflowInfo | None:
        """The workflow for the wire if it ended, None while it runs (nothing of it is kept then)."""
        wf = await self._found(key, workflow_id)
        return None if wf.status == RUNNING else workflow_info(wf, journal=False)

    def _reading(self, key: str, workflow_id: str, watch: _Watch) -> asyncio.Task[m.WorkflowInfo]:
        """The read of the workflow as it is now: one for every call whose deadline passes meanwhile."""
        if watch.reading is None:
            watch.reading = asyncio.create_task(self._current(key, workflow_id))
            watch.reading.add_done_callback(lambda task: _read_done(watch, task))
        return watch.reading

    async def _current(self, key: str, workflow_id: str) -> m.WorkflowInfo:
        return workflow_info(await self._found(key, workflow_id), journal=False)

    async def _found(self, key: str, workflow_id: str) -> Workflow:
        wf = await self._rows.get_workflow(key)
        if wf is None:
            raise journal.not_found(workflow_id)
        return wf


def _read_done(watch: _Watch, task: asyncio.Task[m.WorkflowInfo]) -> None:
    watch.reading = None
    if not task.cancelled():
        task.exception()  # retrieved: the calls that awaited it raised it, and none may be left


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Waits until the first of ``waits`` ends; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
