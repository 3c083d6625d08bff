"""The temporary directory of a memory node's shared sqlite file, removed by the last one to let go.

With ``--storage memory`` the processes share a sqlite file in a directory the supervisor makes and
removes when it exits. A supervisor killed with SIGKILL removes nothing, and its processes stop by
themselves (they watch its pipe): the directory would stay in the temporary directory for good. So the
supervisor and every process hold a shared lock on it while they run (``hold``), and a process that
stops removes it when it can take the lock exclusively (``held``): when nobody else holds it, it is the
last. The kernel drops a lock with its holder, so a process killed with SIGKILL counts as gone too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator

from querator.config import ConfigError


def hold(directory: str) -> int:
    """A descriptor of ``directory`` holding a shared lock on it: keep it open while using it."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:  # removed under us (a cleaner of /tmp): nothing to share any more
        raise ConfigError(f"storage memory is unavailable; cannot open '{directory}': {e.strerror}") from None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


@contextlib.contextmanager
def held(directory: str) -> Iterator[None]:
    """Holds ``directory`` while the block runs, then removes it if nobody else holds it."""
    fd = hold(directory)
    try:
        yield
    finally:
        try:
            # Let go first: of two processes letting go at once, one then finds nobody else holding it.
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # the supervisor, or another process, still uses it
        else:
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            os.close(fd)
