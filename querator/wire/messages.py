"""The v1 wire messages: one msgspec Struct per protobuf message of the Querator API.

Field names are the protojson ``json_name`` spellings; ``__pb__`` gives each field its protobuf number, so
the same class serves JSON and binary protobuf (see the ``querator.wire`` package). Defaults are the
protobuf zero values, which protojson omits on output. ``querator/proto/querator.proto`` is the same
contract in protobuf's own language, and a test keeps the two in step.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import ClassVar

import msgspec


class Message(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True, gc=False):
    """Base of every wire message.

    ``gc=False``: messages never form reference cycles, and untracking the thousands made per second
    keeps the cyclic collector from running (and pausing the loop) as often.
    """

    __pb__: ClassVar[dict[str, int]] = {}


class Reply(Message):
    """duh.v1.Reply: the body of every error and of successes that carry no payload."""

    code: int = 0
    code_text: str = ""
    message: str = ""
    details: dict[str, str] = {}
    __pb__ = {"code": 1, "code_text": 2, "message": 3, "details": 4}


OK_REPLY = Reply(code=200)


class QueueProduceItem(Message):
    encoding: str = ""
    kind: str = ""
    reference: str = ""
    enqueue_at: datetime | None = None
    # The wire name shadows the builtin inside the class body, and with postponed annotations a bare
    # ``bytes`` annotation would resolve to this field's own slot descriptor: spell the type out.
    bytes: builtins.bytes = b""
    utf8: str = ""
    dedup_id: str = ""
    # Extension fields (extensions.md) take numbers from 100 so the reference's future fields stay free.
    __pb__ = {
        "encoding": 1,
        "kind": 2,
        "reference": 3,
        "enqueue_at": 4,
        "bytes": 5,
        "utf8": 6,
        "dedup_id": 100,
    }


class QueueProduceRequest(Message):
    queue_name: str = ""
    request_timeout: str = ""
    items: list[QueueProduceItem] = []
    __pb__ = {"queue_name": 1, "request_timeout": 2, "items": 3}


class QueueLeaseRequest(Message):
    queue_name: str = ""
    batch_size: int = 0
    client_id: str = ""
    request_timeout: str = ""
    __pb__ = {"queue_name": 1, "batch_size": 2, "client_id": 3, "request_timeout": 4}


class QueueLeaseItem(Message):
    encoding: str = ""
    kind: str = ""
    reference: str = ""
    id: str = ""
    attempts: int = 0
    lease_deadline: datetime | None = None
    bytes: builtins.bytes = b""
    __pb__ = {
        "encoding": 1,
        "kind": 2,
        "reference": 3,
        "id": 4,
        "attempts": 5,
        "lease_deadline": 6,
        "bytes": 7,
    }


class QueueLeaseResponse(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[QueueLeaseItem] = []
    __pb__ = {"queue_name": 1, "partition": 2, "items": 3}


class QueueCompleteRequest(Message):
    queue_name: str = ""
    partition: int = 0
    request_timeout: str = ""
    ids: list[str] = []
    __pb__ = {"queue_name": 1, "partition": 2, "request_timeout": 3, "ids": 4}


class QueueRetryItem(Message):
    id: str = ""
    retry_at: datetime | None = None
    dead: bool = False
    __pb__ = {"id": 1, "retry_at": 2, "dead": 3}


class QueueRetryRequest(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[QueueRetryItem] = []
    __pb__ = {"queue_name": 1, "partition": 2, "items": 3}


class QueueStatsRequest(Message):
    queue_name: str = ""
    __pb__ = {"queue_name": 1}


class QueueReloadRequest(Message):
    queue_name: str = ""
    __pb__ = {"queue_name": 1}


class QueueClearRequest(Message):
    queue_name: str = ""
    scheduled: bool = False
    queue: bool = False
    destructive: bool = False
    __pb__ = {"queue_name": 1, "scheduled": 3, "queue": 4, "destructive": 5}


class QueuePartitionStats(Message):
    partition: int = 0
    total: int = 0
    total_leased: int = 0
    failures: int = 0
    average_age: str = ""
    average_leased_age: str = ""
    scheduled: int = 0
    __pb__ = {
        "partition": 1,
        "total": 2,
        "total_leased": 3,
        "failures": 4,
        "average_age": 5,
        "average_leased_age": 6,
        "scheduled": 7,
    }


class QueueLogicalStats(Message):
    produce_waiting: int = 0
    lease_waiting: int = 0
    complete_waiting: int = 0
    in_flight: int = 0
    partitions: list[QueuePartitionStats] = []
    __pb__ = {
        "produce_waiting": 6,
        "lease_waiting": 7,
        "complete_waiting": 8,
        "in_flight": 10,
        "partitions": 11,
    }


class QueueStatsResponse(Message, rename={"logical_queues": "logicalQueues"}):
    queue_name: str = ""
    logical_queues: list[QueueLogicalStats] = []
    __pb__ = {"queue_name": 1, "logical_queues": 2}


class PartitionInfo(Message):
    partition: int = 0
    __pb__ = {"partition": 1}


class QueueInfo(Message):
    queue_name: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    dead_queue: str = ""
    reference: str = ""
    lease_timeout: str = ""
    expire_timeout: str = ""
    max_attempts: int = 0
    requested_partitions: int = 0
    partitions: list[PartitionInfo] = []
    namespace: str = ""
    dedup_window: str = ""
    __pb__ = {
        "queue_name": 1,
        "created_at": 2,
        "updated_at": 3,
        "dead_queue": 4,
        "reference": 5,
        "lease_timeout": 6,
        "expire_timeout": 7,
        "max_attempts": 8,
        "requested_partitions": 9,
        "partitions": 10,
        "namespace": 11,
        "dedup_window": 100,
    }


class QueuesListRequest(Message):
    pivot: str = ""
    limit: int = 0
    namespace: str = ""
    __pb__ = {"pivot": 2, "limit": 3, "namespace": 4}


class QueuesListResponse(Message):
    items: list[QueueInfo] = []
    __pb__ = {"items": 1}


class QueuesDeleteRequest(Message):
    queue_name: str = ""
    force: bool = False
    __pb__ = {"queue_name": 1, "force": 2}


class QueuesInfoRequest(Message):
    queue_name: str = ""
    __pb__ = {"queue_name": 1}


class StorageItem(Message):
    id: str = ""
    source_id: str = ""
    is_leased: bool = False
    lease_deadline: datetime | None = None
    expire_deadline: datetime | None = None
    dead_deadline: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    enqueue_at: datetime | None = None
    attempts: int = 0
    max_attempts: int = 0
    reference: str = ""
    encoding: str = ""
    kind: str = ""
    payload: bytes = b""
    __pb__ = {
        "id": 1,
        "source_id": 2,
        "is_leased": 3,
        "lease_deadline": 4,
        "expire_deadline": 5,
        "dead_deadline": 6,
        "created_at": 7,
        "updated_at": 8,
        "enqueue_at": 9,
        "attempts": 10,
        "max_attempts": 11,
        "reference": 12,
        "encoding": 13,
        "kind": 14,
        "payload": 15,
    }


class StorageItemsListRequest(Message):
    queue_name: str = ""
    partition: int = 0
    pivot: str = ""
    limit: int = 0
    __pb__ = {"queue_name": 1, "partition": 2, "pivot": 3, "limit": 4}


class StorageItemsListResponse(Message):
    items: list[StorageItem] = []
    __pb__ = {"items": 1}


class StorageItemsImportRequest(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[StorageItem] = []
    __pb__ = {"queue_name": 1, "partition": 2, "items": 3}


class StorageItemsImportResponse(Message):
    items: list[StorageItem] = []
    __pb__ = {"items": 2}


class StorageItemsDeleteRequest(Message):
    queue_name: str = ""
    partition: int = 0
    ids: list[str] = []
    __pb__ = {"queue_name": 1, "partition": 2, "ids": 3}


# -- extensions (extensions.md) --------------------------------------------------------------------------


class QueueRenewRequest(Message):
    queue_name: str = ""
    partition: int = 0
    ids: list[str] = []
    lease_timeout: str = ""
    request_timeout: str = ""
    __pb__ = {"queue_name": 1, "partition": 2, "ids": 3, "lease_timeout": 4, "request_timeout": 5}


class QueueRenewItem(Message):
    id: str = ""
    lease_deadline: datetime | None = None
    __pb__ = {"id": 1, "lease_deadline": 2}


class QueueRenewResponse(Message):
    items: list[QueueRenewItem] = []
    __pb__ = {"items": 1}


class QueueRedriveRequest(Message):
    queue_name: str = ""
    target_queue: str = ""
    limit: int = 0
    request_timeout: str = ""
    __pb__ = {"queue_name": 1, "target_queue": 2, "limit": 3, "request_timeout": 4}


class QueueRedriveResponse(Message):
    moved: int = 0
    __pb__ = {"moved": 1}


class ClusterInfoRequest(Message):
    queue_name: str = ""
    namespace: str = ""
    __pb__ = {"queue_name": 1, "namespace": 2}


class ClusterMember(Message):
    node_id: str = ""
    address: str = ""
    state: str = ""
    __pb__ = {"node_id": 1, "address": 2, "state": 3}


class ClusterPartition(Message):
    queue_name: str = ""
    partition: int = 0
    owner: str = ""
    __pb__ = {"queue_name": 1, "partition": 2, "owner": 3}


class ClusterInfoResponse(Message):
    node_id: str = ""
    revision: int = 0
    members: list[ClusterMember] = []
    partitions: list[ClusterPartition] = []
    __pb__ = {"node_id": 1, "revision": 2, "members": 3, "partitions": 4}
