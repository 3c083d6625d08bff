"""What produce, lease, complete, retry, import and the lifecycle do to a partition, written once.

Each function runs inside ``Partition.run`` on a backend's ``PartitionTx``, so every backend gets the
same semantics (docs/semantics.md §4 and §5) and the storage contract suite checks
them against each backend. The functions are synchronous: a backend decides where its transaction runs
(inline for memory, on the database thread for sqlite).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from querator.errors import InvalidOption, QueratorError
from querator.ksuid import KsuidError, parse_ksuid
from querator.storage.base import Deadlines, Item, PartitionTx, QueueRecord
from querator.storage.failures import EXPIRED, LEASE_EXPIRED, Failure, job_id, with_failure

NEAR_NOW = 100_000
"""An enqueue_at or retry_at closer than this (microseconds) to now means "now" (reference: 100 ms)."""

LIFECYCLE_LIMIT = 1000
"""Most items of each kind one lifecycle run handles; a fuller run asks to be run again at once."""
MAX_ATTEMPTS_COUNT = (1 << 31) - 1
"""Attempts travel as int32: a lease counts up to this and no further (an imported item may start
there)."""

LEASE_TOKEN_KEY = "lease_token_key"
"""The queue setting (``QueueRecord.extra``) holding the secret its lease tokens are made with; a queue
that has one requires a lease's token on complete, retry and renew (docs/extensions.md, "Lease tokens")."""

NewId = Callable[[], str]


def new_lease_token_key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def lease_token_key(record: QueueRecord) -> bytes:
    """The secret of the queue's lease tokens; empty when the queue does not require them."""
    key = record.extra.get(LEASE_TOKEN_KEY)
    return base64.urlsafe_b64decode(key) if key else b""


def lease_token(key: bytes, item: Item) -> str:
    """The proof that a caller holds this lease of ``item``: a MAC of its id and attempt, which no two
    leases share (an expired or given-back lease's item returns under a new id; another lease of the same
    id counts another attempt). Anyone without the queue's secret cannot make it from ids they guessed."""
    mac = hmac.digest(key, f"{item.id}\0{item.attempts}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac[:16]).rstrip(b"=").decode()


@dataclass(slots=True)
class LeaseOp:
    """One lease request's share of a batch: how many items it wants, and what it got."""

    batch_size: int
    lease_deadline: int
    items: list[Item] = field(default_factory=list)


@dataclass(slots=True)
class CompleteOp:
    """One complete request; ``error`` is set by the first id that fails (earlier ids stay completed)."""

    ids: list[str]
    tokens: list[str] = field(default_factory=list)
    """The lease token of each id (``lease_token``), when the caller gave them."""
    error: QueratorError | None = None


@dataclass(slots=True)
class RetryEntry:
    """One item of a retry request."""

    id: str
    retry_at: int = 0
    dead: bool = False
    lease_token: str = ""
    error: str = ""
    """Why the attempt failed, recorded with the item (``failures.py``)."""


@dataclass(slots=True)
class RetryOp:
    """One retry request; error semantics as for CompleteOp."""

    items: list[RetryEntry]
    error: QueratorError | None = None


@dataclass(slots=True)
class ReleaseOp:
    """Items leased to a request that never got them (its client went away, its reply could not be
    written): they go back to the queue at once and the lease does not count as an attempt. Ids no longer
    leased (expired, completed) are skipped: the items are someone else's by now."""

    ids: list[str]


@dataclass(slots=True)
class RenewOp:
    """One renew request: new lease deadlines for leased items; error semantics as for CompleteOp."""

    ids: list[str]
    lease_deadline: int
    tokens: list[str] = field(default_factory=list)
    renewed: list[Item] = field(default_factory=list)
    error: QueratorError | None = None


@dataclass(slots=True)
class PartitionBatch:
    """Everything one LogicalQueue loop iteration asks of one partition, applied in this order."""

    produce: list[Item] = field(default_factory=list)
    lease: list[LeaseOp] = field(default_factory=list)
    renew: list[RenewOp] = field(default_factory=list)
    complete: list[CompleteOp] = field(default_factory=list)
    retry: list[RetryOp] = field(default_factory=list)
    release: list[ReleaseOp] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.produce or self.lease or self.renew or self.complete or self.retry or self.release)


