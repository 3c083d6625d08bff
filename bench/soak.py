"""Soak: a steady workload against one Querator node for a long time, with a fault every few minutes.

    python bench/soak.py                                   # 30 min, sqlite, 500 items/s, a fault every 5 min
    python bench/soak.py --duration 3m --fault-every 1m    # a short one
    python bench/soak.py --storage memory --faults sigstop # kill -9 would lose a memory node's items

It starts its own ``querator serve`` (sqlite in a temporary directory, Cassandra on the tests' node
started for the run, or memory), creates a queue of ``--partitions`` partitions with a short lease
timeout, and runs the reliability tests' workload (tests/reliability/history.py) at ``--rate`` items/s:
producers of 1-5 items per request, consumers that lease up to 5 items and complete most of them, retry
some now and abandon a few (their leases expire).
Every ``--fault-every`` it injects the next of ``--faults``, in turn:

- ``kill9``: SIGKILL, then a restart on the same data directory and port;
- ``sigstop``: SIGSTOP for ``--pause`` (longer than the lease timeout), then SIGCONT.

Every ``--sample-every`` it appends a row to ``soak.csv`` in ``--out``: the server's RSS and open file
descriptors, items/s produced and completed, p50/p99 latency of produce, lease and complete as the
client saw them (a lease's includes its long poll's wait for an item), errors, the queue's counts, and
the faults that began in the window. At the end it stops the workload, drains the queue, runs the
reliability checker on the whole history, draws ``soak.svg``, prints a summary, and exits 1 if the
checker found anything lost, unexpected, duplicated or stranded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import gc
import html
import math
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# Run as a script (python bench/soak.py), only bench/ is on the path; the workload and checker live in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from querator.client import AsyncClient
from querator.duration import DurationError, format_duration, parse_duration
from querator.errors import RetryRequest
from tests.cassandra_node import CassandraNode
from tests.integration.conftest import ServerProcess, Servers, kill9, terminate
from tests.reliability.checker import Report, check
from tests.reliability.history import History, Op, Workload, drain

QUEUE = "soak"
FAULTS = ("kill9", "sigstop")
NANOS = 1_000_000_000
PROGRESS_EVERY = 60.0
"""Seconds between the progress lines printed while the soak runs."""


@dataclass
class SoakConfig:
    out: Path
    storage: str = "sqlite"
    duration: float = 1800.0
    rate: float = 500.0
    """Items per second, over all producers."""
    producers: int = 3
    consumers: int = 4
    partitions: int = 4
    lease_timeout: float = 2.0
    retry: float = 0.05
    abandon: float = 0.05
    fault_every: float = 300.0
    """Seconds between faults; 0 for none."""
    faults: tuple[str, ...] = FAULTS
    pause: float = 5.0
    """Seconds a ``sigstop`` fault keeps the server stopped."""
    sample_every: float = 10.0
    seed: int = 0

    def problem(self) -> str | None:
        """Why this configuration cannot run, if it cannot."""
        if self.duration <= 0 or self.sample_every <= 0:
            return "the duration and the sample interval must be positive"
        if unknown := [f for f in self.faults if f not in FAULTS]:
            return f"unknown faults {unknown}: choose from {', '.join(FAULTS)}"
        if "kill9" in self.faults and self.storage == "memory" and self.fault_every:
            return "kill9 loses every item of a memory node (the checker would report them lost): use sigstop"
        if "sigstop" in self.faults and self.pause <= self.lease_timeout:
            return "the sigstop pause must be longer than the lease timeout, so that leases expire meanwhile"
        return None

    def fault_schedule(self) -> list[tuple[float, str]]:
        """(seconds after the start, fault) for every fault that begins before the end."""
        if not self.fault_every or not self.faults:
            return []
        count = math.ceil(self.duration / self.fault_every) - 1
        return [((k + 1) * self.fault_every, self.faults[k % len(self.faults)]) for k in range(count)]


@dataclass
class FaultMark:
    kind: str
    start: float
    """Seconds after the workload started."""
    end: float = 0.0
    """When the server answered again (kill9) or was continued (sigstop)."""


@dataclass
class Sample:
    """One row of the CSV: the window since the previous sample. None (an empty cell): not measured, e.g.
    no such operation returned in the window, or the server was down or stopped."""

    t_s: float
    server_pid: int
    server_rss_mb: float | None
    server_fds: int | None
    produced_per_s: float
    completed_per_s: float
    produce_p50_ms: float | None
    produce_p99_ms: float | None
    lease_p50_ms: float | None
    lease_p99_ms: float | None
    complete_p50_ms: float | None
    complete_p99_ms: float | None
    errors: int
    """Operations refused or unanswered, not counting leases that found nothing to lease."""
    queued: int | None
    """Items in the queue, leased ones included (queue.stats)."""
    leased: int | None
    soak_rss_mb: float | None
    """This process: the history grows with the run."""
    faults: str
    """The faults that began in the window."""

    def row(self) -> list[str]:
        return [_cell(getattr(self, f.name)) for f in fields(self)]


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


@dataclass
class SoakResult:
    config: SoakConfig
    samples: list[Sample]
    faults: list[FaultMark]
    report: Report
    operations: int
    csv_path: Path
    svg_path: Path


# --- measuring -------------------------------------------------------------------------------------------


def process_rss_mb(pid: int | str) -> float | None:
    """VmRSS of a process, or None if it is gone (a zombie has no VmRSS line either)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def percentile_ms(seconds: list[float], p: float) -> float | None:
    """Nearest-rank percentile, in milliseconds, of a sorted list (as bench.py reports them)."""
    if not seconds:
        return None
    return seconds[min(len(seconds) - 1, int(p * len(seconds)))] * 1000


