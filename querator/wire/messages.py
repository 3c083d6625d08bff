"""The v1 wire messages: one msgspec Struct per protobuf message of the Querator API.

Field names are the protojson ``json_name`` spellings, and the same class serves JSON and binary protobuf
(see the ``querator.wire`` package). Defaults are the protobuf zero values, which protojson omits on
output. ``querator/proto/querator.proto`` is the same contract in protobuf's own language and the one
source of its field numbers: the protobuf codec pairs each class with the message of the same name there,
field by field on the JSON key, and refuses a class that does not match it.
"""

from __future__ import annotations

import builtins
from datetime import datetime

import msgspec


class Message(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True, gc=False):
    """Base of every wire message.

    ``gc=False``: messages never form reference cycles, and untracking the thousands made per second
    keeps the cyclic collector from running (and pausing the loop) as often.
    """


class Reply(Message):
    """duh.v1.Reply: the body of every error and of successes that carry no payload."""

    code: int = 0
    code_text: str = ""
    message: str = ""
    details: dict[str, str] = {}


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


class QueueProduceRequest(Message):
    queue_name: str = ""
    request_timeout: str = ""
    items: list[QueueProduceItem] = []


class QueueProduceResponse(Message):
    """A produce's answer: ``Reply``'s fields (the reference's clients decode it as one) and, as an
    extension, each item's id in order ("" for an item not enqueued because its dedup_id was seen)."""

    code: int = 0
    code_text: str = ""
    message: str = ""
    details: dict[str, str] = {}
    ids: list[str] = []


class QueueLeaseRequest(Message):
    queue_name: str = ""
    batch_size: int = 0
    client_id: str = ""
    request_timeout: str = ""


class QueueLeaseItem(Message):
    encoding: str = ""
    kind: str = ""
    reference: str = ""
    id: str = ""
    attempts: int = 0
    lease_deadline: datetime | None = None
    bytes: builtins.bytes = b""
    lease_token: str = ""
    job_id: str = ""


