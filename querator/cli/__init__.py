"""The ``querator`` command: ``serve`` runs a node, ``worker`` runs tasks (``querator.worker``); the other
commands are a client of a running node.

Client commands talk to ``--endpoint`` (env ``QUERATOR_ENDPOINT``) with ``--api-key`` (env
``QUERATOR_API_KEY``), verifying an ``https://`` endpoint against ``--ca-file`` (env ``QUERATOR_CA_FILE``;
default the system's CAs), print the server's reply as indented protojson on stdout (``{"code": 200}`` for
calls without a payload), and report failures on stderr as ``querator: <code> <message>``. Exit status: 0
success, 1 the server refused the call (or sent an unreadable reply), 2 a usage error, 3 no reply at all
(connection failed or timed out; code 0), 4 ``workflows result`` waited its ``--timeout`` and the workflow
still runs (printed as found), 5 ``workflows replay`` found a journal the code disagrees with.

Modules, one per group of commands: ``_main`` (``main``: parsing, ``serve``, ``version``, ``apikey``, and
running a client command), ``_queues`` (a queue and its items), ``_workflows``, ``_schedules``,
``_tenancy`` (namespaces, users, API keys, roles, bindings), ``_worker`` (``querator worker``);
``_common`` (exit statuses, argument types, the global options) and ``_output`` (how replies print).
"""

from __future__ import annotations

from querator.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