class Returned:
    """Hands out each operation of a history once, after it returned.

    Operations enter the history when called, so the ones still in flight at a look are kept aside
    and handed out at a later one: each lands in the window in which its answer came.
    """

    def __init__(self, history: History) -> None:
        self.history = history
        self.looked = 0
        self.in_flight: list[Op] = []

    def since_last(self) -> list[Op]:
        fresh = self.history.ops[self.looked :]
        self.looked += len(fresh)
        ops = self.in_flight + fresh
        self.in_flight = [op for op in ops if not op.returned]
        return [op for op in ops if op.returned]


def is_error(op: Op) -> bool:
    # A lease that found nothing before its timeout is answered 454: the normal end of a long poll.
    empty_lease = op.kind == "lease" and op.error.startswith(str(RetryRequest.code))
    return op.outcome != "ok" and not empty_lease


class Node:
    """The server under test. A kill9 fault replaces its process: same arguments, data and port."""

    def __init__(self, servers: Servers, args: Sequence[str]) -> None:
        self.servers = servers
        self.args = tuple(args)
        self.process: ServerProcess | None = None

    @property
    def server(self) -> ServerProcess:
        assert self.process is not None, "the node was not started"
        return self.process

    async def start(self, port: int | None = None) -> None:
        self.process = await self.servers.astart(*self.args, port=port)

    async def inject(self, fault: str, pause: float) -> None:
        server = self.server
        if fault == "kill9":
            await asyncio.to_thread(kill9, server)
            await self.start(server.port)
        elif fault == "sigstop":
            os.kill(server.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(pause)  # the fault itself: the server stays stopped this long
            finally:
                os.kill(server.pid, signal.SIGCONT)
        else:
            raise ValueError(f"unknown fault {fault!r}")


class Sampler:
    """Takes a sample every ``config.sample_every`` seconds until ``stop`` is set, then one last one."""

    def __init__(
        self, config: SoakConfig, node: Node, history: History, start: float, log: Callable[[str], None]
    ) -> None:
        self.config = config
        self.node = node
        self.start = start
        self.log = log
        self.returned = Returned(history)
        self.samples: list[Sample] = []
        self.faults: list[FaultMark] = []
        self.stop = asyncio.Event()
        self.csv_path = config.out / "soak.csv"
        self._last = start
        self._faults_seen = 0

    async def run(self) -> None:
        every = self.config.sample_every
        async with AsyncClient(self.node.server.url) as client:
            with self.csv_path.open("w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow([f.name for f in fields(Sample)])
                tick = 1
                next_progress = PROGRESS_EVERY
                while not self.stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), self.start + tick * every - time.monotonic())
                    # Skip the ticks a slow sample overran rather than taking them late, back to back.
                    tick = max(tick, int((time.monotonic() - self.start) / every)) + 1
                    sample = await self.take(client)
                    self.samples.append(sample)
                    writer.writerow(sample.row())
                    out.flush()  # a long run can be followed (and survives an interruption) as it goes
                    # Half an interval early still counts: asyncio may wake a timer a hair before its time.
                    if sample.t_s + every / 2 >= next_progress:
                        self.log(progress_line(sample))
                        while next_progress <= sample.t_s + every / 2:
                            next_progress += PROGRESS_EVERY
                    # The history only grows: keep the collector from scanning it again and again (at
                    # a million operations a full collection pauses the clients for about 0.4 s, which
                    # would show in the measured latencies as if it were the server's).
                    gc.freeze()

    async def take(self, client: AsyncClient) -> Sample:
        # The process first, before anything awaits: a fault due at this very tick runs only then.
        pid = self.node.server.pid
        rss = process_rss_mb(pid)
        fds = None if rss is None else open_fds(pid)  # a dying process has no VmRSS, and no fds left
        now = time.monotonic()
        window = max(now - self._last, 1e-9)
        self._last = now
        ops = self.returned.since_last()
        latencies: dict[str, list[float]] = {"produce": [], "lease": [], "complete": []}
        produced = completed = errors = 0
        for op in ops:
            if is_error(op):
                errors += 1
            if op.outcome != "ok":
                continue
            if op.kind in latencies:
                latencies[op.kind].append(op.returned - op.called)
            if op.kind == "produce":
                produced += len(op.payloads)
            elif op.kind == "complete":
                completed += len(op.payloads)
        for values in latencies.values():
            values.sort()
        queued = leased = None
        try:
            # A stopped server never answers: the sample goes without the counts rather than waiting.
            stats = await asyncio.wait_for(client.stats(QUEUE), min(1.0, self.config.sample_every))
            parts = [p for lq in stats.logical_queues for p in lq.partitions]
            queued, leased = sum(p.total for p in parts), sum(p.total_leased for p in parts)
        except Exception:
            pass  # down (kill9) or stopped (sigstop): the row says so with empty cells
        new_faults = self.faults[self._faults_seen :]
        self._faults_seen += len(new_faults)
        return Sample(
            t_s=now - self.start,
            server_pid=pid,
            server_rss_mb=rss,
            server_fds=fds,
            produced_per_s=produced / window,
            completed_per_s=completed / window,
            produce_p50_ms=percentile_ms(latencies["produce"], 0.5),
            produce_p99_ms=percentile_ms(latencies["produce"], 0.99),
            lease_p50_ms=percentile_ms(latencies["lease"], 0.5),
            lease_p99_ms=percentile_ms(latencies["lease"], 0.99),
            complete_p50_ms=percentile_ms(latencies["complete"], 0.5),
            complete_p99_ms=percentile_ms(latencies["complete"], 0.99),
            errors=errors,
            queued=queued,
            leased=leased,
            soak_rss_mb=process_rss_mb("self"),
            faults=" ".join(f"{f.kind}@{f.start:.1f}s" for f in new_faults),
        )