@dataclass(slots=True)
class BatchResult:
    """What a batch changed, for the distribution counters and the lifecycle timer."""

    queued_delta: int = 0
    leased_delta: int = 0
    next_enqueue_at: int = 0
    """The earliest enqueue_at this batch scheduled (0: none), for the scheduled-items timer."""
    dead: list[Item] = field(default_factory=list)
    """Items retried with ``dead`` while the queue has a dead queue: still stored, to be dead-lettered."""
    produced: int = 0
    """Items stored by produce (duplicates by dedup_id are not)."""
    leased: int = 0
    completed: int = 0
    retried: int = 0
    released: int = 0
    dropped: int = 0
    """Items retried with ``dead`` and deleted because the queue has no dead queue."""
    drained_at: int | None = None
    """``queued_delta`` when a lease found fewer items than its requests asked for, so none was left to
    lease: the partition's count after the batch is what changed since (None: not drained)."""


@dataclass(slots=True)
class LifecycleResult:
    """What a lifecycle run did and when it next has work."""

    dead: list[Item] = field(default_factory=list)
    """Items to dead-letter (still stored); without a dead queue they were already deleted."""
    requeued: int = 0
    enqueued: int = 0
    deleted: int = 0
    queued_delta: int = 0
    leased_delta: int = 0
    more: bool = False
    deadlines: Deadlines = field(default_factory=Deadlines)


def storage_id_error(item_id: str) -> InvalidOption | None:
    """The reference's error for an id that is not a KSUID, or None."""
    try:
        parse_ksuid(item_id)
    except KsuidError as e:
        return InvalidOption(f"invalid storage id; '{item_id}': {e}")
    return None


def apply_batch(
    tx: PartitionTx,
    batch: PartitionBatch,
    now: int,
    new_id: NewId,
    has_dead_queue: bool,
    dedup_window: int = 0,
    max_attempts: int = 0,
    token_key: bytes = b"",
    expire_timeout: int = 0,
) -> BatchResult:
    """Applies a batch: produce, lease, renew, complete, retry, release, in that order.

    Renew goes before complete so that a consumer's heartbeat racing its own completion in one batch
    does not fail. ``max_attempts`` (0: unlimited) bounds retries as it bounds expired leases: an item
    retried after its last attempt dies instead (docs/compatibility.md). With a ``token_key`` (the
    queue's ``lease_token_key``) renew, complete and retry need each item's lease token. The queue's
    ``expire_timeout`` gives produced and retried items their expire_deadline (``expires_at``; 0: items
    keep the deadline they carry).
    """
    result = BatchResult()
    if batch.produce:
        items = batch.produce
        if dedup_window and any(i.dedup_id for i in items):
            items = _not_seen(tx, items, now, dedup_window)
        _produce(tx, items, now, new_id, expire_timeout, result)
    if batch.lease:
        _lease(tx, batch.lease, result)
    if batch.renew or batch.complete or batch.retry or batch.release:
        _settle_leases(
            tx, batch, now, new_id, has_dead_queue, max_attempts, token_key, expire_timeout, result
        )
    return result


def expires_at(leasable_at: int, expire_timeout: int, current: int = 0) -> int:
    """The expire_deadline of an item that becomes leasable at ``leasable_at``: its expire_timeout counts
    from then, not from its produce, so that a scheduled item (a durable sleep, a retry's back-off) longer
    than the timeout still gets the whole timeout to be leased once due (ADR 0033, docs/semantics.md
    §5.3). Never earlier than its ``current`` deadline: a retry later only ever extends it, and a retry
    now does not, so an item's life stays bounded by its attempts and their back-offs. Without an
    ``expire_timeout`` (the contract tests' batches) ``current`` stays."""
    if not expire_timeout:
        return current
    return max(current, leasable_at + expire_timeout)


