"""One real PostgreSQL server on loopback for the tests: the machine's PostgreSQL, started by
``scripts/postgres.sh`` (which unpacks Debian's packages under ``.cache/postgres/`` when there is none).

Durability settings are the server's defaults (``fsync`` and ``synchronous_commit`` on): the tests pin
behaviour, and a test that restarts the server must find every committed write. ``stop()`` stops the
server the fixture started (``pg_ctl stop``), ``start()`` again reuses its data directory; ``close()``
stops it and removes the directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg.sql import SQL, Identifier

from tests.cassandra_node import free_port

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "postgres.sh"


class PostgresNode:
    """A PostgreSQL server in a temporary directory (outside pytest's, which is private to its user:
    as root the server runs as the postgres user, who must reach its directory)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="querator-postgres-"))
        self.port = free_port()
        self.url = ""

    def start(self) -> None:
        result = subprocess.run(
            [str(SCRIPT), "start", str(self.dir), str(self.port)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"scripts/postgres.sh start failed: {result.stderr[-2000:]}")
        self.url = result.stdout.strip().splitlines()[-1] + "/postgres"

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", str(self.dir)], capture_output=True, timeout=120, check=False)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def drop_schema(self, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(name)))