def shown(value: float | None, form: str = ".0f") -> str:
    return "-" if value is None else format(value, form)


def window_line(s: Sample) -> str:
    return (
        f"produced {s.produced_per_s:.0f}/s, completed {s.completed_per_s:.0f}/s, p99 ms produce "
        f"{shown(s.produce_p99_ms, '.1f')} lease {shown(s.lease_p99_ms, '.1f')} complete "
        f"{shown(s.complete_p99_ms, '.1f')}, errors {s.errors}, queued {shown(s.queued)}"
    )


def progress_line(s: Sample) -> str:
    server = f"server RSS {shown(s.server_rss_mb)} MB, fds {shown(s.server_fds)}"
    return f"t={s.t_s:6.0f}s  {server}, {window_line(s)}"


# --- the run ---------------------------------------------------------------------------------------------


def storage_args(storage: str, data: Path, cassandra: CassandraNode | None) -> list[str]:
    if storage == "sqlite":
        return ["--storage", "sqlite", "--data-dir", str(data)]
    if cassandra is not None:
        return [
            "--storage",
            "cassandra",
            "--cassandra-port",
            str(cassandra.cql_port),
            "--cassandra-keyspace",
            "soak",
        ]
    return ["--storage", storage]


async def run_soak(config: SoakConfig, log: Callable[[str], None] = print) -> SoakResult:
    """Runs the soak described by ``config``; writes ``soak.csv`` and ``soak.svg`` in ``config.out``."""
    if problem := config.problem():
        raise ValueError(problem)
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "servers").mkdir(exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="querator-soak-"))
    servers = Servers(config.out / "servers")
    cassandra = CassandraNode(data / "cassandra") if config.storage == "cassandra" else None
    node = Node(servers, storage_args(config.storage, data, cassandra))
    try:
        if cassandra is not None:
            cassandra.start()
        await node.start()
        url = node.server.url
        async with AsyncClient(url) as client:
            await client.create_queue(
                QUEUE,
                lease_timeout=format_duration(round(config.lease_timeout * NANOS)),
                # Completion must be the only way out of the queue for the checker (no expiry in the run).
                expire_timeout=format_duration(round((config.duration + 3600) * NANOS)),
                partitions=config.partitions,
            )
        history = History()
        workload = Workload(
            [url],
            QUEUE,
            history,
            producers=config.producers,
            consumers=config.consumers,
            retry=config.retry,
            abandon=config.abandon,
            seed=config.seed,
            rate=config.rate,
            keep_ids=False,
        )
        start = time.monotonic()
        running = asyncio.create_task(workload.run())
        sampler = Sampler(config, node, history, start, log)
        sampling = asyncio.create_task(sampler.run())
        try:
            for at, kind in config.fault_schedule():
                await asyncio.sleep(start + at - time.monotonic())
                mark = FaultMark(kind, time.monotonic() - start)
                sampler.faults.append(mark)
                await node.inject(kind, config.pause)
                mark.end = time.monotonic() - start
                log(f"t={mark.start:6.0f}s  {fault_line(mark)}")
            await asyncio.sleep(start + config.duration - time.monotonic())
        finally:
            workload.stop.set()
            sampler.stop.set()
            await running
            await sampling
            svg_path = config.out / "soak.svg"
            svg_path.write_text(soak_chart(config, sampler.samples, sampler.faults))
        stranded = await drain(url, QUEUE, history)
        report = check(history, stranded)
        return SoakResult(
            config, sampler.samples, sampler.faults, report, len(history.ops), sampler.csv_path, svg_path
        )
    finally:
        gc.unfreeze()
        if node.process is not None and node.process.running():
            with contextlib.suppress(AssertionError):
                terminate(node.process)
        servers.close()
        if cassandra is not None:
            cassandra.stop()
        shutil.rmtree(data, ignore_errors=True)


