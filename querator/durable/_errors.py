"""What a workflow can catch, and what ends it."""

from __future__ import annotations


class DurableError(Exception):
    """Base of the errors ``querator.durable`` raises inside and outside workflows."""


class StepFailed(DurableError):
    """A step (or a child workflow) failed for good: its retries ran out, or it raised a permanent error.
    Raised inside the workflow where it awaited the step, where it can be caught; recorded, so a replay
    raises it again at the same place.

    Attributes:
        name: the step's (or child workflow's) name.
        error: ``<type name>: <message>`` of what the step raised last.
    """

    def __init__(self, name: str, error: str) -> None:
        super().__init__(f"{name} failed: {error}")
        self.name = name
        self.error = error


class ChildFailed(StepFailed):
    """A child workflow ended failed or cancelled."""


class SignalTimeout(DurableError, TimeoutError):
    """``Context.wait_for_signal`` reached its timeout before a signal of its name arrived."""


class Cancelled(DurableError):
    """The workflow was cancelled: raised at its next durable call; its compensations then run."""


class WorkflowTimeout(DurableError, TimeoutError):
    """The workflow passed its timeout (``Durable.start(..., timeout=)``): raised at its next durable
    call once the server saw its deadline pass; its compensations then run and it ends failed."""


class NonDeterminism(DurableError):
    """The workflow's code no longer matches its journal: at a recorded position it asked for another
    step, signal or child than the one recorded. The workflow fails; no recorded result is handed to the
    wrong call."""


class UnknownQuery(DurableError):
    """``Durable.query``: the workflow's code, replayed to the end of its journal, registered no handler of
    that name (``Context.on_query``)."""


class UnknownUpdate(DurableError):
    """``Durable.update``: the workflow's code, replayed to the end of its journal, registered no handler
    of that name (``Context.on_update``); nothing was sent."""


class UpdateRejected(DurableError):
    """``Durable.update``: the update's validator refused its arguments (in the caller, on a replay of the
    journal); nothing was sent or recorded.

    Attributes:
        error: ``<type name>: <message>`` of what the validator raised.
    """

    def __init__(self, name: str, error: str) -> None:
        super().__init__(f"update {name} was rejected: {error}")
        self.name = name
        self.error = error


class UpdateFailed(StepFailed):
    """``Durable.update``: the update's handler raised in the workflow (recorded as its answer); the
    workflow goes on."""


class UpdateTimeout(DurableError, TimeoutError):
    """``Durable.update``: the workflow did not answer within the timeout. The update stays recorded:
    ``Durable.update`` with the same ``update_id`` waits for its answer again."""


class WorkflowFailed(DurableError):
    """``WorkflowHandle.result``: the workflow ended failed or cancelled.

    Attributes:
        status: failed or cancelled.
        error: what ended it, ``<type name>: <message>``.
    """

    def __init__(self, workflow_id: str, status: str, error: str) -> None:
        super().__init__(f"workflow {workflow_id} {status}: {error}")
        self.workflow_id = workflow_id
        self.status = status
        self.error = error


def worker_lost(attempts: int) -> str:
    """The error of a step whose worker was lost (killed, out of memory) while it ran, after ``attempts``
    attempts, its ``max_attempts``: a lost worker counts as an attempt."""
    return f"WorkerLost: its worker was lost while it ran, after {attempts} attempt(s)"


def describe(error: BaseException) -> str:
    """How an error is recorded: ``<type name>: <message>``."""
    return f"{type(error).__name__}: {error}"
