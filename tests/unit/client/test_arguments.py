"""What the client's methods accept: durations in Python's types, produce keywords, retry rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from querator.client import ConnectionFailed
from querator.client._arguments import go_duration, new_client_id, produce_items
from querator.client._retries import Retries, transient
from querator.errors import InvalidOption, LeaseTimedOut, RetryRequest, try_again
from querator.wire import messages as m

NO_KEYWORDS = {
    "enqueue_at": None,
    "delay": None,
    "dedup_id": None,
    "kind": "",
    "reference": "",
    "encoding": "",
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1m", "1m"), (timedelta(minutes=1, seconds=30), "1m30s"), (0.25, "250ms"), (90, "1m30s"), ("", "")],
)
def test_durations_are_go_strings_timedeltas_or_seconds(value: timedelta | float, expected: str) -> None:
    assert go_duration(value) == expected


def test_produce_keywords_fill_only_what_an_item_leaves_empty() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    own = m.QueueProduceItem(utf8="own", kind="mine")
    items = produce_items(
        [b"a", own], **{**NO_KEYWORDS, "enqueue_at": at, "dedup_id": ["d1", "d2"], "kind": "email"}
    )
    assert [(i.kind, i.dedup_id, i.enqueue_at) for i in items] == [("email", "d1", at), ("mine", "d2", at)]
    assert items[0].bytes == b"a" and items[1].utf8 == "own"


def test_a_delay_schedules_from_now() -> None:
    [item] = produce_items(["x"], **{**NO_KEYWORDS, "delay": timedelta(hours=1)})
    assert item.enqueue_at is not None and item.enqueue_at > datetime.now(UTC) + timedelta(minutes=59)


@pytest.mark.parametrize(
    "keywords",
    [
        {"enqueue_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 5.0},
        {"dedup_id": "one"},  # for two items
        {"dedup_id": ["only one"]},
    ],
)
def test_produce_refuses_keywords_that_do_not_fit(keywords: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"^produce: "):
        produce_items(["a", "b"], **{**NO_KEYWORDS, **keywords})  # type: ignore[arg-type]


def test_each_call_gets_its_own_client_id() -> None:
    assert new_client_id() != new_client_id()


def test_connection_failed_is_a_connection_error() -> None:
    assert isinstance(ConnectionFailed("connection failed; x"), ConnectionError)


@pytest.mark.parametrize(
    ("error", "idempotent", "again"),
    [
        (LeaseTimedOut(), True, False),  # an answer, not a failure
        (RetryRequest("queue is overloaded"), False, True),  # refused before anything was done
        (try_again(outcome_unknown=True), False, False),  # may have been done
        (try_again(outcome_unknown=True), True, True),
        (ConnectionFailed("connection failed; refused", sent=False), False, True),
        (ConnectionFailed("request timed out; no reply"), False, False),
        (ConnectionFailed("request timed out; no reply"), True, True),
        (InvalidOption("queue does not exist"), True, False),
    ],
)
def test_which_failures_are_tried_again(error: Exception, idempotent: bool, again: bool) -> None:
    assert transient(error, idempotent) is again  # type: ignore[arg-type]


def test_retry_waits_grow_to_their_bound() -> None:
    policy = Retries(attempts=10, first_s=0.1, max_s=0.3)
    assert all(0 <= policy.wait_s(n) <= min(0.3, 0.1 * 2 ** (n - 1)) for n in range(1, 10) for _ in range(20))
    with pytest.raises(ValueError):
        Retries(attempts=0)