def summary(result: SoakResult) -> str:
    config, samples, report = result.config, result.samples, result.report
    lines = [
        f"soak: {config.storage}, {format_duration(round(config.duration * NANOS))}, target "
        f"{config.rate:,.0f} items/s, {config.producers} producers, {config.consumers} consumers, "
        f"{config.partitions} partitions, lease timeout {config.lease_timeout:g} s, "
        f"retry {config.retry:.0%} / abandon {config.abandon:.0%} of leased items",
    ]
    for f in result.faults:
        lines.append(f"fault at {f.start:7.1f} s: {fault_line(f)}")
        after = next((s for s in samples if s.t_s >= f.end), None)
        if after is not None:
            lines.append(f"    the window to t={after.t_s:.0f} s: {window_line(after)}")
    if samples:
        span = samples[-1].t_s
        produced = sum(s.produced_per_s for s in samples) / len(samples)
        completed = sum(s.completed_per_s for s in samples) / len(samples)
        lines.append(
            f"samples: {len(samples)} over {span:.0f} s; mean of windows: produced {produced:,.0f}/s, "
            f"completed {completed:,.0f}/s; errors {sum(s.errors for s in samples):,}"
        )
        lines.append("server RSS per process (first sample -> last, max): " + rss_by_process(samples))
        fds = [s.server_fds for s in samples if s.server_fds is not None]
        if fds:
            lines.append(f"server open fds: first {fds[0]}, last {fds[-1]}, max {max(fds)}")
        for kind in ("produce", "lease", "complete"):
            lines.append(latency_line(kind, samples, result.faults, 3 * config.sample_every))
        soak_rss = [s.soak_rss_mb for s in samples if s.soak_rss_mb is not None]
        lines.append(
            f"history: {result.operations:,} operations; this process's RSS at the last sample "
            f"{soak_rss[-1] if soak_rss else 0:.0f} MB, at its peak (the checker's run included) "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
        )
    lines.append(f"checker: {report.summary()}")
    problems = report.problems()
    lines.append("result: FAILED: " + "; ".join(problems) if problems else "result: OK")
    lines.append(f"csv: {result.csv_path}\nsvg: {result.svg_path}")
    return "\n".join(lines)


