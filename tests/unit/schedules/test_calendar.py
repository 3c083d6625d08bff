"""The calendar rules of schedules (docs/schedules.md): ticks in a time zone through daylight saving
time, the catch-up policies, jitter. Pure: every function takes ``now``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from querator.clock import MICROS, from_datetime
from querator.errors import InvalidOption
from querator.schedules import (
    ALL,
    LATE_AFTER_US,
    ONE,
    SKIP,
    Calendar,
    Timing,
    jitter_of,
    plan,
    tick_time,
)
from querator.schedules import _calendar as calendar_module

S = MICROS


def utc(*fields: int) -> int:
    return from_datetime(datetime(*fields, tzinfo=UTC))  # type: ignore[misc]


def times(ticks: list[int]) -> list[str]:
    return [tick_time(t) for t in ticks]


def timing(cron: str, catch_up: str = ALL, limit: int = 100, jitter_us: int = 0, zone: str = "UTC") -> Timing:
    return Timing("s", Calendar(cron, zone), catch_up, limit, jitter_us)


# -- parsing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "message"),
    [
        ("61 * * * *", "UTC", "cron is invalid; '61 * * * *': Bad minute"),
        ("* * *", "UTC", "cron is invalid; '* * *' has 3 fields, expected 5 (minute hour day month weekday)"),
        ("", "UTC", "cron is invalid; '' has 0 fields"),
        ("* * * * * * *", "UTC", "has 7 fields"),
        ("* * * * *", "Mars/Olympus", "time zone is invalid; 'Mars/Olympus' is not a known IANA time zone"),
        ("* * * * *", "", "time zone is invalid; '' is not a known IANA time zone"),
        ("* * * * *", "../etc/passwd", "time zone is invalid"),
        ("* * * * *", "localtime", "time zone is invalid; 'localtime' is not a known IANA time zone"),
        ("* * * * *", "a" * 5000, "time zone is invalid; '(unprintable)' is not a known IANA time zone"),
        ("* * * * *", "UTC\x00", "time zone is invalid; '(unprintable)' is not a known IANA time zone"),
        ("* " * 200, "UTC", "cron is invalid; cannot be longer than 256 characters"),
    ],
)
def test_invalid_calendars_are_refused(cron: str, zone: str, message: str) -> None:
    with pytest.raises(InvalidOption) as e:
        Calendar(cron, zone)
    assert message in e.value.message


def test_six_fields_put_seconds_first() -> None:
    calendar = Calendar("*/15 * * * * *", "UTC")
    assert times(calendar.ticks(utc(2026, 1, 1), utc(2026, 1, 1, 0, 1), 10)) == [
        "2026-01-01T00:00:15Z",
        "2026-01-01T00:00:30Z",
        "2026-01-01T00:00:45Z",
        "2026-01-01T00:01:00Z",
    ]


def test_ticks_are_after_and_up_to_until() -> None:
    calendar = Calendar("* * * * *", "UTC")
    assert calendar.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 1)
    assert calendar.next_after(utc(2026, 1, 1) + 1) == utc(2026, 1, 1, 0, 1)
    assert times(calendar.ticks(utc(2026, 1, 1), utc(2026, 1, 1, 0, 3), 10)) == [
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:02:00Z",
        "2026-01-01T00:03:00Z",
    ]
    # Only the newest `limit`, without walking every tick of a long downtime.
    week = 7 * 24 * 3600 * S
    newest = Calendar("* * * * * *", "UTC").ticks(utc(2026, 1, 1) - week, utc(2026, 1, 1), 3)
    assert times(newest) == ["2025-12-31T23:59:58Z", "2025-12-31T23:59:59Z", "2026-01-01T00:00:00Z"]


def test_a_day_that_never_comes_is_refused() -> None:
    with pytest.raises(InvalidOption, match="cron is invalid; '0 0 30 2 \\*': Bad day-of-month"):
        Calendar("0 0 30 2 *", "UTC")


# -- daylight saving time (Europe/Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00) --------


def test_a_local_time_skipped_in_spring_fires_once_at_the_shift() -> None:
    calendar = Calendar("30 2 * * *", "Europe/Berlin")
    ticks = calendar.ticks(utc(2026, 3, 27), utc(2026, 3, 31), 10)
    # 02:30 CET, then the shift itself (03:00 CEST = 01:00 UTC), then 02:30 CEST.
    assert times(ticks) == [
        "2026-03-27T01:30:00Z",
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
    ]


def test_a_local_time_repeated_in_autumn_fires_once() -> None:
    calendar = Calendar("30 2 * * *", "Europe/Berlin")
    ticks = calendar.ticks(utc(2026, 10, 24), utc(2026, 10, 27), 10)
    # The first 02:30 (CEST, 00:30 UTC) only, not the second (CET, 01:30 UTC).
    assert times(ticks) == ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]


def test_frequent_jobs_follow_real_time_through_both_shifts() -> None:
    calendar = Calendar("*/30 * * * *", "Europe/Berlin")
    spring = calendar.ticks(utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 2, 0), 10)
    assert times(spring) == [
        "2026-03-29T00:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-29T01:30:00Z",
        "2026-03-29T02:00:00Z",
    ]
    autumn = calendar.ticks(utc(2026, 10, 24, 23, 0), utc(2026, 10, 25, 2, 0), 10)
    # Every real half hour, the repeated local hour included: six ticks, each instant once.
    assert times(autumn) == [
        "2026-10-24T23:30:00Z",
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-25T02:00:00Z",
    ]


def test_a_long_catch_up_across_a_shift_sees_every_tick_once() -> None:
    calendar = Calendar("*/30 * * * *", "Europe/Berlin")
    ticks = calendar.ticks(utc(2026, 10, 24), utc(2026, 10, 26), 2)
    assert times(ticks) == ["2026-10-25T23:30:00Z", "2026-10-26T00:00:00Z"]
    everything = calendar.ticks(utc(2026, 10, 24), utc(2026, 10, 26), 1000)
    assert len(everything) == len(set(everything)) == 2 * 48  # 48 real hours, the repeated one included


# -- catch-up policies -----------------------------------------------------------------------------------

START = utc(2026, 1, 1, 12)


def test_on_time_ticks_fire_under_every_policy() -> None:
    for policy in (SKIP, ONE, ALL):
        now = START + 2 * S
        found = plan(timing("* * * * * *", policy), START, now)
        assert times(found.fire) == ["2026-01-01T12:00:01Z", "2026-01-01T12:00:02Z"], policy
        assert found.passed == now
        assert found.next_at == now + S


def test_after_a_downtime_skip_fires_none_of_the_missed_ticks() -> None:
    now = START + 60 * S
    found = plan(timing("*/20 * * * * *", SKIP), START - 60 * S, now)
    assert found.fire == [now]  # 12:01:00 is on time; 11:59:20 .. 12:00:40 were missed
    assert found.passed == now


def test_after_a_downtime_one_fires_the_newest_missed_tick() -> None:
    now = START + 65 * S
    found = plan(timing("*/20 * * * * *", ONE), START - 60 * S, now)
    assert times(found.fire) == ["2026-01-01T12:00:40Z", "2026-01-01T12:01:00Z"]
    found = plan(timing("*/20 * * * * *", ONE), START - 60 * S, now + LATE_AFTER_US)
    assert times(found.fire) == ["2026-01-01T12:01:00Z"]
    assert found.passed == START + 60 * S


def test_after_a_downtime_all_fires_the_newest_up_to_the_limit() -> None:
    now = START + 60 * S
    found = plan(timing("*/20 * * * * *", ALL, limit=4), START - 60 * S, now)
    assert times(found.fire) == [
        "2026-01-01T12:00:00Z",
        "2026-01-01T12:00:20Z",
        "2026-01-01T12:00:40Z",
        "2026-01-01T12:01:00Z",
    ]
    everything = plan(timing("*/20 * * * * *", ALL, limit=100), START - 60 * S, now)
    assert len(everything.fire) == 6 and everything.passed == now


def test_nothing_due_says_when_to_look_again() -> None:
    found = plan(timing("0 * * * *", ALL), START, START + 5 * S)
    assert found.fire == [] and found.passed == 0
    assert found.next_at == START + 3600 * S


def test_a_clock_that_jumped_back_fires_nothing_again() -> None:
    """After the last tick fired, time went back an hour: the ticks up to the last one stay done."""
    last = START + 10 * S
    found = plan(timing("* * * * * *"), last, last - 3600 * S)
    assert found.fire == [] and found.passed == 0
    assert found.next_at == last + S


# -- jitter ----------------------------------------------------------------------------------------------


def test_jitter_is_within_bounds_and_the_same_for_a_tick_everywhere() -> None:
    delays = [jitter_of("s", START + n * S, 5 * S) for n in range(1000)]
    assert all(0 <= d < 5 * S for d in delays)
    assert len(set(delays)) > 900  # spread, not one value
    assert delays == [jitter_of("s", START + n * S, 5 * S) for n in range(1000)]
    assert jitter_of("other", START, 5 * S) != jitter_of("s", START, 5 * S)
    assert jitter_of("s", START, 0) == 0


def test_a_jittered_tick_fires_after_its_delay_and_holds_back_later_ones() -> None:
    jitter_us = 30 * S
    t = timing("* * * * *", ALL, jitter_us=jitter_us)
    first = START + 60 * S
    delay = jitter_of("s", first, jitter_us)
    assert plan(t, START, first + delay - 1).fire == []
    assert plan(t, START, first + delay - 1).next_at == first + delay
    assert plan(t, START, first + delay).fire == [first]


# -- rare and extreme calendars ----------------------------------------------------------------------------

RARE_CRONS = (
    "0 0 29 2 *",
    "0 0 29 2 1",
    "0 0 0 29 2 *",
    "59 59 23 31 12 *",
    "59 23 31 12 *",
    "0 0 1 1 *",
    "0 0 L 2 *",
    "0 0 * * 5#5",
    "* * * * *",
)
RARE_ZONES = ("UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Berlin")
INSTANTS = (
    utc(2026, 1, 1, 12),
    utc(2027, 12, 31, 23, 59, 59),
    utc(2028, 2, 29),
    utc(2099, 12, 31, 23, 59),
    utc(9999, 12, 30),
    utc(1, 1, 2),
    utc(1970, 1, 1),
)


@pytest.mark.parametrize("zone", RARE_ZONES)
@pytest.mark.parametrize("cron", RARE_CRONS)
def test_a_valid_calendar_never_raises_near_the_ends_of_time(cron: str, zone: str) -> None:
    """A leap-day cron walked backwards reached year 1 and raised OverflowError, which stopped every
    schedule of the node: every valid expression is planned at any instant, its walks end at the
    ends of ``datetime``."""
    calendar = Calendar(cron, zone)
    t = Timing("s", calendar, ALL, 1000, 0)
    for now in INSTANTS:
        for after in (now - 5000 * 24 * 3600 * S, now - 3600 * S, now):
            found = calendar.ticks(after, now, 1000)
            assert found == sorted(set(found)) and all(after < tick <= now for tick in found)
            upcoming = calendar.next_after(now)
            assert upcoming is None or upcoming > now
            result = plan(t, after, now)
            assert result.fire == found and (result.next_at is None or result.next_at > now)


def test_a_leap_day_cron_is_planned_on_its_days() -> None:
    calendar = Calendar("0 0 29 2 *", "UTC")
    assert times(calendar.ticks(utc(2026, 1, 1), utc(2036, 3, 1), 1000)) == [
        "2028-02-29T00:00:00Z",
        "2032-02-29T00:00:00Z",
        "2036-02-29T00:00:00Z",
    ]
    assert times(calendar.ticks(utc(2026, 1, 1), utc(2036, 3, 1), 2)) == [
        "2032-02-29T00:00:00Z",
        "2036-02-29T00:00:00Z",
    ]
    assert tick_time(calendar.next_after(utc(2026, 1, 1)) or 0) == "2028-02-29T00:00:00Z"


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 1 7 *", "30 6 * * *"])
def test_nothing_due_costs_one_step_of_the_calendar(cron: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking at a schedule with nothing due walked 1000 ticks backwards (years of a yearly cron, the
    whole history of a leap-day one) every second: now it looks at the next tick only."""
    steps = count_steps(monkeypatch)
    calendar = Calendar(cron, "Europe/Berlin")
    found = plan(Timing("s", calendar, ONE, 0, 0), START, START + 10 * S)
    assert found.fire == [] and found.next_at is not None
    assert steps == [1, 1]  # the first tick after START, then the next one after now


def count_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ticks each walk of the calendar went through, one entry per walk."""
    steps: list[int] = []
    walk = calendar_module._walk

    def counted(*args: Any, **kwargs: Any) -> Iterator[int]:
        steps.append(0)
        n = len(steps) - 1
        for tick in walk(*args, **kwargs):
            steps[n] += 1
            yield tick

    monkeypatch.setattr(calendar_module, "_walk", counted)
    return steps


def test_a_long_downtime_walks_back_only_the_newest_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = count_steps(monkeypatch)
    calendar = Calendar("* * * * *", "UTC")
    found = calendar.ticks(START - 365 * 24 * 3600 * S, START, 10)
    assert len(found) == 10 and found[-1] == START
    # forward until more than 10 are found, back 10, forward over the margin before the oldest
    assert steps[0] == 11 and steps[1] == 10 and steps[2] <= 10 + 3 * 60 + 1
