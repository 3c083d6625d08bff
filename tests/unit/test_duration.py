"""Go ``time.ParseDuration`` / ``Duration.String`` compatibility; expected values were produced by Go 1.26."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from querator.duration import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    SECOND,
    DurationError,
    format_duration,
    parse_duration,
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

PARSE_OK: list[tuple[str, int]] = [
    # Go's own parseDurationTests
    ("0", 0),
    ("5s", 5 * SECOND),
    ("30s", 30 * SECOND),
    ("1478s", 1478 * SECOND),
    ("-5s", -5 * SECOND),
    ("+5s", 5 * SECOND),
    ("-0", 0),
    ("+0", 0),
    ("5.0s", 5 * SECOND),
    ("5.6s", 5600 * MILLISECOND),
    ("5.s", 5 * SECOND),
    (".5s", 500 * MILLISECOND),
    ("1.0s", SECOND),
    ("1.00s", SECOND),
    ("1.004s", 1004 * MILLISECOND),
    ("1.0040s", 1004 * MILLISECOND),
    ("100.00100s", 100001 * MILLISECOND),
    ("10ns", 10),
    ("11us", 11 * MICROSECOND),
    ("12\u00b5s", 12 * MICROSECOND),
    ("12\u03bcs", 12 * MICROSECOND),
    ("13ms", 13 * MILLISECOND),
    ("14s", 14 * SECOND),
    ("15m", 15 * MINUTE),
    ("16h", 16 * HOUR),
    ("3h30m", 3 * HOUR + 30 * MINUTE),
    ("10.5s4m", 4 * MINUTE + 10500 * MILLISECOND),
    ("-2m3.4s", -(2 * MINUTE + 3400 * MILLISECOND)),
    ("1h2m3s4ms5us6ns", 3723004005006),
    ("39h9m14.425s", 140954425000000),
    ("52763797000ns", 52763797000),
    ("0.3333333333333333333h", 20 * MINUTE),
    ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", INT64_MAX),
    ("9223372036854775.807us", INT64_MAX),
    ("9223372036s854ms775us807ns", INT64_MAX),
    ("-9223372036854775808ns", INT64_MIN),
    ("-9223372036854775.808us", INT64_MIN),
    ("-9223372036s854ms775us808ns", INT64_MIN),
    ("-2562047h47m16.854775808s", INT64_MIN),
    ("0.100000000000000000000h", 6 * MINUTE),
    ("0.830103483285477580700h", 2988372539827),
    # the examples this project relies on
    ("1.5h", 90 * MINUTE),
    ("1.s", SECOND),
    ("1.0000000001s", SECOND),  # the fraction is scaled in float64, as Go does, and rounds away
    ("1\u00b5s", MICROSECOND),
    ("1\u03bcs", MICROSECOND),
    ("1us", MICROSECOND),
    ("300ms", 300 * MILLISECOND),
    ("2ns", 2),
    ("1.5\u00b5s", 1500),
    ("2m30.25s", 150250 * MILLISECOND),
    ("1.234567891s", 1234567891),
    ("24h0m0s", 24 * HOUR),
    ("1h0m0s", HOUR),
    ("10m0s", 10 * MINUTE),
    ("1m0s", MINUTE),
    ("5m", 5 * MINUTE),
    ("900ms", 900 * MILLISECOND),
    # Go's edge behaviour: precision loss, leading zeros, uint64 wrap-around of the running sum
    ("0.0000000000000000000001h", 0),
    ("1.00000000000000000009h", HOUR),
    ("1.9999999999999999999999h", 2 * HOUR),
    ("00000000000000000000001s", SECOND),
    ("0." + "0" * 400 + "1s", 0),
    ("0" * 5000 + "1s", SECOND),
    ("9223372036854775807.5ns", INT64_MAX),
    ("9223372036854775808ns9223372036854775808ns", 0),
]

PARSE_ERRORS: list[tuple[str, str]] = [
    ("foo", 'time: invalid duration "foo"'),
    ("", 'time: invalid duration ""'),
    ("1", 'time: missing unit in duration "1"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("-1d", 'time: unknown unit "d" in duration "-1d"'),
    ("-", 'time: invalid duration "-"'),
    ("+", 'time: invalid duration "+"'),
    (".s", 'time: invalid duration ".s"'),
    ("-.s", 'time: invalid duration "-.s"'),
    ("+.s", 'time: invalid duration "+.s"'),
    (".", 'time: invalid duration "."'),
    ("s", 'time: invalid duration "s"'),
    (" 1s", 'time: invalid duration " 1s"'),
    ("1.5", 'time: missing unit in duration "1.5"'),
    (".5", 'time: missing unit in duration ".5"'),
    ("3", 'time: missing unit in duration "3"'),
    ("1.5.5s", 'time: missing unit in duration "1.5.5s"'),
    ("1s-2s", 'time: unknown unit "s-" in duration "1s-2s"'),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
    ("1 s", 'time: unknown unit " s" in duration "1 s"'),
    ("1s ", 'time: unknown unit "s " in duration "1s "'),
    ("1hh", 'time: unknown unit "hh" in duration "1hh"'),
    ("1.5sec", 'time: unknown unit "sec" in duration "1.5sec"'),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
    ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
    ("3000000h", 'time: invalid duration "3000000h"'),
    ("1" * 5000 + "s", 'time: invalid duration "' + "1" * 5000 + 's"'),
    # Go's time package quotes with its own helper: " and \ are escaped, every non-ASCII or control
    # byte is written as \xNN (printable non-ASCII is not kept, unlike strconv.Quote).
    ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s"'),
    ("x\\y", 'time: invalid duration "x\\\\y"'),
    ("1\u00b5", 'time: unknown unit "\\xc2\\xb5" in duration "1\\xc2\\xb5"'),
    ("1\u00e9", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ("1\x00s", 'time: unknown unit "\\x00s" in duration "1\\x00s"'),
    ("1\x7fs", 'time: unknown unit "\x7fs" in duration "1\x7fs"'),
    ("\u0663s", 'time: invalid duration "\\xd9\\xa3s"'),  # a non-ASCII digit is not a digit
    ("1\ufffds", 'time: unknown unit "\\xef\\xbf\\xbds" in duration "1\\xef\\xbf\\xbds"'),
    ("1\udcffs", 'time: unknown unit "\\xffs" in duration "1\\xffs"'),  # surrogateescape'd raw byte
]

FORMAT: list[tuple[int, str]] = [
    (0, "0s"),
    (1, "1ns"),
    (2, "2ns"),
    (999, "999ns"),
    (1000, "1\u00b5s"),
    (1100, "1.1\u00b5s"),
    (1500, "1.5\u00b5s"),
    (999_999, "999.999\u00b5s"),
    (MILLISECOND, "1ms"),
    (2_200_000, "2.2ms"),
    (300 * MILLISECOND, "300ms"),
    (999_999_999, "999.999999ms"),
    (SECOND, "1s"),
    (SECOND + 1, "1.000000001s"),
    (1500 * MILLISECOND, "1.5s"),
    (3300 * MILLISECOND, "3.3s"),
    (1234567891, "1.234567891s"),
    (59_999_999_999, "59.999999999s"),
    (MINUTE, "1m0s"),
    (4 * MINUTE + 5 * SECOND, "4m5s"),
    (4 * MINUTE + 5001 * MILLISECOND, "4m5.001s"),
    (150250 * MILLISECOND, "2m30.25s"),
    (8 * MINUTE + 1, "8m0.000000001s"),
    (10 * MINUTE, "10m0s"),
    (HOUR - 1, "59m59.999999999s"),
    (HOUR, "1h0m0s"),
    (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND, "5h6m7.001s"),
    (24 * HOUR, "24h0m0s"),
    (INT64_MAX, "2562047h47m16.854775807s"),
    (-1, "-1ns"),
    (-1500, "-1.5\u00b5s"),
    (-90 * SECOND, "-1m30s"),
    (INT64_MIN, "-2562047h47m16.854775808s"),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_OK)
def test_parse_matches_go(text: str, expected: int) -> None:
    assert parse_duration(text) == expected
    # again, to go through the memo of recent parses
    assert parse_duration(text) == expected


@pytest.mark.parametrize(("text", "message"), PARSE_ERRORS)
def test_parse_errors_match_go(text: str, message: str) -> None:
    for _ in range(2):  # failures must not be remembered as successes
        with pytest.raises(DurationError) as info:
            parse_duration(text)
        assert str(info.value) == message


def test_duration_error_is_value_error() -> None:
    with pytest.raises(ValueError, match=r'^time: invalid duration "foo"$'):
        parse_duration("foo")


@pytest.mark.parametrize(("ns", "text"), FORMAT)
def test_format_matches_go(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@pytest.mark.parametrize("ns", [INT64_MAX + 1, INT64_MIN - 1, 1 << 100])
def test_format_rejects_values_outside_int64(ns: int) -> None:
    with pytest.raises(ValueError):
        format_duration(ns)


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


@given(st.integers(min_value=-(10**13), max_value=10**13))
def test_round_trip_for_everyday_durations(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


_DURATION_ALPHABET = st.sampled_from(list('0123456789.+-nsumh d\u00b5\u03bc\u00e9"\\\x00'))


@given(st.text(_DURATION_ALPHABET, max_size=12) | st.text(max_size=12))
def test_parse_returns_int64_or_raises_duration_error(text: str) -> None:
    try:
        value = parse_duration(text)
    except DurationError as exc:
        assert str(exc).startswith("time: ")
        assert str(exc).isascii()
    else:
        assert INT64_MIN <= value <= INT64_MAX


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10_000),
            st.sampled_from(["ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h"]),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["", "+", "-"]),
)
def test_parse_sums_integer_terms(terms: list[tuple[int, str]], sign: str) -> None:
    units = {"ns": 1, "us": MICROSECOND, "\u00b5s": MICROSECOND, "\u03bcs": MICROSECOND}
    units |= {"ms": MILLISECOND, "s": SECOND, "m": MINUTE, "h": HOUR}
    text = sign + "".join(f"{n}{unit}" for n, unit in terms)
    total = sum(n * units[unit] for n, unit in terms)
    assert parse_duration(text) == (-total if sign == "-" else total)
