"""Every CQL statement the Cassandra store prepares: the members of ``Statement`` are the registry.

``{ks}`` in a statement's text stands for the keyspace, filled in when it is prepared.
"""

from __future__ import annotations

from enum import Enum

_PK = "queue = ? AND partition = ? AND segment = ?"

_QUEUE_FIELDS = (
    "name, namespace, lease_timeout, expire_timeout, dead_queue, max_attempts, reference, "
    "requested_partitions, created_at, updated_at, extra, dedup_window"
)
_QUEUE_VALUES = ", ".join("?" * 12)


class Statement(Enum):
    """A statement, by what it does; its value is its CQL text."""

    # -- items: item rows, state log rows, markers and the partition's statics ---------------------------
    INSERT_ITEM = (
        "INSERT INTO {ks}.items (queue, partition, segment, record, id, meta, payload) "
        "VALUES (?, ?, ?, 0, ?, ?, ?)"
    )
    PUT_STATES = (
        "INSERT INTO {ks}.items (queue, partition, segment, record, id, states) VALUES (?, ?, ?, 1, ?, ?)"
    )
    # The partition's counters in the tail's statics: written plainly by a run's commit, acknowledged
    # once a read of the owner epoch finds its own (ADR 0038)...
    PUT_META = (
        "UPDATE {ks}.items SET opened = true, cursor = ?, last_id = ?, queued = ?, queued_created = ?, "
        f"min_expire = ?, rows = ?, dedup_until = ? WHERE {_PK}"
    )
    # ...or fenced, by a run that writes dedup markers (a marker must never land behind a newer owner).
    FENCED_META = (
        "UPDATE {ks}.items SET opened = true, cursor = ?, last_id = ?, queued = ?, queued_created = ?, "
        f"min_expire = ?, rows = ?, dedup_until = ? WHERE {_PK} IF epoch = ?"
    )
    FENCE = f"UPDATE {{ks}}.items SET epoch = ? WHERE {_PK} IF epoch = ?"
    # A tail left behind with a run's commit maybe still in flight (its coordinator retries the Paxos
    # round for a while): its epoch becomes the owner's, negated, unless a commit landed since it was
    # loaded.
    SEAL = f"UPDATE {{ks}}.items SET epoch = ? WHERE {_PK} IF epoch = ? AND rows = ?"
    OPEN_SEGMENT = (
        "INSERT INTO {ks}.items (queue, partition, segment, epoch) VALUES (?, ?, ?, ?) IF NOT EXISTS"
    )
    SEGMENT_META = (
        "SELECT epoch, opened, cursor, last_id, queued, queued_created, min_expire, rows, dedup_until "
        f"FROM {{ks}}.items "
        f"WHERE {_PK} LIMIT 1"
    )
    STATES = f"SELECT states FROM {{ks}}.items WHERE {_PK} AND record = 1"
    ITEMS_AFTER = (
        f"SELECT id, meta, payload FROM {{ks}}.items WHERE {_PK} "
        "AND record = 0 AND id > ? AND id <= ? LIMIT ?"
    )
    ITEM_META_AFTER = (
        f"SELECT id, meta FROM {{ks}}.items WHERE {_PK} AND record = 0 AND id > ? AND id <= ? LIMIT ?"
    )
    ITEMS_BY_ID = f"SELECT id, meta, payload FROM {{ks}}.items WHERE {_PK} AND record = 0 AND id IN ?"
    DROP_SEGMENT = f"DELETE FROM {{ks}}.items WHERE {_PK}"

    # -- partitions --------------------------------------------------------------------------------------
    GET_PARTITION = (
        "SELECT epoch, base, tail, segments, expires, markers FROM {ks}.partitions "
        "WHERE queue = ? AND partition = ?"
    )
    CREATE_PARTITION = (
        "INSERT INTO {ks}.partitions (queue, partition, epoch, base, tail, segments, expires) "
        "VALUES (?, ?, ?, 0, 0, {0: ''}, {}) IF NOT EXISTS"
    )
    # The read that acknowledges plain commits, shared by the runs of a queue's partitions (_fence.py).
    EPOCHS = "SELECT partition, epoch FROM {ks}.partitions WHERE queue = ? AND partition IN ?"
    CLAIM_PARTITION = "UPDATE {ks}.partitions SET epoch = ? WHERE queue = ? AND partition = ? IF epoch = ?"
    ROLL = (
        "UPDATE {ks}.partitions SET tail = ?, segments = ?, expires = ?, markers = ? "
        "WHERE queue = ? AND partition = ? "
        "IF epoch = ? AND tail = ?"
    )
    RESET_PARTITION = (
        "UPDATE {ks}.partitions SET base = ?, tail = ?, segments = ?, expires = {}, markers = {} "
        "WHERE queue = ? AND partition = ? IF EXISTS"
    )

    # -- import's dedup index ----------------------------------------------------------------------------
    GET_SOURCES = "SELECT source_id, id FROM {ks}.sources WHERE queue = ? AND partition = ? AND source_id = ?"
    PUT_SOURCE = "INSERT INTO {ks}.sources (queue, partition, source_id, id) VALUES (?, ?, ?, ?) USING TTL ?"

    # -- produce de-duplication (_dedup.py) -------------------------------------------------------------
    CLAIM_DEDUP = (
        "INSERT INTO {ks}.dedup (queue, dedup_id, partition, epoch, segment, claimed_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
    )
    TAKE_DEDUP = (
        "UPDATE {ks}.dedup USING TTL ? SET partition = ?, epoch = ?, segment = ?, claimed_at = ?, "
        "expires_at = ? WHERE queue = ? AND dedup_id = ? IF partition = ? AND epoch = ? AND claimed_at = ?"
    )
    # Only the claim this very call took: its batch is not written, so no marker can prove it.
    RELEASE_DEDUP = (
        "DELETE FROM {ks}.dedup WHERE queue = ? AND dedup_id = ? "
        "IF partition = ? AND epoch = ? AND claimed_at = ?"
    )
    PUT_MARKER = (
        "INSERT INTO {ks}.items (queue, partition, segment, record, id, expire_deadline) "
        "VALUES (?, ?, ?, 2, ?, ?)"
    )
    FIND_MARKER = (
        "SELECT expire_deadline FROM {ks}.items "
        "WHERE queue = ? AND partition = ? AND segment = ? AND record = 2 AND id = ?"
    )
    PARTITION_SEGMENTS = "SELECT base, segments FROM {ks}.partitions WHERE queue = ? AND partition = ?"

    # -- queue records: written with lightweight transactions only, since mixing them with plain writes
    # on the same row would order writes by two different clocks ------------------------------------------
    GET_QUEUE = f"SELECT {_QUEUE_FIELDS} FROM {{ks}}.queues WHERE name = ?"
    ADD_QUEUE = f"INSERT INTO {{ks}}.queues ({_QUEUE_FIELDS}) VALUES ({_QUEUE_VALUES}) IF NOT EXISTS"
    UPDATE_QUEUE = (
        "UPDATE {ks}.queues SET namespace = ?, lease_timeout = ?, expire_timeout = ?, dead_queue = ?, "
        "max_attempts = ?, reference = ?, requested_partitions = ?, created_at = ?, updated_at = ?, "
        "extra = ?, dedup_window = ? "
        "WHERE name = ? IF EXISTS"
    )
    DELETE_QUEUE = "DELETE FROM {ks}.queues WHERE name = ? IF EXISTS"
    INDEX_QUEUE = "INSERT INTO {ks}.queues_by_namespace (namespace, name) VALUES (?, ?)"
    UNINDEX_QUEUE = "DELETE FROM {ks}.queues_by_namespace WHERE namespace = ? AND name = ?"
    LIST_QUEUES = "SELECT name FROM {ks}.queues_by_namespace WHERE namespace = ? AND name >= ? LIMIT ?"

    # -- durable workflows (_workflows.py): records replaced by compare-and-set on their version, an index
    # of finished ones by status, and one of running ones by generation -------------------------------------
    GET_WORKFLOW = "SELECT record FROM {ks}.workflows WHERE id = ?"
    # An UPDATE, not an INSERT: an INSERT's row marker would outlive the columns' TTL and keep the id taken.
    ADD_WORKFLOW = (
        "UPDATE {ks}.workflows USING TTL ? SET version = ?, record = ? WHERE id = ? IF version = null"
    )
    PUT_WORKFLOW = "UPDATE {ks}.workflows USING TTL ? SET version = ?, record = ? WHERE id = ? IF version = ?"
    INDEX_WORKFLOW = "INSERT INTO {ks}.workflows_by_status (status, bucket, id) VALUES (?, ?, ?) USING TTL ?"
    PUT_ENTRY = "INSERT INTO {ks}.workflow_entries (id, seq, version, entry) VALUES (?, ?, ?, ?) USING TTL ?"
    # A range of the clustering's first column: one range tombstone, whatever the rows it covers.
    DROP_ENTRIES = "DELETE FROM {ks}.workflow_entries WHERE id = ? AND seq <= ?"
    GET_ENTRIES = (
        "SELECT seq, version, entry FROM {ks}.workflow_entries WHERE id = ? AND seq >= ? AND seq <= ? LIMIT ?"
    )
    LIST_WORKFLOWS = (
        "SELECT id FROM {ks}.workflows_by_status WHERE status = ? AND bucket = ? AND id >= ? LIMIT ?"
    )
    LIST_WORKFLOWS_AFTER = (
        "SELECT id FROM {ks}.workflows_by_status WHERE status = ? AND bucket = ? AND id > ? LIMIT ?"
    )
    # Running rows before generations: read by the carry, which then drops them a partition at a time.
    DROP_LEGACY_RUNNING = "DELETE FROM {ks}.workflows_by_status WHERE status = ? AND bucket = ?"
    INDEX_RUNNING = (
        "INSERT INTO {ks}.workflows_running (bucket, generation, id, done) VALUES (?, ?, ?, false)"
    )
    CARRY_RUNNING = "INSERT INTO {ks}.workflows_running (bucket, generation, id) VALUES (?, ?, ?)"
    MARK_DONE = (
        "UPDATE {ks}.workflows_running SET done = true WHERE bucket = ? AND generation IN ? AND id = ?"
    )
    LIST_RUNNING = (
        "SELECT id, done FROM {ks}.workflows_running WHERE bucket = ? AND generation = ? AND id >= ? LIMIT ?"
    )
    LIST_RUNNING_AFTER = (
        "SELECT id, done FROM {ks}.workflows_running WHERE bucket = ? AND generation = ? AND id > ? LIMIT ?"
    )
    DROP_RUNNING = "DELETE FROM {ks}.workflows_running WHERE bucket = ? AND generation = ?"
    GET_CARRIED = "SELECT first, claimed FROM {ks}.workflows_carried WHERE scope = ?"
    CLAIM_FIRST_CARRY = "INSERT INTO {ks}.workflows_carried (scope, claimed) VALUES (?, ?) IF NOT EXISTS"
    CLAIM_CARRY = "UPDATE {ks}.workflows_carried SET claimed = ? WHERE scope = ? IF claimed < ?"
    CARRIED = "UPDATE {ks}.workflows_carried SET first = ? WHERE scope = ? IF claimed = ?"

    # -- tenancy's records (_records.py): lightweight transactions only, as queue records ---------------
    GET_RECORD = "SELECT value FROM {ks}.records WHERE kind = ? AND key = ?"
    ADD_RECORD = "INSERT INTO {ks}.records (kind, key, value) VALUES (?, ?, ?) IF NOT EXISTS"
    SET_RECORD = "UPDATE {ks}.records SET value = ? WHERE kind = ? AND key = ? IF EXISTS"
    DELETE_RECORD = "DELETE FROM {ks}.records WHERE kind = ? AND key = ? IF EXISTS"
    LIST_RECORDS = "SELECT key, value FROM {ks}.records WHERE kind = ? AND key >= ? LIMIT ?"
    LIST_RECORDS_TO = "SELECT key, value FROM {ks}.records WHERE kind = ? AND key >= ? AND key < ? LIMIT ?"

    # -- stamps (_records.py): plain writes, the write time is the value ------------------------------------
    RAISE_STAMP = "UPDATE {ks}.stamps USING TIMESTAMP ? SET at = ? WHERE kind = ? AND key = ?"
    GET_STAMPS = "SELECT key, at FROM {ks}.stamps WHERE kind = ? AND key IN ?"
    DELETE_STAMP = "DELETE FROM {ks}.stamps WHERE kind = ? AND key = ?"

    def cql(self, keyspace: str) -> str:
        """The statement's text for ``keyspace``."""
        return str(self.value).replace("{ks}", keyspace)
