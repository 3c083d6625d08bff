"""The ``querator`` command: ``serve`` runs a node, ``worker`` runs tasks (``querator.worker``); the other
commands are a client of a running node.

Client commands talk to ``--endpoint`` (env ``QUERATOR_ENDPOINT``) with ``--api-key`` (env
``QUERATOR_API_KEY``), verifying an ``https://`` endpoint against ``--ca-file`` (env ``QUERATOR_CA_FILE``;
default the system's CAs), print the server's reply as indented protojson on stdout (``{"code": 200}`` for
calls without a payload), and report failures on stderr as ``querator: <code> <message>``. Exit status: 0
success, 1 the server refused the call (or sent an unreadable reply), 2 a usage error, 3 no reply at all
(connection failed or timed out; code 0), 4 ``workflows result`` waited its ``--timeout`` and the workflow
still runs (printed as found), 5 ``workflows replay`` found a journal the code disagrees with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from querator import __version__, cli_schedules
from querator import _cli_workflows as workflows_cli
from querator import _tenancy_cli as tenancy_cli
from querator.auth import generate_key, key_hash
from querator.client import DEFAULT_ENDPOINT, AsyncClient, ConnectionFailed, new_queue_info
from querator.config import ConfigError, ServerConfig, environment, load, option_name
from querator.duration import DurationError, format_duration, parse_duration
from querator.errors import LeaseTimedOut, QueratorError
from querator.wire import encode_json
from querator.wire import messages as m
from querator.worker import cli as worker_cli

EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_NOT_FINISHED = 4
EXIT_NON_DETERMINISM = 5


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


class UsageError(Exception):
    """A command line that parses but cannot be carried out (exit status 2)."""


def _duration(text: str) -> str:
    """An argparse type: a Go duration, kept as text."""
    try:
        parse_duration(text)
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _timestamp(text: str) -> datetime:
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


def _global_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--endpoint``, ``--api-key`` and ``--ca-file``, accepted before or after the command.

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
    return p


def _queue_options(p: argparse.ArgumentParser, create: bool) -> None:
    """The queue settings of ``create`` (with defaults) and ``update`` (None = keep the current value)."""
    p.add_argument(
        "--lease-timeout",
        type=_duration,
        default="1m" if create else None,
        help="how long a lease lasts" + (" (default 1m)" if create else ""),
    )
    p.add_argument(
        "--expire-timeout",
        type=_duration,
        help="how long an item may stay in the queue"
        + (" (default 60 x the lease timeout)" if create else ""),
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=0 if create else None,
        help="leases allowed per item, 0 = unlimited" + (" (default 0)" if create else ""),
    )
    p.add_argument(
        "--dead-queue",
        default="" if create else None,
        help="queue that receives dead items (must exist; '' = none)",
    )
    p.add_argument("--reference", default="" if create else None, help="free-form text kept with the queue")
    p.add_argument(
        "--dedup-window",
        type=_duration,
        default=None,
        help="how long a produce dedup_id is remembered (default 5m; 0s disables)",
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=1 if create else None,
        help="number of partitions" + (" (default 1)" if create else " (can only grow)"),
    )


def _leased_options(p: argparse.ArgumentParser) -> None:
    """What ``complete``, ``retry`` and ``renew`` name their leased items by."""
    p.add_argument("queue")
    p.add_argument("ids", nargs="*", metavar="id")
    p.add_argument(
        "-p", "--partition", type=int, required=True, help="the partition the items were leased from"
    )
    p.add_argument("--file", help="more ids, one per line ('-' = stdin): '<id>' or '<id> <lease token>'")
    p.add_argument(
        "-t",
        "--lease-token",
        dest="lease_tokens",
        action="append",
        default=[],
        metavar="TOKEN",
        help="the lease token of each id, in their order (once per id), for a queue that requires them; "
        "one that starts with '-' goes as --lease-token=TOKEN",
    )


# Long on purpose: a table of subcommands and their flags, one statement each.
def _client_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # noqa: PLR0915
    common = [_global_options(with_defaults=False)]

    def add(name: str, help_text: str, description: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=description or help_text, parents=common)

    p = add("create", "create a queue")
    p.add_argument("queue")
    _queue_options(p, create=True)
    p.add_argument("--namespace", default="", help="namespace of the queue (default _system)")

    p = add(
        "update",
        "change a queue's settings",
        "Change a queue's settings: the current settings are read first and only the flags given change "
        "(--max-attempts 0 and --dead-queue '' are explicit values). At least one flag is required.",
    )
    p.add_argument("queue")
    _queue_options(p, create=False)

    p = add("list", "list queues")
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: the server's, 1000)")
    p.add_argument("--pivot", default="", help="start at the first queue name >= this")
    p.add_argument("--namespace", default="", help="namespace to list (default _system)")

    p = add("info", "show a queue's settings")
    p.add_argument("queue")

    p = add("delete", "delete a queue")
    p.add_argument("queue")
    p.add_argument("--force", action="store_true", help="sent to the server (which ignores it)")

    p = add("stats", "show a queue's statistics")
    p.add_argument("queue")

    p = add("clear", "delete items of a queue")
    p.add_argument("queue")
    p.add_argument(
        "--queue", dest="clear_queue", action="store_true", help="delete the un-leased queued items"
    )
    p.add_argument("--scheduled", action="store_true", help="delete the scheduled items")
    p.add_argument("--destructive", action="store_true", help="with --queue: delete leased items too")

    p = add(
        "produce",
        "produce items",
        "Produce one item (the --payload, else all of stdin) or, with --file, one item per non-empty line "
        "in a single request (at most 1000, the server's batch limit).",
    )
    p.add_argument("queue")
    source = p.add_mutually_exclusive_group()
    source.add_argument("-p", "--payload", help="the payload (default: read stdin)")
    source.add_argument("--file", help="one payload per line ('-' = stdin)")
    p.add_argument("--encoding", default="", help="free-form encoding of the payload")
    p.add_argument("--kind", default="", help="free-form kind of the item")
    p.add_argument("--reference", default="", help="free-form reference of the item")
    p.add_argument("--enqueue-at", type=_timestamp, help="RFC 3339 time from which the item may be leased")
    p.add_argument("--dedup-id", default="", help="produce de-duplication id (one item only)")
    p.add_argument("--timeout", type=_duration, default="30s", help="request timeout (default 30s)")

    p = add("lease", "lease items and print them")
    p.add_argument("queue")
    p.add_argument("-c", "--client-id", help="unique id of this consumer (default: random)")
    p.add_argument("-b", "--batch-size", type=int, default=1, help="at most this many items (default 1)")
    p.add_argument(
        "--timeout", type=_duration, default="30s", help="how long to wait for items (default 30s)"
    )

    p = add("complete", "complete leased items")
    _leased_options(p)
    p.add_argument("--timeout", type=_duration, default="30s", help="request timeout (default 30s)")

    p = add("retry", "give leased items back to the queue")
    _leased_options(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--retry-at", type=_timestamp, help="RFC 3339 time of the retry (default: now)")
    when.add_argument("--dead", action="store_true", help="send the items to the dead queue (or drop them)")
    p.add_argument("--error", default="", help="why the attempt failed, kept with the item (4096 chars)")

    p = add(
        "items",
        "list the items of a partition, with their jobs and failures",
        "List the queued (or, with --scheduled, the scheduled) items of one partition in id order, each "
        "with its job id and failed attempts: what a dead-letter queue's items died of.",
    )
    p.add_argument("queue")
    p.add_argument("-p", "--partition", type=int, default=0, help="the partition (default 0)")
    p.add_argument("--scheduled", action="store_true", help="the scheduled items instead")
    p.add_argument("--pivot", default="", help="start at the first item id >= this")
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: the server's)")

    p = add("renew", "extend the leases of leased items")
    _leased_options(p)
    p.add_argument("--lease-timeout", type=_duration, default="", help="new lease (default: the queue's)")
    p.add_argument("--timeout", type=_duration, default="30s", help="request timeout (default 30s)")

    p = add("cluster", "show the cluster's members and who owns each partition")
    p.add_argument("--queue", default="", help="only this queue's partitions")
    p.add_argument("--namespace", default="", help="the queues of this namespace (default _system)")

    p = add("redrive", "move the items of a dead-letter queue into another queue")
    p.add_argument("queue", help="the dead-letter queue")
    p.add_argument("target", help="the queue the items move to")
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    p.add_argument("--timeout", type=_duration, default="5m", help="request timeout (default 5m)")

    workflows_cli.add_parser(sub, common, _duration)
    cli_schedules.add_parser(sub, common)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="querator", description="Querator: a lease-based FIFO queue.", parents=[_global_options(True)]
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
    _client_parsers(sub)
    tenancy_cli.add_parsers(sub, [_global_options(with_defaults=False)], _timestamp)
    worker_cli.add_parser(sub)
    return parser


# -- client commands ----------------------------------------------------------------------------------------

Command = Callable[[AsyncClient, argparse.Namespace], Awaitable[m.Message | None]]


def _lines(path: str) -> list[bytes]:
    """The non-empty lines of a file (``-`` = stdin), without their line endings."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read '{path}': {e.strerror}") from None
    return [line for line in data.splitlines() if line.strip()]


