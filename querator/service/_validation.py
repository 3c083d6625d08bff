"""The checks of every request, in the reference's order and words (docs/semantics.md, validation).

A request is checked completely here before anything waits for it or forwards it: a bad one gets its 400
on any node and backend, whether or not this node serves the queue. Durations come back in microseconds.
"""

from __future__ import annotations

from typing import Final

from querator.clock import MICROS
from querator.duration import MICROSECOND, DurationError, format_duration, format_micros, parse_duration
from querator.errors import InvalidOption
from querator.names import check_new_name_characters, check_printable
from querator.storage.base import QueueRecord
from querator.storage.failures import MAX_ERROR_CHARS, MAX_FAILURES
from querator.storage.journal import INFO_ENTRIES
from querator.storage.operations import storage_id_error
from querator.wire import messages as m
from querator.wire.search import SEARCH_ATTRIBUTES_INVALID, check_search_attributes, decode_search_entry
from querator.wire.workflows import DONE, KINDS, SEARCH, STATES, STATUSES, THENS, UPDATE, UPDATE_RESULT

MAX_PRODUCE_BATCH = 1000
MAX_LEASE_BATCH = 1000
MAX_COMPLETE_BATCH = 1000
MAX_IMPORT_BATCH = MAX_PRODUCE_BATCH
"""Items of a storage/items.import: a produce's, so that what a produce may hold can be imported."""
MAX_DELETE_IDS = 65536
"""Ids of a storage/items.delete: a list's largest page (``MAX_LIST_LIMIT``) can be deleted at once."""
MAX_REQUEST_TIMEOUT_US = 15 * 60 * MICROS
MIN_REQUEST_TIMEOUT_US = 10_000
MAX_LIST_LIMIT = 65536
MAX_NAME = 512
"""Characters of a queue name (and of a dead queue's)."""
MAX_PARTITIONS = 4096
MAX_DEDUP_ID = 128
MAX_DEDUP_WINDOW_US = 7 * 24 * 3600 * MICROS
DEFAULT_LIST_LIMIT = 1000
SYSTEM_NAMESPACE = "_system"
TOO_MANY_FAILURES = f"failures is invalid; an item keeps at most {MAX_FAILURES}"


# -- the queue API -----------------------------------------------------------------------------------------


def check_produce(req: m.QueueProduceRequest) -> int:
    """The produce's request_timeout in microseconds, once the whole request is valid."""
    timeout_us = request_timeout(req.request_timeout)
    if not req.items:
        raise InvalidOption("items cannot be empty; at least one item is required")
    if len(req.items) > MAX_PRODUCE_BATCH:
        raise too_many("items", "max_produce_batch_size", MAX_PRODUCE_BATCH, len(req.items))
    for i in req.items:
        if len(i.dedup_id) > MAX_DEDUP_ID:
            raise InvalidOption(f"dedup id is invalid; cannot be greater than '{MAX_DEDUP_ID}' characters")
    return timeout_us


def check_lease(req: m.QueueLeaseRequest) -> int:
    """The lease's request_timeout in microseconds, once the whole request is valid."""
    if not req.client_id.strip():
        raise InvalidOption("invalid client id; cannot be empty")
    if req.batch_size <= 0:
        raise InvalidOption("invalid batch size; must be greater than zero")
    if req.batch_size > MAX_LEASE_BATCH:
        raise InvalidOption(
            f"invalid batch size; max_lease_batch_size is {MAX_LEASE_BATCH},"
            f" but {req.batch_size} was requested"
        )
    return request_timeout(req.request_timeout)


def check_partition(record: QueueRecord, partition: int) -> None:
    if partition < 0 or partition >= record.requested_partitions:
        raise InvalidOption(f"partition is invalid; '{partition}' is not a valid partition")


def check_complete(req: m.QueueCompleteRequest) -> int:
    """The complete's request_timeout in microseconds."""
    check_ids(req.ids)
    check_lease_tokens(req.lease_tokens, req.ids)
    return request_timeout(req.request_timeout, minimum_us=0)


def check_lease_tokens(tokens: list[str], ids: list[str]) -> None:
    """Lease tokens, when given, come one per id (docs/extensions.md, "Lease tokens")."""
    if tokens and len(tokens) != len(ids):
        raise InvalidOption(f"lease tokens is invalid; {len(tokens)} given for {len(ids)} ids")


LEASE_TOKEN_SETTINGS = ("required", "off")


