"""The number of processes a sqlite data dir was written by, recorded in it.

Each process of a node keeps its own partitions' items in its own database file (process 0 in
``querator.db``, process i in ``querator-<i>.db``), and which process owns a partition follows from the
number of processes. Started with another number, a node would look for items in the wrong files: it is
refused instead, until partitions can be moved between processes (docs/processes.md).
"""

from __future__ import annotations

from pathlib import Path

from querator.config import ConfigError

RECORD = "processes"
"""The file in the data dir holding the number of processes, when more than one wrote it."""
DATABASE = "querator.db"
"""The database of a node's process 0 (of its only process with ``--processes 1``)."""


def database(data_dir: str | Path, index: int) -> Path:
    """The database file of process ``index`` in ``data_dir``."""
    return Path(data_dir) / (DATABASE if index == 0 else f"querator-{index}.db")


def check_processes(data_dir: str | Path, processes: int) -> None:
    """Raises ConfigError unless ``data_dir`` is new or was written by ``processes`` processes; records
    the number in a new data dir of more than one process (one process writes no record: its data dir
    stays what it always was)."""
    record = Path(data_dir) / RECORD
    try:
        text = record.read_text().strip()
    except FileNotFoundError:
        text = "1" if database(data_dir, 0).exists() else ""
    except OSError as e:
        raise ConfigError(f"data-dir is invalid; cannot read '{record}': {e.strerror or e}") from None
    if text and text != str(processes):
        raise ConfigError(
            f"processes is invalid; the data dir {data_dir} was written by {text} process(es), each keeping "
            f"its own partitions: start it with --processes {text} (moving partitions between processes is "
            "not supported yet)"
        )
    if not text and processes > 1:
        try:
            Path(data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # its files hold payloads
            record.write_text(f"{processes}\n")
        except OSError as e:
            raise ConfigError(f"data-dir is invalid; cannot write '{record}': {e.strerror or e}") from None
