"""``Slots`` (querator/worker/_slots.py): the worker's slots and the items held ahead of them."""

from __future__ import annotations

import asyncio

import pytest

from querator.worker._slots import Slots


async def test_held_items_take_freed_slots_in_the_order_they_asked() -> None:
    slots = Slots(1)
    assert await slots.take()
    held = [asyncio.ensure_future(slots.take()) for _ in range(3)]
    await asyncio.sleep(0)  # each waits on its future now
    got: list[int] = []
    for n, future in enumerate(held):
        future.add_done_callback(lambda _, n=n: got.append(n))
    for _ in held:
        slots.give()
    assert await asyncio.gather(*held) == [True, True, True]
    assert got == [0, 1, 2]


async def test_a_stop_turns_held_items_away_except_those_that_wait_through_it() -> None:
    slots = Slots(1)
    assert await slots.take()
    turned_away = asyncio.ensure_future(slots.take())
    kept = asyncio.ensure_future(slots.take(through_stop=True))
    await asyncio.sleep(0)
    slots.stop()
    assert await turned_away is False
    assert not kept.done()
    assert await slots.take() is False  # asked after the stop, while no slot is free
    slots.give()
    assert await kept is True


async def test_a_cancelled_wait_passes_on_the_slot_it_was_handed() -> None:
    slots = Slots(1)
    assert await slots.take()
    first = asyncio.ensure_future(slots.take())
    second = asyncio.ensure_future(slots.take())
    await asyncio.sleep(0)
    slots.give()  # handed to first...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second is True


async def test_a_cancelled_wait_leaves_the_queue() -> None:
    slots = Slots(1)
    assert await slots.take()
    gone = asyncio.ensure_future(slots.take())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    slots.give()
    assert await slots.take() is True  # the slot was freed, not handed to the cancelled wait
