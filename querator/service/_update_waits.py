"""The ``workflows.update`` calls of one node waiting for their answers (docs/adr/0060).

An update is answered by the turn that takes it: that turn's append records the update and its
``update_result`` entry together. A call reads the workflow's head (and the answer's row once it moved
there) when it starts, whenever this node writes the workflow (``changed``: an append here answers at
once), and every ``UPDATE_POLL_US`` otherwise (a turn written through another node is seen that way),
until its deadline.
"""

from __future__ import annotations

import asyncio
from typing import Final

from querator.clock import MICROS, Clock, sleep_until
from querator.errors import RetryRequest
from querator.service._result_waits import _first
from querator.storage import journal
from querator.storage.workflows import Entry, WorkflowRows
from querator.wire import messages as m
from querator.wire.workflows import FINAL_STATES, PENDING, UPDATE_RESULT

UPDATE_POLL_US: Final = MICROS
"""Microseconds between reads of a workflow an update waits on, when another node may answer it."""
MAX_UPDATE_WAITS: Final = 10_000
"""``workflows.update`` calls one node holds at once: beyond it a call gets 454 (``OVERLOADED``)."""
OVERLOADED: Final = "workflow updates are overloaded"
"""The stable prefix of the 454 of an update call beyond ``MAX_UPDATE_WAITS``."""


class UpdateWaits:
    """The update calls of one node, by the stored id of the workflow each waits on."""

    def __init__(self, rows: WorkflowRows, clock: Clock) -> None:
        self._rows = rows
        self._clock = clock
        self._changes: dict[str, asyncio.Event] = {}
        self._waiters: dict[str, int] = {}
        self._waits = 0

    def check_room(self) -> None:
        """Refuses an update before it is recorded when the node holds as many waiting calls as it may."""
        if self._waits >= MAX_UPDATE_WAITS:
            raise RetryRequest(
                f"{OVERLOADED}; {MAX_UPDATE_WAITS} workflows.update calls wait on this node, try again later"
            )

    def changed(self, key: str) -> None:
        """This node wrote the workflow stored as ``key``: the calls waiting on it read it again now."""
        event = self._changes.pop(key, None)
        if event is not None:
            event.set()

    async def wait(
        self, key: str, workflow_id: str, update_id: str, deadline: int
    ) -> m.WorkflowsUpdateResponse:
        """The answer of the update ``update_id`` of the workflow stored as ``key`` once its turn recorded
        it, or ``pending`` at ``deadline``: as ``workflows.result`` answers a running workflow, the end of
        the wait is no error of the server's (the update stays recorded; a call with its id waits again).

        Raises:
            InvalidOption: the workflow ended with the update not taken, or is gone.
        """
        self.check_room()
        self._waits += 1
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            while True:
                # Taken before the read, so that a write between the read and the wait is not missed.
                change = self._changes.setdefault(key, asyncio.Event())
                answer = await self._answer(key, workflow_id, update_id)
                if answer is not None:
                    return answer
                now = self._clock.now()
                if now >= deadline:
                    return m.WorkflowsUpdateResponse(update_id=update_id, state=PENDING)
                await _first(change.wait(), sleep_until(self._clock, min(deadline, now + UPDATE_POLL_US)))
        finally:
            self._waits -= 1
            self._waiters[key] -= 1
            if not self._waiters[key]:
                del self._waiters[key]
                self._changes.pop(key, None)

    async def _answer(self, key: str, workflow_id: str, update_id: str) -> m.WorkflowsUpdateResponse | None:
        wf = await self._rows.get_workflow(key)
        if wf is None:
            raise journal.not_found(workflow_id)
        seq = journal.update_answer_seq(wf, workflow_id, update_id)
        if not seq:
            return None
        entry: Entry | None = wf.entry(seq)
        if entry is None:  # moved into the journal's rows by a later append
            rows = await self._rows.get_entries(key, seq, seq)
            entry = journal.recorded_rows(wf, rows).get(seq)
        if entry is None or entry.kind != UPDATE_RESULT or entry.state not in FINAL_STATES:
            return None  # never so: the turn records the update and its answer in one append
        return m.WorkflowsUpdateResponse(
            update_id=update_id, seq=seq, state=entry.state, value=entry.value, error=entry.error
        )
