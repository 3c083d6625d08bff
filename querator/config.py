"""Configuration of ``querator serve``: one frozen dataclass, filled from defaults, then a YAML file,
then ``QUERATOR_*`` environment variables, then command-line flags (each later source wins).

Every setting has a flag, an environment variable (the flag's name upper-cased, dashes as underscores,
prefixed ``QUERATOR_``) and a YAML key (the flag's name). Defaults and validation live here only.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from querator.duration import SECOND, DurationError, parse_duration

if TYPE_CHECKING:
    from querator.storage.cassandra import CassandraSettings
    from querator.storage.postgres import PostgresSettings

STORAGE_KINDS = ("memory", "sqlite", "cassandra", "postgres")
SHARED_STORAGE = ("cassandra", "postgres")
"""Storage every node of a cluster (and every process of a node) shares."""
LOG_LEVELS = ("debug", "info", "warn", "warning", "error")
LOG_FORMATS = ("text", "json")
SQLITE_SYNC = ("FULL", "NORMAL")
CLUSTER_SCHEME = "etcd://"
DEFAULT_CLUSTER_PREFIX = "/querator"
# Node ids and prefixes become etcd key segments and appear in logs: keep them to a Kubernetes pod
# name's alphabet (plus upper case and underscore), so no '/' can change the key's shape.
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_PREFIX = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
_ALLOWED_HOST = re.compile(r"\*|\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")
MAX_PROCESSES = 256
"""The most processes one node runs (``--processes``): far beyond any machine's cores, but bounded."""
MAX_POSTGRES_CONNECTIONS = 100
"""The most connections one process opens to PostgreSQL (``--postgres-connections``)."""
MIN_ETCD_LEASE_TTL = 2
"""Seconds; etcd silently rounds shorter leases up to about this (1.5 x its election timeout)."""


