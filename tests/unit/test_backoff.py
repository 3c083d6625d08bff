"""querator.backoff, the one exponential back-off, and the callers that share it."""

from __future__ import annotations

import pytest

from querator import backoff
from querator.client import Retries
from querator.worker import backoff as policies

FAILURES_IN_A_LONG_OUTAGE = 5_000
"""More failures in a row than a float's exponent holds for a factor of 2 (about 1024)."""


@pytest.mark.parametrize(
    ("failures", "first_s", "cap_s", "factor", "expected_s"),
    [
        (0, 1.0, 60.0, 2.0, 1.0),  # before any failure: the first wait
        (1, 1.0, 60.0, 2.0, 1.0),
        (2, 1.0, 60.0, 2.0, 2.0),
        (3, 1.0, 60.0, 2.0, 4.0),
        (7, 1.0, 60.0, 2.0, 60.0),  # 64 capped
        (3, 0.5, 10.0, 1.5, 1.125),
        (9, 3.0, 60.0, 1.0, 3.0),  # a factor of 1: the same wait every time
        (2, 0.0, 60.0, 2.0, 0.0),
        (FAILURES_IN_A_LONG_OUTAGE, 0.1, 10.0, 2.0, 10.0),  # the cap, not an OverflowError
    ],
)
def test_bound(failures: int, first_s: float, cap_s: float, factor: float, expected_s: float) -> None:
    assert backoff.bound_s(failures, first_s, cap_s, factor) == expected_s


@pytest.mark.parametrize(("jitter", "lowest_share"), [(1.0, 0.0), (0.5, 0.5), (0.25, 0.75)])
def test_jitter_draws_in_the_top_share_of_the_bound(jitter: float, lowest_share: float) -> None:
    waits = [backoff.wait_s(4, 1.0, 60.0, jitter=jitter) for _ in range(500)]
    assert all(8.0 * lowest_share <= w <= 8.0 for w in waits)
    assert len(set(waits)) > 1


def test_no_jitter_waits_the_bound() -> None:
    assert backoff.wait_s(4, 1.0, 60.0, jitter=0.0) == 8.0


def test_the_client_retries_wait_below_their_bound() -> None:
    retries = Retries(attempts=4, first_s=0.1, max_s=2.0)
    assert all(0.0 <= retries.wait_s(2) <= 0.2 for _ in range(200))
    assert retries.wait_s(FAILURES_IN_A_LONG_OUTAGE) <= 2.0


@pytest.mark.parametrize("failures", [1, 3, 30, FAILURES_IN_A_LONG_OUTAGE])
def test_a_task_policy_waits_at_least_half_its_bound(failures: int) -> None:
    """The worker's policy (and so a durable step's) after any number of failures: before the shared
    back-off, a task failed thousands of times raised OverflowError instead of waiting."""
    policy = policies.exponential(first="1s", cap="10m")
    bound_s = backoff.bound_s(failures, 1.0, 600.0)
    assert all(bound_s / 2 <= policy(failures) <= bound_s for _ in range(100))
    assert policies.exponential(first="1s", cap="10m", jitter=False)(failures) == bound_s
