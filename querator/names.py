"""The characters a name may hold: one rule for every kind of name the API stores (queues, dead queues,
schedules, workflow ids and names, signals, namespaces, users, roles, API keys).

Names reach logs, metrics labels, terminals and the console, where a control character, an invisible
format character or a character a renderer ignores hides or disguises what a name says (docs/semantics.md
§2.2). Layer-free, like ``querator.duration``: the service and tenancy both check with it.
"""

from __future__ import annotations

import bisect
import unicodedata
from typing import Final

from querator.errors import InvalidOption

_IGNORABLE_RANGES: Final = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
"""Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1), which the
``unicodedata`` module does not expose: characters shown as nothing, Hangul fillers and variation
selectors among them, several of which are not in category Cf (U+115F, U+3164 are Lo; U+034F, U+FE0F
are Mn)."""
_STARTS: Final = tuple(start for start, _ in _IGNORABLE_RANGES)


def _ignorable(c: str) -> bool:
    n = bisect.bisect_right(_STARTS, ord(c)) - 1
    return n >= 0 and ord(c) <= _IGNORABLE_RANGES[n][1]


def _unprintable(c: str) -> bool:
    """Control and invisible format characters (Unicode Cc, Cf: NUL, escapes, bidi overrides,
    zero-width spaces): what no name was ever allowed, so what a lookup may still refuse."""
    return unicodedata.category(c) in ("Cc", "Cf")


def _invalid(what: str, found: str) -> InvalidOption:
    # The name is not quoted: it is what must not reach the logs.
    return InvalidOption(
        f"{what} is invalid; cannot contain control or invisible characters, found U+{ord(found):04X}"
    )


def check_new_name_characters(what: str, name: str) -> None:
    """The rule of a name being created: no control, format or default-ignorable character. Only new
    names are checked against it, so a name stored before a character was refused stays usable."""
    if (found := next((c for c in name if _unprintable(c) or _ignorable(c)), None)) is not None:
        raise _invalid(what, found)


def check_printable(what: str, name: str) -> None:
    """The rule a looked-up id kept since it was first checked (Cc, Cf): a default-ignorable character
    in a stored name still finds it."""
    if (found := next((c for c in name if _unprintable(c)), None)) is not None:
        raise _invalid(what, found)
