"""What every command of ``querator`` shares: exit statuses, usage errors, argument types, the global
options, and how a client command's client is made."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from querator.client import DEFAULT_ENDPOINT, AsyncClient
from querator.duration import DurationError, parse_duration
from querator.wire import messages as m

EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_NOT_FINISHED = 4
EXIT_NON_DETERMINISM = 5

Command = Callable[[AsyncClient, argparse.Namespace], Awaitable[m.Message | dict[str, Any] | None]]
"""A client command: one or more calls, and what to print (None: ``{"code": 200}``)."""


class UsageError(Exception):
    """A command line that parses but cannot be carried out (exit status 2)."""


def duration(text: str) -> str:
    """An argparse type: a Go duration, kept as text."""
    try:
        parse_duration(text)
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def timestamp(text: str) -> datetime:
    """An argparse type: an RFC 3339 time with a zone (``2024-01-01T12:00:00Z``), as aware UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not an RFC 3339 time with a zone, e.g. 2024-01-01T12:00:00Z"
        )
    return value.astimezone(UTC)


def global_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--endpoint``, ``--api-key``, ``--ca-file`` and ``--output``, accepted before or after the command.

    Only the top-level parser has defaults; after the command they are SUPPRESSed so that an absent flag
    does not overwrite one given before it.
    """
    p = argparse.ArgumentParser(add_help=False)
    endpoint = os.environ.get("QUERATOR_ENDPOINT") or DEFAULT_ENDPOINT
    p.add_argument(
        "--endpoint",
        default=endpoint if with_defaults else argparse.SUPPRESS,
        help=f"server URL (env QUERATOR_ENDPOINT; default {DEFAULT_ENDPOINT})",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("QUERATOR_API_KEY") if with_defaults else argparse.SUPPRESS,
        help="sent as 'Authorization: Bearer <key>' (env QUERATOR_API_KEY)",
    )
    p.add_argument(
        "--ca-file",
        default=os.environ.get("QUERATOR_CA_FILE") if with_defaults else argparse.SUPPRESS,
        help="PEM file of the CAs that verify an https:// endpoint, for a private CA "
        "(env QUERATOR_CA_FILE; default: the system's CAs)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["json", "table"],
        default=None if with_defaults else argparse.SUPPRESS,
        help="how replies print (env QUERATOR_OUTPUT; default: table on a terminal, else json)",
    )
    return p


def tls(ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context trusting ``ca_file``'s CAs; None: the system's CAs."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"ca-file is invalid; cannot load '{ca_file}': {e.strerror or e}") from None


def read_lines(path: str) -> list[bytes]:
    """The non-empty lines of a file (``-`` = stdin), without their line endings."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read '{path}': {e.strerror}") from None
    return [line for line in data.splitlines() if line.strip()]
