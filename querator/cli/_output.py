"""How a client command's reply prints: indented protojson, or readable tables.

``--output json`` (the default when stdout is not a terminal, so scripts and pipes keep getting JSON)
prints the server's reply as the API sends it. ``--output table`` (the default on a terminal) prints
a reply's list as a table, one row per element and one column per field that some row sets, and its
other fields as ``name: value`` lines; values are cut to ``MAX_CELL`` characters.
"""

from __future__ import annotations

import base64
import os
import sys
from datetime import datetime
from typing import Any

import msgspec

from querator.wire import encode_json
from querator.wire import messages as m

JSON = "json"
TABLE = "table"
OUTPUTS = (JSON, TABLE)
MAX_CELL = 48


def default_output() -> str:
    """``QUERATOR_OUTPUT`` when set, else a table on a terminal and JSON anywhere else."""
    return os.environ.get("QUERATOR_OUTPUT") or (TABLE if sys.stdout.isatty() else JSON)


def print_reply(msg: m.Message | dict[str, Any], output: str = JSON) -> None:
    """Writes ``msg`` to stdout as ``output`` says."""
    text = _table(msg) if output == TABLE else _json(msg)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _json(msg: m.Message | dict[str, Any]) -> str:
    if isinstance(msg, dict):
        return msgspec.json.format(msgspec.json.encode(msg), indent=2).decode()
    data = encode_json(msg)
    if isinstance(msg, m.QueueLeaseResponse):
        # JSON omits zero values, partition 0 included; the next command needs it, so say it always.
        fields = msgspec.json.decode(data)
        fields["partition"] = msg.partition
        data = msgspec.json.encode(fields)
    return msgspec.json.format(data, indent=2).decode()


def _table(msg: m.Message | dict[str, Any]) -> str:
    if msg == m.OK_REPLY:
        return "ok"
    fields = msg if isinstance(msg, dict) else _fields(msg)
    if isinstance(msg, m.QueueStatsResponse):
        # Partitions are what an operator reads; their logical queue is a column of each.
        rows = [
            {"logical_queue": n, **_fields(p)}
            for n, logical in enumerate(msg.logical_queues)
            for p in logical.partitions
        ]
        fields = {"queue_name": msg.queue_name, "partitions": rows}
    lines: list[str] = []
    tables: list[str] = []
    for name, value in fields.items():
        if isinstance(value, list) and value and all(isinstance(v, msgspec.Struct | dict) for v in value):
            tables.append(_grid(name, [v if isinstance(v, dict) else _fields(v) for v in value]))
        elif not _empty(value):
            lines.append(f"{name}: {_cell(value)}")
    if not lines and not tables:
        return "(nothing)"
    return "\n\n".join(part for part in ("\n".join(lines), *tables) if part)


def _grid(title: str, rows: list[dict[str, Any]]) -> str:
    columns = [
        c for c in dict.fromkeys(k for row in rows for k in row) if any(not _empty(r.get(c)) for r in rows)
    ]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out = [
        f"{title} ({len(rows)})",
        "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
    ]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(out)


def _fields(value: msgspec.Struct) -> dict[str, Any]:
    return {f: getattr(value, f) for f in value.__struct_fields__}


def _empty(value: Any) -> bool:
    return value is None or value in ("", [], b"", {})


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        text = value.isoformat(timespec="seconds").replace("+00:00", "Z")
    elif isinstance(value, bytes):
        try:
            text = value.decode()
        except UnicodeDecodeError:
            text = "base64:" + base64.b64encode(value).decode()
        text = text.replace("\n", "\\n")
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, list):
        text = (
            f"[{len(value)}]" if value and not isinstance(value[0], str | int) else ", ".join(map(str, value))
        )
    elif isinstance(value, msgspec.Struct | dict):
        text = "{...}"
    else:
        text = str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"
