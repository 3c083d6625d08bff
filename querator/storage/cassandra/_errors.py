"""Driver errors as the store's own: one place decides whether a failed write may have been applied."""

from __future__ import annotations

from cassandra import DriverException, RequestExecutionException
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import ErrorMessage

from querator.errors import StorageError


class CassandraStorageError(StorageError):
    """Cassandra failed or could not be reached."""


def storage_error(exc: BaseException, sent: bool = False) -> CassandraStorageError:
    """The one place a driver error becomes ours. A write that was ``sent`` may have been applied even
    though it failed, whatever the error: a timeout, a connection cut before the answer, "no host
    available" (also what the driver says when the connection a write went out on died and no other host
    could take the retry), and even ``Unavailable``: Paxos v1 (Cassandra's default) answers it when the
    commit's replicas are missing after a quorum accepted the proposal, and the driver retries an
    unavailable or failed request on the next host, so the error may be the retry's while the first
    attempt was applied."""
    error = CassandraStorageError(f"cassandra storage error; {type(exc).__name__}: {exc}", maybe_applied=sent)
    error.__cause__ = exc
    return error


# ErrorMessage: what Cassandra answered that the driver raises as it came (overloaded, server error,
# bootstrapping) or has no class for (CAS_WRITE_UNKNOWN: a conditional write a later Paxos round may
# still commit, on protocol v5; on v4, the store's, Cassandra sends it as a WriteTimeout of type CAS);
# before, these escaped as bugs (500) instead of 454, as did a connection's failure when the driver
# does not retry it on another host.
DRIVER_ERRORS = (
    DriverException, RequestExecutionException, ErrorMessage, ConnectionException, NoHostAvailable, OSError
)  # fmt: skip
