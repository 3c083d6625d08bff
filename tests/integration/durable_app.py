"""The workflows of tests/integration/test_durable.py, run by real ``querator worker`` processes.

Every step run appends a JSON line to ``$DURABLE_RECORDS/<pid>.jsonl`` (appends of one short line do not
interleave), so a test counts the side effects of every process: a step that ran twice shows twice.
``hold`` waits for the file ``$DURABLE_RECORDS/release-<key>``, which the test creates when ready.
``$DURABLE_VARIANT`` changes the code of ``evolving``, as a deploy would, and
``$DURABLE_APP_VERSION`` is the app's version. ``approved_order`` serves the
console's tests (tests/integration/test_console_durable.py); ``taken_over`` and ``five_ticks`` serve the
fault tests (tests/integration/test_durable_faults.py and tests/reliability/test_durable_checker.py): their
steps return which run made the recorded result.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from querator.durable import Context, Durable, SignalTimeout, StepFailed
from querator.worker import Permanent, backoff

app = Durable(
    queue="durable", concurrency=8, claim_timeout="3s", version=os.environ.get("DURABLE_APP_VERSION", "")
)
RECORDS = Path(os.environ.get("DURABLE_RECORDS", "."))


def record(step: str, **fields: Any) -> None:
    line = json.dumps({"step": step, "pid": os.getpid(), **fields})
    with (RECORDS / f"{os.getpid()}.jsonl").open("a") as f:
        f.write(line + "\n")


def failures(key: str) -> int:
    """How many times the step of ``key`` ran before, by the records of every process."""
    return sum(
        1
        for path in RECORDS.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if json.loads(line).get("key") == key
    )


@app.step()
async def add(key: str, x: int, y: int) -> int:
    record("add", key=key)
    return x + y


@app.step(max_attempts=5, retry=backoff.fixed("100ms"))
async def flaky(key: str, fail_times: int) -> str:
    before = failures(key)
    record("flaky", key=key)
    if before < fail_times:
        raise RuntimeError(f"failure {before + 1}")
    return f"ok after {before + 1}"


@app.step(max_attempts=2, retry=backoff.fixed("100ms"))
def doomed(key: str) -> None:
    record("doomed", key=key)
    raise ValueError("never works")


@app.step()
async def forbidden(key: str) -> None:
    record("forbidden", key=key)
    raise Permanent("not allowed")


@app.step()
async def hold(key: str) -> str:
    """Waits for the test's release file: a step in flight while the test does something."""
    record("hold", key=key, phase="started")
    while not (RECORDS / f"release-{key}").exists():  # noqa: ASYNC110 - another process makes it
        await asyncio.sleep(0.05)
    record("hold", key=key, phase="ended")
    return "held"


@app.step()
async def hold_for_pid(key: str) -> int:
    """``hold`` that returns its process's id: the journal tells which worker's run it recorded."""
    record("hold_for_pid", key=key, phase="started")
    while not (RECORDS / f"release-{key}").exists():  # noqa: ASYNC110 - another process makes it
        await asyncio.sleep(0.05)
    record("hold_for_pid", key=key, phase="ended")
    return os.getpid()


@app.step(max_attempts=0)
async def tick(key: str, i: int) -> str:
    """Records its run, with an id of its own, before any work; takes a while (so that kills land while
    steps run) and returns that id: a recorded result names the one run it came from. No attempt limit:
    a worker lost in a step counts as one of its attempts, and the kill test may hit the same step any
    number of times (the limit's own test: test_a_step_that_kills_its_worker_fails_after_its_attempts)."""
    run = uuid.uuid4().hex
    record("tick", key=key, i=i, run=run, at=time.monotonic())  # one clock for every process of the host
    await asyncio.sleep(random.uniform(0.05, 0.5))  # the step's work
    return run


@app.step()
def undo(key: str, what: str) -> None:
    record("undo", key=key, what=what)


@app.workflow()
async def three_steps(ctx: Context, key: str) -> list[int]:
    a = await ctx.run(add, f"{key}-1", 1, 2)
    b = await ctx.run(add, f"{key}-2", a, 10)
    c = await ctx.run(add, f"{key}-3", b, 100)
    return [a, b, c]


@app.workflow()
async def searched(ctx: Context, key: str) -> str:
    """Sets search attributes before a step held in flight (a list finds the run meanwhile), then again."""
    ctx.set_search_attributes({"customer": key, "amount": 30})
    held = await ctx.run(hold, key)
    ctx.set_search_attributes({"amount": 40, "shipped": True})
    await ctx.run(add, f"{key}-2", 1, 1)
    return held


@app.workflow()
async def held_in_the_middle(ctx: Context, key: str) -> list[Any]:
    first = await ctx.run(add, f"{key}-1", 1, 1)
    middle = await ctx.run(hold, key)
    last = await ctx.run(add, f"{key}-3", 2, 2)
    return [first, middle, last]


@app.workflow()
async def retried(ctx: Context, key: str, fail_times: int) -> str:
    return await ctx.run(flaky, key, fail_times)


@app.workflow()
async def catches(ctx: Context, key: str) -> str:
    try:
        await ctx.run(doomed, key)
    except StepFailed as e:
        return f"caught {e.error}"
    return "not reached"


@app.workflow()
async def saga(ctx: Context, key: str) -> None:
    await ctx.run(add, f"{key}-a", 1, 1)
    ctx.on_failure(undo, key, "a")
    await ctx.run(add, f"{key}-b", 2, 2)
    ctx.on_failure(undo, key, "b")
    await ctx.run(forbidden, key)