def _leased(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The ids of ``complete``, ``retry`` and ``renew``, and their lease tokens (none, or one per id):
    the arguments' and ``--lease-token``'s, then the ``--file`` lines' (``<id>`` or ``<id> <token>``)."""
    ids, tokens = list(args.ids), list(args.lease_tokens)
    if args.file:
        for line in _lines(args.file):
            id_, *token = line.decode("utf-8", "replace").split()
            ids.append(id_)
            tokens.extend(token[:1])
    if not ids:
        raise UsageError("no ids; give them as arguments or with --file")
    if tokens and len(tokens) != len(ids):
        raise UsageError(f"lease tokens is invalid; {len(tokens)} given for {len(ids)} ids")
    return ids, tokens


async def _create(client: AsyncClient, args: argparse.Namespace) -> None:
    info = new_queue_info(
        args.queue,
        lease_timeout=args.lease_timeout,
        expire_timeout=args.expire_timeout or format_duration(60 * parse_duration(args.lease_timeout)),
        max_attempts=args.max_attempts,
        dead_queue=args.dead_queue,
        reference=args.reference,
        partitions=args.partitions,
        namespace=args.namespace,
    )
    await client.create_queue(msgspec.structs.replace(info, dedup_window=args.dedup_window or ""))


async def _update(client: AsyncClient, args: argparse.Namespace) -> None:
    changes = {
        "dedup_window": args.dedup_window,
        "lease_timeout": args.lease_timeout,
        "expire_timeout": args.expire_timeout,
        "max_attempts": args.max_attempts,
        "dead_queue": args.dead_queue,
        "reference": args.reference,
        "requested_partitions": args.partitions,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise UsageError(
            "nothing to update; give at least one of --lease-timeout, --expire-timeout, --max-attempts, "
            "--dead-queue, --reference, --partitions, --dedup-window"
        )
    current = await client.queue_info(args.queue)
    await client.update_queue(msgspec.structs.replace(current, **changes))


async def _list(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    return await client.list_queues(args.pivot, args.limit, args.namespace)


async def _info(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    return await client.queue_info(args.queue)


async def _delete(client: AsyncClient, args: argparse.Namespace) -> None:
    await client.delete_queue(args.queue, force=args.force)


async def _stats(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    return await client.stats(args.queue)


async def _clear(client: AsyncClient, args: argparse.Namespace) -> None:
    await client.clear(
        args.queue, queue=args.clear_queue, scheduled=args.scheduled, destructive=args.destructive
    )


async def _produce(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    if args.payload is not None:
        payloads = [args.payload.encode()]
    elif args.file is not None:
        payloads = _lines(args.file)
        if not payloads:
            raise UsageError(f"no payloads; '{args.file}' has no non-empty line")
    else:
        payloads = [sys.stdin.buffer.read()]
    items = [
        m.QueueProduceItem(
            bytes=payload,
            encoding=args.encoding,
            kind=args.kind,
            reference=args.reference,
            enqueue_at=args.enqueue_at,
            dedup_id=args.dedup_id,
        )
        for payload in payloads
    ]
    if args.dedup_id and len(items) > 1:
        raise UsageError("--dedup-id names one item; it cannot be used with several lines of --file")
    # The ids, in order ("" for an item a dedup id kept out), are what a caller needs to follow its items.
    ids = await client.produce(args.queue, items, request_timeout=args.timeout)
    return m.QueueProduceResponse(code=200, ids=ids)


async def _lease(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    client_id = args.client_id or "id-" + secrets.token_hex(5)
    reply = await client.lease(args.queue, args.batch_size, client_id, request_timeout=args.timeout)
    if not reply.items:
        # The client reads the server's 454 as "no items"; the command reports it as the server said it,
        # with exit status 1, as it always has: scripts tell the two apart by it.
        raise LeaseTimedOut()
    return reply


async def _complete(client: AsyncClient, args: argparse.Namespace) -> None:
    ids, tokens = _leased(args)
    await client.complete(args.queue, args.partition, ids, request_timeout=args.timeout, lease_tokens=tokens)


async def _retry(client: AsyncClient, args: argparse.Namespace) -> None:
    ids, tokens = _leased(args)
    items = [
        m.QueueRetryItem(id=i, retry_at=args.retry_at, dead=args.dead, lease_token=token, error=args.error)
        for i, token in zip(ids, tokens or [""] * len(ids), strict=True)
    ]
    await client.retry(args.queue, args.partition, items)


async def _items(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    listed = client.list_scheduled if args.scheduled else client.list_items
    return await listed(args.queue, args.partition, pivot=args.pivot, limit=args.limit)


async def _renew(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    ids, tokens = _leased(args)
    return await client.renew(
        args.queue,
        args.partition,
        ids,
        lease_timeout=args.lease_timeout,
        request_timeout=args.timeout,
        lease_tokens=tokens,
    )


async def _redrive(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    moved = await client.redrive(args.queue, args.target, limit=args.limit, request_timeout=args.timeout)
    return m.QueueRedriveResponse(moved=moved)


async def _cluster(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    return await client.cluster_info(args.queue, args.namespace)


COMMANDS: dict[str, Command] = {
    "create": _create,
    "update": _update,
    "list": _list,
    "info": _info,
    "delete": _delete,
    "stats": _stats,
    "clear": _clear,
    "produce": _produce,
    "lease": _lease,
    "complete": _complete,
    "retry": _retry,
    "items": _items,
    "renew": _renew,
    "redrive": _redrive,
    "cluster": _cluster,
    "workflows": workflows_cli.command,
    "schedules": cli_schedules.command,
    **dict.fromkeys(tenancy_cli.GROUPS, tenancy_cli.run),
}


def _print_json(msg: m.Message) -> None:
    data = encode_json(msg)
    if isinstance(msg, m.QueueLeaseResponse):
        # JSON omits zero values, partition 0 included; the next command needs it, so say it always.
        fields = msgspec.json.decode(data)
        fields["partition"] = msg.partition
        data = msgspec.json.encode(fields)
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")
    sys.stdout.flush()


def _tls(ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context trusting ``ca_file``'s CAs; None: the system's CAs."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"ca-file is invalid; cannot load '{ca_file}': {e.strerror or e}") from None


async def _client_command(command: Command, args: argparse.Namespace) -> m.Message:
    async with AsyncClient(args.endpoint, api_key=args.api_key, ssl=_tls(args.ca_file)) as client:
        result = await command(client, args)
    return m.OK_REPLY if result is None else result


def run_client(args: argparse.Namespace) -> int:
    """Runs a parsed client command; returns the exit status (see the module docstring)."""
    try:
        result = asyncio.run(_client_command(COMMANDS[args.command], args))
    except (UsageError, workflows_cli.CannotReplay) as e:
        print(f"querator: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConnectionFailed as e:
        print(f"querator: {e.code} {e.message}", file=sys.stderr)
        return EXIT_CONNECTION
    except QueratorError as e:
        print(f"querator: {e.code} {e.message}", file=sys.stderr)
        return EXIT_SERVER_ERROR
    except workflows_cli.NotFinished as e:
        _print_json(e.info)
        return EXIT_NOT_FINISHED
    except workflows_cli.Replayed as e:
        sys.stdout.write(e.report())
        return EXIT_NON_DETERMINISM if e.diverged else 0
    _print_json(result)
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
        return worker_cli.run(args)
    if args.command == "serve":
        try:
            config = load(None, environment(), vars(args))
        except ConfigError as e:
            print(f"querator: {e}", file=sys.stderr)
            return 2
        from querator.server import run, setup_logging

        setup_logging(config.log_level, config.log_format)
        try:
            return run(config)
        except ConfigError as e:  # found only when starting, e.g. an address that cannot be bound
            print(f"querator: {e}", file=sys.stderr)
            return 2
    return run_client(args)


if __name__ == "__main__":
    sys.exit(main())
