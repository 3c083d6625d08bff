"""One real Cassandra node on loopback, for the tests and the benchmark.

``CassandraNode.start()`` runs ``org.apache.cassandra.service.CassandraDaemon`` (jars fetched by
``scripts/cassandra.sh fetch`` into ``.cache/``) on free ports with a 1 GiB heap and its data in a
temporary directory, then polls until a CQL query succeeds (deadline, no fixed sleeps). CQL listens on
every address, so that a Querator node in another network namespace reaches it too; the node announces
itself as 127.0.0.1. ``stop()`` kills it (only the process it started); ``start()`` again reuses the same
data directory, which is how the tests restart Cassandra under a running Querator.

``cluster(base, size)`` makes ``size`` such nodes on 127.0.0.1, 127.0.0.2, ... sharing their ports (as the
nodes of a real cluster do), one token each spread evenly over the ring, the first as the seed: what a
replication factor above 1 needs, for the replica fault tests. Its nodes listen for CQL on their own
address only.

Settings for speed, never for production: one token each, no gossip settle wait, ``skip_sync`` (no fsync of
the commit log: a killed process still leaves its writes in the page cache). ``commitlog_sync: group``
(1 ms window) is for correctness, not speed: with the default ``periodic`` mode Cassandra acknowledges
writes before their commit-log section is marked synced and replays only synced sections, so a single
node (RF 1) loses up to ``commitlog_sync_period`` of acknowledged writes when it is killed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VERSION = "5.0.8"
START_DEADLINE = 120.0
STOP_DEADLINE = 60.0

# What Cassandra's own jvm17-server.options opens up for Java 17.
JAVA17_OPTIONS = [
    *(
        f"--add-exports={m}=ALL-UNNAMED"
        for m in (
            "java.base/jdk.internal.misc",
            "java.base/jdk.internal.ref",
            "java.base/sun.nio.ch",
            "java.management.rmi/com.sun.jmx.remote.internal.rmi",
            "java.rmi/sun.rmi.registry",
            "java.rmi/sun.rmi.server",
            "java.sql/java.sql",
        )
    ),
    *(
        f"--add-opens={m}=ALL-UNNAMED"
        for m in (
            "java.base/java.lang.module",
            "java.base/jdk.internal.loader",
            "java.base/jdk.internal.ref",
            "java.base/jdk.internal.reflect",
            "java.base/jdk.internal.math",
            "java.base/jdk.internal.module",
            "java.base/jdk.internal.util.jar",
            "jdk.management/com.sun.management.internal",
            "java.base/java.io",
            "java.base/java.nio",
            "java.base/sun.nio.ch",
            "java.base/java.lang",
            "java.base/java.util",
            "java.base/java.util.concurrent",
            "java.base/java.util.concurrent.atomic",
            "java.base/java.net",
        )
    ),
]

CONFIG = """\
cluster_name: querator-test
num_tokens: 1
initial_token: {token}
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
{commitlog}
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed}:{storage_port}"
listen_address: {address}
rpc_address: {rpc_address}
broadcast_rpc_address: {address}
storage_port: {storage_port}
native_transport_port: {cql_port}
start_native_transport: true
endpoint_snitch: SimpleSnitch
data_file_directories: [{base}/data]
commitlog_directory: {base}/commitlog
saved_caches_directory: {base}/saved_caches
hints_directory: {base}/hints
cdc_raw_directory: {base}/cdc
auto_snapshot: false
hinted_handoff_enabled: false
concurrent_compactors: 1
auto_bootstrap: false
tombstone_warn_threshold: 1000
paxos_variant: v2
tombstone_failure_threshold: 100000
"""

COMMITLOG = {
    "group": "commitlog_sync: group\ncommitlog_sync_group_window: 1ms",
    "periodic": "commitlog_sync: periodic\ncommitlog_sync_period: 10000ms",
}
"""Commit-log modes: ``group`` (the tests', see above) and Cassandra's default ``periodic``, for the
benchmark harness (docs/benchmarks-log.md, "The commit-log mode")."""

LOGBACK = """\
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{base}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_on(addresses: list[str]) -> int:
    """A port free on every one of ``addresses`` (the ephemeral range is shared; try until one is)."""
    while True:
        port = free_port()
        try:
            for address in addresses[1:]:
                with socket.socket() as s:
                    s.bind((address, port))
        except OSError:
            continue
        return port


def fetch() -> Path:
    """The directory of Cassandra's jars, fetching them with mvn the first time."""
    out = subprocess.run(
        [str(ROOT / "scripts" / "cassandra.sh"), "fetch"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


class CassandraNode:
    """A single Cassandra node process; see the module docstring.

    Alone (the default) it takes free ports and listens for CQL on every address; a member of
    ``cluster()`` gets its address, the cluster's ports, its token and the seed from there.
    """

    def __init__(
        self,
        base: Path,
        address: str = "127.0.0.1",
        ports: tuple[int, int] | None = None,
        token: int = 0,
        seed: str = "127.0.0.1",
        commitlog: str = "group",
    ) -> None:
        self.base = base
        self.address = address
        self.cql_port, self.storage_port = ports or (free_port(), free_port())
        self.proc: subprocess.Popen[bytes] | None = None
        self._cluster: Any = None
        self._cql: Any = None
        self.lib = fetch()
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        config = CONFIG.format(
            base=base,
            address=address,
            rpc_address="0.0.0.0" if ports is None else address,
            seed=seed,
            token=token,
            storage_port=self.storage_port,
            cql_port=self.cql_port,
            commitlog=COMMITLOG[commitlog],
        )
        (base / "cassandra.yaml").write_text(config)
        (base / "logback.xml").write_text(LOGBACK.format(base=base))

    @property
    def log_path(self) -> Path:
        return self.base / "system.log"

    def start(self) -> None:
        """Starts the node (again, on the same data) and waits until CQL answers."""
        command = [
            "java",
            "-Xms1G",
            "-Xmx1G",
            "-Xmn256M",
            "-XX:+UseG1GC",
            "-Xss256k",
            "-XX:ActiveProcessorCount=2",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dcassandra.config=file://{self.base}/cassandra.yaml",
            f"-Dlogback.configurationFile=file://{self.base}/logback.xml",
            f"-Dcassandra.storagedir={self.base}",
            "-Dcassandra-foreground=yes",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.load_ring_state=false",
            "-Dcassandra.superuser_setup_delay_ms=0",
            "-Dcassandra.skip_sync=true",
            *JAVA17_OPTIONS,
            "-cp",
            f"{self.lib}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]
        with (self.base / "stdout.log").open("ab") as out:
            self.proc = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self) -> None:
        from cassandra.cluster import Cluster

        deadline = time.monotonic() + START_DEADLINE
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"cassandra exited with {self.proc.returncode}; see {self.log_path}")
            cluster = Cluster([self.address], port=self.cql_port, connect_timeout=2, protocol_version=5)
            try:
                session = cluster.connect()
                session.execute("SELECT release_version FROM system.local")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                cluster.shutdown()
            time.sleep(0.5)

    def empty_keyspace(self, name: str) -> list[str]:
        """Empties a keyspace a test is done with, for the next test to reuse (tests/conftest.py): truncates
        each of its tables that holds a row, and says which. A table that shows none holds only what no
        read returns (tombstones, expired cells), and a truncated one keeps nothing, not even those."""
        session = self._session()
        tables = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (name,)
        )
        truncated = []
        for table in [row.table_name for row in tables]:
            if session.execute(f"SELECT * FROM {name}.{table} LIMIT 1").one() is not None:
                session.execute(f"TRUNCATE {name}.{table}")
                truncated.append(table)
        return truncated

    def _session(self) -> Any:
        """The tests' own CQL session on the node, made on first use (the driver reconnects across a
        restart of the node)."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import RoundRobinPolicy

        if self._cluster is None:
            # TRUNCATE flushes the table first: seconds on a busy node, past the driver's default 10 s.
            profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=120)
            self._cluster = Cluster(
                [self.address],
                port=self.cql_port,
                protocol_version=5,
                execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                schema_metadata_enabled=False,
                token_metadata_enabled=False,
            )
            self._cql = self._cluster.connect()
        return self._cql

    def stop(self) -> None:
        """Kills the node (SIGKILL: what a crash looks like) and waits for it to exit."""
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = self._cql = None
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_DEADLINE)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def cluster(base: Path, size: int) -> list[CassandraNode]:
    """``size`` nodes (not started) forming one cluster; see the module docstring."""
    addresses = [f"127.0.0.{n + 1}" for n in range(size)]
    cql_port = free_port_on(addresses)
    storage_port = free_port_on(addresses)
    while storage_port == cql_port:
        storage_port = free_port_on(addresses)
    ports = (cql_port, storage_port)
    step = 2**64 // size
    return [
        CassandraNode(base / f"node{n}", address, ports, token=-(2**63) + n * step, seed=addresses[0])
        for n, address in enumerate(addresses)
    ]


def wait_all_up(nodes: list[CassandraNode]) -> None:
    """Waits until every node of a ``cluster()`` sees every other up: a write at consistency ALL through
    each of them as coordinator succeeds (a replica its failure detector still counts down refuses it).
    """
    from cassandra import ConsistencyLevel
    from cassandra.cluster import Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    deadline = time.monotonic() + START_DEADLINE
    for node in nodes:
        only = ExecutionProfile(
            load_balancing_policy=WhiteListRoundRobinPolicy([node.address]),
            consistency_level=ConsistencyLevel.ALL,
        )
        while True:
            driver = Cluster(
                [node.address], port=node.cql_port, protocol_version=5, execution_profiles={"only": only}
            )
            try:
                session = driver.connect()
                session.execute(
                    "CREATE KEYSPACE IF NOT EXISTS liveness WITH replication = "
                    f"{{'class': 'SimpleStrategy', 'replication_factor': {len(nodes)}}}"
                )
                session.execute("CREATE TABLE IF NOT EXISTS liveness.t (k int PRIMARY KEY)")
                session.execute("INSERT INTO liveness.t (k) VALUES (1)", execution_profile="only")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
            finally:
                driver.shutdown()
            time.sleep(0.5)
