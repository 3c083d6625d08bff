"""A sqlite data dir: each process's database, the number of processes it was written by, and moving the
partitions when that number changes (docs/processes.md, ADR 0025).

Each process of a node keeps its own partitions' items in its own database file (process 0 in
``querator.db``, process i in ``querator-<i>.db``), and which process owns a partition follows from the
number of processes, which the data dir records (``processes``; no record for one process). A node
started with another number first moves every partition to the database of its new owner
(``querator.storage.sqlite.move_partitions``, by the ring the processes route by), removes the
databases of processes that no longer exist, and records the new number: that record is written last,
atomically. Before moving it writes ``processes.moving``, removed after the record: a start that finds
it (a move was cut short by a crash) moves again, to whatever number it is given, so the next start
completes the work with the new number or the old one alike.

The node holds an exclusive ``flock`` on ``querator.lock`` for as long as it runs (the supervisor hands
it to its processes, which keep it while they run): no two nodes use one data dir, so none moves
partitions another is serving.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from querator.clock import SystemClock
from querator.cluster.local_members import process_owner
from querator.cluster.node import LOCAL_NODE
from querator.config import ConfigError
from querator.errors import StorageError
from querator.storage.sqlite import move_partitions, remove_database

log = logging.getLogger(__name__)

RECORD = "processes"
"""The file in the data dir holding the number of processes, when more than one wrote it."""
MOVING = "processes.moving"
"""The file saying a move of partitions began and its record is not written yet."""
LOCK = "querator.lock"
"""The file a running node holds an exclusive ``flock`` on."""
DATABASE = "querator.db"
"""The database of a node's process 0 (of its only process with ``--processes 1``)."""
LOCK_WAIT_S = 15.0
"""Seconds a start waits for the data dir's lock: the processes of a killed supervisor stop by
themselves, and let go of it then."""
LOCK_POLL_S = 0.1

_PROCESS_DATABASE = re.compile(r"querator-([1-9][0-9]*)\.db")


def database(data_dir: str | Path, index: int) -> Path:
    """The database file of process ``index`` in ``data_dir``."""
    return Path(data_dir) / (DATABASE if index == 0 else f"querator-{index}.db")


@contextlib.contextmanager
def held(data_dir: str | Path, processes: int) -> Iterator[int]:
    """Locks ``data_dir`` for a node of ``processes`` processes, moving its partitions first when it was
    written by another number (``settle``); yields the lock's descriptor, which the node's processes
    inherit, and lets go when the block ends.

    Raises:
        ConfigError: the data dir cannot be used, or another node holds it.
    """
    fd = _lock(Path(data_dir))
    try:
        settle(data_dir, processes)
        yield fd
    finally:
        os.close(fd)


def _lock(data_dir: Path) -> int:
    path = data_dir / LOCK
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its files hold payloads
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot create '{data_dir}': {e.strerror or e}") from None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot lock '{path}': {e.strerror or e}") from None
    clock = SystemClock()
    deadline = clock.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if clock.monotonic() >= deadline:
                os.close(fd)
                raise ConfigError(
                    f"data-dir is invalid; another querator node uses {data_dir} (it holds '{path}')"
                ) from None
            time.sleep(LOCK_POLL_S)  # flock has no timeout of its own
        else:
            return fd


def settle(data_dir: str | Path, processes: int) -> None:
    """Makes ``data_dir`` one of ``processes`` processes: moves its partitions when it was written by
    another number (or a move was cut short), then records the number. The caller holds its lock.

    Raises:
        ConfigError: the data dir cannot be read or written.
    """
    directory = Path(data_dir)
    recorded = _recorded(directory)
    present = _databases(directory)
    moving = (directory / MOVING).exists()
    if not moving and recorded in (processes, None) and all(i < processes for i in present):
        if recorded is None and processes > 1:
            _write(directory / RECORD, f"{processes}\n")
        return
    if moving:
        log.info(
            "a move of the partitions of %s was cut short: moving them to %d process(es)",
            directory,
            processes,
        )
    else:
        log.info(
            "%s was written by %s process(es): moving its partitions to %d", directory, recorded, processes
        )
    _write(directory / MOVING, f"{processes}\n")
    owner = process_owner(LOCAL_NODE, processes)
    databases = {i: str(database(directory, i)) for i in sorted({*present, *range(processes)})}
    try:
        moved = move_partitions(databases, owner, records=0)  # queue records are process 0's
        for index in present:
            if index >= processes:
                remove_database(databases[index])
    except StorageError as e:
        raise ConfigError(f"data-dir is invalid; {e.message}") from None
    for queue, done in sorted(moved.items()):
        if done.dropped:
            log.info(
                "queue %s: deleted while a process was down: dropped %d partition(s)", queue, done.dropped
            )
        else:
            log.info(
                "queue %s: moved %d partition(s) with %d item(s) and %d de-duplication record(s)",
                queue,
                done.partitions,
                done.items,
                done.dedup,
            )
    if processes > 1:
        _write(directory / RECORD, f"{processes}\n")
    else:
        _remove(directory / RECORD)
    _remove(directory / MOVING)
    log.info("the data dir %s is now one of %d process(es)", directory, processes)


def _recorded(directory: Path) -> int | None:
    """The number of processes the data dir was written by; None for a new one."""
    record = directory / RECORD
    try:
        text = record.read_text().strip()
    except FileNotFoundError:
        return 1 if database(directory, 0).exists() else None
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot read '{record}': {e.strerror or e}") from None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"data-dir is invalid; '{record}' holds {text!r}, not a number of processes")
    return int(text)


def _databases(directory: Path) -> list[int]:
    """The indexes of the processes whose databases are in the data dir."""
    found = [0] if database(directory, 0).exists() else []
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot read '{directory}': {e.strerror or e}") from None
    found += sorted(int(m.group(1)) for name in names if (m := _PROCESS_DATABASE.fullmatch(name)))
    return found


def _write(path: Path, text: str) -> None:
    """Writes ``path`` atomically and durably: a temporary file renamed over it, then the directory."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        _sync_directory(path.parent)
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot write '{path}': {e.strerror or e}") from None


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
        _sync_directory(path.parent)
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot remove '{path}': {e.strerror or e}") from None


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
