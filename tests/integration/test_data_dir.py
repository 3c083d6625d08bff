"""The sqlite data dir in real ``querator serve`` processes: what start-up refuses, and what damage and a
full disk do to a running node (docs/storage.md, "Damage and a full disk").

A refusal is exit status 2 and one line on stderr naming ``data-dir``, as for any bad setting.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from querator.client import Client
from querator.errors import QueratorError

from .conftest import START_DEADLINE, ServerProcess, Servers, free_port, start_refused, terminate, wait_until

PAYLOAD = "x" * 2000
"""Items big enough that a few hundred of them fill many pages of the database."""
ITEMS = 400


def sqlite_args(data_dir: Path) -> tuple[str, ...]:
    return ("--storage", "sqlite", "--data-dir", str(data_dir))


def fill(server: ServerProcess, queue: str = "q", items: int = ITEMS) -> None:
    """Creates ``queue`` and produces ``items`` acknowledged items into it."""
    with Client(server.url) as client:
        client.create_queue(queue, lease_timeout="1m", expire_timeout="1h")
        for start in range(0, items, 100):
            client.produce(queue, [f"{PAYLOAD}{n}" for n in range(start, min(items, start + 100))])


def stored(server: ServerProcess, queue: str = "q") -> int:
    with Client(server.url) as client:
        return len(client.list_items(queue, 0, limit=10_000).items)


def refused_start(servers: Servers, *args: str) -> str:
    """Starts a server that must refuse to start; returns its one line of stderr."""
    return start_refused(servers, *args, "--address", f"127.0.0.1:{free_port()}").stderr()


def corrupt(db: Path) -> None:
    """Overwrites every page of ``db`` but the first (the schema) with bytes that are no b-tree page."""
    size = db.stat().st_size
    page = 8192
    assert size > 4 * page, f"{db} is too small to corrupt its middle: {size} bytes"
    with db.open("r+b") as f:
        f.seek(page)
        f.write(bytes(range(256)) * ((size - page) // 256))
        f.flush()
        os.fsync(f.fileno())


def ready(server: ServerProcess) -> tuple[int, str]:
    """``GET /ready``: its status and, when it fails, its reason."""
    try:
        with urllib.request.urlopen(server.url + "/ready", timeout=5) as resp:
            return int(resp.status), ""
    except urllib.error.HTTPError as e:
        return e.code, str(json.loads(e.read())["output"])


def not_ready(server: ServerProcess) -> str:
    """Waits until ``/ready`` fails; returns its reason."""
    reasons: list[str] = []

    def check() -> bool:
        status, reason = ready(server)
        reasons.append(reason)
        return status == 503

    wait_until(check, START_DEADLINE, "/ready answers 503")
    return reasons[-1]


def test_an_emptied_database_is_refused(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server)
    assert terminate(server) == 0
    (data / "querator.db").write_bytes(b"")  # what a lost or truncated file looks like to sqlite
    line = refused_start(servers, *sqlite_args(data))
    assert line.startswith(
        f"querator: data-dir is invalid; sqlite storage error; the database {data / 'querator.db'} is empty"
    ), line
    assert (data / "querator.db").stat().st_size == 0  # refused, not overwritten with a new store


def test_a_deleted_database_is_refused(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server, items=1)
    assert terminate(server) == 0
    (data / "querator.db").unlink()
    line = refused_start(servers, *sqlite_args(data))
    assert line.startswith(
        f"querator: data-dir is invalid; sqlite storage error; the database {data / 'querator.db'} is missing"
    ), line


def test_a_corrupt_database_is_refused(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server)
    assert terminate(server) == 0  # a clean stop checkpoints the WAL into the database file
    corrupt(data / "querator.db")
    line = refused_start(servers, *sqlite_args(data))
    assert line.startswith(
        f"querator: data-dir is invalid; sqlite storage error; the database {data / 'querator.db'} is damaged"
    ), line


def test_a_schema_with_text_that_is_not_utf8_is_refused(servers: Servers, tmp_path: Path) -> None:
    """An index renamed to the byte 0xFF: sqlite's own error names it, in bytes Python cannot decode."""
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server, items=1)
    assert terminate(server) == 0
    db = data / "querator.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET name = CAST(X'FF' AS TEXT) WHERE name = 'items_queued'")
    line = refused_start(servers, *sqlite_args(data))
    assert line == (
        f"querator: data-dir is invalid; sqlite storage error; the database {db} is damaged: sqlite"
        " reported text that is not UTF-8, 'malformed database schema (\\xff)'; restore it from a backup"
        " or repair it (sqlite3's .recover)\n"
    ), line