def fault_line(fault: FaultMark) -> str:
    took = fault.end - fault.start
    if fault.kind == "kill9":
        return f"kill9, restarted and answering again after {took:.2f} s"
    return f"{fault.kind}, continued after {took:.2f} s"


def rss_by_process(samples: list[Sample]) -> str:
    spans: dict[int, list[Sample]] = {}
    for s in samples:
        if s.server_rss_mb is not None:
            spans.setdefault(s.server_pid, []).append(s)
    return "; ".join(
        f"pid {pid} ({run[0].t_s:.0f}-{run[-1].t_s:.0f} s): {run[0].server_rss_mb:.0f} -> "
        f"{run[-1].server_rss_mb:.0f} MB, max {max(s.server_rss_mb or 0 for s in run):.0f}"
        for pid, run in spans.items()
    )


def latency_line(kind: str, samples: list[Sample], faults: list[FaultMark], near: float) -> str:
    """Typical and worst windows; the worst is blamed on a fault that began at most ``near`` s before."""
    p99s = [(v, s.t_s) for s in samples if (v := getattr(s, f"{kind}_p99_ms")) is not None]
    p50s = [v for s in samples if (v := getattr(s, f"{kind}_p50_ms")) is not None]
    if not p99s:
        return f"{kind}: no operation returned"
    worst, at = max(p99s)
    cause = [f for f in faults if f.start <= at <= f.start + near]
    blame = f" ({at - cause[-1].start:.0f} s after the {cause[-1].kind})" if cause else " (no fault near)"
    return (
        f"{kind} ms: median of windows p50 {statistics.median(p50s):.1f}, p99 "
        f"{statistics.median(v for v, _ in p99s):.1f}; worst window p99 {worst:.1f} at t={at:.0f} s{blame}"
    )


# --- the chart ---------------------------------------------------------------------------------------------

WIDTH = 960
PANEL_HEIGHT = 170
HEADER = 40
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 24, 30
"""Margins around a panel's plot area: tick labels left and below, the title and legend above."""
FAULT_COLOR = "#d62728"


@dataclass
class Line:
    label: str
    color: str
    values: list[float | None]
    """One per time; None leaves a gap."""


@dataclass
class Panel:
    title: str
    lines: list[Line] = field(default_factory=list)


@dataclass
class Frame:
    """A panel's plot area: pixel edges, and the time and value at its right and top edges."""

    left: float
    right: float
    top: float
    bottom: float
    t_max: float
    y_max: float

    def x(self, t: float) -> float:
        return self.left + (self.right - self.left) * t / self.t_max

    def y(self, value: float) -> float:
        return self.bottom - (self.bottom - self.top) * value / self.y_max


def nice_step(span: float, ticks: int = 5) -> float:
    """1, 2 or 5 times a power of ten, giving about ``ticks`` steps over ``span``."""
    raw = max(span, 1e-9) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if raw <= m * power)


