"""``RateLimit``: evenly spaced starts per key (docs/worker.md, "Rate limits")."""

from __future__ import annotations

import pytest

from querator.worker._rate import RateLimit


def test_starts_of_a_key_are_spaced_and_keys_are_apart() -> None:
    rate = RateLimit("4/s")
    assert [rate.reserve("a", 10.0) for _ in range(3)] == [10.0, 10.25, 10.5]
    assert rate.reserve("b", 10.0) == 10.0  # another key: its own slots
    assert rate.reserve("a", 11.0) == 11.0  # a slot in the past is not owed: no burst after a pause
    assert RateLimit("30/m").interval_s == 2.0 and RateLimit("2/h").interval_s == 1800.0


def test_only_keys_with_a_slot_ahead_are_kept() -> None:
    rate = RateLimit("1/s")
    for n in range(2000):
        rate.reserve(f"k{n}", 0.0)
    rate.reserve("late", 100.0)  # every earlier key's slot has passed
    assert len(rate._next_s) <= 1025


@pytest.mark.parametrize("spec", ["10", "0/s", "-1/s", "10/d", "x/s", "1.5/s", ""])
def test_a_malformed_limit_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="is not '<n>/s', '<n>/m' or '<n>/h'"):
        RateLimit(spec)
