"""Durations as text, exactly as Go writes and reads them: this module owns the ``time.Duration`` grammar.

Clients send timeouts such as ``"5m"`` or ``"900ms"`` and read back ages such as ``"1.234567891s"``, and
the reference server's tests compare both the accepted inputs and the error texts verbatim, so
``parse_duration`` mirrors Go's ``time.ParseDuration`` (grammar, overflow rules, float rounding of
fractions and error messages) and ``format_duration`` mirrors ``Duration.String``. A duration is a plain
``int`` of nanoseconds in the int64 range, like Go's.
"""

from __future__ import annotations

__all__ = [
    "HOUR",
    "MICROSECOND",
    "MILLISECOND",
    "MINUTE",
    "NANOSECOND",
    "SECOND",
    "DurationError",
    "format_duration",
    "parse_duration",
]

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Go accumulates in a uint64 and allows exactly 1<<63 so that the most negative duration parses.
_LIMIT = 1 << 63
_UINT64_MASK = (1 << 64) - 1
# Enough digits for any value up to _LIMIT; a longer run is only valid if it is mostly leading zeros.
_MAX_INT_DIGITS = 19
# No run of this many fraction digits can exceed _LIMIT, so the per-digit overflow walk is not needed.
_SAFE_FRACTION_DIGITS = 18

_UNITS: dict[str, int] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}

# Request timeouts repeat ("5m", "900ms"), so remembering recent good parses turns the scanner's
# microsecond into a dict lookup. Bounded in entry count and key length so hostile input cannot grow it.
_CACHE: dict[str, int] = {}
_CACHE_ENTRIES = 512
_CACHE_KEY_CHARS = 24

_DIGITS = frozenset("0123456789")
_NUMBER_CHARS = frozenset("0123456789.")


def _scales() -> tuple[float, ...]:
    # Built by repeated multiplication, as Go's leadingFraction does, rather than 10.0**k: the two differ
    # in the last bit past 1e22, and the fraction's rounding must match Go's to the nanosecond.
    out = [1.0]
    for _ in range(_SAFE_FRACTION_DIGITS):
        out.append(out[-1] * 10)
    return tuple(out)


_SCALES = _scales()


class DurationError(ValueError):
    """A duration string Go rejects; ``str()`` is Go's error text, e.g. ``time: invalid duration "x"``."""


def _quote(text: str) -> str:
    """Quotes as Go's ``time`` package does: each non-ASCII or control byte becomes ``\\xNN``.

    Go's time package carries its own quote so as not to depend on strconv, and it hex-escapes every byte
    of a non-ASCII character instead of keeping printable ones; error texts must match it byte for byte.
    """
    if text.isascii() and text.isprintable():
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if 0x20 <= cp < 0x80:
            out.append("\\" + ch if ch in '"\\' else ch)
        elif cp < 0x80:
            out.append(f"\\x{cp:02x}")
        elif 0xDC80 <= cp <= 0xDCFF:
            # A lone surrogate in this range is how surrogateescape carries an undecodable byte; Go would
            # have seen that raw byte, so print it rather than the surrogate's UTF-8 form.
            out.append(f"\\x{cp - 0xDC00:02x}")
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    out.append('"')
    return "".join(out)


def _invalid(text: str) -> DurationError:
    return DurationError("time: invalid duration " + _quote(text))


def _leading_fraction(digits: str) -> tuple[int, float]:
    """Go's leadingFraction: digits past the point where the value would pass 1<<63 are dropped."""
    if len(digits) <= _SAFE_FRACTION_DIGITS:
        return int(digits), _SCALES[len(digits)]
    value = 0
    scale = 1.0
    for ch in digits:
        step = value * 10 + ord(ch) - 48
        if step > _LIMIT:
            break
        value = step
        # Long runs of leading zeros push this to inf; Go does the same and the fraction then adds 0.
        scale *= 10
    return value, scale


def parse_duration(text: str) -> int:
    """Parses ``text`` with Go's ``time.ParseDuration`` rules and returns nanoseconds.

    Raises ``DurationError`` carrying Go's exact message for anything Go rejects.
    """
    value = _CACHE.get(text)
    if value is None:
        value = _scan(text)
        if len(text) <= _CACHE_KEY_CHARS:
            if len(_CACHE) >= _CACHE_ENTRIES:
                _CACHE.clear()
            _CACHE[text] = value
    return value


