"""KSUID codec and generator: segmentio/ksuid compatibility, ordering and monotonicity."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from querator.ksuid import (
    KSUID_EPOCH,
    KSUID_MAX,
    KSUID_MAX_VALUE,
    KSUID_MIN,
    KsuidError,
    KsuidGenerator,
    format_ksuid,
    is_ksuid,
    ksuid_prev,
    ksuid_timestamp,
    parse_ksuid,
)

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SIZE_ERROR = "Valid encoded KSUIDs are 27 characters"
VALUE_ERROR = (
    "Valid encoded KSUIDs are bounded by 000000000000000000000000000 and aWgEPTl1tmebfsQzFP4bxwgy80V"
)
PAYLOAD_BITS = 128

# From segmentio/ksuid's README (`ksuid -f inspect`): string, raw bytes, timestamp field.
VECTORS: list[tuple[str, str, int]] = [
    ("0ujtsYcgvSTl8PAuAdqWYSMnLOv", "0669F7EFB5A1CD34B5F99D1154FB6853345C9735", 107608047),
    ("0ujzPyRiIAffKhBux4PvQdDqMHY", "066A029C73FC1AA3B2446246D6E89FCD909E8FE8", 107610780),
]

values = st.integers(min_value=0, max_value=KSUID_MAX_VALUE)


def reference_encode(value: int) -> str:
    """Textbook base62, one digit at a time, to check the table-driven codec against."""
    digits = []
    for _ in range(27):
        value, digit = divmod(value, 62)
        digits.append(ALPHABET[digit])
    assert value == 0
    return "".join(reversed(digits))


def test_known_bounds() -> None:
    assert parse_ksuid(KSUID_MIN) == 0
    assert format_ksuid(0) == "000000000000000000000000000"
    assert parse_ksuid(KSUID_MAX) == (1 << 160) - 1 == KSUID_MAX_VALUE
    assert format_ksuid(KSUID_MAX_VALUE) == "aWgEPTl1tmebfsQzFP4bxwgy80V"
    assert KSUID_EPOCH == 1_400_000_000


@pytest.mark.parametrize(("text", "raw", "timestamp"), VECTORS)
def test_segmentio_vectors(text: str, raw: str, timestamp: int) -> None:
    value = int(raw, 16)
    assert parse_ksuid(text) == value
    assert format_ksuid(value) == text
    assert value >> PAYLOAD_BITS == timestamp
    assert ksuid_timestamp(text) == timestamp + KSUID_EPOCH
    assert is_ksuid(text)


def test_readme_example_timestamp() -> None:
    assert ksuid_timestamp("0ujtsYcgvSTl8PAuAdqWYSMnLOv") == 1507608047


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", SIZE_ERROR),
        ("0", SIZE_ERROR),
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO", SIZE_ERROR),  # 26
        ("0ujtsYcgvSTl8PAuAdqWYSMnLOv0", SIZE_ERROR),  # 28
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO\u00e9", SIZE_ERROR),  # 27 characters but 28 UTF-8 bytes
        ("\u00e9ujtsYcgvSTl8PAuAdqWYSMnLO", VALUE_ERROR),  # 26 characters, 27 UTF-8 bytes as Go counts
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO-", VALUE_ERROR),
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO ", VALUE_ERROR),
        (" ujtsYcgvSTl8PAuAdqWYSMnLOv", VALUE_ERROR),
        ("0ujtsYcgvSTl8PAuAdqWYSMnLO_", VALUE_ERROR),
        ("aWgEPTl1tmebfsQzFP4bxwgy80W", VALUE_ERROR),  # max + 1
        ("aWgEPTl1tmebfsQzFP4bxwgy810", VALUE_ERROR),
        ("b00000000000000000000000000", VALUE_ERROR),
        ("zzzzzzzzzzzzzzzzzzzzzzzzzzz", VALUE_ERROR),
    ],
)
def test_parse_errors_match_segmentio(text: str, message: str) -> None:
    with pytest.raises(KsuidError) as info:
        parse_ksuid(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)
    assert not is_ksuid(text)


@pytest.mark.parametrize("value", [-1, KSUID_MAX_VALUE + 1])
def test_format_rejects_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        format_ksuid(value)


@given(values)
def test_codec_round_trips_and_matches_reference(value: int) -> None:
    text = format_ksuid(value)
    assert text == reference_encode(value)
    assert len(text) == 27
    assert parse_ksuid(text) == value
    assert is_ksuid(text)


@given(values, values)
def test_string_order_is_value_order(a: int, b: int) -> None:
    assert (format_ksuid(a) < format_ksuid(b)) == (a < b)


@given(st.text(alphabet=st.sampled_from(ALPHABET + "-_ \u00e9"), min_size=25, max_size=28) | st.text())
def test_is_ksuid_agrees_with_parse(text: str) -> None:
    try:
        parse_ksuid(text)
    except KsuidError as exc:
        assert str(exc) in (SIZE_ERROR, VALUE_ERROR)
        assert not is_ksuid(text)
    else:
        assert is_ksuid(text)


@given(st.integers(min_value=1, max_value=KSUID_MAX_VALUE))
def test_prev_is_one_less(value: int) -> None:
    text = format_ksuid(value)
    prev = ksuid_prev(text)
    assert parse_ksuid(prev) == value - 1
    assert prev < text


def test_prev_of_zero_wraps_like_segmentio() -> None:
    assert ksuid_prev(KSUID_MIN) == KSUID_MAX
    assert ksuid_prev("000000000000000000000000001") == KSUID_MIN


def test_prev_rejects_malformed_ids() -> None:
    with pytest.raises(KsuidError):
        ksuid_prev("nope")


def test_generator_ids_carry_the_clock_time() -> None:
    now = 1_700_000_000
    generator = KsuidGenerator(now)
    ids = [generator.next() for _ in range(200)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # a carry out of a random 128-bit payload within 200 steps is a 2**-121 event
    assert all(ksuid_timestamp(i) == now for i in ids)
    assert all(is_ksuid(i) for i in ids)


def test_generator_counts_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\x00" * n)
    generator = KsuidGenerator(KSUID_EPOCH + 5)
    seed = 5 << PAYLOAD_BITS
    # the seed itself is never issued: the first id is seed + 1
    assert [parse_ksuid(generator.next()) for _ in range(300)] == [seed + k for k in range(1, 301)]


def test_generator_carries_into_the_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\xff" * n)
    generator = KsuidGenerator(KSUID_EPOCH + 7)
    first = generator.next()
    assert parse_ksuid(first) == 8 << PAYLOAD_BITS
    assert ksuid_timestamp(first) == KSUID_EPOCH + 8


def test_generator_timestamp_wraps_like_go() -> None:
    assert ksuid_timestamp(KsuidGenerator(KSUID_EPOCH).next()) == KSUID_EPOCH
    # Go's uint32(t - epoch) wraps for times before the epoch
    assert ksuid_timestamp(KsuidGenerator(KSUID_EPOCH - 1).next()) == KSUID_EPOCH + (1 << 32) - 1


# With the clock at the epoch a seed is at most 2**128 - 1, so any id from there up is ahead of it.
@given(st.integers(min_value=(1 << PAYLOAD_BITS) - 1, max_value=KSUID_MAX_VALUE), st.integers(1, 130))
def test_generator_after_an_id_ahead_of_the_clock(after_value: int, count: int) -> None:
    """A later id than the seed (clock went back, restart): counting resumes just past it."""
    after = format_ksuid(after_value)
    generator = KsuidGenerator(KSUID_EPOCH, after=after)
    previous = after
    for k in range(1, count + 1):
        expected = after_value + k
        if expected > KSUID_MAX_VALUE:
            with pytest.raises(OverflowError):
                generator.next()
            return
        current = generator.next()
        assert parse_ksuid(current) == expected
        assert current > previous
        previous = current


@given(st.integers(min_value=0, max_value=(1_700_000_000 - KSUID_EPOCH) << PAYLOAD_BITS))
def test_generator_after_an_older_id_keeps_its_seed(after_value: int) -> None:
    now = 1_700_000_000
    after = format_ksuid(after_value)
    first = KsuidGenerator(now, after=after).next()
    assert first > after
    assert ksuid_timestamp(first) == now


@given(st.integers(min_value=0, max_value=KSUID_MAX_VALUE), st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_generator_is_strictly_increasing_across_carries(start: int, seconds: int) -> None:
    generator = KsuidGenerator(KSUID_EPOCH + seconds, after=format_ksuid(start))
    previous = format_ksuid(start)
    for _ in range(70):  # more than one base62 digit's worth, so the cached-prefix path rolls over
        try:
            current = generator.next()
        except OverflowError:
            assert parse_ksuid(previous) == KSUID_MAX_VALUE
            return
        assert current > previous
        assert parse_ksuid(current) <= KSUID_MAX_VALUE
        previous = current


def test_generator_stops_at_the_top_of_the_id_space() -> None:
    generator = KsuidGenerator(KSUID_EPOCH, after=format_ksuid(KSUID_MAX_VALUE - 2))
    assert parse_ksuid(generator.next()) == KSUID_MAX_VALUE - 1
    assert generator.next() == KSUID_MAX
    for _ in range(2):
        with pytest.raises(OverflowError):
            generator.next()


def test_generator_rejects_malformed_after() -> None:
    with pytest.raises(KsuidError, match=r"^Valid encoded KSUIDs are 27 characters$"):
        KsuidGenerator(1_700_000_000, after="short")
