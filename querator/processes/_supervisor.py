"""The supervisor: ``querator serve --processes N`` with N > 1 runs N processes and restarts them.

It opens what must outlive a process: one private listening socket per process on 127.0.0.1, where the
others forward to it (a restarting process's forwards wait in that socket's backlog instead of being
refused; for a cluster node, a socket per process at its ``process-ports`` port, where the other nodes
forward to it too, each process being a cluster member of its own), the public port reserved for the
processes to bind with ``SO_REUSEPORT`` (the kernel spreads connections among them), and, with memory
storage, the directory of the sqlite file the processes share (``_shared_dir``: removed by the supervisor
or, when it is killed, by its last process). A sqlite data dir it locks for the node's life, moving its
partitions first when another number of processes wrote it (``_data_dir``); the processes inherit the
lock's descriptor, so the lock outlives a killed supervisor until they stopped.
It then starts each process (``python -m querator.server``) with its role in the environment
(``_role``), restarts one that dies with a back-off, passes SIGTERM and SIGINT on and waits for all.
A process that exits with the configuration error status (2) stops the node: restarting cannot fix a
setting. Neither can it fix a process that keeps failing soon after its start: after ``MAX_FAILURES``
in a row the node stops with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from querator import backoff
from querator.clock import SystemClock
from querator.config import ConfigError, ServerConfig, split_address
from querator.errors import StorageError
from querator.processes._data_dir import database
from querator.processes._data_dir import held as data_dir_held
from querator.processes._role import ProcessRole, role_env
from querator.processes._shared_dir import hold
from querator.storage.sqlite import SqliteStore

log = logging.getLogger(__name__)

BACKLOG = 1024
"""Connections a private socket queues: forwards wait there while their process restarts."""
EXIT_CONFIG = 2
"""A process's exit status for a setting it cannot use (``querator serve``'s)."""
EXIT_FAILING = 1
"""The node's exit status when a process keeps failing."""
STABLE_S = 10.0
"""Seconds a process must run before its exit counts as a crash rather than a failure to start."""
MAX_FAILURES = 5
"""Failures to start in a row after which the node gives up."""
BACKOFF_S = (0.5, 10.0)
"""First and longest pause before a restart; doubled after each failure to start."""
STOP_TIMEOUT_S = 60.0
"""Seconds the processes get to stop after SIGTERM before they are killed."""