def check_lease_token_setting(value: str) -> None:
    if value and value not in LEASE_TOKEN_SETTINGS:
        raise InvalidOption(f"lease token is invalid; '{value}' must be 'required' or 'off'")


def check_retry(req: m.QueueRetryRequest) -> None:
    if not req.items:
        raise InvalidOption("items is invalid; list of items cannot be empty")
    if len(req.items) > MAX_COMPLETE_BATCH:
        raise too_many("items", "max_complete_batch_size", MAX_COMPLETE_BATCH, len(req.items))
    for n, item in enumerate(req.items):
        if len(item.error) > MAX_ERROR_CHARS:
            raise InvalidOption(
                f"error is invalid; items[{n}].error is longer than {MAX_ERROR_CHARS} characters"
            )


def check_renew(req: m.QueueRenewRequest, record: QueueRecord) -> int:
    """The lease timeout the renewed leases get, in microseconds (0: the queue's)."""
    check_ids(req.ids)
    check_lease_tokens(req.lease_tokens, req.ids)
    lease_timeout_us = queue_duration(req.lease_timeout, "lease timeout", "8m, 15m or 1h")
    if lease_timeout_us > record.expire_timeout:
        raise lease_too_long(lease_timeout_us, record.expire_timeout)
    request_timeout(req.request_timeout, minimum_us=0)
    return lease_timeout_us


def check_redrive(req: m.QueueRedriveRequest) -> int:
    """The redrive's request_timeout in microseconds, once the whole request is valid (both queues
    exist: checked by the caller, the target after the source)."""
    if req.limit < 0:
        raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
    return request_timeout(req.request_timeout)


def check_redrive_target(req: m.QueueRedriveRequest) -> None:
    if not req.target_queue.strip():
        raise InvalidOption("target queue is invalid; cannot be empty")
    if req.target_queue == req.queue_name:
        raise InvalidOption(f"target queue is invalid; '{req.target_queue}' is the queue being redriven")


def check_clear(req: m.QueueClearRequest) -> None:
    if not req.queue and not req.scheduled:
        raise InvalidOption("invalid clear request; one of 'queue', 'scheduled' must be true")


# -- the storage API ---------------------------------------------------------------------------------------


def check_list_items(req: m.StorageItemsListRequest) -> None:
    if req.pivot and (error := storage_id_error(req.pivot)) is not None:
        raise error
    if req.limit < 0:
        raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
    # The reference has no maximum here; ours is queues.list's. A page also ends early at
    # storage.LIST_PAGE_BYTES of payloads (docs/extensions.md, "Storage lists").
    check_list_limit(req.limit)


def check_import(req: m.StorageItemsImportRequest) -> None:
    if not req.items:
        raise InvalidOption("items is invalid; cannot be empty")
    if len(req.items) > MAX_IMPORT_BATCH:
        raise too_many("items", "max_import_batch_size", MAX_IMPORT_BATCH, len(req.items))
    for item in req.items:
        if item.attempts < 0:
            raise InvalidOption(f"attempts is invalid; cannot be negative, but {item.attempts} was given")
        if item.job_id and storage_id_error(item.job_id) is not None:
            raise InvalidOption("job id is invalid; must be an item id (a KSUID)")
        if len(item.failures) > MAX_FAILURES:
            raise InvalidOption(TOO_MANY_FAILURES)
        if any(len(f.error) > MAX_ERROR_CHARS for f in item.failures):
            raise InvalidOption(f"failures is invalid; an error is longer than {MAX_ERROR_CHARS} characters")


def check_delete(req: m.StorageItemsDeleteRequest) -> None:
    if not req.ids:
        raise InvalidOption("ids is invalid; cannot be empty")
    if len(req.ids) > MAX_DELETE_IDS:
        raise too_many("ids", "max_delete_ids", MAX_DELETE_IDS, len(req.ids))
    for item_id in req.ids:
        if (error := storage_id_error(item_id)) is not None:
            raise error


def check_queues_list(req: m.QueuesListRequest) -> str:
    """The namespace listed."""
    if req.limit < 0:
        raise InvalidOption("limit is invalid; limit cannot be negative")
    check_list_limit(req.limit)
    if "~" in req.pivot:
        raise InvalidOption(f"pivot is invalid; '{req.pivot}' cannot contain '~' character")
    return namespace(req.namespace)


# -- names, durations and queue settings -------------------------------------------------------------------


def has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def check_stored_name(name: str) -> None:
    if not name.strip():
        raise InvalidOption("queue name is invalid; queue name cannot be empty")
    if "~" in name:
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain '~' character")


