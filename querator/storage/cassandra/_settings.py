"""How to reach Cassandra: ``CassandraSettings`` and the driver's ``Cluster`` arguments made from them."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy, TokenAwarePolicy
from cassandra.query import dict_factory

_QUORUMS = frozenset(
    {
        ConsistencyLevel.QUORUM,
        ConsistencyLevel.LOCAL_QUORUM,
        ConsistencyLevel.EACH_QUORUM,
        ConsistencyLevel.ALL,
    }
)


@dataclass(frozen=True)
class CassandraSettings:
    """How to reach Cassandra and where to keep Querator's tables.

    Args:
        hosts: Contact points; the driver discovers the rest of the cluster from them.
        port: The native protocol (CQL) port.
        keyspace: Created when missing, with ``replication``.
        local_dc: The data center whose replicas serve requests ("" lets the driver pick the first
            contact point's).
        replication: ``SimpleStrategy:<rf>`` or ``NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>...]``;
            only used to create a missing keyspace.
        consistency: Of every read and write (``LOCAL_QUORUM`` by default); lightweight transactions
            use ``LOCAL_SERIAL`` (or ``SERIAL`` with a non-local consistency) for their Paxos round.
        username: With ``password``, authenticates with Cassandra's PasswordAuthenticator.
        tls_ca_file: A PEM file of CAs: connect with TLS and verify the server against them.
        request_timeout: Seconds before a request counts as failed (the partition answers 454).
    """

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "querator"
    local_dc: str = ""
    replication: str = "SimpleStrategy:1"
    consistency: str = "LOCAL_QUORUM"
    username: str = ""
    password: str = ""
    tls_ca_file: str = ""
    request_timeout: float = 10.0

    def replication_cql(self) -> str:
        """The keyspace's replication map as CQL; raises ValueError on a malformed setting."""
        strategy, _, spec = self.replication.partition(":")
        if strategy == "SimpleStrategy" and spec.isdigit():
            return f"{{'class': 'SimpleStrategy', 'replication_factor': {int(spec)}}}"
        if strategy == "NetworkTopologyStrategy" and spec:
            pairs = [p.partition("=") for p in spec.split(",")]
            if all(
                dc.strip().replace("-", "").replace("_", "").isalnum() and rf.isdigit() for dc, _, rf in pairs
            ):
                dcs = ", ".join(f"'{dc.strip()}': {int(rf)}" for dc, _, rf in pairs)
                return f"{{'class': 'NetworkTopologyStrategy', {dcs}}}"
        raise ValueError(
            f"'{self.replication}' is not SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>[,...]"
        )

    def consistency_level(self) -> int:
        """The driver's consistency level; raises ValueError for an unknown name."""
        level = ConsistencyLevel.name_to_value.get(self.consistency.upper())
        if level is None or level in (ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL):
            raise ValueError(f"'{self.consistency}' is not a consistency level for reads and writes")
        return int(level)

    def fence_level(self) -> int:
        """The consistency of what fences a plain commit (the commit, the read of the owner epoch after
        it, the claims it is checked against): the configured one if it is a quorum's, else
        ``LOCAL_QUORUM``. The fence rests on the read's replicas meeting the claim's (ADR 0038): a read
        at ``ONE`` may miss a claim."""
        level = self.consistency_level()
        return level if level in _QUORUMS else int(ConsistencyLevel.LOCAL_QUORUM)

    def cluster_kwargs(self) -> dict[str, Any]:
        """The driver's ``Cluster`` arguments (the conversion stays here, at the edge)."""
        level = self.consistency_level()
        serial = (
            ConsistencyLevel.LOCAL_SERIAL if "LOCAL" in self.consistency.upper() else ConsistencyLevel.SERIAL
        )
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=self.local_dc or None)),
            consistency_level=level,
            serial_consistency_level=serial,
            request_timeout=self.request_timeout,
            row_factory=dict_factory,
        )
        kwargs: dict[str, Any] = {
            "contact_points": list(self.hosts),
            "port": self.port,
            "execution_profiles": {EXEC_PROFILE_DEFAULT: profile},
            # Reconnect quickly after a Cassandra restart: the default waits up to ten minutes.
            "reconnection_policy": ExponentialReconnectionPolicy(0.5, 5.0),
            "connect_timeout": 5,
            # Not 5: its framing (a CRC24 of each frame's header, computed bit by bit in Python, and a
            # CRC32 of its payload) cost a fifth of the driver's CPU per statement on both threads
            # (ADR 0074; TCP checksums the bytes, TLS authenticates them).
            "protocol_version": 4,
            # Without it, Nagle's algorithm holds the end of a large request (a batch of a hundred rows)
            # until its start is acknowledged, which Linux delays by up to 40 ms: a batch then took
            # 47 ms instead of 4 (docs/benchmarks-log.md).
            "sockopts": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        }
        if self.username:
            kwargs["auth_provider"] = PlainTextAuthProvider(self.username, self.password)
        if self.tls_ca_file:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            kwargs["ssl_context"] = context
        return kwargs
