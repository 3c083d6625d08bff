"""``Lease``: what ``leased()`` hands its body, and how its items are settled when the body ends."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from querator.client._arguments import When, absolute
from querator.wire import messages as m

if TYPE_CHECKING:
    from querator.client._async import AsyncClient


class Lease:
    """The items one ``leased()`` block leased (one partition), with an outcome for each.

    Mark an item with ``complete``, ``retry`` or ``dead``; when the block ends, every marked item gets
    its outcome and every unmarked one is completed (or, if the block raised, retried now). Marking is
    immediate and local (no request), so ``Client.leased`` offers the same methods to blocking code.
    Marking an item again replaces its outcome.

    Attributes:
        queue_name: the queue.
        partition: the partition every item was leased from.
        items: the leased items (none when the lease found nothing before its ``request_timeout``).
    """

    __slots__ = ("_outcomes", "items", "partition", "queue_name")

    def __init__(self, reply: m.QueueLeaseResponse) -> None:
        self.queue_name = reply.queue_name
        self.partition = reply.partition
        self.items = reply.items
        self._outcomes: dict[str, m.QueueRetryItem | None] = {}
        """Item id -> its retry, or None to complete it."""

    def complete(self, item: m.QueueLeaseItem | str) -> None:
        """Completes ``item`` (an item or its id) when the block ends, even if the block raises."""
        self._outcomes[self._id(item)] = None

    def retry(self, item: m.QueueLeaseItem | str, at: When | None = None) -> None:
        """Gives ``item`` back when the block ends: now (queue tail, new id), or scheduled ``at`` a time or
        after a delay (``datetime``, ``timedelta`` or seconds)."""
        item_id = self._id(item)
        self._outcomes[item_id] = m.QueueRetryItem(id=item_id, retry_at=None if at is None else absolute(at))

    def dead(self, item: m.QueueLeaseItem | str) -> None:
        """Dead-letters ``item`` when the block ends: into the queue's dead queue, or dropped without one."""
        item_id = self._id(item)
        self._outcomes[item_id] = m.QueueRetryItem(id=item_id, dead=True)

    def _id(self, item: m.QueueLeaseItem | str) -> str:
        item_id = item if isinstance(item, str) else item.id
        if not any(i.id == item_id for i in self.items):
            raise ValueError(f"lease: '{item_id}' is not an item of this lease")
        return item_id

    async def settle(self, client: AsyncClient, failed: bool) -> None:
        """Applies the outcomes: the marked ones, and for the rest complete (retry now when ``failed``).

        Completions and retries go as one request each, together; if both fail, the first error is
        raised.

        Raises:
            as ``AsyncClient.complete`` and ``retry``: InvalidOption for an item whose lease was lost.
        """
        complete: list[str] = []
        tokens: list[str] = []
        retry: list[m.QueueRetryItem] = []
        for item in self.items:
            outcome = self._outcomes.get(item.id, m.QueueRetryItem(id=item.id) if failed else None)
            # Each item's proof of this lease goes with it, for a queue that requires lease tokens.
            if outcome is None:
                complete.append(item.id)
                tokens.append(item.lease_token)
            else:
                retry.append(msgspec.structs.replace(outcome, lease_token=item.lease_token))
        calls = []
        if complete:
            proofs = tokens if any(tokens) else ()
            calls.append(client.complete(self.queue_name, self.partition, complete, lease_tokens=proofs))
        if retry:
            calls.append(client.retry(self.queue_name, self.partition, retry))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
