"""The sqlite data dir in real ``querator serve`` processes: what start-up refuses, and what damage and a
full disk do to a running node (docs/storage.md, "Damage and a full disk").

A refusal is exit status 2 and one line on stderr naming ``data-dir``, as for any bad setting.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import START_DEADLINE, Servers, free_port, wait_until


def sqlite_args(data_dir: Path) -> tuple[str, ...]:
    return ("--storage", "sqlite", "--data-dir", str(data_dir))


def refused_start(servers: Servers, *args: str) -> str:
    """Starts a server that must refuse to start; returns its one line of stderr."""
    server = servers.spawn(*args, "--address", f"127.0.0.1:{free_port()}")
    wait_until(
        lambda: not server.running() or "querator listening" in server.stderr(),
        START_DEADLINE,
        "the server exits or listens",
    )
    assert server.proc.poll() == 2, server.describe()
    stderr = server.stderr()
    assert stderr.count("\n") == 1, stderr  # one line, no traceback
    return stderr


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
