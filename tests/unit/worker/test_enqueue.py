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