class _GiveUp(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def supervise(config: ServerConfig) -> int:
    """Runs the node's processes until SIGTERM or SIGINT; the exit status."""
    address, reserved = _reserve("address", config.address)
    admin_address, admin_reserved = (
        _reserve("admin-address", config.admin_address) if config.admin_address else ("", None)
    )
    config = replace(config, address=address, admin_address=admin_address)
    sockets = [sock for sock in (reserved, admin_reserved) if sock is not None]
    try:
        privates, addresses = _process_sockets(config)
        sockets += privates
        # A sqlite data dir is locked for the node's life (its processes inherit the lock), and its
        # partitions are moved first when it was written by another number of processes; after binding,
        # so that an address that cannot be used leaves no data dir behind.
        held = (
            data_dir_held(config.data_dir, config.processes)
            if config.storage == "sqlite"
            else contextlib.nullcontext(-1)
        )
        with held as lock:
            return _supervise(config, privates, addresses, lock)
    finally:
        for sock in sockets:
            sock.close()


def _supervise(
    config: ServerConfig, privates: list[socket.socket], addresses: tuple[str, ...], lock: int
) -> int:
    shared_dir = tempfile.mkdtemp(prefix="querator-") if config.storage == "memory" else ""
    shared_lock = hold(shared_dir) if shared_dir else -1  # a process stopping after us removes it
    try:
        return asyncio.run(_Supervisor(config, privates, addresses, shared_dir, lock).run())
    finally:
        if shared_dir:
            shutil.rmtree(shared_dir, ignore_errors=True)
            os.close(shared_lock)


def _process_sockets(config: ServerConfig) -> tuple[list[socket.socket], tuple[str, ...]]:
    """One listening socket per process, where the others forward to it, and the address it is reached
    at: on 127.0.0.1 for a node alone; for a cluster node, where other nodes forward to it too, at its
    port of ``process-ports`` on the API address's host, advertised with the advertise address's."""
    if not config.cluster:
        alone = [socket.create_server(("127.0.0.1", 0), backlog=BACKLOG) for _ in range(config.processes)]
        return alone, tuple(f"127.0.0.1:{s.getsockname()[1]}" for s in alone)
    host = split_address(config.address)[0]
    socks: list[socket.socket] = []
    for port in config.cluster_process_ports():
        try:
            socks.append(socket.create_server((host, port), backlog=BACKLOG))
        except OSError as e:
            for sock in socks:
                sock.close()
            raise ConfigError(
                f"process-ports is invalid; cannot listen on '{host}:{port}': {e.strerror or e}"
            ) from None
    advertised = split_address(config.advertise_address)[0]
    return socks, tuple(f"{advertised}:{s.getsockname()[1]}" for s in socks)


def _reserve(name: str, address: str) -> tuple[str, socket.socket]:
    """Binds ``address`` without listening, so that the processes can bind it too (``SO_REUSEPORT``) but
    no other program can; returns it with the port the system chose for port 0."""
    host, port = split_address(address)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Bound first without SO_REUSEPORT: a port another node's processes share refuses this bind,
        # where with it the two nodes would silently share the port. Set after, it lets ours bind.
        sock.bind((host, port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError as e:
        sock.close()
        raise ConfigError(f"{name} is invalid; cannot listen on '{address}': {e.strerror or e}") from None
    return f"{address.rpartition(':')[0]}:{sock.getsockname()[1]}", sock


def _cluster_secret(config: ServerConfig) -> bytes:
    """A secret of this run for the processes to sign their forwards with, when they must be signed (API
    keys are on: a forward carries no key) and none is configured (a configured one is read by each)."""
    if config.cluster_secret_file or not (config.api_keys.strip() or config.api_keys_file or config.tenancy):
        return b""
    return secrets.token_hex(32).encode("ascii")


class _Supervisor:
    def __init__(
        self,
        config: ServerConfig,
        privates: list[socket.socket],
        addresses: tuple[str, ...],
        shared_dir: str,
        data_dir_lock: int,
    ) -> None:
        self._config = config
        self._data_dir_lock = data_dir_lock
        """The sqlite data dir's lock (-1 for other storage): each process holds it too while it runs."""
        self._privates = privates
        self._addresses = addresses
        self._shared_db = str(Path(shared_dir) / "shared.db") if shared_dir else ""
        self._secret = _cluster_secret(config)
        self._clock = SystemClock()
        self._stop = asyncio.Event()
        self._running: dict[int, asyncio.subprocess.Process] = {}
        self._parent_read, self._parent_write = os.pipe()  # the processes see end of file when we go

    async def run(self) -> int:
        await self._create_shared()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        log.info(
            "querator supervising %d processes on %s (%s addresses %s)",
            len(self._privates),
            self._config.address,
            "member" if self._config.cluster else "private",
            ", ".join(self._addresses),
        )
        keepers = [asyncio.ensure_future(self._keep(i)) for i in range(len(self._privates))]
        stopping = asyncio.ensure_future(self._stop.wait())
        status = 0
        try:
            done, _ = await asyncio.wait([*keepers, stopping], return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopping}:
                error = task.exception()
                if isinstance(error, _GiveUp):
                    status = error.status
                elif error is not None:  # a bug here must not leave the node running unsupervised
                    log.error("supervising a process failed: %r", error)
                    status = EXIT_FAILING
        finally:
            self._stop.set()
            await self._stop_all()
            for task in keepers:
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            os.close(self._parent_write)
            os.close(self._parent_read)
        log.info("stopped")
        return status

    async def _create_shared(self) -> None:
        """Creates (or migrates) the sqlite database the processes share before any opens it: processes
        creating one database at once find it locked (``SQLITE_BUSY``) while another sets it up."""
        config = self._config
        if config.storage == "memory":
            path, synchronous, setting = self._shared_db, "OFF", "storage memory is unavailable"
        elif config.storage == "sqlite":
            path, synchronous, setting = (
                str(database(config.data_dir, 0)),
                config.sqlite_synchronous,
                "data-dir is invalid",
            )
        else:
            return
        store = SqliteStore(path, synchronous=synchronous)
        try:
            await store.open()
        except StorageError as e:
            raise ConfigError(f"{setting}; {e.message}") from None
        await store.close()

    async def _keep(self, index: int) -> None:
        """Runs process ``index`` until the node stops, restarting it when it ends."""
        failures = 0
        while not self._stop.is_set():
            started = self._clock.monotonic()
            proc = await self._spawn(index)
            self._running[index] = proc
            status = await proc.wait()
            del self._running[index]
            if self._stop.is_set():
                return
            if status == EXIT_CONFIG:
                log.error("process %d refused its settings (exit status %d): stopping", index, status)
                raise _GiveUp(EXIT_CONFIG)
            failures = 0 if self._clock.monotonic() - started >= STABLE_S else failures + 1
            if failures >= MAX_FAILURES:
                log.error(
                    "process %d failed %d times in a row soon after starting: stopping", index, failures
                )
                raise _GiveUp(EXIT_FAILING)
            pause_s = backoff.bound_s(failures, *BACKOFF_S)
            log.warning("process %d ended (exit status %s): restarting it in %.1fs", index, status, pause_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), pause_s)

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        private = self._privates[index].fileno()
        role = ProcessRole(index, self._addresses, private, self._parent_read, self._secret, self._shared_db)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "querator.server",
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, **role_env(self._config, role)},
            pass_fds=(private, self._parent_read, *(lock for lock in [self._data_dir_lock] if lock >= 0)),
        )
        log.info("process %d started (pid %d)", index, proc.pid)
        return proc

    async def _stop_all(self) -> None:
        """SIGTERM to every process, then waits; one still running after ``STOP_TIMEOUT_S`` is killed."""
        procs = list(self._running.values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if not procs:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), STOP_TIMEOUT_S)
        except TimeoutError:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
