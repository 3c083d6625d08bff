"""The PostgreSQL backend: every queue of one node, or of every node of a cluster, in one schema of a
PostgreSQL database, through psycopg 3 (docs/storage.md).

- Runs (``Partition.run``) execute the engine's function on a worker thread with a connection of the
  pool. The run's last write and the fence are one statement, which commits it; reads before it are
  sent alone, so a produce is one statement and a lease or a complete two (docs/adr/0073). A write that
  must share the run's transaction with a later statement opens pipeline mode first: the statements
  then go out in the pipeline's implicit transaction, committed by its sync (no BEGIN or COMMIT,
  docs/adr/0065), and only a read the function needs an answer to waits. ``synchronous_commit`` is the
  server's: on (the default), a 200 means the WAL is on disk.
- Batches travel as arrays (``unnest``): a hundred items are one statement, not a hundred.
- Layout as the sqlite store's: one ``items`` table keyed by (queue, partition, id), so a partition is one
  contiguous key range in FIFO order, with partial indexes that make every primitive an index range scan;
  nothing reads a whole partition into memory.
- Fencing: each partition's row holds its owner epoch; a run that writes ends with the fence, which fails
  (and so rolls the run back) when a newer owner claimed the partition (docs/adr/0045).
- Tables are created or migrated when a store opens, under an advisory lock; ``querator_schema`` holds
  their version, and a newer version is refused.

Modules: ``_settings`` (``PostgresSettings``), ``_errors`` (driver errors as ours), ``_schema`` (tables,
the fence, their version), ``_statements`` (every item and queue statement), ``_codec`` (rows),
``_arrays`` (typed array parameters), ``_pool`` (connections, worker threads, a run's statements and
transactions), ``_tx`` (``PostgresTx``: the ``PartitionTx`` primitives), ``_partition``
(``PostgresPartition``: claims and runs), ``_records``, ``_schedules`` and ``_workflows`` (tenancy's
records, schedules, durable workflows) and ``_store`` (``PostgresStore``).
"""

from __future__ import annotations

from querator.storage.postgres._errors import PostgresStorageError
from querator.storage.postgres._partition import PostgresPartition
from querator.storage.postgres._schema import SCHEMA_VERSION
from querator.storage.postgres._settings import PostgresSettings
from querator.storage.postgres._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresPartition", "PostgresSettings", "PostgresStorageError", "PostgresStore"]