class ConfigError(ValueError):
    """A setting has a value the server cannot use; the message names the setting."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``querator serve`` needs. Sizes are bytes."""

    address: str = field(default="localhost:2319", metadata={"help": "host:port to listen on"})
    processes: int = field(
        default=1,
        metadata={
            "help": "processes serving the node on one port, splitting the queues' partitions "
            "(docs/processes.md)"
        },
    )
    process_ports: str = field(
        default="",
        metadata={
            "help": "with --cluster and --processes N > 1: N comma-separated ports, one per process, that "
            "the other nodes forward to it on (bound on --address's host, advertised with "
            "--advertise-address's; 0: a port the system chooses)",
            "default": "none",
        },
    )
    storage: str = field(
        default="sqlite", metadata={"help": "storage backend: memory, sqlite, cassandra or postgres"}
    )
    data_dir: str = field(default="querator-data", metadata={"help": "directory of the sqlite store"})
    sqlite_synchronous: str = field(
        default="FULL",
        metadata={
            "help": "sqlite fsync policy: FULL (a 200 survives power loss) or NORMAL (survives a crash)"
        },
    )
    cassandra_hosts: str = field(
        default="127.0.0.1", metadata={"help": "comma-separated Cassandra contact points"}
    )
    cassandra_port: int = field(default=9042, metadata={"help": "Cassandra's CQL port"})
    cassandra_keyspace: str = field(
        default="querator", metadata={"help": "keyspace of Querator's tables (created when missing)"}
    )
    cassandra_local_dc: str = field(
        default="", metadata={"help": "data center to send requests to ('' = the first contact point's)"}
    )
    cassandra_replication: str = field(
        default="SimpleStrategy:1",
        metadata={
            "help": "replication of a keyspace Querator creates: SimpleStrategy:<rf> or "
            "NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>]"
        },
    )
    cassandra_consistency: str = field(
        default="LOCAL_QUORUM", metadata={"help": "consistency level of Cassandra reads and writes"}
    )
    cassandra_username: str = field(default="", metadata={"help": "Cassandra user ('' = no authentication)"})
    cassandra_password: str = field(default="", metadata={"help": "Cassandra password"})
    cassandra_tls_ca_file: str = field(
        default="", metadata={"help": "PEM CA file: connect to Cassandra with TLS and verify it"}
    )
    postgres_url: str = field(
        default="postgresql://127.0.0.1:5432/postgres",
        metadata={"help": "PostgreSQL connection URL (libpq's; a password is better in --postgres-password)"},
    )
    postgres_schema: str = field(
        default="querator", metadata={"help": "PostgreSQL schema of Querator's tables, created when missing"}
    )
    postgres_username: str = field(default="", metadata={"help": "PostgreSQL user ('' = the URL's)"})
    postgres_password: str = field(default="", metadata={"help": "PostgreSQL password ('' = the URL's)"})
    postgres_tls_ca_file: str = field(
        default="", metadata={"help": "PEM CA file: connect to PostgreSQL with TLS and verify it"}
    )
    postgres_connections: int = field(
        default=8, metadata={"help": "connections to PostgreSQL: partitions run on that many at once"}
    )
    log_level: str = field(default="info", metadata={"help": "debug, info, warn or error"})
    log_format: str = field(default="text", metadata={"help": "text or json"})
    max_produce_body: int = field(default=5_000_000, metadata={"help": "largest queue.produce body"})
    max_requests_per_queue: int = field(
        default=100, metadata={"help": "requests waiting on one queue before it answers 'overloaded'"}
    )
    max_connections: int = field(
        default=1000,
        metadata={
            "help": "open connections per listening address; more are closed as soon as they are accepted"
        },
    )
    max_connections_per_client: int = field(
        default=0,
        metadata={
            "help": "open connections per client address and listening address (0: no limit; behind a "
            "load balancer every client may share one address)"
        },
    )
    header_timeout: str = field(
        default="10s",
        metadata={
            "help": "time a request's line and headers have to arrive, from its first byte (from the "
            "accept for a connection's first request)"
        },
    )
    body_timeout: str = field(
        default="1m", metadata={"help": "time a request's body has to arrive once its headers are in"}
    )
    idle_timeout: str = field(
        default="2m", metadata={"help": "time a kept-alive connection may wait for its next request"}
    )
    write_timeout: str = field(
        default="1m",
        metadata={
            "help": "time a reply may stay stuck in a full send buffer (a client that stopped reading) "
            "before its connection is closed"
        },
    )
    workflow_retention: str = field(
        default="168h",
        metadata={"help": "how long a finished durable workflow is kept, with its result and journal"},
    )
    admin_address: str = field(
        default="",
        metadata={"help": "host:port serving /health, /ready and /metrics apart from the API (off: '')"},
    )
    no_ui: bool = field(
        default=False,
        metadata={
            "help": "do not serve the web console at /ui/ (served on --admin-address when set, else on "
            "--address; docs/console.md)"
        },
    )
    api_keys: str = field(
        default="",
        metadata={"help": "comma-separated SHA-256 hashes of the API keys (see 'querator apikey')"},
    )
    api_keys_file: str = field(
        default="", metadata={"help": "file of API key hashes, one per line ('#' starts a comment)"}
    )
    allowed_hosts: str = field(
        default="",
        metadata={
            "help": "without API keys, comma-separated Host names the node answers besides its own "
            "addresses' hosts, loopback names, IP literals and names without a dot: 'name', '.domain' "
            "(it and every name under it) or '*' (any; turns the check off)",
            "default": "none beyond those",
        },
    )
    tenancy: bool = field(
        default=False,
        metadata={
            "help": "on: namespaces, users, API keys and roles authorize every request "
            "(docs/tenancy.md); the --api-keys keys become the bootstrap admin's"
        },
    )
    cluster_secret_file: str = field(
        default="",
        metadata={
            "help": "file holding the secret nodes sign the requests they forward to each other, and "
            "their replies, with (the same on every node; at least 32 characters)"
        },
    )
    tls_cert_file: str = field(
        default="",
        metadata={"help": "PEM certificate (chain) of the API address: serve HTTPS ('' = plain HTTP)"},
    )
    tls_key_file: str = field(default="", metadata={"help": "PEM private key of --tls-cert-file"})
    tls_client_ca_file: str = field(
        default="",
        metadata={
            "help": "PEM CAs that client certificates are verified against; requests forwarded by other "
            "nodes must then come with one (mutual TLS between nodes)"
        },
    )
    cluster_tls_ca_file: str = field(
        default="",
        metadata={
            "help": "PEM CAs the other nodes' certificates are verified against when forwarding to them "
            "over HTTPS (with --tls-cert-file)",
            "default": "the system's CAs",
        },
    )
    cluster_tls_cert_file: str = field(
        default="",
        metadata={"help": "PEM client certificate this node presents when forwarding (mutual TLS)"},
    )
    cluster_tls_key_file: str = field(
        default="", metadata={"help": "PEM private key of --cluster-tls-cert-file"}
    )
    cluster: str = field(
        default="",
        metadata={
            "help": "etcd://host:port[,host:port][/prefix] of the cluster's etcd (prefix default "
            f"{DEFAULT_CLUSTER_PREFIX})",
            "default": "none, a single node",
        },
    )
    node_id: str = field(
        default="",
        metadata={"help": "stable id of this node in the cluster", "default": "the host name"},
    )
    advertise_address: str = field(
        default="",
        metadata={
            "help": "host:port other nodes reach this node at",
            "default": "--address, with the host name for a wildcard host",
        },
    )
    etcd_tls_ca_file: str = field(
        default="", metadata={"help": "PEM CAs: connect to etcd with TLS (https) and verify it"}
    )
    etcd_tls_cert_file: str = field(
        default="", metadata={"help": "PEM client certificate presented to etcd (needs --etcd-tls-ca-file)"}
    )
    etcd_tls_key_file: str = field(default="", metadata={"help": "PEM private key of --etcd-tls-cert-file"})
    etcd_username: str = field(default="", metadata={"help": "etcd user ('' = no authentication)"})
    etcd_password_file: str = field(default="", metadata={"help": "file holding the etcd user's password"})
    etcd_lease_ttl: str = field(
        default="10s",
        metadata={"help": "etcd lease of a node (whole seconds): a node that stops renewing it drops out"},
    )
    cluster_grace_period: str = field(
        default="20s",
        metadata={"help": "how long a vanished node keeps its partitions (covers a rolling restart)"},
    )

    # Long on purpose: one check per setting, in the order the docs list them.
    def validated(self) -> ServerConfig:  # noqa: C901, PLR0912
        """This config, normalised; raises ConfigError naming the first bad setting."""
        _check_address("address", self.address)
        if not 1 <= self.processes <= MAX_PROCESSES:
            raise ConfigError(
                f"processes is invalid; '{self.processes}' is not a whole number from 1 to {MAX_PROCESSES}"
            )
        if self.storage not in STORAGE_KINDS:
            raise ConfigError(
                f"storage is invalid; '{self.storage}' is not one of ({', '.join(STORAGE_KINDS)})"
            )
        level = self.log_level.lower()
        if level not in LOG_LEVELS:
            raise ConfigError(
                f"log-level is invalid; '{self.log_level}' is not one of (debug, info, warn, error)"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log-format is invalid; '{self.log_format}' is not one of (text, json)")
        sync = self.sqlite_synchronous.upper()
        if sync not in SQLITE_SYNC:
            raise ConfigError(
                f"sqlite-synchronous is invalid; '{self.sqlite_synchronous}' is not FULL or NORMAL"
            )
        if self.admin_address:
            _check_address("admin-address", self.admin_address)
        if self.storage == "cassandra":
            self._validate_cassandra()
        if self.storage == "postgres":
            self._validate_postgres()
        if self.max_produce_body <= 0 or self.max_requests_per_queue <= 0:
            raise ConfigError("max-produce-body and max-requests-per-queue must be greater than zero")
        if self.max_connections <= 0:
            raise ConfigError(
                f"max-connections is invalid; '{self.max_connections}' is not greater than zero"
            )
        if self.max_connections_per_client < 0:
            raise ConfigError(
                f"max-connections-per-client is invalid; '{self.max_connections_per_client}' is negative"
            )
        for name in ("header_timeout", "body_timeout", "idle_timeout", "write_timeout", "workflow_retention"):
            value = getattr(self, name)
            if _duration(option_name(name), value) <= 0:
                raise ConfigError(f"{option_name(name)} is invalid; '{value}' is not greater than zero")
        self._validate_tls()
        for host in self.allowed_hosts.split(","):
            if host.strip() and not _ALLOWED_HOST.fullmatch(host.strip()):
                raise ConfigError(
                    f"allowed-hosts is invalid; '{host.strip()}' is not a host name, '.<domain>' or '*'"
                )
        _pair("etcd-tls-cert-file", self.etcd_tls_cert_file, "etcd-tls-key-file", self.etcd_tls_key_file)
        if self.etcd_tls_cert_file and not self.etcd_tls_ca_file:
            raise ConfigError("etcd-tls-cert-file is invalid; it needs --etcd-tls-ca-file (TLS to etcd)")
        _pair("etcd-username", self.etcd_username, "etcd-password-file", self.etcd_password_file)
        ttl = _duration("etcd-lease-ttl", self.etcd_lease_ttl)
        if ttl % SECOND or ttl < MIN_ETCD_LEASE_TTL * SECOND:
            raise ConfigError(
                f"etcd-lease-ttl is invalid; '{self.etcd_lease_ttl}' is not a whole number of seconds "
                f"of at least {MIN_ETCD_LEASE_TTL}s"
            )
        if _duration("cluster-grace-period", self.cluster_grace_period) < 0:
            raise ConfigError(f"cluster-grace-period is invalid; '{self.cluster_grace_period}' is negative")
        if self.process_ports and not (self.cluster and self.processes > 1):
            raise ConfigError(
                "process-ports is invalid; it gives the ports of a cluster node's processes (--cluster with "
                "--processes above 1)"
            )
        node_id, advertise = self.node_id, self.advertise_address
        if self.cluster:
            node_id, advertise = self._validate_cluster()
        return replace(
            self, log_level=level, sqlite_synchronous=sync, node_id=node_id, advertise_address=advertise
        )

    def _validate_cluster(self) -> tuple[str, str]:
        """Checks the settings of a cluster node; its node id and advertised address, defaults filled."""
        node_id, advertise = self.node_id, self.advertise_address
        _parse_cluster(self.cluster)
        # Only a cluster node needs an id: a single node must start whatever its host is called.
        node_id = node_id or socket.gethostname()
        # With several processes each is a member '<node-id>-<index>': the longest must fit too.
        longest = f"{node_id}-{self.processes - 1}" if self.processes > 1 else node_id
        if not _NODE_ID.fullmatch(node_id) or not _NODE_ID.fullmatch(longest):
            suffix = f" ('-{self.processes - 1}' included: a process's member id)" * (longest != node_id)
            raise ConfigError(
                f"node-id is invalid; '{node_id}' must be 1 to 253 letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit{suffix}"
            )
        advertise = advertise or self._default_advertise_address()
        _host_port("advertise-address", advertise)
        if (self.api_keys.strip() or self.api_keys_file or self.tenancy) and not self.cluster_secret_file:
            raise ConfigError(
                "cluster-secret-file is required with api keys or tenancy in a cluster; the nodes "
                "authenticate "
                "the requests they forward to each other with it"
            )
        if self.processes > 1:
            self._validate_cluster_processes()
        return node_id, advertise

    def _validate_cluster_processes(self) -> None:
        """A cluster node of several processes: each is a member of its own, on a port of its own."""
        if self.storage not in SHARED_STORAGE:
            raise ConfigError(
                "processes is invalid; more than one process per cluster node needs --storage cassandra "
                "or postgres, which every process of every node shares (docs/processes.md)"
            )
        if not self.process_ports:
            raise ConfigError(
                f"process-ports is invalid; --cluster with --processes {self.processes} needs "
                f"{self.processes} ports, one per process, for the other nodes to forward to"
            )
        ports = self.cluster_process_ports()
        if len(ports) != self.processes:
            raise ConfigError(
                f"process-ports is invalid; '{self.process_ports}' gives {len(ports)} port(s) for "
                f"{self.processes} processes"
            )
        taken = {split_address(self.address)[1]: "--address's"}
        if self.admin_address:
            taken[split_address(self.admin_address)[1]] = "--admin-address's"
        for n, port in enumerate(ports):
            if port and port in ports[:n]:
                raise ConfigError(f"process-ports is invalid; port {port} is given twice")
            if port and port in taken:
                raise ConfigError(f"process-ports is invalid; port {port} is {taken[port]}")

    def cluster_process_ports(self) -> tuple[int, ...]:
        """The ports of ``process-ports``, by process index (0: the system chooses)."""
        ports = []
        for text in self.process_ports.split(","):
            port = text.strip()
            if not port.isdigit() or int(port) > 65535:
                raise ConfigError(
                    f"process-ports is invalid; '{port}' in '{self.process_ports}' is not a port from 0 "
                    "to 65535"
                )
            ports.append(int(port))
        return tuple(ports)

    def _validate_tls(self) -> None:
        _pair("tls-cert-file", self.tls_cert_file, "tls-key-file", self.tls_key_file)
        _pair(
            "cluster-tls-cert-file",
            self.cluster_tls_cert_file,
            "cluster-tls-key-file",
            self.cluster_tls_key_file,
        )
        # The scheme between nodes follows this node's own listener: every node of a cluster is configured
        # alike, so a node serving HTTPS forwards over HTTPS.
        for name in ("tls_client_ca_file", "cluster_tls_ca_file", "cluster_tls_cert_file"):
            if getattr(self, name) and not self.tls_cert_file:
                raise ConfigError(f"{option_name(name)} is invalid; it needs --tls-cert-file (HTTPS)")

    def _default_advertise_address(self) -> str:
        host, _, port = self.address.rpartition(":")
        # A wildcard is where to listen, not where to be reached: other nodes need a name.
        return f"{socket.gethostname() if host in _WILDCARD_HOSTS else host}:{port}"

    def cluster_config(self) -> ClusterConfig | None:
        """The cluster settings of a validated config; None when the node runs alone."""
        if not self.cluster:
            return None
        from querator import tls

        endpoints, prefix = _parse_cluster(self.cluster, "https" if self.etcd_tls_ca_file else "http")
        etcd_tls = None
        if self.etcd_tls_ca_file:
            etcd_tls = tls.client_context(
                "etcd-tls", self.etcd_tls_ca_file, self.etcd_tls_cert_file, self.etcd_tls_key_file
            )
        return ClusterConfig(
            etcd_tls=etcd_tls,
            etcd_username=self.etcd_username,
            etcd_password=_read_password("etcd-password-file", self.etcd_password_file),
            endpoints=endpoints,
            prefix=prefix,
            node_id=self.node_id,
            advertise_address=self.advertise_address,
            lease_ttl=parse_duration(self.etcd_lease_ttl) // SECOND,
            grace_period=parse_duration(self.cluster_grace_period) / SECOND,
        )

    def listener_config(self) -> ListenerConfig:
        """The connection limits of a validated config, for each listening address."""
        return ListenerConfig(
            max_connections=self.max_connections,
            max_connections_per_client=self.max_connections_per_client,
            header_timeout=parse_duration(self.header_timeout) / SECOND,
            body_timeout=parse_duration(self.body_timeout) / SECOND,
            idle_timeout=parse_duration(self.idle_timeout) / SECOND,
            write_timeout=parse_duration(self.write_timeout) / SECOND,
        )

    def _validate_cassandra(self) -> None:
        if not 0 < self.cassandra_port <= 65535:
            raise ConfigError(f"cassandra-port is invalid; '{self.cassandra_port}' is not a port")
        if not self.cassandra_hosts.strip(", "):
            raise ConfigError("cassandra-hosts is invalid; at least one contact point is needed")
        if not _IDENTIFIER.fullmatch(self.cassandra_keyspace):
            raise ConfigError(
                f"cassandra-keyspace is invalid; '{self.cassandra_keyspace}' is not a Cassandra identifier"
            )
        settings = self.cassandra_settings()
        try:
            settings.replication_cql()
        except ValueError as e:
            raise ConfigError(f"cassandra-replication is invalid; {e}") from None
        try:
            settings.consistency_level()
        except ValueError as e:
            raise ConfigError(f"cassandra-consistency is invalid; {e}") from None

    def _validate_postgres(self) -> None:
        if not 1 <= self.postgres_connections <= MAX_POSTGRES_CONNECTIONS:
            raise ConfigError(
                f"postgres-connections is invalid; '{self.postgres_connections}' is not a whole number "
                f"from 1 to {MAX_POSTGRES_CONNECTIONS}"
            )
        if self.postgres_schema and not _PG_IDENTIFIER.fullmatch(self.postgres_schema):
            raise ConfigError(
                f"postgres-schema is invalid; '{self.postgres_schema}' is not a lower-case identifier"
            )
        try:
            self.postgres_settings().connect_kwargs()
        except ValueError as e:
            raise ConfigError(f"postgres-url is invalid; {e}") from None

    def postgres_settings(self) -> PostgresSettings:
        """The PostgreSQL store's settings from the ``postgres-*`` settings."""
        from querator.storage.postgres import PostgresSettings

        return PostgresSettings(
            url=self.postgres_url,
            schema=self.postgres_schema,
            username=self.postgres_username,
            password=self.postgres_password,
            tls_ca_file=self.postgres_tls_ca_file,
            connections=self.postgres_connections,
        )

    def cassandra_settings(self) -> CassandraSettings:
        """The Cassandra store's settings from the ``cassandra-*`` settings."""
        from querator.storage.cassandra import CassandraSettings

        return CassandraSettings(
            hosts=tuple(h.strip() for h in self.cassandra_hosts.split(",") if h.strip()),
            port=self.cassandra_port,
            keyspace=self.cassandra_keyspace,
            local_dc=self.cassandra_local_dc,
            replication=self.cassandra_replication,
            consistency=self.cassandra_consistency.upper(),
            username=self.cassandra_username,
            password=self.cassandra_password,
            tls_ca_file=self.cassandra_tls_ca_file,
        )


@dataclass(frozen=True)
class ClusterConfig:
    """What ``querator.cluster`` needs to join a cluster; built by ``ServerConfig.cluster_config``."""

    endpoints: tuple[str, ...]
    """etcd JSON gateway URLs, ``http://host:port``, tried in order."""
    prefix: str
    """Key prefix of this cluster in etcd, ``/name`` without a trailing slash."""
    node_id: str
    """Stable id of this node (a restart with the same id moves no partition)."""
    advertise_address: str
    """``host:port`` the other nodes reach this node at."""
    lease_ttl: int = 10
    """Seconds: a node that stops renewing its lease leaves the member set this long after."""
    grace_period: float = 20.0
    """Seconds a vanished member keeps its partitions, so a rolling restart moves nothing."""
    etcd_tls: ssl.SSLContext | None = None
    """TLS to etcd (``https`` endpoints): its CAs and the client certificate, if any."""
    etcd_username: str = ""
    """etcd user to authenticate as ("" = none)."""
    etcd_password: str = field(default="", repr=False)


@dataclass(frozen=True)
class ListenerConfig:
    """Connection limits of one listening address; built by ``ServerConfig.listener_config``.

    None of them bounds a request once it has arrived: a lease may wait its full request_timeout.
    """

    max_connections: int = 1000
    """Open connections; one more replaces the connection idle the longest, or is closed as soon as it is
    accepted when none is idle (the reference's ``MaxConcurrentRequests`` closes it always)."""
    max_connections_per_client: int = 0
    """Open connections from one client address, the same way; 0: no limit."""
    header_timeout: float = 10.0
    """Seconds from a request's first byte (the accept, for a connection's first) to its last header."""
    body_timeout: float = 60.0
    """Seconds from a request's headers to the end of its body."""
    idle_timeout: float = 120.0
    """Seconds a kept-alive connection may wait for its next request."""
    write_timeout: float = 60.0
    """Seconds a connection's replies may make no progress into the client's socket."""


def _parse_cluster(text: str, scheme: str = "http") -> tuple[tuple[str, ...], str]:
    """``etcd://h1:p1,h2:p2/prefix`` -> (``http://h1:p1``, ``http://h2:p2``), ``/prefix``."""
    if not text.startswith(CLUSTER_SCHEME):
        raise ConfigError(
            f"cluster is invalid; '{text}' is not etcd://host:port[,host:port][/prefix] "
            "(--etcd-tls-ca-file makes the connections TLS)"
        )
    hosts, _, path = text[len(CLUSTER_SCHEME) :].partition("/")
    endpoints = tuple(f"{scheme}://" + _host_port("cluster", h, text) for h in hosts.split(","))
    path = path.rstrip("/")
    if path and not _PREFIX.fullmatch(path):
        raise ConfigError(
            f"cluster is invalid; prefix '/{path}' of '{text}' may only hold letters, digits, "
            "'.', '_', '-' and single '/' separators"
        )
    return endpoints, "/" + path if path else DEFAULT_CLUSTER_PREFIX


def _host_port(setting: str, value: str, whole: str | None = None) -> str:
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        context = f" in '{whole}'" if whole is not None else ""
        raise ConfigError(
            f"{setting} is invalid; '{value}'{context} is not host:port with a port from 1 to 65535"
        )
    return value


def _pair(name: str, value: str, other: str, other_value: str) -> None:
    """A certificate and its key are set together or not at all."""
    if bool(value) != bool(other_value):
        missing = other if value else name
        raise ConfigError(f"{missing} is invalid; {name} and {other} are set together")


def _read_password(setting: str, path: str) -> str:
    """A password file's text without its line ending ("" for no file)."""
    if not path:
        return ""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"{setting} is invalid; cannot read '{path}': {e.strerror}") from None