@app.workflow()
async def sleeper(ctx: Context, key: str, seconds: float) -> str:
    await ctx.run(add, f"{key}-before", 0, 0)
    await ctx.sleep(timedelta(seconds=seconds))
    await ctx.run(add, f"{key}-after", 0, 0)
    return "awake"


@app.workflow()
async def approval(ctx: Context, key: str, timeout_s: float) -> Any:
    try:
        decision = await ctx.wait_for_signal("approval", timeout=timedelta(seconds=timeout_s))
    except SignalTimeout:
        return "timed out"
    second = await ctx.wait_for_signal("approval", timeout=timedelta(seconds=timeout_s))
    return [decision, second]


@app.workflow()
async def approved_order(ctx: Context, key: str) -> dict[str, Any]:
    """Waits for one ``approval`` signal between two steps (the console's tests send it)."""
    total = await ctx.run(add, f"{key}-1", 40, 2)
    decision = await ctx.wait_for_signal("approval")
    await ctx.run(add, f"{key}-2", 0, 0)
    return {"total": total, "decision": decision}


@app.workflow()
async def fan_out(ctx: Context, key: str, n: int) -> int:
    parts = await ctx.gather(*(ctx.run(add, f"{key}-{i}", i, 0) for i in range(n)))
    return sum(parts)


@app.workflow()
async def parent(ctx: Context, key: str) -> dict[str, Any]:
    child = await ctx.child(three_steps, f"{key}-child")
    return {"child": child}


@app.workflow()
async def waits_forever(ctx: Context, key: str) -> None:
    await ctx.run(add, f"{key}-1", 1, 1)
    ctx.on_failure(undo, key, "first")
    await ctx.child(approval, f"{key}-child", 3600.0)


@app.workflow()
async def evolving(ctx: Context, key: str) -> int:
    variant = os.environ.get("DURABLE_VARIANT")
    if variant == "renamed":
        await ctx.run(undo, key, "x")  # the deploy put another step where `add` was recorded
    elif variant == "patched":  # the same change behind a patch (docs/durable.md)
        if ctx.patched("undo-first"):
            await ctx.run(undo, key, "x")
    elif variant == "deprecated":  # the patch's second step: its new code only
        ctx.deprecate_patch("undo-first")
        await ctx.run(undo, key, "x")
    first = await ctx.run(add, f"{key}-1", 1, 1)
    await ctx.wait_for_signal("go")
    return first + await ctx.run(add, f"{key}-2", 1, 1)


@app.workflow()
async def taken_over(ctx: Context, key: str) -> list[int]:
    first = await ctx.run(hold_for_pid, f"{key}-a")
    second = await ctx.run(hold_for_pid, f"{key}-b")
    return [first, second]


@app.workflow()
async def five_ticks(ctx: Context, key: str) -> list[str]:
    return [await ctx.run(tick, key, i) for i in range(1, 6)]


@app.workflow()
async def undone_on_failure(ctx: Context, key: str) -> list[Any]:
    first = await ctx.run(add, f"{key}-1", 1, 1)
    ctx.on_failure(undo, key, "first")
    middle = await ctx.run(hold, key)
    return [first, middle]


@app.workflow()
async def unrecordable(ctx: Context, how: str) -> Any:
    """Ends with an outcome the worker cannot record: a value JSON cannot hold, or one past the record's
    size limit."""
    if how == "unserializable":
        return {1j}
    return "x" * (9 * 1024 * 1024)


@app.step(max_attempts=2)
async def kills_its_worker(key: str) -> None:
    """Dies as a step out of memory or in a segfault would: its worker with it, once the test has seen
    the run (the file ``release-<key>-<runs before>``), so the worker is up when the test looks."""
    before = failures(key)
    record("kills", key=key)
    while not (RECORDS / f"release-{key}-{before}").exists():  # noqa: ASYNC110 - the test's signal
        await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)


@app.workflow()
async def deadly(ctx: Context, key: str) -> str:
    try:
        await ctx.run(kills_its_worker, key)
    except StepFailed as e:
        return f"caught {e.error}"
    return "not reached"


@app.workflow()
async def deadly_gathered(ctx: Context, key: str) -> str:
    """``deadly`` with the step dispatched to a worker of its own (``Context.gather``)."""
    try:
        await ctx.gather(ctx.run(kills_its_worker, key))
    except StepFailed as e:
        return f"caught {e.error}"
    return "not reached"


def die_once(marker: str) -> None:
    """Kills this worker (kill -9) if the file ``marker`` exists, taking it away: a fault the test set
    up, met once whichever worker comes there first."""
    try:
        (RECORDS / marker).unlink()
    except FileNotFoundError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


@app.step()
async def count(key: str, i: int) -> int:
    record("count", key=f"{key}-{i}")
    die_once(f"die-in-step-{key}-{i}")
    return i


@app.workflow()
async def looping(ctx: Context, key: str, i: int, n: int, total: int) -> int:
    """A step a run, continued as new until run ``n``: its journal stays one run's (one entry)."""
    total += await ctx.run(count, key, i)
    if i < n:
        die_once(f"die-before-continue-{key}-{i}")  # its step run, its result and continue not yet sent
        ctx.continue_as_new(key, i + 1, n, total)
    return total


@app.workflow()
async def collector(ctx: Context, key: str, got: list[str], want: int) -> list[str]:
    """Takes one signal a run and continues as new until it has ``want``: those sent meanwhile wait."""
    got = [*got, await ctx.wait_for_signal("item")]
    if len(got) < want:
        ctx.continue_as_new(key, got, want)
    return got