def _not_seen(tx: PartitionTx, items: list[Item], now: int, dedup_window: int) -> list[Item]:
    """The items to store: those without a dedup_id, and the first with each dedup_id not seen within
    the window. The others are accepted (their produce answers 200) but not stored again."""
    seen = tx.dedup({i.dedup_id for i in items if i.dedup_id}, now, now + dedup_window)
    fresh: list[Item] = []
    for item in items:
        if item.dedup_id:
            if item.dedup_id in seen:
                continue
            seen.add(item.dedup_id)
        fresh.append(item)
    return fresh


def _produce(
    tx: PartitionTx, items: list[Item], now: int, new_id: NewId, expire_timeout: int, result: BatchResult
) -> None:
    """Stores ``items``, giving each its id in place: the produce's answer reports them
    (``engine._batch.Transaction.answer``), on every backend."""
    for item in items:
        item.id = new_id()
        item.created_at = now
        if item.enqueue_at and item.enqueue_at < now + NEAR_NOW:
            item.enqueue_at = 0
        if expire_timeout:
            item.expire_deadline = expires_at(item.enqueue_at or now, expire_timeout)
        if item.enqueue_at:
            result.next_enqueue_at = _earliest(result.next_enqueue_at, item.enqueue_at)
        else:
            result.queued_delta += 1
    result.produced += len(items)
    tx.insert(items)


def _lease(tx: PartitionTx, ops: list[LeaseOp], result: BatchResult) -> None:
    wanted = sum(op.batch_size for op in ops)
    available = tx.head(wanted)
    if len(available) < wanted:
        result.drained_at = result.queued_delta - len(available)
    if not available:
        return
    # Deal one item at a time, in arrival order, to the requests still wanting more (docs/semantics.md §4.2).
    wanting = list(ops)
    it = (item.copy() for item in available)
    while wanting:
        still: list[LeaseOp] = []
        for op in wanting:
            item = next(it, None)
            if item is None:
                still = []
                break
            item.is_leased = True
            item.lease_deadline = op.lease_deadline
            if item.attempts < MAX_ATTEMPTS_COUNT:
                item.attempts += 1
            op.items.append(item)
            if len(op.items) < op.batch_size:
                still.append(op)
        wanting = still
    taken = [item for op in ops for item in op.items]
    result.leased += len(taken)
    tx.update(taken)
    result.queued_delta -= len(taken)
    result.leased_delta += len(taken)


