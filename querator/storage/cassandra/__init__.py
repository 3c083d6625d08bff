"""The Cassandra backend: the cluster's store, built the way queues on Cassandra work (docs/storage.md).

- One writer per partition, fenced: ``partitions`` holds the owner epoch, taken with a lightweight
  transaction by ``claim``; every segment's static ``epoch`` column carries it too. A run commits with
  ONE plain single-partition batch on the tail segment, acknowledged once a quorum read of the owner
  epoch (shared by the queue's runs, ``_fence``) finds its own (ADR 0038); a run with dedup markers
  commits with a conditional batch (``IF epoch = ?``) instead. A newer epoch found raises
  ``StaleOwnerError`` and the partition stops serving until it is claimed again.
- A fenced commit's item rows go out just before it, as a plain batch (ADR 0004: in the Paxos round
  their bytes were written twice). Rows of a run that then failed are orphans: they lie above the committed
  ``last_id`` of their segment, which bounds every read, and they stay there because the owner opens a
  new tail before writing item rows into a segment it did not open itself in this life.
- Items live in segments (Cassandra partitions of about ``Segments.rows`` rows); a new tail is opened when
  the old one is full (or not the owner's own), before the run, from the committed state, carrying over
  the few rows that describe non-queued items, and drained segments
  are dropped whole (one partition tombstone, never read). Nothing deletes an item row on the hot path:
  completing records the item gone in the tail's state log (one row per write).
- Reads start at the persisted cursor, never at the head of a segment, so they never meet tombstones.
- The partition's state lives in an in-memory index (``_index``) loaded on first use;
  ``Partition.run`` runs ``fn`` on a worker thread (reads it needs beyond the index are blocking driver
  calls there) and then awaits the batch through ``execute_async``, bridged into the event loop.

Modules: ``_settings`` (``CassandraSettings``), ``_errors`` (driver errors as ours), ``_schema`` (tables
and their version), ``_statements`` (every prepared statement), ``_session`` (the connection and the
asyncio bridge), ``_codec`` (rows), ``_index`` (a partition's in-memory state and its ``PartitionTx``
primitives), ``_dedup`` (produce de-duplication claims), ``_fence`` (the shared reads of owner
epochs), ``_partition`` (runs, fencing, segments) and ``_store`` (``CassandraStore``: queue records and
partitions).
"""

from __future__ import annotations

from querator.storage.cassandra._errors import CassandraStorageError
from querator.storage.cassandra._partition import CassandraPartition, Segments, SendHook, Step
from querator.storage.cassandra._settings import CassandraSettings
from querator.storage.cassandra._store import CassandraStore

__all__ = [
    "CassandraPartition",
    "CassandraSettings",
    "CassandraStorageError",
    "CassandraStore",
    "Segments",
    "SendHook",
    "Step",
]