def tick_label(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 or value == int(value) else f"{value:g}"


def segments(points: Sequence[tuple[float, float | None]]) -> Iterator[list[tuple[float, float]]]:
    """The runs of points without a gap."""
    run: list[tuple[float, float]] = []
    for x, y in points:
        if y is None:
            if run:
                yield run
            run = []
        else:
            run.append((x, y))
    if run:
        yield run


def line_chart(title: str, times: list[float], panels: list[Panel], faults: list[FaultMark]) -> str:
    """A self-contained SVG: panels stacked on one time axis, each fault a shaded band and its name."""
    height = HEADER + len(panels) * PANEL_HEIGHT
    t_last = max([*times, *(f.end for f in faults), 1e-9])
    unit, scale = ("min", 60.0) if t_last >= 300 else ("s", 1.0)
    t_step = nice_step(t_last / scale, 10)
    # The last sample comes a little after the run's end: a 180 s run ends on the 180 tick, not the next.
    t_ticks = math.ceil(t_last / scale / t_step - 0.05)
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{LEFT}" y="24" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for n, panel in enumerate(panels):
        highest = max((v for line in panel.lines for v in line.values if v is not None), default=0.0)
        y_step = nice_step(highest or 1.0)
        y_ticks = math.floor(highest / y_step) + 1  # headroom: the highest value stays off the frame
        top = HEADER + n * PANEL_HEIGHT
        frame = Frame(
            left=LEFT,
            right=WIDTH - RIGHT,
            top=top + TOP,
            bottom=top + PANEL_HEIGHT - BOTTOM,
            t_max=t_ticks * t_step * scale,
            y_max=y_ticks * y_step,
        )
        svg.append(
            f'<text x="{frame.left}" y="{frame.top - 8}" font-weight="bold">{html.escape(panel.title)}</text>'
        )
        svg += value_axis(frame, y_step, y_ticks)
        svg += time_axis(frame, t_step, t_ticks, scale)
        if n == len(panels) - 1:
            svg.append(f'<text x="{frame.right}" y="{frame.bottom + 28}" text-anchor="end">t ({unit})</text>')
        svg += fault_bands(frame, faults)
        svg += legend(frame, panel.lines)
        for line in panel.lines:
            svg += polylines(frame, times, line)
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def value_axis(frame: Frame, step: float, ticks: int) -> list[str]:
    """Grid lines and labels, and the frame."""
    svg = []
    for k in range(ticks + 1):
        y = frame.y(k * step)
        svg.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        svg.append(
            f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_label(k * step)}</text>'
        )
    width, height = frame.right - frame.left, frame.bottom - frame.top
    svg.append(
        f'<rect x="{frame.left}" y="{frame.top}" width="{width}" height="{height}" '
        'fill="none" stroke="#999"/>'
    )
    return svg


def time_axis(frame: Frame, step: float, ticks: int, scale: float) -> list[str]:
    """Ticks below the frame, labelled in the axis's unit (``scale`` seconds)."""
    svg = []
    for k in range(ticks + 1):
        x = frame.x(k * step * scale)
        svg.append(
            f'<line x1="{x:.1f}" y1="{frame.bottom}" x2="{x:.1f}" y2="{frame.bottom + 4}" stroke="#999"/>'
        )
        svg.append(
            f'<text x="{x:.1f}" y="{frame.bottom + 16}" text-anchor="middle">{tick_label(k * step)}</text>'
        )
    return svg


def fault_bands(frame: Frame, faults: list[FaultMark]) -> list[str]:
    svg = []
    for f in faults:
        left = frame.x(f.start)
        width = max(frame.x(f.end) - left, 2)  # an instant fault stays visible
        height = frame.bottom - frame.top
        svg += [
            f'<rect x="{left:.1f}" y="{frame.top}" width="{width:.1f}" height="{height}" '
            f'fill="{FAULT_COLOR}" fill-opacity="0.15"/>',
            f'<line x1="{left:.1f}" y1="{frame.top}" x2="{left:.1f}" y2="{frame.bottom}" '
            f'stroke="{FAULT_COLOR}" stroke-dasharray="3,3"/>',
            f'<text x="{left + 3:.1f}" y="{frame.top + 10}" fill="{FAULT_COLOR}">'
            f"{html.escape(f.kind)}</text>",
        ]
    return svg


def legend(frame: Frame, lines: list[Line]) -> list[str]:
    """The labels in their lines' colours, right-aligned above the frame."""
    svg, right = [], frame.right
    for line in reversed(lines):
        svg.append(
            f'<text x="{right}" y="{frame.top - 8}" text-anchor="end" fill="{line.color}">'
            f"{html.escape(line.label)}</text>"
        )
        right -= 7 * len(line.label) + 16  # about the label's width at this font size, and a gap
    return svg


def polylines(frame: Frame, times: list[float], line: Line) -> list[str]:
    svg = []
    for run in segments(list(zip(times, line.values, strict=True))):
        if len(run) == 1:  # a polyline of one point draws nothing
            (t, v) = run[0]
            svg.append(f'<circle cx="{frame.x(t):.1f}" cy="{frame.y(v):.1f}" r="2" fill="{line.color}"/>')
        else:
            points = " ".join(f"{frame.x(t):.1f},{frame.y(v):.1f}" for t, v in run)
            svg.append(f'<polyline points="{points}" fill="none" stroke="{line.color}" stroke-width="1.5"/>')
    return svg