def test_a_new_data_dir_and_a_restart_start(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server, items=3)
    assert terminate(server) == 0
    server = servers.start(*sqlite_args(data))  # the check passes on an intact store
    assert stored(server) == 3


def test_an_unusable_data_dir_is_one_line(servers: Servers, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    line = refused_start(servers, *sqlite_args(a_file))
    assert line.startswith(f"querator: data-dir is invalid; cannot create '{a_file}'"), line
    line = refused_start(servers, *sqlite_args(a_file / "below"))
    assert line.startswith(f"querator: data-dir is invalid; cannot create '{a_file / 'below'}'"), line

    not_sqlite = tmp_path / "not-sqlite"
    not_sqlite.mkdir()
    (not_sqlite / "querator.db").write_bytes(
        b"this is no sqlite database, but it is not empty either\n" * 200
    )
    line = refused_start(servers, *sqlite_args(not_sqlite))
    assert line.startswith("querator: data-dir is invalid; "), line
    assert "not a database" in line, line

    a_dir = tmp_path / "dir-db"
    (a_dir / "querator.db").mkdir(parents=True)
    line = refused_start(servers, *sqlite_args(a_dir))
    assert line.startswith("querator: data-dir is invalid; "), line


def test_the_data_dir_and_its_files_are_private(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "parent" / "data"
    server = servers.start(*sqlite_args(data))
    fill(server, items=1)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [data, *data.iterdir()]}
    assert modes["data"] == 0o700, modes
    assert {"querator.db", "querator.db-wal", "querator.db-shm"} <= set(modes), modes
    assert all(mode == 0o600 for name, mode in modes.items() if name != "data"), modes


def test_damage_found_while_running_fails_ready_and_refuses_writes(servers: Servers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = servers.start(*sqlite_args(data))
    fill(server)
    assert terminate(server) == 0
    server = servers.start(*sqlite_args(data))  # intact: the start-up check passes
    corrupt(data / "querator.db")  # under the running server, as a failing disk would
    with Client(server.url) as client:
        with pytest.raises(QueratorError) as refused:  # the queue's partition reads damaged pages
            client.produce("q", ["into the damaged file"])
        assert refused.value.code == 454, refused.value
        reason = not_ready(server)
        assert "SQLITE_CORRUPT" in reason, reason
        # Damage does not heal: every write is refused, and the node stays out of traffic.
        for _ in range(3):
            with pytest.raises(QueratorError):
                client.produce("q", ["into the damaged file"])
            assert ready(server)[0] == 503


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs: a disk that really fills up (ENOSPC), with nothing faked in the server."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=False, capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill_up(disk: Path) -> Path:
    """Writes a file that takes every free byte of ``disk``; returns it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 65536
    try:
        while True:
            try:
                if os.write(fd, chunk) < len(chunk):
                    chunk = chunk[: max(1, len(chunk) // 2)]
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return filler
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)


def test_a_full_disk_fails_ready_until_there_is_room(small_disk: Path, servers: Servers) -> None:
    # small_disk comes first: it is unmounted after the servers on it are gone.
    data = small_disk / "data"
    server = servers.start(*sqlite_args(data))
    fill(server, items=5)
    assert ready(server) == (200, "")
    filler = fill_up(small_disk)
    with Client(server.url) as client:
        with pytest.raises(QueratorError) as refused:  # no room for it: refused, never acknowledged
            client.produce("q", [PAYLOAD])
        assert refused.value.code == 454, refused.value
        reason = not_ready(server)
        assert "SQLITE_FULL" in reason, reason
        assert ready(server)[0] == 503  # still full: still not ready
        filler.unlink()
        wait_until(lambda: ready(server)[0] == 200, START_DEADLINE, "/ready passes again")
        client.produce("q", ["after"])
    assert stored(server) == 6  # nothing acknowledged was lost