def _duration(setting: str, value: str) -> int:
    try:
        return parse_duration(value)
    except DurationError as e:
        raise ConfigError(f"{setting} is invalid; {e}") from None


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` as (host, port); an empty host means localhost."""
    host, _, port = address.rpartition(":")
    return host or "localhost", int(port)


def _check_address(name: str, address: str) -> None:
    port = address.rpartition(":")[2]
    if ":" not in address or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{name} is invalid; '{address}' is not host:port with a port up to 65535")


_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")
"""An unquoted Cassandra keyspace name."""
_PG_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""A PostgreSQL schema name that needs no quoting (``search_path`` folds unquoted names to lower case)."""


BOOL_TEXT = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}
"""How the environment, flags and files spell a switch."""


def option_name(name: str) -> str:
    """The flag and YAML spelling of a field: ``data_dir`` -> ``data-dir``."""
    return name.replace("_", "-")


def load(config_file: str | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> ServerConfig:
    """Builds the config from a YAML file, the environment and flags (None values in flags are unset)."""
    values: dict[str, Any] = {}
    config_file = flags.get("config") or env.get("QUERATOR_CONFIG") or config_file
    if config_file:
        values.update(_from_file(Path(config_file)))
    for f in fields(ServerConfig):
        key = "QUERATOR_" + f.name.upper()
        if key in env:
            values[f.name] = env[key]
        if flags.get(f.name) is not None:
            values[f.name] = flags[f.name]
    typed: dict[str, Any] = {}
    for f in fields(ServerConfig):
        if f.name in values:
            typed[f.name] = _cast(f.name, values[f.name], f.type)
    return ServerConfig(**typed).validated()


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"config file is invalid; cannot read '{path}': {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file is invalid; '{path}': {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file is invalid; '{path}' must hold a mapping of settings")
    known = {option_name(f.name): f.name for f in fields(ServerConfig)}
    values = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"config file is invalid; unknown setting '{key}' in '{path}'")
        values[known[key]] = value
    return values


def _cast(name: str, value: Any, kind: Any) -> Any:
    if kind in (bool, "bool"):
        # YAML gives booleans; the environment gives text; a flag without a value gives True.
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in BOOL_TEXT:
            return BOOL_TEXT[value.strip().lower()]
        raise ConfigError(f"{option_name(name)} is invalid; '{value}' is not on or off")
    if kind in (int, "int"):
        # YAML gives ints, the environment and flags give strings; anything else (1.5, true) is refused
        # rather than truncated.
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        raise ConfigError(f"{option_name(name)} is invalid; '{value}' is not a whole number")
    return str(value)


def environment() -> Mapping[str, str]:
    """The process environment (a seam so tests pass their own)."""
    return os.environ