# Long on purpose: the lease rule in one place (docs/semantics.md §4.2); split, its order is harder
# to follow.
def _settle_leases(  # noqa: C901, PLR0912, PLR0915
    tx: PartitionTx,
    batch: PartitionBatch,
    now: int,
    new_id: NewId,
    has_dead_queue: bool,
    max_attempts: int,
    token_key: bytes,
    expire_timeout: int,
    result: BatchResult,
) -> None:
    """Renew, complete, retry and release: each acts on items that must be leased, and checks them the same
    way."""
    wanted = {i for op in batch.complete for i in op.ids}
    wanted.update(i for op in batch.renew for i in op.ids)
    wanted.update(e.id for op in batch.retry for e in op.items)
    wanted.update(i for op in batch.release for i in op.ids)
    found = tx.get(wanted)
    deleted: set[str] = set()
    requeued: list[Item] = []
    updated: dict[str, Item] = {}

    def leased(item_id: str, verb: str, token: str | None = None) -> Item | InvalidOption:
        """The leased item, or why it cannot be acted on; ``token`` None: no proof asked (a release)."""
        item = found.get(item_id)
        if item is None or item_id in deleted:
            return storage_id_error(item_id) or InvalidOption(
                f"invalid storage id; '{item_id}' does not exist"
            )
        if not item.is_leased:
            return InvalidOption(f"item(s) cannot be {verb}; '{item_id}' is not marked as leased")
        if token_key and token is not None and not hmac.compare_digest(token, lease_token(token_key, item)):
            return InvalidOption(f"item(s) cannot be {verb}; '{item_id}' needs its lease token")
        return item

    for nop in batch.renew:
        for n, item_id in enumerate(nop.ids):
            got = leased(item_id, "renewed", _token(nop.tokens, n))
            if not isinstance(got, InvalidOption) and got.lease_deadline < now:
                # Expired, though the lifecycle has not returned it yet: too late to renew.
                got = InvalidOption(f"item(s) cannot be renewed; '{item_id}' is not marked as leased")
            if isinstance(got, InvalidOption):
                nop.error = got
                break
            got = updated.get(item_id) or got.copy()
            got.lease_deadline = nop.lease_deadline
            updated[item_id] = got
            nop.renewed.append(got)

    for op in batch.complete:
        for n, item_id in enumerate(op.ids):
            got = leased(item_id, "completed", _token(op.tokens, n))
            if isinstance(got, InvalidOption):
                op.error = got
                break
            deleted.add(item_id)
            updated.pop(item_id, None)
            result.leased_delta -= 1
            result.completed += 1

    for rop in batch.retry:
        for entry in rop.items:
            got = leased(entry.id, "retried", entry.lease_token)
            if isinstance(got, InvalidOption):
                rop.error = got
                break
            result.leased_delta -= 1
            result.retried += 1
            updated.pop(entry.id, None)  # a renew earlier in this batch no longer matters
            got = _failed(_unleased(got.copy()), now, entry.error)
            if max_attempts and got.attempts >= max_attempts:
                # Its last attempt is spent: it dies now rather than at retry_at, since it will never be
                # leased again. Marked so that a failed dead-lettering answers the retry "try again".
                entry.dead = True
            if entry.dead:
                if has_dead_queue:
                    # Stays stored until the copy in the dead queue is written: nothing is lost on a crash.
                    result.dead.append(got)
                    found.pop(entry.id)
                    continue
                deleted.add(entry.id)
                result.dropped += 1
            elif entry.retry_at >= now + NEAR_NOW:
                got.enqueue_at = entry.retry_at
                if got.expire_deadline:  # one imported without an expiry keeps none
                    got.expire_deadline = expires_at(entry.retry_at, expire_timeout, got.expire_deadline)
                updated[entry.id] = got
                found.pop(entry.id)
                result.next_enqueue_at = _earliest(result.next_enqueue_at, entry.retry_at)
            else:
                deleted.add(entry.id)
                requeued.append(_to_tail(got, new_id))
                result.queued_delta += 1

    for lop in batch.release:
        for item_id in lop.ids:
            if isinstance(got := leased(item_id, "released"), InvalidOption):
                continue
            result.leased_delta -= 1
            result.released += 1
            result.queued_delta += 1
            updated.pop(item_id, None)
            deleted.add(item_id)
            # Back to the tail under a new id, as an expired lease's items go (an id never queues twice).
            moved = _unleased(_to_tail(got, new_id))
            moved.attempts = max(0, moved.attempts - 1)
            requeued.append(moved)

    if deleted:
        tx.delete(deleted)
    if updated:
        tx.update(list(updated.values()))
    if requeued:
        tx.insert(requeued)


def _token(tokens: list[str], n: int) -> str:
    """The ``n``-th lease token a request gave ("" when it gave none: refused where one is needed)."""
    return tokens[n] if n < len(tokens) else ""


def import_items(tx: PartitionTx, items: list[Item], now: int, new_id: NewId) -> list[Item]:
    """Stores items as given (storage items.import, dead-lettering) with new ids and created_at.

    Items whose source_id is already in the partition are skipped and come back without an id, which
    makes dead-lettering idempotent. ``enqueue_at`` is ignored: imported items are never scheduled.
    """
    existing = tx.existing_source_ids({i.source_id for i in items if i.source_id})
    stored: list[Item] = []
    for item in items:
        item.enqueue_at = 0
        if item.source_id:
            if item.source_id in existing:
                item.id = ""
                continue
            existing.add(item.source_id)
        item.id = new_id()
        item.created_at = now
        stored.append(item)
    if stored:
        tx.insert(stored)
    return items


