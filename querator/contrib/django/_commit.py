"""``enqueue_on_commit``: a task's call produced once the surrounding database transaction commits."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import transaction

from querator.client import Duration
from querator.worker import Task


def enqueue_on_commit(
    task: Task[..., Any],
    *args: Any,
    using: str | None = None,
    delay: Duration | None = None,
    enqueue_at: datetime | None = None,
    dedup_id: str | None = None,
    **kwargs: Any,
) -> None:
    """Enqueues ``task(*args, **kwargs)`` when the transaction of database ``using`` commits, and never
    if it rolls back; at once outside a transaction (Django's ``on_commit``).

    A worker never sees a row the transaction has not committed yet. The arguments are checked against
    the task's parameters now, so a mistake raises here, inside the transaction. The produce runs after
    the commit, in the committing thread (``enqueue_sync``): if the node cannot be reached then, the
    exception comes out of the ``atomic`` block, whose data is committed already; give ``dedup_id`` and
    enqueue again to repair it without a duplicate (docs/frameworks.md).

    Raises:
        TypeError: the arguments do not fit the task's parameters.
    """
    task.signature.check(args, kwargs)
    produce = functools.partial(
        task.enqueue_sync, *args, delay=delay, enqueue_at=enqueue_at, dedup_id=dedup_id, **kwargs
    )
    transaction.on_commit(produce, using=using)
