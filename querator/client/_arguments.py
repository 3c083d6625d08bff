"""What the client's methods accept besides wire messages: bare payloads and ids, durations and times
in Python's types, queue settings by name, and a client id of its own."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from querator.clock import SystemClock, to_datetime
from querator.duration import MICROSECOND, SECOND, format_duration, parse_duration
from querator.wire import messages as m

ProduceItem = m.QueueProduceItem | bytes | str
"""An item to produce: a full message, or just its payload (``bytes`` -> ``bytes``, ``str`` -> ``utf8``)."""
RetryItem = m.QueueRetryItem | str
"""An item to retry: a full message, or just its id (retry now)."""
Duration = str | timedelta | float
"""A duration: a Go duration string (``"1m30s"``), a ``timedelta``, or seconds."""
When = datetime | timedelta | float
"""A time: a ``datetime`` (aware), or a delay from now as a ``timedelta`` or seconds."""


def go_duration(value: Duration) -> str:
    """``value`` as a Go duration string, which is what the wire carries (the server checks its range)."""
    if isinstance(value, str):
        return value
    if isinstance(value, timedelta):
        return format_duration((value // timedelta(microseconds=1)) * MICROSECOND)
    return format_duration(round(value * SECOND))


def seconds_of(value: Duration) -> float:
    """``value`` in seconds.

    Raises:
        DurationError: a string that is not a Go duration.
    """
    if isinstance(value, str):
        return parse_duration(value) / SECOND
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def absolute(when: When) -> datetime:
    """``when`` as a time: a delay counts from now (``querator.clock``)."""
    if isinstance(when, datetime):
        return when
    delay = when if isinstance(when, timedelta) else timedelta(seconds=when)
    return to_datetime(SystemClock().now()) + delay


def new_client_id() -> str:
    """A lease's client id no other lease shares: host, process and 64 random bits (the server refuses a
    second waiting lease with the client id of one still waiting on the queue)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(8)}"


def produce_item(item: ProduceItem) -> m.QueueProduceItem:
    """The message of a ``ProduceItem``."""
    if isinstance(item, m.QueueProduceItem):
        return item
    if isinstance(item, str):
        return m.QueueProduceItem(utf8=item)
    return m.QueueProduceItem(bytes=bytes(item))


def produce_items(
    items: Sequence[ProduceItem],
    *,
    enqueue_at: datetime | None,
    delay: Duration | None,
    dedup_id: str | Sequence[str] | None,
    kind: str,
    reference: str,
    encoding: str,
) -> list[m.QueueProduceItem]:
    """The messages of ``items``, with the keywords of ``AsyncClient.produce`` filling each field an item
    leaves empty.

    Raises:
        ValueError: both ``enqueue_at`` and ``delay``; one ``dedup_id`` for several items, or a sequence
            of them not one per item.
    """
    if enqueue_at is not None and delay is not None:
        raise ValueError("produce: give enqueue_at or delay, not both")
    if isinstance(dedup_id, str):
        if len(items) != 1:
            raise ValueError("produce: one dedup_id names one item; give one per item")
        dedup_id = [dedup_id]
    if dedup_id is not None and len(dedup_id) != len(items):
        raise ValueError(f"produce: {len(dedup_id)} dedup ids for {len(items)} items")
    at = enqueue_at if delay is None else absolute(timedelta(seconds=seconds_of(delay)))
    defaults = {"kind": kind, "reference": reference, "encoding": encoding}
    messages = []
    for n, item in enumerate(items):
        msg = produce_item(item)
        fill: dict[str, str | datetime] = {k: v for k, v in defaults.items() if v and not getattr(msg, k)}
        if at is not None and msg.enqueue_at is None:
            fill["enqueue_at"] = at
        if dedup_id is not None and not msg.dedup_id:
            fill["dedup_id"] = dedup_id[n]
        messages.append(msgspec.structs.replace(msg, **fill) if fill else msg)
    return messages


def retry_item(item: RetryItem) -> m.QueueRetryItem:
    """The message of a ``RetryItem``."""
    return m.QueueRetryItem(id=item) if isinstance(item, str) else item


def new_queue_info(
    name: str,
    *,
    lease_timeout: Duration = "1m",
    expire_timeout: Duration | None = None,
    max_attempts: int = 0,
    dead_queue: str = "",
    reference: str = "",
    partitions: int = 1,
    namespace: str = "",
) -> m.QueueInfo:
    """A ``QueueInfo`` for ``create_queue``; the expire timeout defaults to 60 times the lease timeout.

    Raises:
        ValueError: ``expire_timeout`` is None and ``lease_timeout`` is not a Go duration.
    """
    lease_timeout = go_duration(lease_timeout)
    if expire_timeout is None:
        expire_timeout = format_duration(60 * parse_duration(lease_timeout))
    return m.QueueInfo(
        queue_name=name,
        lease_timeout=lease_timeout,
        expire_timeout=go_duration(expire_timeout),
        max_attempts=max_attempts,
        dead_queue=dead_queue,
        reference=reference,
        requested_partitions=partitions,
        namespace=namespace,
    )
