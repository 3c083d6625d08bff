"""``querator workflows list | show | signal | update | cancel | resume | fork | terminate | result | query
| replay``: a caller's view of durable workflows (docs/durable.md), printed as the other client commands
print (``querator.cli``); ``query`` and ``replay`` load the app's code: a query's answer comes from a
replay of the journal, and ``replay`` checks changed workflow code against recorded journals; ``update``
loads it, with ``--app``, to validate the update first."""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from querator import durable
from querator.client import AsyncClient
from querator.errors import InvalidOption
from querator.wire import messages as m
from querator.wire.search import parse_search_condition
from querator.wire.workflows import PENDING, RUNNING, STATUSES
from querator.worker import find_app


class CannotReplay(Exception):
    """``replay``'s or ``query``'s app or files cannot be loaded, or the query is unknown (a usage
    error)."""


class Replayed(Exception):
    """``replay``'s report: one line of JSON per journal, printed; the exit status says whether any
    disagreed with the code."""

    def __init__(self, results: list[durable.Replayed]) -> None:
        super().__init__(f"{len(results)} journals replayed")
        self.results = results
        self.diverged = any(r.error is not None for r in results)

    def report(self) -> str:
        return "".join(
            msgspec.json.encode(
                {"workflow_id": r.workflow_id, "name": r.name, "then": r.then, "error": str(r.error or "")}
            ).decode()
            + "\n"
            for r in self.results
        )


class NotFinished(Exception):
    """``result`` waited its ``--timeout`` and the workflow still runs, or ``update`` did and the update
    is not answered yet: printed as found, with an exit status of its own, so that a script cannot take
    a timeout for an outcome."""

    def __init__(self, info: m.WorkflowInfo | m.WorkflowsUpdateResponse) -> None:
        super().__init__(info)
        self.info = info


