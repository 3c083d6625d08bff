"""The error every decoder raises for a body that does not decode."""

from __future__ import annotations

__all__ = ["DecodeError"]


class DecodeError(ValueError):
    """A request body that is not a valid encoding of the expected message."""