class QueueLeaseResponse(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[QueueLeaseItem] = []


class QueueCompleteRequest(Message):
    queue_name: str = ""
    partition: int = 0
    request_timeout: str = ""
    ids: list[str] = []
    lease_tokens: list[str] = []


class QueueRetryItem(Message):
    id: str = ""
    retry_at: datetime | None = None
    dead: bool = False
    lease_token: str = ""
    error: str = ""


class QueueRetryRequest(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[QueueRetryItem] = []


class QueueStatsRequest(Message):
    queue_name: str = ""


class QueueReloadRequest(Message):
    queue_name: str = ""


class QueueClearRequest(Message):
    queue_name: str = ""
    scheduled: bool = False
    queue: bool = False
    destructive: bool = False


class QueuePartitionStats(Message):
    partition: int = 0
    total: int = 0
    total_leased: int = 0
    failures: int = 0
    average_age: str = ""
    average_leased_age: str = ""
    scheduled: int = 0


class QueueLogicalStats(Message):
    produce_waiting: int = 0
    lease_waiting: int = 0
    complete_waiting: int = 0
    in_flight: int = 0
    partitions: list[QueuePartitionStats] = []


class QueueStatsResponse(Message, rename={"logical_queues": "logicalQueues"}):
    queue_name: str = ""
    logical_queues: list[QueueLogicalStats] = []


class PartitionInfo(Message):
    partition: int = 0


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
    lease_token: str = ""


class QueuesListRequest(Message):
    pivot: str = ""
    limit: int = 0
    namespace: str = ""


class QueuesListResponse(Message):
    items: list[QueueInfo] = []


class QueuesDeleteRequest(Message):
    queue_name: str = ""
    force: bool = False


class QueuesInfoRequest(Message):
    queue_name: str = ""


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
    job_id: str = ""
    failures: list[ItemFailure] = []


class ItemFailure(Message):
    at: datetime | None = None
    attempt: int = 0
    error: str = ""


class StorageItemsListRequest(Message):
    queue_name: str = ""
    partition: int = 0
    pivot: str = ""
    limit: int = 0


class StorageItemsListResponse(Message):
    items: list[StorageItem] = []


class StorageItemsImportRequest(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[StorageItem] = []


class StorageItemsImportResponse(Message):
    items: list[StorageItem] = []


class StorageItemsDeleteRequest(Message):
    queue_name: str = ""
    partition: int = 0
    ids: list[str] = []


# -- extensions (extensions.md) --------------------------------------------------------------------------


class QueueRenewRequest(Message):
    queue_name: str = ""
    partition: int = 0
    ids: list[str] = []
    lease_timeout: str = ""
    request_timeout: str = ""
    lease_tokens: list[str] = []


class QueueRenewItem(Message):
    id: str = ""
    lease_deadline: datetime | None = None


class QueueRenewResponse(Message):
    items: list[QueueRenewItem] = []


class QueueRedriveRequest(Message):
    queue_name: str = ""
    target_queue: str = ""
    limit: int = 0
    request_timeout: str = ""


class QueueRedriveResponse(Message):
    moved: int = 0


class ClusterInfoRequest(Message):
    queue_name: str = ""
    namespace: str = ""


class ClusterMember(Message):
    node_id: str = ""
    address: str = ""
    state: str = ""


class ClusterPartition(Message):
    queue_name: str = ""
    partition: int = 0
    owner: str = ""


class ClusterHandOff(Message):
    at: datetime | None = None
    queue_name: str = ""
    partition: int = 0
    direction: str = ""
    other_node: str = ""
    reason: str = ""
    outcome: str = ""


class ClusterInfoResponse(Message):
    node_id: str = ""
    revision: int = 0
    members: list[ClusterMember] = []
    partitions: list[ClusterPartition] = []
    hand_offs: list[ClusterHandOff] = []


# -- durable workflows (docs/durable.md) ---------------------------------------------------------------------


class WorkflowEntry(Message):
    seq: int = 0
    kind: str = ""
    name: str = ""
    state: str = ""
    value: builtins.bytes = b""
    error: str = ""
    attempts: int = 0
    wake_at: datetime | None = None
    group: int = 0
    group_size: int = 0


class WorkflowSignal(Message):
    id: str = ""
    name: str = ""
    payload: builtins.bytes = b""
    sent_at: datetime | None = None
    taken_by: int = 0


class WorkflowInfo(Message):
    workflow_id: str = ""
    name: str = ""
    queue_name: str = ""
    status: str = ""
    input: builtins.bytes = b""
    encoding: str = ""
    result: builtins.bytes = b""
    error: str = ""
    parent_id: str = ""
    parent_seq: int = 0
    fence: int = 0
    claim_deadline: datetime | None = None
    cancel_requested: bool = False
    entries: list[WorkflowEntry] = []
    signals: list[WorkflowSignal] = []
    updates: list[WorkflowSignal] = []
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    expires_at: datetime | None = None
    namespace: str = ""
    lapsed_claims: int = 0
    resumable: bool = False
    timeout: str = ""
    deadline: datetime | None = None
    timed_out: bool = False
    forked_from: str = ""
    app_version: str = ""
    search_attributes: dict[str, str] = {}
    seq_base: int = 0
    runs: int = 0


class WorkflowsStartRequest(Message):
    workflow_id: str = ""
    name: str = ""
    queue_name: str = ""
    input: builtins.bytes = b""
    encoding: str = ""
    parent_id: str = ""
    parent_seq: int = 0
    timeout: str = ""
    app_version: str = ""
    search_attributes: dict[str, str] = {}


class WorkflowsForkRequest(Message):
    workflow_id: str = ""
    namespace: str = ""
    new_workflow_id: str = ""
    from_step: int = 0


class WorkflowsStartResponse(Message):
    created: bool = False
    workflow: WorkflowInfo | None = None


class WorkflowsInfoRequest(Message):
    workflow_id: str = ""
    namespace: str = ""
    after: int = 0
    limit: int = 0


class WorkflowsListRequest(Message):
    status: str = ""
    pivot: str = ""
    limit: int = 0
    namespace: str = ""
    app_version: str = ""
    search: dict[str, str] = {}


class WorkflowsListResponse(Message):
    workflows: list[WorkflowInfo] = []


class WorkflowsSignalRequest(Message):
    workflow_id: str = ""
    name: str = ""
    payload: builtins.bytes = b""
    signal_id: str = ""
    namespace: str = ""


class WorkflowsUpdateRequest(Message):
    workflow_id: str = ""
    name: str = ""
    payload: builtins.bytes = b""
    update_id: str = ""
    request_timeout: str = ""
    namespace: str = ""


class WorkflowsUpdateResponse(Message):
    update_id: str = ""
    seq: int = 0
    """The seq of the ``update_result`` entry that answers it."""
    state: str = ""
    value: builtins.bytes = b""
    error: str = ""


class WorkflowsCancelRequest(Message):
    workflow_id: str = ""
    namespace: str = ""


class WorkflowsResumeRequest(Message):
    workflow_id: str = ""
    namespace: str = ""


class WorkflowsTerminateRequest(Message):
    workflow_id: str = ""
    namespace: str = ""
    reason: str = ""


class WorkflowsResultRequest(Message):
    workflow_id: str = ""
    request_timeout: str = ""
    namespace: str = ""


class WorkflowsClaimRequest(Message):
    workflow_id: str = ""
    claim_timeout: str = ""
    namespace: str = ""
    app_version: str = ""


class WorkflowsClaimResponse(Message):
    outcome: str = ""
    workflow: WorkflowInfo | None = None


class WorkflowsLeaseRequest(Message):
    """A ``queue.lease`` of a durable app's task queue that also claims the workflows of the activations
    it leases, up to ``claims`` of them, for the caller (docs/adr/0071)."""

    queue_name: str = ""
    batch_size: int = 0
    client_id: str = ""
    request_timeout: str = ""
    claims: int = 0
    claim_timeout: str = ""
    app_version: str = ""
    claimant: str = ""


class WorkflowsLeaseClaim(Message):
    """The claim of the workflow an activation item of a ``workflows.lease`` names (the item's ``id``)."""

    id: str = ""
    outcome: str = ""
    workflow: WorkflowInfo | None = None


class WorkflowsLeaseResponse(Message):
    queue_name: str = ""
    partition: int = 0
    items: list[QueueLeaseItem] = []
    claims: list[WorkflowsLeaseClaim] = []


class WorkflowActivation(Message):
    """The activation item a turn runs for: its lease in the workflow's queue, which the append that
    ends the turn completes (docs/adr/0070)."""

    partition: int = 0
    id: str = ""
    lease_token: str = ""


class WorkflowsAppendRequest(Message):
    workflow_id: str = ""
    fence: int = 0
    entries: list[WorkflowEntry] = []
    then: str = ""
    wake_at: datetime | None = None
    result: builtins.bytes = b""
    error: str = ""
    claim_timeout: str = ""
    namespace: str = ""
    resumable: bool = False
    activation: WorkflowActivation | None = None


class WorkflowsAppendResponse(Message):
    resume: bool = False
    timed_out: bool = False
    settled: bool = False
    """The request's activation was completed with the turn's end: its worker leaves it."""


# -- cron schedules (docs/schedules.md) -------------------------------------------------------------------


class ScheduleInfo(Message):
    """A schedule: what schedules.create and schedules.update take, and info and list return (with
    the times, which a create or update ignores)."""

    name: str = ""
    cron: str = ""
    time_zone: str = ""
    queue_name: str = ""
    catch_up: str = ""
    catch_up_limit: int = 0
    jitter: str = ""
    paused: bool = False
    encoding: str = ""
    kind: str = ""
    reference: str = ""
    payload: bytes = b""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_tick: datetime | None = None
    next_tick: datetime | None = None
    owner: str = ""


class SchedulesRequest(Message):
    """schedules.info, delete, pause and resume: the schedule they name."""

    name: str = ""


class SchedulesListRequest(Message):
    pivot: str = ""
    limit: int = 0


class SchedulesListResponse(Message):
    items: list[ScheduleInfo] = []


# -- cluster-wide rate limits (docs/extensions.md, "Rate limits") ------------------------------------------


class RateLimitsTakeRequest(Message):
    """rate_limits.take: the next start of ``key`` under ``limit`` starts per ``period``, for the
    queue ``queue_name``, if it is at most ``max_wait`` away."""

    queue_name: str = ""
    key: str = ""
    limit: int = 0
    period: str = ""
    max_wait: str = ""


class RateLimitsTakeResponse(Message):
    """``granted``: a start is reserved ``wait`` from now ("0s": at once). Not granted: the next free
    start is further than ``max_wait``; asking again after ``wait`` finds one within it."""

    granted: bool = False
    wait: str = ""


# -- tenancy (docs/tenancy.md) ----------------------------------------------------------------------------


class NamespaceInfo(Message):
    name: str = ""
    description: str = ""
    created_at: datetime | None = None
    api_key_tag: str = ""


class NamespacesListRequest(Message):
    pivot: str = ""
    limit: int = 0


class NamespacesListResponse(Message):
    items: list[NamespaceInfo] = []


class NamespacesDeleteRequest(Message):
    name: str = ""


class User(Message):
    id: str = ""
    username: str = ""
    external_id: str = ""
    email: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None


class UserCreateRequest(Message):
    username: str = ""
    email: str = ""
    external_id: str = ""


class UserCreateResponse(Message):
    id: str = ""


class UsersListRequest(Message):
    limit: int = 0
    pivot: str = ""


class UsersListResponse(Message):
    items: list[User] = []


class UsersDeleteRequest(Message):
    id: str = ""


class APIKeyMetadata(Message):
    id: str = ""
    user_id: str = ""
    namespace_scope: str = ""
    name: str = ""
    prefix: str = ""
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    created_at: datetime | None = None


class APIKeyCreateRequest(Message):
    user_id: str = ""
    name: str = ""
    namespace_scope: str = ""
    expires_at: datetime | None = None
    key_tag: str = ""


class APIKeyCreateResponse(Message):
    id: str = ""
    key: str = ""
    prefix: str = ""


class APIKeysListRequest(Message):
    user_id: str = ""
    limit: int = 0
    pivot: str = ""


class APIKeysListResponse(Message):
    items: list[APIKeyMetadata] = []


class APIKeysDeleteRequest(Message):
    id: str = ""


class Role(Message):
    id: str = ""
    namespace: str = ""
    name: str = ""
    permissions: list[str] = []
    created_at: datetime | None = None


class RoleCreateRequest(Message):
    namespace: str = ""
    name: str = ""
    permissions: list[str] = []


class RoleCreateResponse(Message):
    id: str = ""


class RoleUpdateRequest(Message):
    namespace: str = ""
    name: str = ""
    permissions: list[str] = []


class RolesListRequest(Message):
    namespace: str = ""
    limit: int = 0
    pivot: str = ""


class RolesListResponse(Message):
    items: list[Role] = []


class RolesDeleteRequest(Message):
    namespace: str = ""
    name: str = ""


class RoleBinding(Message):
    id: str = ""
    namespace: str = ""
    user_id: str = ""
    role_id: str = ""
    created_at: datetime | None = None


class RoleBindingCreateRequest(Message):
    namespace: str = ""
    role_name: str = ""
    user_id: str = ""


class RoleBindingCreateResponse(Message):
    id: str = ""


class RoleBindingsListRequest(Message):
    namespace: str = ""
    user_id_filter: str = ""
    limit: int = 0
    pivot: str = ""


class RoleBindingsListResponse(Message):
    items: list[RoleBinding] = []


class RoleBindingDeleteRequest(Message):
    namespace: str = ""
    role_name: str = ""
    user_id: str = ""
