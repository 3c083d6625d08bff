"""What the client's methods accept besides wire messages: bare payloads and ids, queue settings by name."""

from __future__ import annotations

from querator.duration import format_duration, parse_duration
from querator.wire import messages as m

ProduceItem = m.QueueProduceItem | bytes | str
"""An item to produce: a full message, or just its payload (``bytes`` -> ``bytes``, ``str`` -> ``utf8``)."""
RetryItem = m.QueueRetryItem | str
"""An item to retry: a full message, or just its id (retry now)."""


def produce_item(item: ProduceItem) -> m.QueueProduceItem:
    """The message of a ``ProduceItem``."""
    if isinstance(item, m.QueueProduceItem):
        return item
    if isinstance(item, str):
        return m.QueueProduceItem(utf8=item)
    return m.QueueProduceItem(bytes=bytes(item))


def retry_item(item: RetryItem) -> m.QueueRetryItem:
    """The message of a ``RetryItem``."""
    return m.QueueRetryItem(id=item) if isinstance(item, str) else item


def new_queue_info(
    name: str,
    *,
    lease_timeout: str = "1m",
    expire_timeout: str | None = None,
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
    if expire_timeout is None:
        expire_timeout = format_duration(60 * parse_duration(lease_timeout))
    return m.QueueInfo(
        queue_name=name,
        lease_timeout=lease_timeout,
        expire_timeout=expire_timeout,
        max_attempts=max_attempts,
        dead_queue=dead_queue,
        reference=reference,
        requested_partitions=partitions,
        namespace=namespace,
    )
