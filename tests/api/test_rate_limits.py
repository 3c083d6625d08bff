"""rate_limits.take over real HTTP (docs/extensions.md, "Rate limits"): the starts a key admits, counted
against a FakeClock, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from querator.clock import FakeClock
from tests.conftest import Api

TAKE = "/v1/rate_limits.take"


async def take(api: Api, key: str = "k", **fields: Any) -> dict[str, Any]:
    body = {"queue_name": "q", "key": key, "limit": 2, "period": "1s", **fields}
    return await api.post(TAKE, body)


async def test_a_key_admits_its_limit_per_period_and_keys_are_apart(api: Api, clock: FakeClock) -> None:
    """Issue 45 (cluster-wide rate limits): 2/s admits one start every 500 ms per key; a take that
    would wait longer than max_wait is refused with the wait after which it would not."""
    await api.create("q")
    admitted = 0
    for _ in range(10):  # ten asks within one instant: one start, the rest refused
        reply = await take(api)
        admitted += reply.get("granted", False)
    assert admitted == 1
    assert await take(api) == {"wait": "500ms"}  # not granted (false is the default, left out)
    assert await take(api, key="other") == {"granted": True, "wait": "0s"}
    clock.advance(0.5)
    assert await take(api) == {"granted": True, "wait": "0s"}
    # Reserving ahead: within max_wait, the next starts are granted in order, each its interval later.
    assert [await take(api, max_wait="2s") for _ in range(3)] == [
        {"granted": True, "wait": "500ms"},
        {"granted": True, "wait": "1s"},
        {"granted": True, "wait": "1.5s"},
    ]
    assert await take(api, max_wait="1s") == {"wait": "1s"}
    clock.advance(60)
    assert await take(api) == {"granted": True, "wait": "0s"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"limit": 0}, "limit is invalid; must be between 1 and 1000000 but 0 was given"),
        ({"limit": 1_000_001}, "limit is invalid; must be between 1 and 1000000 but 1000001 was given"),
        ({"period": ""}, "period is required; expected format: 1s, 1m or 1h"),
        ({"period": "soon"}, "period is invalid; "),
        ({"period": "25h"}, "period is invalid; must be more than 0s and at most '24h' but '25h' was given"),
        ({"period": "-1s"}, "period is invalid; must be more than 0s"),
        ({"max_wait": "16m"}, "max wait is invalid; must be between 0s and '15m' but '16m' was given"),
        ({"key": "k" * 1025}, "key is invalid; cannot be greater than '1024' characters"),
        ({"key": "a\x00b"}, "key is invalid; cannot contain control or invisible characters, found U+0000"),
        ({"queue_name": "nope"}, "queue does not exist; "),
    ],
)
async def test_bad_takes_are_400_with_the_reason(api: Api, fields: dict[str, Any], message: str) -> None:
    await api.create("q")
    e = await api.error(TAKE, {"queue_name": "q", "key": "k", "limit": 2, "period": "1s", **fields})
    assert e.status == 400 and e.message.startswith(message), e.message
