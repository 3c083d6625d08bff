"""The calendar of a schedule, pure: which instants are its ticks, which are due now, and which of those
fire under its catch-up policy (docs/schedules.md). No clock and no I/O: every function takes ``now``.

Ticks are whole seconds, as UTC microseconds; a tick is identified by that instant alone, so no rule
here can make one instant two ticks. Local times follow cronsim, which keeps Debian cron's rules for
daylight saving time: a job at a specific local time that falls into the hour skipped in spring fires
once, at the shift; one in the hour repeated in autumn fires once, at its first occurrence; jobs that
run hourly or more often follow real time (every real minute of the repeated hour is a tick of a
``* * * * *`` job, and the skipped hour has none).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from querator.clock import MICROS, from_datetime, to_datetime
from querator.errors import InvalidOption

SKIP: Final = "skip"
ONE: Final = "one"
ALL: Final = "all"
CATCH_UP_POLICIES: Final = (SKIP, ONE, ALL)

LATE_AFTER_US: Final = 10 * MICROS
"""A due tick is *missed* (its catch-up policy decides whether it fires) once it is more than this late;
until then it is on time and fires whatever the policy. Covers a busy node and a slow produce, not a
node that was down."""
MAX_CATCH_UP: Final = 1000
"""The most ticks one look at a schedule considers (``catch_up_limit`` is at most this): after a long
downtime only the newest this many ticks are looked at."""
MAX_CRON: Final = 256
"""Characters of a cron expression (its error messages quote it)."""
DST_MARGIN_US: Final = 3 * 3600 * MICROS
"""How far before the newest ``MAX_CATCH_UP`` ticks the forward walk starts: a reverse walk finds them,
and may disagree with the forward one about a tick near a shift of local time (shifts are < 3 h)."""


class Calendar:
    """A cron expression (5 fields, or 6 with seconds first) in an IANA time zone.

    Raises:
        InvalidOption: the expression or the zone is not valid, or the expression never fires.
    """

    def __init__(self, cron: str, time_zone: str) -> None:
        self.cron = cron
        if time_zone not in _zones():
            shown = time_zone if time_zone.isprintable() and len(time_zone) <= 64 else "(unprintable)"
            raise InvalidOption(f"time zone is invalid; '{shown}' is not a known IANA time zone")
        self.zone = ZoneInfo(time_zone)
        if len(cron) > MAX_CRON:
            raise InvalidOption(f"cron is invalid; cannot be longer than {MAX_CRON} characters")
        fields = cron.split()
        if len(fields) not in (5, 6):
            raise InvalidOption(
                f"cron is invalid; '{cron}' has {len(fields)} fields, expected 5 (minute hour day month "
                "weekday) or 6 (with seconds first)"
            )
        try:
            CronSim(cron, datetime(2000, 1, 1, tzinfo=self.zone))
        except CronSimError as e:
            raise InvalidOption(f"cron is invalid; '{cron}': {e}") from None

    def next_after(self, after_us: int) -> int | None:
        """The first tick strictly after ``after_us``; None when there is none within 50 years."""
        return next(self._forward(after_us), None)

    def ticks(self, after_us: int, until_us: int, limit: int) -> list[int]:
        """The newest ``limit`` ticks in ``(after_us, until_us]``, oldest first.

        Walks forward from ``after_us`` first, so a schedule with nothing due costs one step whatever its
        calendar; only when more than ``limit`` ticks are due (a long downtime) does it walk backwards
        from ``until_us`` to skip the older ones. A reverse walk with nothing to find would cross up to
        ``limit`` gaps of the calendar: four thousand years for a leap-day cron, past year 1.
        """
        if limit <= 0:
            return []
        found = list(itertools.islice(_until(self._forward(after_us), until_us), limit + 1))
        if len(found) <= limit:
            return found
        start_us = after_us
        newest = list(itertools.islice(self._reverse(until_us), limit))
        if len(newest) == limit:
            start_us = max(after_us, newest[-1] - DST_MARGIN_US)
        return list(_until(self._forward(start_us), until_us))[-limit:]

    def _forward(self, after_us: int) -> Iterator[int]:
        return _walk(self.cron, after_us // MICROS, self.zone, reverse=False)

    def _reverse(self, until_us: int) -> Iterator[int]:
        # Reverse walks are strict for a whole second: start one second later to include ``until_us``.
        return _walk(self.cron, until_us // MICROS + 1, self.zone, reverse=True)


def _walk(cron: str, start_s: int, zone: ZoneInfo, reverse: bool) -> Iterator[int]:
    """cronsim's walk from ``start_s`` (whole seconds since the epoch), in UTC microseconds. It ends
    where ``datetime`` does (years 1 and 9999: OverflowError or ValueError from cronsim or the zone
    conversion): a valid expression must never stop the scheduler (a leap-day cron walked backwards
    1000 ticks reaches year 1)."""
    try:
        walk = CronSim(cron, datetime.fromtimestamp(start_s, UTC).astimezone(zone), reverse=reverse)
        for found in walk:
            yield from_datetime(found)
    except (OverflowError, ValueError):
        return


def _until(ticks: Iterator[int], until_us: int) -> Iterator[int]:
    return itertools.takewhile(lambda tick: tick <= until_us, ticks)


@functools.cache
def _zones() -> frozenset[str]:
    """The IANA zone names this Python knows (the system's database, else the tzdata package); read once,
    so that no file name a client sends is ever opened. Not ``localtime``, which some systems list: it is
    the server's own zone, not a name that means the same everywhere."""
    return frozenset(available_timezones() - {"localtime"})


def jitter_of(name: str, tick_us: int, jitter_us: int) -> int:
    """How long after its time a tick fires: in ``[0, jitter_us)``, the same on every node and after a
    restart (a hash of the schedule and the tick), so a repeated tick waits as long as the first try."""
    if jitter_us <= 0:
        return 0
    digest = hashlib.blake2b(f"{name}\0{tick_us}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % jitter_us


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do for a schedule now."""

    fire: list[int]
    """The ticks to produce an item for, oldest first."""
    passed: int
    """The newest tick due now, fired or passed over (0: none): its ``last_tick`` once ``fire`` is done."""
    next_at: int | None
    """When to look again: the firing time of the first tick not yet due (None: it never fires)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """A schedule's settings the plan depends on."""

    name: str
    calendar: Calendar
    catch_up: str
    catch_up_limit: int
    jitter_us: int


def plan(timing: Timing, after_us: int, now_us: int) -> Plan:
    """The ticks after ``after_us`` (the later of the last tick and the schedule's start) that fire now.

    A tick is due once its time plus its jitter has come; ticks are dealt with in order, so a tick waits
    for every earlier one (the last tick only ever moves forward, and nothing before it fires again). Due
    ticks more than ``LATE_AFTER_US`` late were missed: ``skip`` fires none of them, ``one`` the newest,
    ``all`` each of the newest ``catch_up_limit``.
    """
    limit = timing.catch_up_limit if timing.catch_up == ALL else MAX_CATCH_UP
    due: list[int] = []
    next_at: int | None = None
    for tick in timing.calendar.ticks(after_us, now_us, limit):
        fires_at = tick + jitter_of(timing.name, tick, timing.jitter_us)
        if fires_at > now_us:
            next_at = fires_at
            break
        due.append(tick)
    if next_at is None:
        upcoming = timing.calendar.next_after(max([after_us, now_us, *due]))
        if upcoming is not None:
            next_at = upcoming + jitter_of(timing.name, upcoming, timing.jitter_us)
    # With jitter, a later tick can be later than an earlier one: each is judged on its own.
    missed = [t for t in due if now_us - t - jitter_of(timing.name, t, timing.jitter_us) > LATE_AFTER_US]
    on_time = [t for t in due if t not in missed]
    if timing.catch_up == ALL:
        fire = due
    elif timing.catch_up == ONE:
        fire = sorted(missed[-1:] + on_time)
    else:
        fire = on_time
    return Plan(fire=fire, passed=due[-1] if due else 0, next_at=next_at)


def tick_time(tick_us: int) -> str:
    """A tick as RFC 3339 UTC text, as dedup ids and references carry it."""
    return to_datetime(tick_us).strftime("%Y-%m-%dT%H:%M:%SZ")
