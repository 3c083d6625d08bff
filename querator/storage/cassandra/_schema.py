"""The keyspace's tables, created when missing, and the version of their layout."""

from __future__ import annotations

from typing import Any, Final

from querator.storage.cassandra._errors import CassandraStorageError
from querator.storage.cassandra._schedules import TABLES as SCHEDULE_TABLES
from querator.storage.cassandra._schedules import fill_slots
from querator.storage.cassandra._settings import CassandraSettings

SCHEMA_VERSION: Final = 2

# Item rows, state log rows and markers share one table with the partition's statics because a
# conditional batch may not span tables or partitions: the fence must sit in the partition it protects.
SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS {ks}.schema_version (
        name text PRIMARY KEY, version int)""",
    """CREATE TABLE IF NOT EXISTS {ks}.queues (
        name text PRIMARY KEY, namespace text, lease_timeout bigint, expire_timeout bigint,
        dead_queue text, max_attempts int, reference text, requested_partitions int,
        created_at bigint, updated_at bigint, extra map<text, text>, dedup_window bigint)""",
    # list_queues reads one namespace in name order: a partition per namespace, rows sorted by name.
    """CREATE TABLE IF NOT EXISTS {ks}.queues_by_namespace (
        namespace text, name text, PRIMARY KEY ((namespace), name))""",
    # Written only with lightweight transactions (claim, opening a segment, reset): one row per partition.
    """CREATE TABLE IF NOT EXISTS {ks}.partitions (
        queue text, partition int, epoch bigint, base int, tail int,
        segments map<int, text>, expires map<int, bigint>, markers map<int, bigint>,
        PRIMARY KEY ((queue, partition)))""",
    # Segments are written for a while, read from the cursor on, then dropped whole: rows are never
    # deleted one by one, so tombstones are rare partition deletions of segments nobody reads again,
    # and a short gc_grace is safe (a resurrected dropped segment holds only dead items, unreferenced).
    # Columns by record: item rows (0) meta and payload, state log rows (1) states, dedup markers (2)
    # expire_deadline.
    """CREATE TABLE IF NOT EXISTS {ks}.items (
        queue text, partition int, segment int, record tinyint, id text,
        epoch bigint static, opened boolean static, cursor text static, last_id text static,
        queued bigint static, queued_created varint static, min_expire bigint static, rows int static,
        dedup_until bigint static,
        meta blob, payload blob, states blob, expire_deadline bigint,
        PRIMARY KEY ((queue, partition, segment), record, id))
        WITH compaction = {{'class': 'LeveledCompactionStrategy'}} AND gc_grace_seconds = 3600""",
    # Produce de-duplication claims (_dedup.py): one row per dedup id, gone with its window.
    """CREATE TABLE IF NOT EXISTS {ks}.dedup (
        queue text, dedup_id text, partition int, epoch bigint, segment int, claimed_at bigint,
        expires_at bigint, PRIMARY KEY ((queue, dedup_id)))
        WITH gc_grace_seconds = 3600""",
    # The dedup index of import (dead-lettering): an entry lives as long as its item may (TTL), and is
    # only trusted after the item is found live, so stale entries are harmless.
    """CREATE TABLE IF NOT EXISTS {ks}.sources (
        queue text, partition int, source_id text, id text,
        PRIMARY KEY ((queue, partition, source_id)))
        WITH gc_grace_seconds = 3600""",
    # Cron schedules (docs/schedules.md): new tables, so no new schema version.
    *SCHEDULE_TABLES,
    # Durable workflows (_workflows.py): a record is msgpack of storage.workflows.Workflow, written only
    # with lightweight transactions; a finished one carries the TTL of its retention.
    "CREATE TABLE IF NOT EXISTS {ks}.workflows (id text PRIMARY KEY, version bigint, record blob)",
    # A journal's rows (docs/adr/0046): msgpack of storage.workflows.Entry, plain writes sent before
    # the record's transaction, keyed by the record's version too, so that a refused writer's row never
    # replaces one that was recorded; a finished workflow's rows carry its record's TTL.
    """CREATE TABLE IF NOT EXISTS {ks}.workflow_entries (
        id text, seq bigint, version bigint, entry blob, PRIMARY KEY ((id), seq, version))""",
    # Lists finished workflows by status, a few buckets per status, each row with its record's TTL.
    # (Running ones were indexed here too, and their rows deleted when they finished: docs/adr/0041.)
    """CREATE TABLE IF NOT EXISTS {ks}.workflows_by_status (
        status text, bucket int, id text, PRIMARY KEY ((status, bucket), id))""",
    # Lists running workflows: the generation (hour) a workflow started in or was last carried into, a
    # few buckets each. Rows are never deleted one by one (a finish sets done): a generation carried on
    # is dropped whole, never read again, so a short gc_grace is safe.
    """CREATE TABLE IF NOT EXISTS {ks}.workflows_running (
        bucket int, generation bigint, id text, done boolean, PRIMARY KEY ((bucket, generation), id))
        WITH gc_grace_seconds = 3600""",
    # One row: the first generation that may hold a running workflow (``first``), and the generation a
    # member claimed to carry them into (``claimed``), with lightweight transactions only.
    """CREATE TABLE IF NOT EXISTS {ks}.workflows_carried (
        scope text PRIMARY KEY, first bigint, claimed bigint)""",
    # Tenancy's records (docs/tenancy.md): a partition per kind, rows sorted by key, written with
    # lightweight transactions only. Kinds hold at most thousands of small rows.
    """CREATE TABLE IF NOT EXISTS {ks}.records (
        kind text, key text, value blob, PRIMARY KEY ((kind), key))""",
    # Stamps (_records.py): a partition per key, plain writes whose write time is the value.
    """CREATE TABLE IF NOT EXISTS {ks}.stamps (
        kind text, key text, at bigint, PRIMARY KEY ((kind, key)))""",
)


def create_schema(session: Any, settings: CassandraSettings) -> None:
    """Creates the keyspace and tables when missing (blocking) and records the schema version.

    Raises:
        CassandraStorageError: the keyspace holds another version of the schema.
    """
    ks = settings.keyspace
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {settings.replication_cql()}")
    for statement in SCHEMA:
        session.execute(statement.format(ks=ks))
    row = session.execute(f"SELECT version FROM {ks}.schema_version WHERE name = 'items'").one()
    version = row["version"] if row else 0
    if version > SCHEMA_VERSION:
        raise CassandraStorageError(
            f"cassandra storage error; schema version {version} of keyspace {ks} is newer than "
            f"the supported version {SCHEMA_VERSION}"
        )
    if 0 < version < SCHEMA_VERSION:
        # Version 1 (pre-release) kept one row per item state and a column per field; nothing was
        # released with it.
        raise CassandraStorageError(
            f"cassandra storage error; keyspace {ks} has schema version {version}, which this "
            f"version does not read; use a new keyspace"
        )
    if version < SCHEMA_VERSION:
        session.execute(f"INSERT INTO {ks}.schema_version (name, version) VALUES ('items', {SCHEMA_VERSION})")
    fill_slots(session, ks)
