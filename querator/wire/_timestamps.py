"""RFC 3339 timestamps in JSON bodies, read as Go's protojson reads them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["parse_timestamp"]

# RFC 3339 as Go's time.Parse(time.RFC3339Nano) takes it (protojson's rule). The canonical shape is Go's
# fast path: upper-case T and Z, a '.' fraction of 1-9 digits (protojson's limit), Z or +hh:mm with
# hh <= 23 and mm <= 59. When that fails Go falls back to its general layout parser, which also takes a
# one-digit hour and a ',' fraction of any length (protojson's digit check only looks for '.').
_TS_CANONICAL: Final = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)", re.ASCII
)
_TS_GENERAL: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d?):(\d\d):(\d\d)(?:\.(\d{1,9})|,(\d+))?(?:Z|([+-])(\d\d):(\d\d))",
    re.ASCII,
)


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp as Go protojson accepts it, as an aware UTC datetime (sub-microsecond digits
    truncated); raises ValueError."""
    try:
        if _TS_CANONICAL.fullmatch(text) is not None:
            value = datetime.fromisoformat(text)  # the shape is checked; this validates the ranges
            return value if text[-1] == "Z" else value.astimezone(UTC)
        m = _TS_GENERAL.fullmatch(text)
        if m is None:
            raise ValueError("not an RFC 3339 timestamp with Z or a numeric offset")
        year, month, day, hour, minute, second, frac, comma_frac, sign, off_h, off_m = m.groups()
        digits = frac or (comma_frac[:9] if comma_frac else "")
        micros = int(digits.ljust(9, "0")) // 1000 if digits else 0
        value = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=UTC
        )
        if sign is not None:
            oh, om = int(off_h), int(off_m)
            if oh > 23 or om > 59:
                raise ValueError("time zone offset out of range")
            offset = timedelta(hours=oh, minutes=om)
            value = value - offset if sign == "+" else value + offset
        return value
    except OverflowError:  # before 0001-01-01 or after 9999-12-31 in UTC
        raise ValueError("timestamp out of range") from None
