"""``querator schedules create|update|info|list|delete|pause|resume``: the schedules routes from the
command line (docs/schedules.md), as a client command of ``querator.cli``."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from querator.client import AsyncClient
from querator.wire import messages as m

_TEMPLATE = ("time_zone", "catch_up", "catch_up_limit", "jitter", "kind", "encoding", "reference")


def add_parser(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """Adds ``schedules`` and its actions to the ``querator`` command's subparsers."""
    p = sub.add_parser(
        "schedules",
        help="create, change, inspect and delete cron schedules",
        description="Cron schedules: each tick produces one item into a queue (docs/schedules.md).",
        parents=common,
    )
    actions = p.add_subparsers(dest="schedules_action", required=True)

    def action(name: str, help_text: str, description: str = "") -> argparse.ArgumentParser:
        found: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=description or help_text, parents=common
        )
        return found

    for name, help_text, description in (
        ("create", "create a schedule", ""),
        (
            "update",
            "change a schedule",
            "Change a schedule: its definition is read first and only the flags given change (a new "
            "--cron or --time-zone starts from now).",
        ),
    ):
        q = action(name, help_text, description)
        q.add_argument("name")
        create = name == "create"
        q.add_argument("--cron", required=create, help="5 fields, or 6 with seconds first")
        q.add_argument("--queue", required=create, help="the queue each tick produces an item into")
        q.add_argument("--time-zone", help="an IANA time zone (default UTC)")
        q.add_argument("--catch-up", choices=["skip", "one", "all"], help="missed ticks (default one)")
        q.add_argument("--catch-up-limit", type=int, help="with --catch-up all: at most this many (100)")
        q.add_argument("--jitter", help="each tick fires up to this long after its time (a duration)")
        q.add_argument("--payload", help="the payload of each tick's item (UTF-8 text)")
        q.add_argument("--kind", help="the kind of each tick's item")
        q.add_argument("--encoding", help="the encoding of each tick's item")
        q.add_argument("--reference", help="the reference of each tick's item (default <name>@<tick>)")
    q = action("list", "list schedules")
    q.add_argument("--limit", type=int, default=0, help="at most this many (default: the server's, 100)")
    q.add_argument("--pivot", default="", help="start at the first schedule name >= this")
    for name, help_text in (
        ("info", "show a schedule with its last and next ticks"),
        ("delete", "delete a schedule"),
        ("pause", "stop a schedule's ticks"),
        ("resume", "start a paused schedule again from now"),
    ):
        action(name, help_text).add_argument("name")


async def command(client: AsyncClient, args: argparse.Namespace) -> m.Message | None:
    """Runs ``querator schedules <action>``; the reply to print (None: ``{"code": 200}``)."""
    action = args.schedules_action
    if action == "list":
        return await client.list_schedules(args.pivot, args.limit)
    by_name = {
        "info": client.schedule_info,
        "delete": client.delete_schedule,
        "pause": client.pause_schedule,
        "resume": client.resume_schedule,
    }
    if action in by_name:
        return await by_name[action](args.name)
    changes = _given(args)
    if action == "create":
        return await client.create_schedule(m.ScheduleInfo(name=args.name, **changes))
    current = await client.schedule_info(args.name)
    return await client.update_schedule(msgspec.structs.replace(current, **changes))


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The definition fields the flags give."""
    given: dict[str, Any] = {k: getattr(args, k) for k in _TEMPLATE if getattr(args, k) is not None}
    if args.cron is not None:
        given["cron"] = args.cron
    if args.queue is not None:
        given["queue_name"] = args.queue
    if args.payload is not None:
        given["payload"] = args.payload.encode()
    return given
