"""The workflow of tests/integration/test_durable_updates.py, run by real ``querator worker`` processes.

Each time the update handler runs in a worker it appends a JSON line to ``$DURABLE_RECORDS/<pid>.jsonl``;
for the item ``held`` it then blocks until the file ``$DURABLE_RECORDS/release`` exists, so the test can
kill its worker after the server recorded the update and before the workflow answered it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from querator.durable import Context, Durable

app = Durable(queue="updates", concurrency=4, claim_timeout="3s")
RECORDS = Path(os.environ.get("DURABLE_RECORDS", "."))


def record(step: str, **fields: Any) -> None:
    line = json.dumps({"step": step, "pid": os.getpid(), **fields})
    with (RECORDS / f"{os.getpid()}.jsonl").open("a") as f:
        f.write(line + "\n")


@app.step()
async def pack(items: list[str]) -> str:
    return "+".join(items)


@app.workflow()
async def cart(ctx: Context) -> str:
    items: list[str] = []

    def add(item: str) -> int:
        if not ctx.replaying:  # in a worker (a caller's replay only validates)
            record("add", item=item)
            while item == "held" and not (RECORDS / "release").exists():
                time.sleep(0.01)  # the whole worker waits here: the test kills it
        items.append(item)
        return len(items)

    ctx.on_update("add", add)
    await ctx.wait_for_signal("checkout")
    return await ctx.run(pack, items)