def soak_chart(config: SoakConfig, samples: list[Sample], faults: list[FaultMark]) -> str:
    def column(name: str) -> list[float | None]:
        return [None if (v := getattr(s, name)) is None else float(v) for s in samples]

    panels = [
        Panel("server RSS (MB)", [Line("RSS", "#9467bd", column("server_rss_mb"))]),
        Panel("server open file descriptors", [Line("fds", "#8c564b", column("server_fds"))]),
        Panel(
            "throughput (items/s)",
            [
                Line("produced", "#1f77b4", column("produced_per_s")),
                Line("completed", "#ff7f0e", column("completed_per_s")),
            ],
        ),
        Panel(
            "p99 latency per window (ms; a lease's includes its long poll)",
            [
                Line("produce", "#1f77b4", column("produce_p99_ms")),
                Line("lease", "#2ca02c", column("lease_p99_ms")),
                Line("complete", "#ff7f0e", column("complete_p99_ms")),
            ],
        ),
        Panel(
            "items in the queue (queue.stats)",
            [Line("queued", "#17becf", column("queued")), Line("leased", "#7f7f7f", column("leased"))],
        ),
    ]
    title = (
        f"Querator soak: {config.storage}, {config.rate:,.0f} items/s, "
        f"{config.partitions} partitions, lease timeout {config.lease_timeout:g} s"
    )
    return line_chart(title, [s.t_s for s in samples], panels, faults)


# --- command line ------------------------------------------------------------------------------------------


def seconds(text: str) -> float:
    """A Go duration (``30m``, ``10s``, ``1m30s``) as seconds, for argparse."""
    try:
        return parse_duration(text) / NANOS
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_args(argv: Sequence[str] | None = None) -> SoakConfig:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--storage", default=SoakConfig.storage, choices=["sqlite", "cassandra", "memory"])
    parser.add_argument(
        "--duration", type=seconds, default=SoakConfig.duration, help="Go duration; default 30m"
    )
    parser.add_argument("--rate", type=float, default=SoakConfig.rate, help="items/s over all producers")
    parser.add_argument("--producers", type=int, default=SoakConfig.producers)
    parser.add_argument("--consumers", type=int, default=SoakConfig.consumers)
    parser.add_argument("--partitions", type=int, default=SoakConfig.partitions)
    parser.add_argument("--lease-timeout", type=seconds, default=SoakConfig.lease_timeout, help="default 2s")
    parser.add_argument(
        "--retry", type=float, default=SoakConfig.retry, help="share of leased items retried now"
    )
    parser.add_argument(
        "--abandon", type=float, default=SoakConfig.abandon, help="share left to their lease's expiry"
    )
    parser.add_argument(
        "--fault-every", type=seconds, default=SoakConfig.fault_every, help="default 5m; 0 for no faults"
    )
    parser.add_argument(
        "--faults",
        help="comma-separated, injected in turn: kill9, sigstop (default both; sigstop on memory)",
    )
    parser.add_argument(
        "--pause", type=seconds, default=SoakConfig.pause, help="how long sigstop stops the server"
    )
    parser.add_argument("--sample-every", type=seconds, default=SoakConfig.sample_every, help="default 10s")
    parser.add_argument("--seed", type=int, default=SoakConfig.seed)
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for soak.csv, soak.svg and the server's logs "
        "(default bench/results/soak-<date>-<time>)",
    )
    args = parser.parse_args(argv)
    default_faults = "sigstop" if args.storage == "memory" else ",".join(FAULTS)
    faults = tuple(f.strip() for f in (args.faults or default_faults).split(",") if f.strip())
    out = args.out or Path(__file__).resolve().parent / "results" / time.strftime("soak-%Y%m%d-%H%M%S")
    # The flags are named after SoakConfig's fields, and take their defaults from it.
    config = SoakConfig(**{**vars(args), "out": out, "faults": faults})
    if problem := config.problem():
        parser.error(problem)
    return config


async def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    schedule = ", ".join(f"{kind} at {at:.0f} s" for at, kind in config.fault_schedule()) or "none"
    print(f"soak for {config.duration:.0f} s, output in {config.out}; faults: {schedule}", flush=True)
    result = await run_soak(config, log=lambda line: print(line, flush=True))
    print(summary(result))
    return 1 if result.report.problems() else 0


if __name__ == "__main__":
    run: Callable[[Coroutine[Any, Any, int]], int] = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    sys.exit(run(main()))
