"""Conversions between the wire's messages and what the engine and storage work with.

Times: the wire carries datetimes (Go's zero time for "unset" where the reference does) and duration
strings; the engine and storage carry integers of microseconds.
"""

from __future__ import annotations

import functools
from datetime import datetime

from querator.clock import from_datetime, to_datetime
from querator.duration import format_micros
from querator.engine.logical_queue import LogicalStats
from querator.storage.base import Item, PartitionStats, QueueRecord
from querator.storage.failures import Failure, encode_failures, failures_of
from querator.storage.operations import LEASE_TOKEN_KEY, RetryEntry, lease_token
from querator.storage.workflows import Entry, Signal, Workflow, split_stored_id
from querator.wire import messages as m

_lease_deadline = functools.lru_cache(maxsize=64)(to_datetime)
"""``to_datetime`` of lease deadlines: the leases of one batch share theirs, and the conversion is the
costliest step of a small lease's reply (about 0.5 us; a hit costs 0.03)."""


def produced_items(req: m.QueueProduceRequest) -> list[Item]:
    """The items of a produce; an item's payload is its ``bytes``, else its ``utf8``."""
    return [
        Item(
            enqueue_at=from_datetime(i.enqueue_at) if i.enqueue_at is not None else 0,
            reference=i.reference,
            encoding=i.encoding,
            kind=i.kind,
            payload=i.bytes or i.utf8.encode(),
            dedup_id=i.dedup_id,
        )
        for i in req.items
    ]


def lease_reply(
    queue_name: str, partition: int, items: list[Item], token_key: bytes = b""
) -> m.QueueLeaseResponse:
    """``token_key``: the queue's lease token secret; each item then carries its lease's token."""
    # Every item of one lease shares its deadline: convert it once.
    deadline = _lease_deadline(items[0].lease_deadline) if items else None
    return m.QueueLeaseResponse(
        queue_name=queue_name,
        partition=partition,
        items=[
            m.QueueLeaseItem(
                id=i.id,
                attempts=i.attempts,
                lease_deadline=deadline,
                bytes=i.payload,
                encoding=i.encoding,
                kind=i.kind,
                reference=i.reference,
                lease_token=lease_token(token_key, i) if token_key else "",
                job_id=i.job_id,
            )
            for i in items
        ],
    )


def retry_entries(req: m.QueueRetryRequest) -> list[RetryEntry]:
    return [
        RetryEntry(
            i.id, from_datetime(i.retry_at) if i.retry_at is not None else 0, i.dead, i.lease_token, i.error
        )
        for i in req.items
    ]


def renew_reply(items: list[Item]) -> m.QueueRenewResponse:
    return m.QueueRenewResponse(
        items=[m.QueueRenewItem(id=i.id, lease_deadline=to_datetime(i.lease_deadline)) for i in items]
    )


def logical_stats(
    waiting: LogicalStats, partitions: list[tuple[int, PartitionStats]], failures: dict[int, int]
) -> m.QueueLogicalStats:
    """One logical queue's stats; ``failures``: each partition's failures in a row."""
    return m.QueueLogicalStats(
        produce_waiting=waiting.produce_waiting,
        lease_waiting=waiting.lease_waiting,
        complete_waiting=waiting.complete_waiting,
        in_flight=waiting.in_flight,
        partitions=[
            m.QueuePartitionStats(
                partition=number,
                total=s.total,
                total_leased=s.leased,
                failures=failures[number],
                average_age=format_micros(s.average_age),
                average_leased_age=format_micros(s.average_leased_age),
                scheduled=s.scheduled,
            )
            for number, s in partitions
        ],
    )


def queue_info(r: QueueRecord) -> m.QueueInfo:
    """A stored queue as the wire's QueueInfo."""
    return m.QueueInfo(
        queue_name=r.name,
        created_at=to_datetime(r.created_at),
        updated_at=to_datetime(r.updated_at),
        dead_queue=r.dead_queue,
        reference=r.reference,
        lease_timeout=format_micros(r.lease_timeout),
        expire_timeout=format_micros(r.expire_timeout),
        max_attempts=r.max_attempts,
        requested_partitions=r.requested_partitions,
        namespace=r.namespace,
        # Left out of JSON replies to clients that did not ask for extensions (http._reference_view).
        dedup_window=format_micros(r.dedup_window),
        lease_token="required" if LEASE_TOKEN_KEY in r.extra else "",
    )