def check_new_name(name: str) -> None:
    if len(name) > MAX_NAME:
        raise InvalidOption(f"queue name is invalid; cannot be greater than '{MAX_NAME}' characters")
    if not name.strip():
        raise InvalidOption("queue name is invalid; queue name cannot be empty")
    if has_space(name):
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain whitespace")
    if "~" in name:
        raise InvalidOption(f"queue name is invalid; '{name}' cannot contain '~' character")


def check_list_limit(limit: int) -> None:
    """The largest page of a list, in the reference's text for queues.list (its tests compare it); each
    list checks a negative limit first, in its own words."""
    if limit > MAX_LIST_LIMIT:
        raise InvalidOption(f"limit is invalid; cannot be greater than {MAX_LIST_LIMIT}")


def check_ids(ids: list[str]) -> None:
    """The ids of a complete or renew."""
    if not ids:
        raise InvalidOption("ids is invalid; list of ids cannot be empty")
    if len(ids) > MAX_COMPLETE_BATCH:
        raise too_many("ids", "max_complete_batch_size", MAX_COMPLETE_BATCH, len(ids))


def too_many(field: str, setting: str, limit: int, received: int | str) -> InvalidOption:
    """A list over its batch limit, in the reference's words: ``received`` is the count, or "more than
    <limit>" when the body was refused before its elements were counted (``querator.wire.Bound``)."""
    return InvalidOption(f"{field} is invalid; {setting} is {limit} but received {received}")


def lease_too_long(lease_timeout_us: int, expire_timeout_us: int) -> InvalidOption:
    return InvalidOption(
        f"lease timeout is too long; {format_micros(lease_timeout_us)} cannot be greater"
        f" than the expire timeout {format_micros(expire_timeout_us)}"
    )


_TIMEOUTS_US: dict[str, int] = {}
"""The request timeouts seen, parsed (``deadline_us``): a node's clients use a handful of them."""
MAX_TIMEOUTS_KEPT: Final = 256