# Long on purpose: Go's time.ParseDuration, step for step, so both accept exactly the same text.
def _scan(text: str) -> int:  # noqa: C901, PLR0912, PLR0915
    n = len(text)
    i = 0
    neg = False
    if n and text[0] in "+-":
        neg = text[0] == "-"
        i = 1
    if n - i == 1 and text[i] == "0":
        return 0
    if i == n:
        raise _invalid(text)

    total = 0
    while i < n:
        if text[i] not in _NUMBER_CHARS:
            raise _invalid(text)

        start = i
        while i < n and text[i] in _DIGITS:
            i += 1
        has_whole = i > start
        whole = 0
        if has_whole:
            digits = text[start:i]
            if len(digits) > _MAX_INT_DIGITS:
                # Also keeps int() away from its 4300-digit guard on hostile input.
                digits = digits.lstrip("0") or "0"
                if len(digits) > _MAX_INT_DIGITS:
                    raise _invalid(text)
            whole = int(digits)
            if whole > _LIMIT:
                raise _invalid(text)

        frac = 0
        scale = 1.0
        has_frac = False
        if i < n and text[i] == ".":
            i += 1
            start = i
            while i < n and text[i] in _DIGITS:
                i += 1
            if i > start:
                has_frac = True
                frac, scale = _leading_fraction(text[start:i])
        if not has_whole and not has_frac:
            raise _invalid(text)

        start = i
        while i < n and text[i] not in _NUMBER_CHARS:
            i += 1
        if i == start:
            raise DurationError("time: missing unit in duration " + _quote(text))
        unit_text = text[start:i]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise DurationError("time: unknown unit " + _quote(unit_text) + " in duration " + _quote(text))

        if whole > _LIMIT // unit:
            raise _invalid(text)
        value = whole * unit
        if frac:
            # Go scales the fraction in float64 (exact to the nanosecond even for hours) and truncates.
            value += int(frac * (unit / scale))
            if value > _LIMIT:
                raise _invalid(text)
        # Go's uint64 sum can wrap to exactly 0 (two terms of 1<<63), which it then accepts; match it.
        total = (total + value) & _UINT64_MASK
        if total > _LIMIT:
            raise _invalid(text)

    if neg:
        return -total
    if total > _INT64_MAX:
        raise _invalid(text)
    return total


def _fraction(remainder: int, width: int) -> str:
    if not remainder:
        return ""
    return "." + f"{remainder:0{width}d}".rstrip("0")


# Long on purpose: Go's Duration.String: one return per magnitude.
def _format_magnitude(u: int) -> str:  # noqa: PLR0911
    if u < SECOND:
        if u == 0:
            return "0s"
        if u < MICROSECOND:
            return f"{u}ns"
        if u < MILLISECOND:
            whole, rest = divmod(u, MICROSECOND)
            return f"{whole}{_fraction(rest, 3)}\u00b5s"
        whole, rest = divmod(u, MILLISECOND)
        return f"{whole}{_fraction(rest, 6)}ms"
    seconds, rest = divmod(u, SECOND)
    minutes, seconds = divmod(seconds, 60)
    tail = f"{seconds}{_fraction(rest, 9)}s"
    if not minutes:
        return tail
    # Go stops at hours because days vary in length, and prints minutes whenever hours are present.
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes}m{tail}"
    return f"{hours}h{minutes}m{tail}"


def format_duration(ns: int) -> str:
    """Renders nanoseconds as Go's ``Duration.String`` does, e.g. ``300ms``, ``1.5µs``, ``1h0m0s``.

    Raises ``ValueError`` outside the int64 range, which Go cannot represent.
    """
    if ns < 0:
        if ns < _INT64_MIN:
            raise ValueError(f"duration {ns}ns is below the int64 range")
        return "-" + _format_magnitude(-ns)
    if ns > _INT64_MAX:
        raise ValueError(f"duration {ns}ns is above the int64 range")
    return _format_magnitude(ns)


def format_micros(us: int) -> str:
    """Microseconds as Go renders a duration (``1m30s``)."""
    return format_duration(us * MICROSECOND)
