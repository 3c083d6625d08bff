"""Durable workflows as stored: a versioned head per workflow, and its journal's recorded entries as rows.

A workflow's **head** (its status, claim, signals, and the entries still open) is small and changes a
step at a time, so it is stored whole and replaced by compare-and-set on ``version``
(``WorkflowRows.put_workflow``): the rules of ``journal.py`` read a head and return the next one. Two
writers that read the same version cannot both replace it; the loser reads again and re-applies its
rule (docs/adr/0016). An entry once final is moved out of the head by the claimant's next write into a
**journal row** of its own, keyed (workflow id, seq) and tagged with the head version that recorded it,
written with the head and never again: an append costs what it adds, whatever the journal's length
(docs/adr/0046). ``journal.entries_of`` says which rows are recorded.

Times are microseconds since the epoch; 0 means unset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    search_attributes: dict[str, str] = {}
    """Its custom search attributes, as text (``querator.wire.search``): those of its start, merged with
    each ``search`` entry as the entry is recorded. ``workflows.list`` filters on them."""
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
    """Claims in a row that ran out without being released or renewed since the journal last grew: each
    is a worker lost in the middle of the turn (killed, out of memory), which the step it was running
    counts as an attempt."""
    claimant: str = ""
    """The worker process the current claim was made for by its lease (docs/adr/0071); "" for a claim it
    asked for itself."""
    lost_claimant: str = ""
    """The claimant of the last claim counted in ``lapsed_claims``: another of its claims that runs out
    is the same worker lost (a paused worker's waiting leases claim again and again), not counted again."""
    resumable: bool = False
    """It failed for its code (non-determinism): ``journal.resume`` may run it again."""
    cancel_requested: bool = False
    timeout_us: int = 0
    """The workflow's own timeout (0: none): ``deadline`` is its start plus this (docs/adr/0047)."""
    deadline: int = 0
    """When it times out; an activation is scheduled then."""
    timed_out: bool = False
    """A claim or append saw ``deadline`` pass: its worker raises ``WorkflowTimeout`` in it."""
    forked_from: str = ""
    """The workflow id (in its namespace) whose journal it started with (``journal.fork``)."""
    seq_base: int = 0
    """The last seq of the runs before this one (it continued as new): this run's seqs follow it, and
    no entry, row or result of a seq up to it is this run's (``journal.continue_as_new``)."""
    runs: int = 0
    """How many times it continued as new."""
    entries: list[Entry] = []
    """The entries kept in the head: those still open (pending), and those recorded from outside the
    claim (a dispatched step's, a child's result) that no claimant write has moved into rows yet."""
    length: int = 0
    """The highest seq of the journal's rows: rows past it are not recorded (docs/adr/0046)."""
    journal_rows: int = 0
    """How many entries the journal's rows hold (each seq moves into a row once)."""
    journal_bytes: int = 0
    """Bytes of the values and error texts of the journal's rows (``journal.MAX_JOURNAL_BYTES``)."""
    signals: list[Signal] = []
    updates: list[Signal] = []
    """Updates asked for (docs/adr/0060), in the order they came, until the workflow takes them (``taken_by``:
    the seq of their ``update`` entry, whose next one holds the answer)."""
    created_at: int = 0
    updated_at: int = 0
    finished_at: int = 0
    expires_at: int = 0
    """When a finished run is dropped (0 while it runs)."""
    version: int = 0
    """Bumped by every write; ``put`` replaces only the version it read."""

    def entry(self, seq: int) -> Entry | None:
        """The entry at ``seq`` if the head holds it (not one of the journal's rows)."""
        for e in self.entries:
            if e.seq == seq:
                return e
        return None


class JournalRow(msgspec.Struct, frozen=True):
    """An entry as a row: ``version`` is the head's version written with it. Only the claimant's
    writes add rows; which rows are recorded is ``journal.entries_of``'s rule."""

    version: int
    entry: Entry


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


_entry_encoder = msgspec.msgpack.Encoder()
_entry_decoder = msgspec.msgpack.Decoder(Entry)


def encode_entry(entry: Entry) -> bytes:
    """A journal row's entry as a backend stores it (msgpack)."""
    return _entry_encoder.encode(entry)


def decode_entry(data: bytes) -> Entry:
    return _entry_decoder.decode(data)


class WorkflowRows(Protocol):
    """What a backend stores for durable workflows: versioned heads, replaced by compare-and-set, and
    their journals' rows."""

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        """The record, or None when there is none (never started, or dropped after its retention)."""

    async def put_workflow(
        self, workflow: Workflow, expected_version: int, rows: Sequence[Entry] = ()
    ) -> bool:
        """Stores ``workflow`` if the stored record's version is ``expected_version`` (0: no record yet),
        and ``rows`` as its journal's rows, tagged ``workflow.version``; False, and no change to the head,
        otherwise. Rows of a refused write may stay (Cassandra writes them before the head's
        transaction): ``journal.entries_of`` never reads them as recorded. A record with ``expires_at``
        may be dropped from then on, with its rows."""

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        """The journal rows of ``workflow_id`` with ``first_seq <= seq <= last_seq``, in seq order (a
        seq's rows of several versions in any order)."""

    async def drop_entries(self, workflow_id: str, last_seq: int) -> None:
        """Drops the journal rows of ``workflow_id`` with ``seq <= last_seq``: an earlier run's, once the
        workflow continued as new (its rows are never read again, ``journal.continue_as_new``)."""

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        """Records with ``id >= pivot`` in id order, at most ``limit``, of ``status`` ("" for any), a page
        ending early at ``LIST_PAGE_RECORD_BYTES`` of records but never before the first record after the
        pivot (``workflow_page``); the backend reads no further."""

    async def purge_workflows(self, now: int) -> int:
        """Drops records whose ``expires_at`` passed; how many (0 for a backend that expires them itself)."""
