"""What ``Task.enqueue`` refuses before it produces anything."""

from __future__ import annotations

import pytest

from querator.worker import Worker


async def test_enqueue_refuses_arguments_the_task_does_not_take() -> None:
    """A misspelt keyword was enqueued and dead-lettered at run time (issue 45): it is a TypeError at
    enqueue now, before any connection (the endpoint here has no server)."""
    worker = Worker("http://127.0.0.1:1")

    @worker.task(queue="mail")
    def send(subject: str, body: str = "") -> None: ...

    with pytest.raises(TypeError, match=r"task .*send cannot take these arguments: .*'bdoy'"):
        await send.enqueue("hello", bdoy="world")
    with pytest.raises(TypeError, match="missing a required argument: 'subject'"):
        await send.enqueue_many([((), {"body": "x"})])


async def test_priorities_are_checked_before_anything_is_produced() -> None:
    """Issue 45 (priorities): an unknown level, in the decorator or at enqueue, and a level for a task
    declared without levels, are a ValueError naming the levels, before any connection."""
    worker = Worker("http://127.0.0.1:1")
    with pytest.raises(ValueError, match=r"^worker: priority 'urgent' is not one of high, normal, low$"):
        worker.task(queue="mail", priority="urgent")

    @worker.task(queue="mail", priority="low")
    def send(subject: str) -> None: ...

    @worker.task(queue="plain")
    def plain(subject: str) -> None: ...

    assert [send.options.queue_of(p) for p in (None, "high", "normal", "low")] == [
        "mail.low",
        "mail.high",
        "mail",
        "mail.low",
    ]
    with pytest.raises(ValueError, match=r"^worker: priority 'urgent' is not one of high, normal, low$"):
        await send.enqueue("hello", priority="urgent")
    with pytest.raises(ValueError, match=r"task .*plain has no priority levels; declare it with priority="):
        await plain.enqueue_many([(("hello",), {})], priority="high")
    assert plain.options.queue_of(None) == "plain"


def test_a_rate_scope_is_checked_when_the_task_is_declared() -> None:
    worker = Worker("http://127.0.0.1:1")
    with pytest.raises(ValueError, match=r"^worker: rate_scope 'global' is not one of process, cluster$"):
        worker.task(queue="mail", rate_limit="1/s", rate_scope="global")
    with pytest.raises(ValueError, match=r"^worker: rate_scope needs a rate_limit$"):
        worker.task(queue="mail", rate_scope="cluster")
