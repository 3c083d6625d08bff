"""``KeyedBatcher``: calls about one key that arrive together are carried out in one round each."""

from __future__ import annotations

import asyncio

import pytest

from querator.errors import Conflict
from querator.service._batcher import KeyedBatcher


class Flushes:
    """A flush that records its rounds; ``gate`` holds a round in flight until the test opens it."""

    def __init__(self) -> None:
        self.rounds: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, key: str, items: list[int]) -> list[BaseException | None]:
        self.rounds.append((key, items))
        await self.gate.wait()
        return [Conflict(f"odd; {n}") if n % 2 else None for n in items]


async def test_calls_made_together_are_one_round_and_each_gets_its_own_outcome() -> None:
    flushes = Flushes()
    batcher = KeyedBatcher(flushes)
    outcomes = await asyncio.gather(*(batcher.submit("a", n) for n in range(6)), return_exceptions=True)
    assert flushes.rounds == [("a", [0, 1, 2, 3, 4, 5])]
    assert [type(o).__name__ for o in outcomes] == ["NoneType", "Conflict"] * 3


async def test_calls_arriving_during_a_round_go_in_the_next_and_keys_are_apart() -> None:
    flushes = Flushes()
    flushes.gate.clear()
    batcher = KeyedBatcher(flushes)
    first = asyncio.ensure_future(batcher.submit("a", 0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first round is in flight, held at the gate
    later = [asyncio.ensure_future(batcher.submit("a", n)) for n in (2, 4)]
    other = asyncio.ensure_future(batcher.submit("b", 6))
    await asyncio.sleep(0)
    flushes.gate.set()
    await asyncio.gather(first, *later, other)
    assert sorted(flushes.rounds) == [("a", [0]), ("a", [2, 4]), ("b", [6])]


async def test_a_cancelled_caller_hands_the_others_back_to_go_on_alone() -> None:
    flushes = Flushes()
    flushes.gate.clear()
    batcher = KeyedBatcher(flushes)
    leader = asyncio.ensure_future(batcher.submit("a", 0))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    follower = asyncio.ensure_future(batcher.submit("a", 2))
    await asyncio.sleep(0)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    flushes.gate.set()
    await follower  # carried out in a round of its own
    assert flushes.rounds[-1] == ("a", [2])