def storage_item(i: Item) -> m.StorageItem:
    """A stored item as the wire's StorageItem; unset deadlines travel as Go's zero time."""
    return m.StorageItem(
        id=i.id,
        source_id=i.source_id,
        is_leased=i.is_leased,
        lease_deadline=to_datetime(i.lease_deadline),
        expire_deadline=to_datetime(i.expire_deadline),
        created_at=to_datetime(i.created_at) if i.id else None,
        enqueue_at=to_datetime(i.enqueue_at) if i.enqueue_at else None,
        attempts=i.attempts,
        max_attempts=i.max_attempts,
        reference=i.reference,
        encoding=i.encoding,
        kind=i.kind,
        payload=i.payload,
        job_id=i.job_id,
        failures=[
            m.ItemFailure(at=to_datetime(f.at_us), attempt=f.attempt, error=f.error)
            for f in failures_of(i.failures)
        ],
    )


def stored_item(i: m.StorageItem) -> Item:
    """The wire's StorageItem as an item (an import ignores its id, created_at and enqueue_at; it keeps
    the job and failures, which dead-lettering carries to the dead queue this way)."""
    return Item(
        id=i.id,
        source_id=i.source_id,
        is_leased=i.is_leased,
        lease_deadline=_micros(i.lease_deadline),
        expire_deadline=_micros(i.expire_deadline),
        enqueue_at=_micros(i.enqueue_at),
        created_at=_micros(i.created_at),
        attempts=i.attempts,
        max_attempts=i.max_attempts,
        reference=i.reference,
        encoding=i.encoding,
        kind=i.kind,
        payload=i.payload,
        job_id=i.job_id,
        failures=encode_failures([Failure(_micros(f.at), f.attempt, f.error) for f in i.failures]),
    )


def _micros(value: datetime | None) -> int:
    return from_datetime(value) if value is not None else 0


def _when(micros: int) -> datetime | None:
    """A workflow's time on the wire: absent when unset (these fields are ours, not the reference's)."""
    return to_datetime(micros) if micros else None


def workflow_info(wf: Workflow, journal: bool) -> m.WorkflowInfo:
    """A workflow for the wire; without ``journal``, without its entries and signals (lists, results).
    Its ids are the ones callers know, in its namespace (not the stored ids)."""
    owner, workflow_id = split_stored_id(wf.id)
    info = m.WorkflowInfo(
        workflow_id=workflow_id,
        namespace=owner,
        name=wf.name,
        queue_name=wf.queue,
        status=wf.status,
        input=wf.input,
        encoding=wf.encoding,
        result=wf.result,
        error=wf.error,
        parent_id=split_stored_id(wf.parent_id)[1] if wf.parent_id else "",
        parent_seq=wf.parent_seq,
        fence=wf.fence,
        claim_deadline=_when(wf.claim_deadline),
        cancel_requested=wf.cancel_requested,
        created_at=_when(wf.created_at),
        updated_at=_when(wf.updated_at),
        finished_at=_when(wf.finished_at),
        expires_at=_when(wf.expires_at),
        lapsed_claims=wf.lapsed_claims,
        resumable=wf.resumable,
        timeout=format_micros(wf.timeout_us) if wf.timeout_us else "",
        deadline=_when(wf.deadline),
        timed_out=wf.timed_out,
        forked_from=wf.forked_from,
        app_version=wf.app_version,
        search_attributes=wf.search_attributes,
        seq_base=wf.seq_base,
        runs=wf.runs,
    )
    if journal:
        info.entries = [
            m.WorkflowEntry(
                seq=e.seq,
                kind=e.kind,
                name=e.name,
                state=e.state,
                value=e.value,
                error=e.error,
                attempts=e.attempts,
                wake_at=_when(e.wake_at),
                group=e.group,
                group_size=e.group_size,
            )
            for e in wf.entries
        ]
        info.signals = [_wire_signal(s) for s in wf.signals]
        info.updates = [_wire_signal(u) for u in wf.updates]
    return info


def _wire_signal(s: Signal) -> m.WorkflowSignal:
    """A signal, or an update asked for (the same fields: docs/adr/0060), for the wire."""
    return m.WorkflowSignal(
        id=s.id, name=s.name, payload=s.payload, sent_at=_when(s.sent_at), taken_by=s.taken_by
    )


def workflow_entry(e: m.WorkflowEntry) -> Entry:
    return Entry(
        seq=e.seq,
        kind=e.kind,
        name=e.name,
        state=e.state,
        value=e.value,
        error=e.error,
        attempts=e.attempts,
        wake_at=from_datetime(e.wake_at) if e.wake_at is not None else 0,
        group=e.group,
        group_size=e.group_size,
    )
