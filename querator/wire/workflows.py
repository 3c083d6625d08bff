"""The vocabulary of durable workflows both sides speak (docs/durable.md): statuses, the kinds and states of
journal entries, a claim's outcomes, how an append ends a claim's turn, and how a child workflow's id is
made. Each word is defined here only: the journal's rules (``storage.journal``), the service's checks and
the client's workflow runtime (``querator.durable``) import it."""

from __future__ import annotations

from typing import Final

RUNNING: Final = "running"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
STATUSES: Final = (RUNNING, COMPLETED, FAILED, CANCELLED)

# An entry's kinds: what the workflow did at its sequence number.
STEP: Final = "step"
SLEEP: Final = "sleep"
SIGNAL: Final = "signal"
CHILD: Final = "child"
PATCH: Final = "patch"
"""A marker, named by the patch's id: the run took the changed code of ``Context.patched`` there."""
SEARCH: Final = "search"
"""Search attributes the workflow set (``Context.set_search_attributes``), a JSON object in its value:
recording it merges them into the run's attributes, once (``querator.wire.search``)."""
UPDATE: Final = "update"
"""An update the workflow took (docs/adr/0060): its value is the caller's arguments, which a replay applies
again at the same seq; the next seq holds its ``UPDATE_RESULT``."""
UPDATE_RESULT: Final = "update_result"
"""What an update's handler returned (done) or raised (error): the answer its caller waits for."""
KINDS: Final = frozenset({STEP, SLEEP, SIGNAL, CHILD, PATCH, SEARCH, UPDATE, UPDATE_RESULT})

# An entry's states. The first two are final: a final entry is never replaced by a different one.
DONE: Final = "done"
ERROR: Final = "error"
PENDING: Final = "pending"
"""Started and not finished: a dispatched step or child, a timer, a wait for a signal, a step between
attempts."""
FINAL_STATES: Final = frozenset({DONE, ERROR})
STATES: Final = frozenset({DONE, ERROR, PENDING})

# A claim's outcome (``WorkflowsClaimResponse.outcome``).
CLAIMED: Final = "claimed"
"""The caller holds the claim and replays the workflow."""
BUSY: Final = "busy"
"""Another claim holds until the workflow's ``claim_deadline``."""
FINISHED: Final = "finished"
"""The workflow has ended: nothing to replay."""
OTHER_VERSION: Final = "other_version"
"""The workflow is a run of another app version than the claimant's: left for a worker of its version."""

# How an append ends the claim's turn (``WorkflowsAppendRequest.then``).
CONTINUE: Final = ""
SUSPEND: Final = "suspend"
COMPLETE: Final = "complete"
FAIL: Final = "fail"
CANCEL: Final = "cancel"
CONTINUE_AS_NEW: Final = "continue_as_new"
"""The run ends and the workflow starts over with ``result`` as its input and an empty journal."""
ENDINGS: Final = {COMPLETE: COMPLETED, FAIL: FAILED, CANCEL: CANCELLED}
"""The ``then`` that ends a workflow, and the status it ends in."""
THENS: Final = frozenset({CONTINUE, SUSPEND, CONTINUE_AS_NEW, *ENDINGS})


def child_id(parent_id: str, seq: int) -> str:
    """A child workflow's id: its parent's and the seq that started it, so a replay starts the same one."""
    return f"{parent_id}/{seq}"