def json_payload(text: str) -> bytes:
    """An argparse type: JSON text, or ``@file`` (``@-``: stdin) holding it, as bytes."""
    data = text.encode()
    if text.startswith("@"):
        try:
            data = sys.stdin.buffer.read() if text == "@-" else Path(text[1:]).read_bytes()
        except OSError as e:
            raise argparse.ArgumentTypeError(f"cannot read '{text[1:]}': {e.strerror}") from None
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise argparse.ArgumentTypeError(f"'{text}' is not JSON: {e}") from None
    return data


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: list[argparse.ArgumentParser],
    duration: Callable[[str], str],
) -> None:
    """Adds ``workflows`` to the ``querator`` command's subparsers; ``common`` are the global options,
    ``duration`` the argparse type of a Go duration."""
    p = sub.add_parser(
        "workflows",
        help="list, show, signal, cancel and await durable workflows",
        description="Inspect and steer durable workflows (docs/durable.md); workers run them.",
        parents=common,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        action = actions.add_parser(name, help=help_text, description=help_text, parents=common)
        if name not in ("list", "replay"):
            action.add_argument("workflow_id", metavar="ID")
        action.add_argument(
            "--namespace", default="", help="the namespace of the workflow's queue (default _system)"
        )
        return action

    a = add("list", "list workflows by id (without their journals)")
    a.add_argument("--status", choices=STATUSES, default="", help="only workflows of this status")
    a.add_argument("--pivot", default="", help="start at the first workflow id >= this")
    a.add_argument("--limit", type=int, default=0, help="at most this many (default: the server's, 1000)")
    a.add_argument("--app-version", default="", help="only runs started by this app version")
    a.add_argument(
        "--where",
        type=_condition,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only runs whose search attribute KEY is VALUE, as text (repeatable: all must hold)",
    )
    a = add("show", "show a workflow with its journal (a page of it) and signals")
    a.add_argument("--after", type=int, default=0, metavar="N", help="the journal's entries after seq N")
    a.add_argument(
        "--limit", type=int, default=0, metavar="M", help="at most M entries (default: the server's, 10000)"
    )
    a.add_argument("--all", action="store_true", help="the whole journal, read a page (of --limit) at a time")
    a = add("signal", "send a signal to a running workflow")
    a.add_argument("name", metavar="NAME", help="the signal's name, as the workflow waits for it")
    a.add_argument(
        "-p", "--payload", type=json_payload, default=b"", help="JSON, or @file holding it (@- = stdin)"
    )
    a.add_argument("--signal-id", default="", help="a signal sent again with the same id counts once")
    a = add(
        "update",
        "send an update to a running workflow and print its handler's answer (still pending, and exit "
        "status 4, when --timeout passed first: the update stays recorded, ask again with its --update-id)",
    )
    a.add_argument("name", metavar="NAME", help="the update, as the workflow registers it (ctx.on_update)")
    a.add_argument(
        "--args", type=json_payload, default=b"[]", help="the handler's arguments: a JSON array, or @file"
    )
    a.add_argument(
        "--app",
        default="",
        help="module:attribute of the querator.durable.Durable app: validate the update with its code "
        "first (without it the update is sent unvalidated)",
    )
    a.add_argument("--update-id", default="", help="an update sent again with the same id counts once")
    a.add_argument(
        "--timeout", type=duration, default="30s", help="how long to wait, at most 15m (default 30s)"
    )
    add("cancel", "ask a workflow to stop (its compensations run, its children are cancelled)")
    add("resume", "run a workflow that failed on non-determinism again, once its code is fixed")
    a = add(
        "fork",
        "start a new workflow with this one's input and its journal before --from-step: it runs from "
        "that step on (the original is left as it is); prints the new workflow",
    )
    a.add_argument(
        "--from-step", type=int, required=True, metavar="N", help="the seq to run from (1: from the top)"
    )
    a.add_argument("--new-id", default="", help="the new workflow's id (default: a new one)")
    a = add("terminate", "end a workflow now, with no worker (no compensation runs; children too)")
    a.add_argument("--reason", default="", help="why: its error becomes 'Terminated: <reason>'")
    a = add(
        "query",
        "answer a workflow's query from a replay of its journal with the app's code (no step runs, "
        "nothing is written); prints the answer, or exits 5 when the code does not match the journal",
    )
    a.add_argument("name", metavar="NAME", help="the query, as the workflow registers it (ctx.on_query)")
    a.add_argument(
        "--app", required=True, help="module:attribute of the querator.durable.Durable app with its code"
    )
    a.add_argument(
        "--args", type=json_payload, default=b"[]", help="the handler's arguments: a JSON array, or @file"
    )
    a = add(
        "replay",
        "replay recorded journals against an app's workflow code as it is now, without running steps, "
        "and report non-determinism (exit status 5): from --file, else the node's workflows",
    )
    a.add_argument("app", metavar="APP", help="module:attribute of the querator.durable.Durable app")
    a.add_argument("ids", metavar="ID", nargs="*", help="the node's workflows to replay (default: --status)")
    a.add_argument(
        "--file",
        action="append",
        default=[],
        help="journals to replay instead: a file as `workflows show` prints it, or a JSON array of them "
        "(repeatable)",
    )
    a.add_argument("--status", choices=STATUSES, default=RUNNING, help="without IDs: these (default running)")
    a = add(
        "result",
        "wait for a workflow to finish and print it (printed still running, and exit status 4, when "
        "--timeout passed first)",
    )
    a.add_argument(
        "--timeout", type=duration, default="30s", help="how long to wait, at most 15m (default 30s)"
    )


def _condition(text: str) -> tuple[str, str]:
    """``--where KEY=VALUE``, by the rule the console's filter keeps too (``parse_search_condition``)."""
    try:
        return parse_search_condition(text)
    except InvalidOption as e:
        raise argparse.ArgumentTypeError(str(e)) from None


async def command(client: AsyncClient, args: argparse.Namespace) -> m.Message | dict[str, Any] | None:
    """Runs the ``workflows`` action ``args`` names; what to print (None: ``{"code": 200}``)."""
    if args.action in ("signal", "resume", "terminate", "cancel"):
        await _steer(client, args)
        return None
    if args.action == "list":
        found = await client.list_workflows(
            args.status,
            pivot=args.pivot,
            limit=args.limit,
            namespace=args.namespace,
            app_version=args.app_version,
            search=dict(args.where),
        )
        return m.WorkflowsListResponse(workflows=found)
    if args.action == "replay":
        raise Replayed(await _replay(client, args))
    if args.action == "query":
        return {"workflow_id": args.workflow_id, "query": args.name, "answer": await _query(client, args)}
    if args.action == "update":
        return await _update(client, args)
    if args.action == "result":
        info = await client.workflow_result(args.workflow_id, args.timeout, namespace=args.namespace)
        if info.status == RUNNING:
            raise NotFinished(info)
        return info
    return await _fork_or_show(client, args)


async def _fork_or_show(client: AsyncClient, args: argparse.Namespace) -> m.Message:
    if args.action == "fork":
        return await client.fork_workflow(
            args.workflow_id, args.from_step, new_workflow_id=args.new_id, namespace=args.namespace
        )
    return await _show(client, args)


async def _show(client: AsyncClient, args: argparse.Namespace) -> m.WorkflowInfo:
    """A page of the journal (``--after``, ``--limit``), or all of it (``--all``)."""
    if args.all:
        return await client.workflow_journal(args.workflow_id, namespace=args.namespace, limit=args.limit)
    return await client.workflow_info(
        args.workflow_id, namespace=args.namespace, after=args.after, limit=args.limit
    )


async def _steer(client: AsyncClient, args: argparse.Namespace) -> None:
    """The actions that change a workflow and answer nothing of their own."""
    if args.action == "signal":
        await client.signal_workflow(
            args.workflow_id,
            args.name,
            args.payload,
            signal_id=args.signal_id or None,
            namespace=args.namespace,
        )
    elif args.action == "resume":
        await client.resume_workflow(args.workflow_id, namespace=args.namespace)
    elif args.action == "terminate":
        await client.terminate_workflow(args.workflow_id, args.reason, namespace=args.namespace)
    else:
        await client.cancel_workflow(args.workflow_id, namespace=args.namespace)


def _app(spec: str, action: str) -> durable.Durable:
    """The ``Durable`` app ``module:attribute`` names."""
    try:
        app = find_app(spec)
    except (ValueError, ImportError, AttributeError) as e:
        raise CannotReplay(f"{action}: {e}") from None
    if not isinstance(app, durable.Durable):
        raise CannotReplay(f"{action}: '{spec}' is a {type(app).__name__}, not a querator.durable.Durable")
    return app


async def _query(client: AsyncClient, args: argparse.Namespace) -> object:
    app = _app(args.app, "query")
    arguments = msgspec.json.decode(args.args)
    if not isinstance(arguments, list):
        raise CannotReplay("query: --args must be a JSON array")
    info = await client.workflow_info(args.workflow_id, namespace=args.namespace)
    try:
        return await durable.Replayer(app).query(info, args.name, *arguments)
    except durable.UnknownQuery as e:
        raise CannotReplay(f"query: {e}") from None
    except durable.NonDeterminism as e:
        raise Replayed([durable.Replayed(info.workflow_id, info.name, "", e)]) from None


async def _update(client: AsyncClient, args: argparse.Namespace) -> m.WorkflowsUpdateResponse:
    """Sends the update, validated first with ``--app``'s code as ``Durable.update`` does (a refusal is
    a usage error: nothing was sent); the reply as the server gave it, the answer in the workflow's
    encoding."""
    arguments = msgspec.json.decode(args.args)
    if not isinstance(arguments, list):
        raise CannotReplay("update: --args must be a JSON array")
    if args.app:
        info = await client.workflow_info(args.workflow_id, namespace=args.namespace)
        try:
            await durable.Replayer(_app(args.app, "update")).validate_update(info, args.name, *arguments)
        except (durable.UnknownUpdate, durable.UpdateRejected) as e:
            raise CannotReplay(f"update: {e}") from None
        except durable.NonDeterminism as e:
            raise Replayed([durable.Replayed(info.workflow_id, info.name, "", e)]) from None
    reply = await client.update_workflow(
        args.workflow_id,
        args.name,
        args.args,
        update_id=args.update_id or secrets.token_hex(16),
        timeout=args.timeout,
        namespace=args.namespace,
    )
    if reply.state == PENDING:
        raise NotFinished(reply)
    return reply


async def _replay(client: AsyncClient, args: argparse.Namespace) -> list[durable.Replayed]:
    app = _app(args.app, "replay")
    try:
        journals = [wf for path in args.file for wf in durable.load(path)]
    except (OSError, msgspec.DecodeError) as e:
        raise CannotReplay(f"replay: {e}") from None
    replayer = durable.Replayer(app)
    if journals:
        return await replayer.replay_all(journals)
    return await replayer.replay_node(client, args.ids, status=args.status)