def lifecycle(
    tx: PartitionTx, now: int, new_id: NewId, max_attempts: int, has_dead_queue: bool
) -> LifecycleResult:
    """One lifecycle pass (docs/semantics.md §5): expiry, lease expiry, scheduled items due.

    An item past its expire_deadline dies whether or not it is leased. An expired lease dies when its
    attempts reached ``max_attempts`` (never earlier), otherwise it goes back to the tail with a new id.
    Dead items are deleted, or returned for dead-lettering when the queue has a dead queue.
    """
    result = LifecycleResult()
    dead: dict[str, Item] = {}
    for item in tx.expired(now, LIFECYCLE_LIMIT):
        dead[item.id] = _failed(item.copy(), now, EXPIRED)
    expired_leases = tx.expired_leases(now, LIFECYCLE_LIMIT)
    requeued: list[Item] = []
    gone: list[str] = []
    for item in expired_leases:
        if item.id in dead:
            continue
        if max_attempts and item.attempts >= max_attempts:
            dead[item.id] = _failed(item.copy(), now, LEASE_EXPIRED)
            continue
        gone.append(item.id)
        requeued.append(_failed(_unleased(_to_tail(item, new_id)), now, LEASE_EXPIRED))
    due = tx.due(now, LIFECYCLE_LIMIT)
    for item in due:
        gone.append(item.id)
        moved = _to_tail(item, new_id)
        moved.enqueue_at = 0
        requeued.append(moved)
    # Counted as if the dead items were gone already: dead-lettering deletes them right after.
    result.queued_delta = len(requeued) - sum(1 for i in dead.values() if not i.is_leased)
    result.leased_delta = -sum(1 for i in expired_leases) - sum(
        1 for i in dead.values() if i.is_leased and i.lease_deadline >= now
    )
    if dead and not has_dead_queue:
        gone.extend(dead)
        result.deleted = len(dead)
    elif dead:
        result.dead = list(dead.values())
    if gone:
        tx.delete(gone)
    if requeued:
        tx.insert(requeued)
    result.requeued = len(requeued) - len(due)
    result.enqueued = len(due)
    result.more = LIFECYCLE_LIMIT in (len(expired_leases), len(due)) or len(dead) >= LIFECYCLE_LIMIT
    result.deadlines = tx.deadlines()
    return result


def moved_copies(
    items: list[Item], now: int, expire_timeout: int, max_attempts: int | None = None
) -> list[Item]:
    """The copies another queue receives (dead-lettering, redrive): new items, attempts 0, source_id =
    the moved item's id, so that importing them twice stores them once; the job and its failures go
    along. ``max_attempts`` None keeps each item's own."""
    return [
        Item(
            source_id=item.id,
            expire_deadline=expires_at(now, expire_timeout),
            max_attempts=item.max_attempts if max_attempts is None else max_attempts,
            reference=item.reference,
            encoding=item.encoding,
            kind=item.kind,
            payload=item.payload,
            job_id=job_id(item.id, item.job_id),
            failures=item.failures,
        )
        for item in items
    ]


def _to_tail(item: Item, new_id: NewId) -> Item:
    """A copy of ``item`` under a new id, which continues its job."""
    moved = item.copy()
    moved.id = new_id()
    moved.job_id = job_id(item.id, item.job_id)
    return moved


def _failed(item: Item, now: int, error: str) -> Item:
    """``item`` (a copy: stored items are never changed in place) with a failed attempt recorded."""
    item.failures = with_failure(item.failures, Failure(now, item.attempts, error))
    return item


def _unleased(item: Item) -> Item:
    item.is_leased = False
    item.lease_deadline = 0
    return item


def _earliest(current: int, candidate: int) -> int:
    return candidate if not current or candidate < current else current
