"""``querator create|update|list|info|delete|stats|clear|produce|lease|complete|retry|items|renew|
redrive|cluster``: a queue and its items from the command line, one client call each
(docs/configuration.md)."""

from __future__ import annotations

import argparse
import secrets
import sys

import msgspec

from querator.cli._common import Command, UsageError, duration, read_lines, timestamp
from querator.client import AsyncClient, new_queue_info
from querator.duration import format_duration, parse_duration
from querator.errors import LeaseTimedOut
from querator.wire import messages as m


def _queue_options(p: argparse.ArgumentParser, create: bool) -> None:
    """The queue settings of ``create`` (with defaults) and ``update`` (None = keep the current value)."""
    p.add_argument(
        "--lease-timeout",
        type=duration,
        default="1m" if create else None,
        help="how long a lease lasts" + (" (default 1m)" if create else ""),
    )
    p.add_argument(
        "--expire-timeout",
        type=duration,
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
        type=duration,
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
def add_parsers(  # noqa: PLR0915
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: list[argparse.ArgumentParser]
) -> None:
    """Adds the queue and item commands to the ``querator`` command's subparsers."""

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
    p.add_argument("--enqueue-at", type=timestamp, help="RFC 3339 time from which the item may be leased")
    p.add_argument("--dedup-id", default="", help="produce de-duplication id (one item only)")
    p.add_argument("--timeout", type=duration, default="30s", help="request timeout (default 30s)")

    p = add("lease", "lease items and print them")
    p.add_argument("queue")
    p.add_argument("-c", "--client-id", help="unique id of this consumer (default: random)")
    p.add_argument("-b", "--batch-size", type=int, default=1, help="at most this many items (default 1)")
    p.add_argument("--timeout", type=duration, default="30s", help="how long to wait for items (default 30s)")

    p = add("complete", "complete leased items")
    _leased_options(p)
    p.add_argument("--timeout", type=duration, default="30s", help="request timeout (default 30s)")

    p = add("retry", "give leased items back to the queue")
    _leased_options(p)
    when = p.add_mutually_exclusive_group()
    when.add_argument("--retry-at", type=timestamp, help="RFC 3339 time of the retry (default: now)")
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
    p.add_argument("--lease-timeout", type=duration, default="", help="new lease (default: the queue's)")
    p.add_argument("--timeout", type=duration, default="30s", help="request timeout (default 30s)")

    p = add("cluster", "show the cluster's members and who owns each partition")
    p.add_argument("--queue", default="", help="only this queue's partitions")
    p.add_argument("--namespace", default="", help="the queues of this namespace (default _system)")

    p = add("redrive", "move the items of a dead-letter queue into another queue")
    p.add_argument("queue", help="the dead-letter queue")
    p.add_argument("target", help="the queue the items move to")
    p.add_argument("--limit", type=int, default=0, help="at most this many (default: all)")
    p.add_argument("--timeout", type=duration, default="5m", help="request timeout (default 5m)")


def _leased(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The ids of ``complete``, ``retry`` and ``renew``, and their lease tokens (none, or one per id):
    the arguments' and ``--lease-token``'s, then the ``--file`` lines' (``<id>`` or ``<id> <token>``)."""
    ids, tokens = list(args.ids), list(args.lease_tokens)
    if args.file:
        for line in read_lines(args.file):
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
        payloads = read_lines(args.file)
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
}