def deadline_us(req: m.Message, now_us: int) -> int:
    """When the request's caller stops waiting: ``now_us`` plus its ``request_timeout``, for a request
    that has one (0 for none, or for one its own check refuses, which it then does)."""
    text = getattr(req, "request_timeout", "")
    if not text:
        return 0
    timeout_us = _TIMEOUTS_US.get(text)
    if timeout_us is None:
        try:
            timeout_us = min(max(parse_duration(text) // MICROSECOND, 0), MAX_REQUEST_TIMEOUT_US)
        except DurationError:
            timeout_us = 0
        if len(_TIMEOUTS_US) >= MAX_TIMEOUTS_KEPT:  # many distinct ones: start afresh, bounded
            _TIMEOUTS_US.clear()
        _TIMEOUTS_US[text] = timeout_us
    return now_us + timeout_us if timeout_us else 0


def request_timeout(text: str, minimum_us: int = MIN_REQUEST_TIMEOUT_US) -> int:
    """A request_timeout in microseconds, checked against the reference's bounds (10ms..15m inclusive)."""
    if not text:
        raise InvalidOption("request timeout is required; '5m' is recommended, 15m is the maximum")
    try:
        ns = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"request timeout is invalid; {e} - expected format: 900ms, 5m or 15m") from None
    if ns == 0:
        raise InvalidOption("request timeout is required; '5m' is recommended, 15m is the maximum")
    if ns > MAX_REQUEST_TIMEOUT_US * MICROSECOND:
        raise InvalidOption(
            f"request timeout is invalid; maximum timeout is '15m' but '{format_duration(ns)}' was requested"
        )
    if ns < minimum_us * MICROSECOND:
        raise InvalidOption(
            f"request timeout is invalid; minimum timeout is '10ms' but '{format_duration(ns)}' was requested"
        )
    return ns // MICROSECOND


def timeouts(info: m.QueueInfo) -> tuple[int, int]:
    """The lease and expire timeouts of a create or update, in microseconds (0 when absent)."""
    if len(info.lease_timeout) > 15:
        raise InvalidOption("lease timeout is invalid; cannot be greater than '15' characters")
    if len(info.expire_timeout) > 15:
        raise InvalidOption("expire timeout is invalid; cannot be greater than '15' characters")
    expire = queue_duration(info.expire_timeout, "expire timeout", "60m, 2h or 24h")
    lease = queue_duration(info.lease_timeout, "lease timeout", "8m, 15m or 1h")
    return lease, expire


def queue_duration(text: str, what: str, formats: str) -> int:
    if not text:
        return 0
    # Zero reads as "not given": on create the store check answers "cannot be empty", on update the
    # current value is kept (as the reference does for a zero duration).
    return _non_negative_ns(text, what, formats) // MICROSECOND


def _non_negative_ns(text: str, what: str, formats: str) -> int:
    """A queue setting's duration in nanoseconds, refused when it cannot be read or is negative."""
    try:
        ns = parse_duration(text)
    except DurationError as e:
        raise InvalidOption(f"{what} is invalid; {e} - expected format: {formats}") from None
    if ns < 0:
        raise InvalidOption(f"{what} is invalid; cannot be negative but '{text}' was given")
    return ns


def dedup_window(text: str, unset: int) -> int:
    """A queue's dedup_window in microseconds; ``unset`` when not given, 0 (``0s``) disables."""
    if not text:
        return unset
    ns = _non_negative_ns(text, "dedup window", "5m, 1h or 0s")
    if ns > MAX_DEDUP_WINDOW_US * MICROSECOND:
        raise InvalidOption(
            f"dedup window is invalid; maximum is '{format_micros(MAX_DEDUP_WINDOW_US)}'"
            f" but '{format_duration(ns)}' was given"
        )
    return ns // MICROSECOND


def namespace(namespace: str) -> str:
    if not namespace:
        return SYSTEM_NAMESPACE
    if len(namespace) > 256:
        raise InvalidOption("namespace name is invalid; cannot be greater than '256' characters")
    if has_space(namespace):
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain whitespace")
    if "~" in namespace:
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain '~' character")
    if ":" in namespace:
        raise InvalidOption(f"namespace name is invalid; '{namespace}' cannot contain ':' character")
    return namespace


def partitions_error() -> InvalidOption:
    return InvalidOption(f"partitions is invalid; cannot be greater than {MAX_PARTITIONS}")


def check_record(r: QueueRecord) -> None:
    """The store checks, in the reference's order."""
    if len(r.dead_queue) > 512:
        raise InvalidOption("dead queue is invalid; cannot be greater than '512' characters")
    if len(r.reference) > 2000:
        raise InvalidOption("reference field is invalid; cannot be greater than '2000' characters")
    if r.max_attempts > 65536:
        raise InvalidOption("max attempts is invalid; cannot be greater than 65536")
    if r.max_attempts < 0:
        raise InvalidOption("max attempts is invalid; cannot be negative number")
    if r.requested_partitions < 1:
        raise InvalidOption("partitions is invalid; cannot be less than 1")
    if r.requested_partitions > MAX_PARTITIONS:
        raise partitions_error()
    if not r.lease_timeout:
        raise InvalidOption("lease timeout is invalid; cannot be empty")
    if not r.expire_timeout:
        raise InvalidOption("expire timeout is invalid; cannot be empty")
    if r.lease_timeout > r.expire_timeout:
        raise lease_too_long(r.lease_timeout, r.expire_timeout)


# -- durable workflows (docs/durable.md) ---------------------------------------------------------------------

MAX_WORKFLOW_ID = 256
MAX_WORKFLOW_NAME = 256
MAX_SIGNAL_ID = 128
MAX_APPEND_ENTRIES = 1000
TOO_MANY_ENTRIES = f"entries is invalid; at most {MAX_APPEND_ENTRIES} entries to an append"
DEFAULT_CLAIM_TIMEOUT_US = 30 * MICROS
MAX_CLAIM_TIMEOUT_US = 15 * 60 * MICROS
MIN_CLAIM_TIMEOUT_US = MICROS
_WORKFLOW_STATUSES = frozenset({"", *STATUSES})  # "": any status


def check_workflow_id(workflow_id: str, what: str = "workflow id", *, new: bool = False) -> None:
    """A workflow's id: a ``new`` one (a start's) under the rule of new names, one looked up under the
    rule it was created with before (a stored id keeps being found)."""
    if not workflow_id.strip():
        raise InvalidOption(f"{what} is invalid; cannot be empty")
    if len(workflow_id) > MAX_WORKFLOW_ID:
        raise InvalidOption(f"{what} is invalid; cannot be greater than '{MAX_WORKFLOW_ID}' characters")
    (check_new_name_characters if new else check_printable)(what, workflow_id)


def _check_label(value: str, what: str) -> None:
    """A workflow's, step's or signal's name: what workers look code up by; always a new one, stored
    with what is being recorded."""
    if not value.strip():
        raise InvalidOption(f"{what} is invalid; cannot be empty")
    if len(value) > MAX_WORKFLOW_NAME:
        raise InvalidOption(f"{what} is invalid; cannot be greater than '{MAX_WORKFLOW_NAME}' characters")
    check_new_name_characters(what, value)


def check_app_version(version: str) -> None:
    """An app version (docs/durable.md, "App versions"): "" for none, else a label."""
    if version:
        _check_label(version, "app version")


def check_workflows_lease(req: m.WorkflowsLeaseRequest) -> None:
    """What a ``workflows.lease`` adds to a lease (which ``check_lease`` checks): its claims'."""
    if req.claims < 0:
        raise InvalidOption(f"claims is invalid; {req.claims} cannot be negative")
    check_app_version(req.app_version)
    if req.claimant:
        _check_label(req.claimant, "claimant")
    claim_timeout(req.claim_timeout)


def check_start(req: m.WorkflowsStartRequest) -> None:
    check_workflow_id(req.workflow_id, new=True)
    _check_label(req.name, "workflow name")
    check_app_version(req.app_version)
    check_search_attributes(req.search_attributes)
    check_stored_name(req.queue_name)
    if req.parent_id:
        check_workflow_id(req.parent_id, "parent id")
        if req.parent_seq < 1:
            raise InvalidOption("parent seq is invalid; a child names the seq of its parent that started it")
    elif req.parent_seq:
        # Stored and answered as given otherwise, a negative seq included.
        raise InvalidOption(f"parent seq is invalid; {req.parent_seq} was given without a parent id")
    check_new_name_characters("encoding", req.encoding)


MIN_WORKFLOW_TIMEOUT_US: Final = MICROS
"""A workflow's shortest timeout: its deadline is an activation, which a worker must get to."""


def workflow_timeout(text: str) -> int:
    """A start's ``timeout`` in microseconds (0: none), at least 1s (docs/adr/0047)."""
    if not text:
        return 0
    if len(text) > 15:
        raise InvalidOption("timeout is invalid; cannot be greater than '15' characters")
    try:
        us = parse_duration(text) // MICROSECOND
    except DurationError as e:
        raise InvalidOption(f"timeout is invalid; {e} - expected format: 30s, 5m or 48h") from None
    if us < MIN_WORKFLOW_TIMEOUT_US:
        raise InvalidOption(f"timeout is invalid; must be at least 1s, got {format_micros(us)}")
    return us


def check_fork(req: m.WorkflowsForkRequest) -> None:
    check_workflow_id(req.workflow_id)
    if req.new_workflow_id:
        check_workflow_id(req.new_workflow_id, "new workflow id", new=True)
    if req.from_step < 1:
        raise InvalidOption(f"from step is invalid; steps count from 1, got {req.from_step}")


def check_signal(req: m.WorkflowsSignalRequest) -> None:
    check_workflow_id(req.workflow_id)
    _check_label(req.name, "signal name")
    if len(req.signal_id) > MAX_SIGNAL_ID:
        raise InvalidOption(f"signal id is invalid; cannot be greater than '{MAX_SIGNAL_ID}' characters")
    check_new_name_characters("signal id", req.signal_id)


def check_update(req: m.WorkflowsUpdateRequest) -> int:
    """An update's request (docs/adr/0060), all of it before anything is recorded or waited for; its
    ``request_timeout`` in microseconds."""
    check_workflow_id(req.workflow_id)
    _check_label(req.name, "update name")
    if not req.update_id:
        raise InvalidOption("update id is required; the caller makes it, to ask again for the same update")
    if len(req.update_id) > MAX_SIGNAL_ID:
        raise InvalidOption(f"update id is invalid; cannot be greater than '{MAX_SIGNAL_ID}' characters")
    check_new_name_characters("update id", req.update_id)
    return request_timeout(req.request_timeout)


MAX_TERMINATE_REASON: Final = 1024
"""Characters of a terminate's reason: it becomes the workflow's error."""


def check_terminate(req: m.WorkflowsTerminateRequest) -> None:
    check_workflow_id(req.workflow_id)
    if len(req.reason) > MAX_TERMINATE_REASON:
        raise InvalidOption(f"reason is invalid; cannot be greater than '{MAX_TERMINATE_REASON}' characters")


def check_list_workflows(req: m.WorkflowsListRequest) -> int:
    """The page size of a workflows.list, once the request is valid."""
    if req.status not in _WORKFLOW_STATUSES:
        raise InvalidOption(
            f"status is invalid; '{req.status}' is not running, completed, failed or cancelled"
        )
    if req.limit < 0:
        raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
    check_list_limit(req.limit)
    check_app_version(req.app_version)
    check_search_attributes(req.search, "conditions")
    return req.limit or DEFAULT_LIST_LIMIT


def check_workflow_info(req: m.WorkflowsInfoRequest) -> int:
    """A page of a journal (``after`` a seq, at most ``limit`` entries): the page's size, at most
    ``INFO_ENTRIES`` (the default)."""
    check_workflow_id(req.workflow_id)
    if req.after < 0:
        raise InvalidOption(f"after is invalid; cannot be negative, but {req.after} was requested")
    if req.limit < 0:
        raise InvalidOption(f"limit is invalid; cannot be negative, but {req.limit} was requested")
    if req.limit > INFO_ENTRIES:
        raise InvalidOption(f"limit is invalid; cannot be greater than {INFO_ENTRIES}")
    return req.limit or INFO_ENTRIES


def check_workflow_append(req: m.WorkflowsAppendRequest) -> None:
    check_workflow_id(req.workflow_id)
    if req.fence < 0:
        raise InvalidOption(f"fence is invalid; cannot be negative, but {req.fence} was given")
    if req.then not in THENS:
        raise InvalidOption(
            f"then is invalid; '{req.then}' is not suspend, complete, fail, cancel or continue_as_new"
        )
    if req.fence == 0 and (req.then or not req.entries):
        raise InvalidOption("fence is invalid; only entries may be recorded without a claim's fence")
    if len(req.entries) > MAX_APPEND_ENTRIES:
        raise InvalidOption(TOO_MANY_ENTRIES)
    for e in req.entries:
        _check_entry(req.fence, e)
    if req.claim_timeout:
        claim_timeout(req.claim_timeout)
    activation = req.activation
    if activation is not None and (not req.then or not activation.id or activation.partition < 0):
        raise InvalidOption(
            "activation is invalid; it goes with an ending (then), with an item id and a partition >= 0"
        )


def _check_entry(fence: int, e: m.WorkflowEntry) -> None:
    if e.seq < 1:
        raise InvalidOption(f"entries is invalid; seq must be at least 1, got {e.seq}")
    if e.kind not in KINDS or e.state not in STATES:
        raise InvalidOption(f"entries is invalid; '{e.kind}' '{e.state}' is not a kind and state of an entry")
    _check_label(e.name, "entry name")
    if e.attempts < 0 or e.group < 0 or e.group_size < 0:
        raise InvalidOption("entries is invalid; attempts, group and group_size cannot be negative")
    if e.kind == SEARCH:
        _check_search_entry(fence, e)
    _check_outside(fence, e)


def _check_search_entry(fence: int, e: m.WorkflowEntry) -> None:
    """Only the claimant's code sets attributes, in a recorded entry holding them (docs/adr/0061)."""
    if fence == 0 or e.state != DONE:
        raise InvalidOption(
            f"{SEARCH_ATTRIBUTES_INVALID}; a search entry is recorded done, by the claim's fence"
        )
    decode_search_entry(e.value)


def _check_outside(fence: int, e: m.WorkflowEntry) -> None:
    """Only the claimant's turn takes an update and answers it: a result recorded from outside the claim
    (fence 0) cannot answer for a workflow (docs/adr/0060)."""
    if fence == 0 and e.kind in (UPDATE, UPDATE_RESULT):
        raise InvalidOption(f"entries is invalid; only a claim's turn records {e.kind} entries")


def claim_timeout(text: str) -> int:
    """A claim's timeout in microseconds (default 30s), between 1s and 15m."""
    if not text:
        return DEFAULT_CLAIM_TIMEOUT_US
    if len(text) > 15:
        raise InvalidOption("claim timeout is invalid; cannot be greater than '15' characters")
    try:
        us = parse_duration(text) // MICROSECOND
    except DurationError as e:
        raise InvalidOption(f"claim timeout is invalid; {e} - expected format: 30s or 5m") from None
    if not MIN_CLAIM_TIMEOUT_US <= us <= MAX_CLAIM_TIMEOUT_US:
        raise InvalidOption(f"claim timeout is invalid; must be between 1s and 15m, got {format_micros(us)}")
    return us
