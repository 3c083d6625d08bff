"""Where a local Cassandra spends its CPU, by thread pool, over a window: run it while a benchmark runs.

    python bench/cassandra_threads.py --seconds 20

Reads every thread's CPU time of the CassandraDaemon process from /proc before and after the window and
sums it by thread name with the numbers removed (``MutationStage-12`` -> ``MutationStage``; Linux keeps
the first 15 characters of a name). Tells the cost of the work itself (mutations, the native transport
that coordinates requests and Paxos) apart from the commit log, compaction, garbage collection and the
JIT compiler of a JVM that is not warm yet (docs/benchmarks-log.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path


def cassandra_pid() -> str:
    found = subprocess.run(["pgrep", "-f", "[C]assandraDaemon"], check=True, capture_output=True, text=True)
    return found.stdout.split()[0]


def thread_times(pid: str) -> dict[str, tuple[str, int]]:
    """Thread id -> (name, CPU clock ticks used)."""
    times = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        times[task.name] = (name, int(fields[11]) + int(fields[12]))
    return times


def pool(name: str) -> str:
    return re.sub(r"\d+", "#", re.sub(r"[:\-_ ]?\d+$", "", name))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the window")
    parser.add_argument("--top", type=int, default=12, help="pools to list")
    args = parser.parse_args()
    pid = cassandra_pid()
    before = thread_times(pid)
    time.sleep(args.seconds)
    after = thread_times(pid)
    used: Counter[str] = Counter()
    for tid, (name, ticks) in after.items():
        used[pool(name)] += ticks - before.get(tid, (name, 0))[1]
    total = sum(used.values()) or 1
    tick = os.sysconf("SC_CLK_TCK")
    print(f"Cassandra used {total / tick / args.seconds:.2f} cores over {args.seconds:g} s")
    print("| threads | CPU s | share |\n|---|---|---|")
    for name, ticks in used.most_common(args.top):
        print(f"| {name} | {ticks / tick:.2f} | {100 * ticks / total:.1f}% |")


if __name__ == "__main__":
    main()
