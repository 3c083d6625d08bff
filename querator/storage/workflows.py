"""Durable workflows as stored: one versioned record per workflow, holding its journal.

A workflow's record is small and changes a step at a time, so it is stored whole and replaced by
compare-and-set on ``version`` (``WorkflowRows.put``): the rules of ``journal.py`` read a record and
return the next one, and a backend only has to store rows atomically. Two writers that read the same
version cannot both replace it; the loser reads again and re-applies its rule (docs/adr/0016).

Times are microseconds since the epoch; 0 means unset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

import msgspec

from querator.wire.workflows import PENDING, RUNNING


class Entry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the workflow did at sequence number ``seq`` (from 1, in the order its code reached it)."""

    seq: int
    kind: str
    name: str = ""
    """The step's or child workflow's name, or the signal's: replay checks the code asks for the same."""
    state: str = PENDING
    value: bytes = b""
    """A done step's or child's result, or a received signal's payload, in the workflow's encoding."""
    error: str = ""
    """A failed step's or child's error: ``<type name>: <message>``."""
    attempts: int = 0
    wake_at: int = 0
    """A timer's end, a signal wait's deadline, or when a failed step runs again."""
    group: int = 0
    """For steps and children awaited together (``Context.gather``): the first ``seq`` of the group."""
    group_size: int = 0


class Signal(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A signal sent to a workflow, kept until a wait takes it (in the order they were sent)."""

    id: str
    name: str
    payload: bytes = b""
    sent_at: int = 0
    taken_by: int = 0
    """The seq of the entry that received it; 0 while no wait has."""


class Workflow(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One workflow run: what started it, its journal, and how it ended."""

    id: str
    """Its stored id (``stored_id``): its namespace's and its own; so is ``parent_id``."""
    name: str
    queue: str
    """The task queue its activations (and dispatched steps) go to."""
    status: str = RUNNING
    input: bytes = b""
    encoding: str = ""
    result: bytes = b""
    error: str = ""
    parent_id: str = ""
    parent_seq: int = 0
    app_version: str = ""
    """The version of the app that started it ("": any): only workers of that version, or of none, claim
    it (``journal.claim``)."""
    fence: int = 0
    """How many times a worker claimed it; an append must carry the current value."""
    claim_deadline: int = 0
    """Until when the last claim holds (0: released); no other worker claims it before."""
    changed: bool = False
    """Something arrived (a signal, a step's result, a cancel) since the current claim read the record:
    the claimant replays again instead of suspending."""
    timer_at: int = 0
    """The wake-up time an activation is already scheduled for."""
    lapsed_claims: int = 0
    resumable: bool = False
    """It failed for its code (non-determinism): ``journal.resume`` may run it again."""
    """Claims in a row that ran out without being released or renewed since the journal last grew: each
    is a worker lost in the middle of the turn (killed, out of memory), which the step it was running
    counts as an attempt."""
    cancel_requested: bool = False
    entries: list[Entry] = []
    signals: list[Signal] = []
    created_at: int = 0
    updated_at: int = 0
    finished_at: int = 0
    expires_at: int = 0
    """When a finished run is dropped (0 while it runs)."""
    version: int = 0
    """Bumped by every write; ``put`` replaces only the version it read."""

    def entry(self, seq: int) -> Entry | None:
        for e in self.entries:
            if e.seq == seq:
                return e
        return None


SYSTEM_NAMESPACE: Final = "_system"
NAMESPACE_SEPARATOR: Final = "\x1f"
"""Between a namespace and a workflow id in a stored id: a control character, which no workflow id
(refused by ``check_printable`` since workflows began) and no namespace name may hold, so a stored id
reads back one way only (docs/adr/0031)."""


def stored_id(namespace: str, workflow_id: str) -> str:
    """The id a workflow is stored under: ids are per namespace. ``_system``'s are stored as they are,
    so the records written before namespaces mattered stay where they were."""
    if namespace == SYSTEM_NAMESPACE:
        return workflow_id
    return f"{namespace}{NAMESPACE_SEPARATOR}{workflow_id}"


def split_stored_id(stored: str) -> tuple[str, str]:
    """The namespace and the workflow id of a stored id (``stored_id`` undone)."""
    namespace, separator, workflow_id = stored.partition(NAMESPACE_SEPARATOR)
    return (namespace, workflow_id) if separator else (SYSTEM_NAMESPACE, stored)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Workflow)


def encode_workflow(workflow: Workflow) -> bytes:
    """The record as a backend stores it (msgpack)."""
    return _encoder.encode(workflow)


def decode_workflow(data: bytes) -> Workflow:
    return _decoder.decode(data)


LIST_PAGE_RECORD_BYTES: Final = 4 * 1024 * 1024
"""Stored bytes of the records one page of ``list_workflows`` holds: a record may hold megabytes (its
journal, input and result), and a list must not hold a thousand of them in memory (as items.list's pages
of ``storage.base.LIST_PAGE_BYTES``)."""


def workflow_page(
    records: Iterable[bytes], status: str, pivot: str, limit: int, max_bytes: int = LIST_PAGE_RECORD_BYTES
) -> list[Workflow]:
    """The first ``limit`` of ``records`` (those from ``pivot``, inclusive) of ``status`` ("" for any),
    decoded, taken lazily, ending early before the record that would pass ``max_bytes`` in all. The first
    record after the pivot is always taken, whatever its size: a caller paging on from the last id it got
    always moves on, also past a record larger than a page (a page of only the pivot hid every record
    after a large one)."""
    page: list[Workflow] = []
    size = 0
    for record in records:
        workflow = decode_workflow(record)
        if status and workflow.status != status:
            continue
        size += len(record)
        if size > max_bytes and any(w.id != pivot for w in page):
            break
        page.append(workflow)
        if len(page) >= limit:
            break
    return page


class WorkflowRows(Protocol):
    """What a backend stores for durable workflows: versioned records, replaced by compare-and-set."""

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        """The record, or None when there is none (never started, or dropped after its retention)."""

    async def put_workflow(self, workflow: Workflow, expected_version: int) -> bool:
        """Stores ``workflow`` if the stored record's version is ``expected_version`` (0: no record yet);
        False, and no change, otherwise. A record with ``expires_at`` may be dropped from then on."""

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        """Records with ``id >= pivot`` in id order, at most ``limit``, of ``status`` ("" for any), a page
        ending early at ``LIST_PAGE_RECORD_BYTES`` of records but never before the first record after the
        pivot (``workflow_page``); the backend reads no further."""

    async def purge_workflows(self, now: int) -> int:
        """Drops records whose ``expires_at`` passed; how many (0 for a backend that expires them itself)."""
