"""``main``: the command line parsed, and each command run with its exit status."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from querator import __version__
from querator.auth import generate_key, key_hash
from querator.cli import _completion, _queues, _schedules, _status, _tenancy, _worker, _workflows
from querator.cli._common import (
    EXIT_CONNECTION,
    EXIT_NON_DETERMINISM,
    EXIT_NOT_FINISHED,
    EXIT_SERVER_ERROR,
    EXIT_USAGE,
    Command,
    UsageError,
    duration,
    global_options,
    timestamp,
    tls,
)
from querator.cli._output import default_output, print_reply
from querator.client import AsyncClient, ConnectionFailed
from querator.config import ConfigError, ServerConfig, environment, load, option_name
from querator.errors import QueratorError
from querator.wire import messages as m

COMMANDS: dict[str, Command] = {
    **_queues.COMMANDS,
    "workflows": _workflows.command,
    "schedules": _schedules.command,
    "status": _status.command,
    **dict.fromkeys(_tenancy.GROUPS, _tenancy.run),
}


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run a Querator node", description="Run a Querator node.")
    p.add_argument("--config", help="YAML file of settings (env QUERATOR_CONFIG)")
    for f in fields(ServerConfig):
        env = "QUERATOR_" + f.name.upper()
        default = f.metadata.get("default", f.default)
        help_text = f"{f.metadata.get('help', '')} (env {env}; default {default})"
        flag = "--" + option_name(f.name)
        if f.type in (bool, "bool"):  # a switch: alone it turns on; it may also say on, off, true...
            p.add_argument(flag, dest=f.name, nargs="?", const=True, help=help_text)
        else:
            p.add_argument(flag, dest=f.name, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="querator", description="Querator: a lease-based FIFO queue.", parents=[global_options(True)]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    sub.add_parser("version", help="print the version")
    p = sub.add_parser(
        "apikey",
        help="generate an API key",
        description="Generate an API key: prints the key (give it to the client, once) and its SHA-256 hash "
        "(give it to the server with --api-keys or --api-keys-file).",
    )
    p.add_argument(
        "--tag", default="live", help="lowercase letters or digits shown in the key (default live)"
    )
    common = [global_options(with_defaults=False)]
    _queues.add_parsers(sub, common)
    _workflows.add_parser(sub, common, duration)
    _schedules.add_parser(sub, common)
    _tenancy.add_parsers(sub, common, timestamp)
    _status.add_parser(sub, common)
    _worker.add_parser(sub)
    _completion.add_parser(sub)
    return parser


async def _client_command(command: Command, args: argparse.Namespace) -> m.Message | dict[str, Any]:
    async with AsyncClient(args.endpoint, api_key=args.api_key, ssl=tls(args.ca_file)) as client:
        result = await command(client, args)
    return m.OK_REPLY if result is None else result


def run_client(args: argparse.Namespace) -> int:
    """Runs a parsed client command; returns the exit status (see the package docstring)."""
    try:
        result = asyncio.run(_client_command(COMMANDS[args.command], args))
    except (UsageError, _workflows.CannotReplay) as e:
        print(f"querator: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionFailed as e:
        print(f"querator: {e.code} {e.message}", file=sys.stderr)
        return EXIT_CONNECTION
    except QueratorError as e:
        print(f"querator: {e.code} {e.message}", file=sys.stderr)
        return EXIT_SERVER_ERROR
    except _workflows.NotFinished as e:
        print_reply(e.info, args.output or default_output())
        return EXIT_NOT_FINISHED
    except _workflows.Replayed as e:
        sys.stdout.write(e.report())
        return EXIT_NON_DETERMINISM if e.diverged else 0
    print_reply(result, args.output or default_output())
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line; ids may also follow options (``complete q -p 0 id1 id2``).

    argparse fills an optional-length positional at its first chance, so ids given after an option
    come back unrecognised: they are added to ``ids`` here, anything else is still an error.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if isinstance(getattr(args, "ids", None), list) and not any(x.startswith("-") for x in extra):
            args.ids.extend(extra)
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


# Long on purpose: one exit status per outcome (module docstring).
def main(argv: Sequence[str] | None = None) -> int:  # noqa: PLR0911
    args = _parse(argv)
    if args.command == "version":
        print(f"querator {__version__}")
        return 0
    if args.command == "apikey":
        try:
            key = generate_key(args.tag)
        except ValueError as e:
            print(f"querator: {e}", file=sys.stderr)
            return EXIT_USAGE
        print(f"key:  {key}\nhash: {key_hash(key)}")
        return 0
    if args.command == "worker":
        return _worker.run(args)
    if args.command == "completion":
        print(_completion.script(build_parser(), args.shell), end="")
        return 0
    if args.command == "serve":
        try:
            config = load(None, environment(), vars(args))
        except ConfigError as e:
            print(f"querator: {e}", file=sys.stderr)
            return EXIT_USAGE
        from querator.server import run, setup_logging

        setup_logging(config.log_level, config.log_format)
        try:
            return run(config)
        except ConfigError as e:  # found only when starting, e.g. an address that cannot be bound
            print(f"querator: {e}", file=sys.stderr)
            return EXIT_USAGE
    return run_client(args)
