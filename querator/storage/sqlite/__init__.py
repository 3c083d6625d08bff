"""The sqlite backend: every queue of one server in one stdlib-sqlite3 database file in WAL mode.

One dedicated writer thread owns the connection (the aiosqlite mechanism): coroutines put jobs on a queue,
the thread runs them and hands each result back to the job's event loop with ``call_soon_threadsafe``.
``Partition.run(fn)`` is one job, and a job is one transaction, so a caller sees a result only after its
COMMIT returned: with ``synchronous=FULL`` a 200 on produce means the items are on disk.

Group commit: every commit pays an fsync, so when several jobs are waiting the thread runs them in one
transaction, each inside its own SAVEPOINT (a failing job rolls back only itself), and commits once. A
job's caller still hears nothing until that COMMIT succeeded; if it fails, every job of the group fails.

Layout: ``queues`` holds the queue records, ``partitions`` maps (queue, number) to a small integer key
and remembers the partition's greatest id, and one ``items`` table holds every item keyed by (partition
key, id) ``WITHOUT ROWID``, so a partition is one contiguous key range in id (FIFO) order. Partial
indexes make every ``PartitionTx`` primitive an index range scan, and nothing ever reads a whole
partition into memory: reads are ``LIMIT``-ed and ``stats`` is one aggregate query.

Modules: ``_schema`` (tables, their version, pragma values), ``_statements`` (every SQL statement),
``_codec`` (rows), ``_errors`` (driver errors as ours), ``_connect`` (opening the file: pragmas, schema
and migrations, the initialised marker and the damage check), ``_worker`` (the connection and the
partition keys it knows), ``_jobs`` (jobs and handing their outcomes back to the event loop), ``_writer``
(the writer thread and group commit), ``_tx`` (``SqliteTx``: the ``PartitionTx`` primitives),
``_partition`` (``SqlitePartition``) and ``_store`` (``SqliteStore``: queue records and partitions);
``_move`` moves partitions between the databases of a node's processes when their number changes.
"""

from __future__ import annotations

from querator.storage.sqlite._connect import INITIALISED_SUFFIX
from querator.storage.sqlite._errors import SqliteStorageError
from querator.storage.sqlite._move import Moved, move_partitions, remove_database
from querator.storage.sqlite._partition import SqlitePartition
from querator.storage.sqlite._schema import SCHEMA, SCHEMA_VERSION
from querator.storage.sqlite._store import SqliteStore

__all__ = [
    "INITIALISED_SUFFIX",
    "SCHEMA",
    "SCHEMA_VERSION",
    "Moved",
    "SqlitePartition",
    "SqliteStorageError",
    "SqliteStore",
    "move_partitions",
    "remove_database",
]
