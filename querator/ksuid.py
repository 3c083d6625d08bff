"""KSUID item ids, compatible with segmentio/ksuid: this module owns id generation, parsing and ordering.

A KSUID is 20 bytes, a big-endian uint32 of seconds since ``KSUID_EPOCH`` followed by a 16-byte payload,
written as 27 base62 characters (``0-9A-Za-z``, left-padded with ``0``). Fixed width plus an alphabet in
ASCII order make string order equal numeric order, so here an id's value is simply a 160-bit ``int``.
Partitions seed one id when they open and then count upwards from it (``KsuidGenerator``), which keeps ids
strictly increasing within a partition so that id order is FIFO order. Parse errors carry the Go
library's texts because the reference server embeds them in its replies.
"""

from __future__ import annotations

import os

__all__ = [
    "KSUID_EPOCH",
    "KSUID_LENGTH",
    "KSUID_MAX",
    "KSUID_MAX_VALUE",
    "KSUID_MIN",
    "KsuidError",
    "KsuidGenerator",
    "format_ksuid",
    "is_ksuid",
    "ksuid_prev",
    "ksuid_timestamp",
    "parse_ksuid",
]

KSUID_EPOCH = 1_400_000_000
KSUID_LENGTH = 27
KSUID_MIN = "000000000000000000000000000"
KSUID_MAX = "aWgEPTl1tmebfsQzFP4bxwgy80V"
KSUID_MAX_VALUE = (1 << 160) - 1

_PAYLOAD_BITS = 128
_TIMESTAMP_MASK = (1 << 32) - 1
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE = 62

_ERR_SIZE = f"Valid encoded KSUIDs are {KSUID_LENGTH} characters"
_ERR_VALUE = f"Valid encoded KSUIDs are bounded by {KSUID_MIN} and {KSUID_MAX}"

# Python pays per operation, not per bit, so the codec works two digits at a time and splits the
# 27 digits into three 9-digit groups whose arithmetic stays on small ints.
_PAIR_BASE = _BASE * _BASE
_GROUP_BASE = _BASE**9
_DIGIT_VALUE: dict[str, int] = {ch: i for i, ch in enumerate(_ALPHABET)}
_PAIR_TEXT: tuple[str, ...] = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
_PAIR_VALUE: dict[str, int] = {pair: i for i, pair in enumerate(_PAIR_TEXT)}


class KsuidError(ValueError):
    """Text that is not a KSUID; ``str()`` is segmentio/ksuid's error text for the same input."""


def _encode_group(value: int) -> str:
    rest, d0 = divmod(value, _PAIR_BASE)
    rest, d1 = divmod(rest, _PAIR_BASE)
    rest, d2 = divmod(rest, _PAIR_BASE)
    rest, d3 = divmod(rest, _PAIR_BASE)
    return _ALPHABET[rest] + _PAIR_TEXT[d3] + _PAIR_TEXT[d2] + _PAIR_TEXT[d1] + _PAIR_TEXT[d0]


def _encode(value: int) -> str:
    high, low = divmod(value, _GROUP_BASE)
    top, middle = divmod(high, _GROUP_BASE)
    return _encode_group(top) + _encode_group(middle) + _encode_group(low)


def _decode_group(text: str, i: int) -> int:
    d = _DIGIT_VALUE
    p = _PAIR_VALUE
    value = d[text[i]] * _PAIR_BASE + p[text[i + 1 : i + 3]]
    value = value * _PAIR_BASE + p[text[i + 3 : i + 5]]
    value = value * _PAIR_BASE + p[text[i + 5 : i + 7]]
    return value * _PAIR_BASE + p[text[i + 7 : i + 9]]


def _decode(text: str) -> int:
    high = _decode_group(text, 0) * _GROUP_BASE + _decode_group(text, 9)
    return high * _GROUP_BASE + _decode_group(text, 18)


def _check(text: str) -> None:
    if len(text) != KSUID_LENGTH or not text.isascii():
        # Go measures length in UTF-8 bytes, so non-ASCII text of 27 bytes is a bad value, not a bad size.
        if len(text.encode("utf-8", "surrogatepass")) != KSUID_LENGTH:
            raise KsuidError(_ERR_SIZE)
        raise KsuidError(_ERR_VALUE)
    # For ASCII, isalnum() is exactly the base62 alphabet; with fixed width, string order is value order,
    # so the upper bound needs no decoding. Go decodes stray characters into garbage rather than
    # rejecting them; rejecting is the only reading under which an id names one item.
    if not text.isalnum() or text > KSUID_MAX:
        raise KsuidError(_ERR_VALUE)


def parse_ksuid(text: str) -> int:
    """Returns the 160-bit value of an encoded KSUID; raises ``KsuidError`` with Go's text otherwise."""
    _check(text)
    return _decode(text)


def is_ksuid(text: str) -> bool:
    """Reports whether ``parse_ksuid`` would accept ``text``."""
    return len(text) == KSUID_LENGTH and text.isascii() and text.isalnum() and text <= KSUID_MAX


def format_ksuid(value: int) -> str:
    """Encodes a 160-bit value as its 27-character KSUID; raises ``ValueError`` outside that range."""
    if not 0 <= value <= KSUID_MAX_VALUE:
        raise ValueError(f"KSUID value out of range: {value}")
    return _encode(value)


def ksuid_prev(text: str) -> str:
    """The id one below ``text``: an id that sorts just before it and that nothing ever generated.

    Like segmentio's ``Prev``, the all-zero id wraps around to ``KSUID_MAX``.
    """
    return _encode((parse_ksuid(text) - 1) & KSUID_MAX_VALUE)


def ksuid_timestamp(text: str) -> int:
    """The Unix time, in seconds, stored in the id's timestamp."""
    return (parse_ksuid(text) >> _PAYLOAD_BITS) + KSUID_EPOCH


class KsuidGenerator:
    """Issues strictly increasing KSUIDs: one random seed, then +1 per id with carry into the timestamp.

    ``next()`` returns seed + 1 first, so the seed itself (or ``after``) is never issued and every id is
    strictly greater than ``after``. Not thread-safe: each partition owns its generator.
    """

    __slots__ = ("_base", "_head", "_offset", "_stop")

    def __init__(self, unix_seconds: int, after: str | None = None) -> None:
        # uint32 wrap-around, as Go's ksuid does for times outside 2014..2150, rather than an error.
        timestamp = (unix_seconds - KSUID_EPOCH) & _TIMESTAMP_MASK
        value = (timestamp << _PAYLOAD_BITS) | int.from_bytes(os.urandom(16), "big")
        if after is not None:
            value = max(value, parse_ksuid(after))
        self._rebase(value)

    def _rebase(self, value: int) -> None:
        # Only the last base62 digit changes on 61 of every 62 increments, so next() caches the other 26
        # and counts in that digit with a small int; the full encoding runs again only on a carry.
        high, offset = divmod(value, _BASE)
        self._head = _encode(high)[1:]  # high < 62**26, so its 27-digit form always leads with a "0"
        self._offset = offset
        self._base = value - offset
        self._stop = min(_BASE, KSUID_MAX_VALUE + 1 - self._base)

    def next(self) -> str:
        """Returns the next id, greater than every id this generator returned before."""
        offset = self._offset + 1
        if offset < self._stop:
            self._offset = offset
            return self._head + _ALPHABET[offset]
        value = self._base + offset
        if value > KSUID_MAX_VALUE:
            raise OverflowError("KSUID space exhausted: no id is greater than " + KSUID_MAX)
        self._rebase(value)
        return self._head + _ALPHABET[self._offset]
