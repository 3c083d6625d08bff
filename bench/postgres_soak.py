"""Dead tuples of the PostgreSQL store under a steady cycle: does the churn stay bounded?

Runs ``bench/bench.py --storage postgres --scenario cycle`` for ``--minutes`` against one PostgreSQL
(started here with ``tests/postgres_node.py``, the server's defaults, or ``--postgres-url``) and samples
``pg_stat_user_tables`` and the tables' sizes (indexes included) every ``--every`` seconds: every lease
and complete leaves dead row versions, and autovacuum must keep up with them.

    python bench/postgres_soak.py --minutes 5 --batch 1 --clients 32 --partitions 8
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.postgres_node import PostgresNode  # noqa: E402

TABLES = ("items", "partitions")
_SAMPLE = (
    "SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, "
    "pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE schemaname = %s AND relname = ANY(%s)"
)


def sample(url: str, schema: str) -> dict[str, tuple[int, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0]: tuple(r[1:]) for r in conn.execute(_SAMPLE, (schema, list(TABLES))).fetchall()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres-url", help="a running PostgreSQL (otherwise one is started)")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    node = None
    url = args.postgres_url
    if url is None:
        node = PostgresNode()
        node.start()
        url = node.url
    # bench.py names its schema after its own process id.
    bench = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "bench.py"),
            "--storage=postgres",
            f"--postgres-url={url}",
            "--scenario=cycle",
            f"--batch={args.batch}",
            f"--clients={args.clients}",
            f"--partitions={args.partitions}",
            f"--duration={args.minutes * 60}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    schema = f"bench_{bench.pid}"
    shape = f"batch {args.batch}, {args.clients} clients, {args.partitions} partitions"
    print(f"# cycle, {shape}, {args.minutes} min")
    print("| s | table | live | dead | updates | HOT | autovacuums | size kB |")
    print("|---|---|---|---|---|---|---|---|")
    start_s = time.monotonic()  # a benchmark's wall clock, outside querator (querator/clock.py)
    try:
        while bench.poll() is None:
            time.sleep(args.every)
            for table, row in sorted(sample(url, schema).items()):
                live, dead, updates, hot, vacuums, size_bytes = row
                elapsed_s = time.monotonic() - start_s
                print(
                    f"| {elapsed_s:.0f} | {table} | {live} | {dead} | {updates} | {hot} | {vacuums} "
                    f"| {size_bytes // 1024} |",
                    flush=True,
                )
        out, _ = bench.communicate()
        print(out)
    finally:
        bench.kill()
        if node is not None:
            node.close()


if __name__ == "__main__":
    main()
