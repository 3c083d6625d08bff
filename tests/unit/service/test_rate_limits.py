"""``RateLimits``: the next free start of each key, kept by its owner (docs/extensions.md, "Rate limits")."""

from __future__ import annotations

import pytest

from querator.errors import RetryRequest
from querator.service import _rate_limits
from querator.service._rate_limits import RateLimits


def test_only_keys_with_a_start_ahead_are_kept_and_their_number_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_rate_limits, "MAX_KEYS", 3)
    limits = RateLimits()
    for key in "abc":
        assert limits.take("q", key, 1000, 0, 0).granted
    with pytest.raises(RetryRequest, match="this node holds 3 rate limit keys with a start ahead"):
        limits.take("q", "d", 1000, 0, 500)
    assert not limits.take("q", "a", 1000, 0, 500).granted  # a known key is still answered
    assert limits.take("q", "d", 1000, 0, 1000).granted  # the others' starts passed: dropped
    assert len(limits) == 1
    assert limits.take("other", "d", 1000, 0, 1000).granted  # queues are apart
