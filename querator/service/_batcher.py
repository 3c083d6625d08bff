"""``KeyedBatcher``: concurrent calls about one key, carried out together by one of them.

Many callers writing one record by compare-and-set (the results of a thousand dispatched steps of one
workflow) each read it, change it and lose the race to each other: each loss a read and a write more,
until some give up. Gathered here, the calls that arrive while one write is being prepared or is in
flight are carried out by that write's caller in the next one: one write per round, whatever the number
of callers (docs/durable.md, "Fan-in").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

Flush = Callable[[str, list[T]], Awaitable[list[BaseException | None]]]
"""Carries out the calls ``items`` about one key together; for each, None or the error it gets."""


class _HandedBack(Exception):
    """The caller carrying out a round was cancelled before this call was done: submit it again (a call
    carried out twice must do no harm, as for any retried request)."""


class KeyedBatcher(Generic[T]):
    def __init__(self, flush: Flush[T]) -> None:
        self._flush = flush
        self._pending: dict[str, list[tuple[T, asyncio.Future[None]]]] = {}

    async def submit(self, key: str, item: T) -> None:
        """Carries out ``item`` with the others about ``key``; raises the error it alone got, or the
        flush's."""
        while True:
            try:
                return await self._submit(key, item)
            except _HandedBack:
                continue

    async def _submit(self, key: str, item: T) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = self._pending.get(key)
        if pending is not None:  # a caller is carrying out this key's calls: it takes this one next
            pending.append((item, done))
            return await done
        pending = self._pending[key] = [(item, done)]
        try:
            await asyncio.sleep(0)  # the calls made at the same time join this first round
            while pending:
                group = pending[:]
                await self._carry_out(key, group)
                del pending[: len(group)]
        finally:
            del self._pending[key]
            for _, left in pending:  # cancelled while carrying them out: they go on by themselves
                if left is done:
                    left.cancel()
                elif not left.done():
                    left.set_exception(_HandedBack())
        return await done

    async def _carry_out(self, key: str, group: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            outcomes = await self._flush(key, [item for item, _ in group])
        except Exception as e:
            outcomes = [e] * len(group)
        for (_, done), outcome in zip(group, outcomes, strict=True):
            if done.done():
                continue
            if outcome is None:
                done.set_result(None)
            else:
                done.set_exception(outcome)
