"""Wall-clock steps (NTP corrections, a restored VM) through the injected clock: a forward step expires
everything that is due at once, however much it is; a backward step never breaks FIFO order."""

from __future__ import annotations

from querator.clock import FakeClock
from tests.conftest import Api, eventually

from .test_queue import parse_ts, ts

DAY = 24 * 3600
LEASED = 2500
"""More than one lifecycle run handles (LIFECYCLE_LIMIT = 1000): the catch-up takes several runs."""


async def test_a_forward_step_expires_every_due_lease_and_schedule(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="1m", expire_timeout="72h")
    for start in range(0, LEASED, 1000):
        await api.produce("q", [{"utf8": f"i{n}"} for n in range(start, min(start + 1000, LEASED))])
    leased = 0
    while leased < LEASED:
        leased += len((await api.lease("q", batch_size=1000))["items"])
    await api.produce("q", [{"utf8": "later", "enqueue_at": ts(clock, 3600)}])
    clock.jump(DAY)

    async def all_back() -> bool:
        stats = await api.partition_stats("q")
        return stats.get("total_leased", 0) == 0 and stats.get("scheduled", 0) == 0

    await eventually(all_back, timeout=30)
    stats = await api.partition_stats("q")
    assert stats["total"] == LEASED + 1
    first = (await api.lease("q", batch_size=1))["items"][0]
    assert (first["bytes"], first["attempts"]) == ("aTA=", 2)  # "i0": the oldest comes back first


async def test_a_backward_step_keeps_fifo_and_delays_expiry(api: Api, clock: FakeClock) -> None:
    await api.create("q", lease_timeout="1m")
    await api.produce("q", [{"utf8": "before"}])
    held = (await api.lease("q", client_id="a"))["items"][0]
    clock.jump(-3600)
    await api.produce("q", [{"utf8": "after-1"}, {"utf8": "after-2"}])
    ids = [i["id"] for i in await api.items("q")]
    assert ids == sorted(ids) and ids[0] == held["id"]  # new ids still sort after the old ones
    again = (await api.lease("q", client_id="b"))["items"][0]
    assert again["bytes"] == "YWZ0ZXItMQ=="  # "after-1": FIFO kept across the step
    assert parse_ts(again["lease_deadline"]) == parse_ts(ts(clock, 60))
    # The lease taken before the step expires by the wall clock: an hour and a minute from now.
    clock.advance(3600 + 61)

    async def returned() -> bool:
        return held["id"] not in {i["id"] for i in await api.items("q")}

    await eventually(returned)
