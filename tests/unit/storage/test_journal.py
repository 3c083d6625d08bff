"""The journal's rules (querator/storage/journal.py), pure functions of a record: each case is a record,
a call, and what it must return or raise, with no store and no server (docs/durable.md, "The journal";
docs/adr/0016-durable-workflows-as-journals-replaced-by-compare-and-set.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from msgspec.structs import replace

from querator.errors import Conflict, InvalidOption
from querator.storage import journal as j
from querator.storage.workflows import Entry, JournalRow, Signal, Workflow
from querator.wire.workflows import (
    BUSY,
    CANCEL,
    CANCELLED,
    CHILD,
    CLAIMED,
    COMPLETE,
    COMPLETED,
    DONE,
    ERROR,
    FAIL,
    FAILED,
    FINISHED,
    OTHER_VERSION,
    PENDING,
    RUNNING,
    SIGNAL,
    SLEEP,
    STEP,
    SUSPEND,
    UPDATE,
    UPDATE_RESULT,
)

NOW = 1_000_000_000
CLAIM_US = 30_000_000
RETENTION_US = 86_400_000_000

FRESH = Workflow(id="wf", name="checkout", queue="durable")
CLAIMED_WF = replace(FRESH, fence=1, claim_deadline=NOW + CLAIM_US)
V1 = replace(FRESH, app_version="v1")
CHARGED = Entry(seq=1, kind=STEP, name="charge", state=DONE, value=b'"r-1"', attempts=1)
PACKING = [
    Entry(seq=2, kind=STEP, name="pack", state=PENDING, group=2, group_size=2),
    Entry(seq=3, kind=STEP, name="pack", state=PENDING, group=2, group_size=2),
]


# -- claim ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimCase:
    id: str
    current: Workflow
    outcome: str
    fence: int = 0  # of the stored record; 0: nothing stored
    lapsed: int = 0
    timed_out: bool = False

    app_version: str = ""
    """The claimant's (docs/adr/0049)."""


CLAIMS = [
    ClaimCase("a new workflow is claimed", FRESH, CLAIMED, fence=1),
    ClaimCase("a released claim is claimed again", replace(FRESH, fence=3), CLAIMED, fence=4),
    ClaimCase("a claim that holds makes the caller wait", CLAIMED_WF, BUSY),
    ClaimCase(
        "a claim that ran out counts a lost worker",
        replace(FRESH, fence=1, claim_deadline=NOW - 1),
        CLAIMED,
        fence=2,
        lapsed=1,
    ),
    ClaimCase("a finished workflow is not claimed", replace(FRESH, status=COMPLETED), FINISHED),
    ClaimCase(
        "a claim past the deadline times the workflow out",
        replace(FRESH, deadline=NOW),
        CLAIMED,
        fence=1,
        timed_out=True,
    ),
    ClaimCase(
        "a deadline's activation delivered early times it out too",
        replace(FRESH, deadline=NOW + 50_000),
        CLAIMED,
        fence=1,
        timed_out=True,
    ),
    ClaimCase(
        "a claim before the deadline does not", replace(FRESH, deadline=NOW + 200_000), CLAIMED, fence=1
    ),
    ClaimCase("a run of its version is claimed", V1, CLAIMED, fence=1, app_version="v1"),
    ClaimCase("a run of another version is left alone", V1, OTHER_VERSION, app_version="v2"),
    ClaimCase(
        "a busy run of another version is left alone",
        replace(CLAIMED_WF, app_version="v1"),
        OTHER_VERSION,
        app_version="v2",
    ),
    ClaimCase("a run of no version goes to any worker", FRESH, CLAIMED, fence=1, app_version="v2"),
    ClaimCase("a worker of no version claims any run", V1, CLAIMED, fence=1),
]


@pytest.mark.parametrize("case", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim(case: ClaimCase) -> None:
    outcome, stored = j.claim(case.current, "wf", NOW, NOW + CLAIM_US, case.app_version)
    assert outcome.outcome == case.outcome
    if not case.fence:
        assert stored is None and outcome.workflow is case.current
        return
    assert stored is not None and outcome.workflow is stored
    assert (stored.fence, stored.claim_deadline, stored.lapsed_claims, stored.timed_out) == (
        case.fence,
        NOW + CLAIM_US,
        case.lapsed,
        case.timed_out,
    )
    assert not stored.changed


def test_claim_of_an_unknown_workflow_is_refused() -> None:
    with pytest.raises(InvalidOption, match=r"^workflow does not exist; no workflow 'wf'$"):
        j.claim(None, "wf", NOW, NOW + CLAIM_US)


def test_a_timer_due_now_is_the_one_being_claimed() -> None:
    due = replace(FRESH, timer_at=NOW + 1)
    later = replace(FRESH, timer_at=NOW + 3_600_000_000)
    assert j.claim(due, "wf", NOW, NOW + CLAIM_US)[1].timer_at == 0  # type: ignore[union-attr]
    assert j.claim(later, "wf", NOW, NOW + CLAIM_US)[1].timer_at == later.timer_at  # type: ignore[union-attr]


# -- append --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendCase:
    id: str
    current: Workflow
    entries: list[Entry]
    ending: j.Ending
    status: str = RUNNING
    effects: dict[str, Any] = field(default_factory=dict)
    check: Callable[[Workflow], bool] = lambda wf: True
    fence: int = 1


APPENDS = [
    AppendCase(
        "entries are kept in seq order and the claim renewed",
        replace(CLAIMED_WF, entries=[PACKING[0]]),
        [PACKING[1], CHARGED],
        j.Ending(),
        check=lambda wf: [e.seq for e in wf.entries] == [1, 2, 3] and wf.claim_deadline == NOW + 2 * CLAIM_US,
    ),
    AppendCase(
        "a suspend releases the claim and schedules its timer",
        CLAIMED_WF,
        [Entry(seq=1, kind=SLEEP, name="sleep", wake_at=NOW + 60)],
        j.Ending(SUSPEND, wake_at=NOW + 60),
        effects={"timer_at": NOW + 60},
        check=lambda wf: wf.claim_deadline == 0 and wf.timer_at == NOW + 60,
    ),
    AppendCase(
        "a suspend to the timer already scheduled schedules none",
        replace(CLAIMED_WF, timer_at=NOW + 60),
        [],
        j.Ending(SUSPEND, wake_at=NOW + 60),
        check=lambda wf: wf.claim_deadline == 0,
    ),
    AppendCase(
        "a suspend after something arrived replays again",
        replace(CLAIMED_WF, changed=True),
        [],
        j.Ending(SUSPEND),
        effects={"resume": True},
        check=lambda wf: not wf.changed and wf.claim_deadline == NOW + 2 * CLAIM_US,
    ),
    AppendCase(
        "complete ends it with its result, kept for the retention",
        CLAIMED_WF,
        [CHARGED],
        j.Ending(COMPLETE, result=b'"ok"'),
        status=COMPLETED,
        check=lambda wf: (
            wf.result == b'"ok"' and wf.expires_at == NOW + RETENTION_US and not wf.claim_deadline
        ),
    ),
    AppendCase(
        "a failure of the code may be resumed",
        CLAIMED_WF,
        [],
        j.Ending(FAIL, error="NonDeterminism: x", resumable=True),
        status=FAILED,
        check=lambda wf: wf.resumable and wf.error == "NonDeterminism: x",
    ),
    AppendCase(
        "a child's failure is not resumable: its parent recorded it",
        replace(CLAIMED_WF, parent_id="p", parent_seq=4),
        [],
        j.Ending(FAIL, error="E: x", resumable=True),
        status=FAILED,
        effects={"parent": Entry(seq=4, kind=CHILD, name="checkout", state=ERROR, error="E: x")},
        check=lambda wf: not wf.resumable,
    ),
    AppendCase(
        "an ending cancels the unfinished children",
        replace(CLAIMED_WF, entries=[Entry(seq=1, kind=CHILD, name="ship")]),
        [],
        j.Ending(CANCEL, error="Cancelled: x"),
        status=CANCELLED,
        effects={"cancel_children": ["wf/1"]},
    ),
    AppendCase(
        "the same ending again (its reply lost) sets off what it did again",
        replace(CLAIMED_WF, status=COMPLETED, parent_id="p", parent_seq=2, result=b"1"),
        [],
        j.Ending(COMPLETE, result=b"1"),
        status=COMPLETED,
        effects={"parent": Entry(seq=2, kind=CHILD, name="checkout", state=DONE, value=b"1")},
    ),
    AppendCase(
        "a pending entry whose result came first is left recorded",
        replace(CLAIMED_WF, entries=[replace(PACKING[0], state=DONE, value=b"1")]),
        [PACKING[0]],
        j.Ending(),
        check=lambda wf: wf.entries[0].state == DONE,
    ),
    AppendCase(
        "a wait that receives a signal takes the oldest of its name",
        replace(
            CLAIMED_WF,
            signals=[Signal(id="a", name="go", payload=b"1"), Signal(id="b", name="go", payload=b"2")],
        ),
        [Entry(seq=1, kind=SIGNAL, name="go", state=DONE)],
        j.Ending(),
        check=lambda wf: wf.entries[0].value == b"1" and [s.taken_by for s in wf.signals] == [1, 0],
    ),
    AppendCase(
        "a signal another wait received is not received again",
        replace(
            CLAIMED_WF,
            signals=[
                Signal(id="a", name="go", payload=b"1", taken_by=5),
                Signal(id="b", name="go", payload=b"2"),
            ],
        ),
        [Entry(seq=6, kind=SIGNAL, name="go", state=DONE)],
        j.Ending(),
        check=lambda wf: wf.entries[0].value == b"2" and [s.taken_by for s in wf.signals] == [5, 6],
    ),
    AppendCase(
        "a turn past the deadline times the workflow out",
        replace(CLAIMED_WF, deadline=NOW),
        [CHARGED],
        j.Ending(),
        check=lambda wf: wf.timed_out,
    ),
    AppendCase(
        "a suspend past the deadline replays at once",
        replace(CLAIMED_WF, deadline=NOW),
        [],
        j.Ending(SUSPEND, wake_at=NOW + 60),
        effects={"resume": True},
        check=lambda wf: wf.timed_out and wf.claim_deadline == NOW + 2 * CLAIM_US and wf.timer_at == 0,
    ),
    AppendCase(
        "a suspend of a workflow timed out already is one (its compensation's retry)",
        replace(CLAIMED_WF, deadline=NOW - 1, timed_out=True),
        [],
        j.Ending(SUSPEND, wake_at=NOW + 60),
        effects={"timer_at": NOW + 60},
        check=lambda wf: wf.claim_deadline == 0,
    ),
    AppendCase(
        "entries reset the count of lost workers",
        replace(CLAIMED_WF, lapsed_claims=2),
        [CHARGED],
        j.Ending(),
        check=lambda wf: wf.lapsed_claims == 0,
    ),
]


@pytest.mark.parametrize("case", APPENDS, ids=[c.id for c in APPENDS])
def test_append(case: AppendCase) -> None:
    effects, stored = j.append(
        case.current, "wf", case.fence, case.entries, case.ending, NOW, NOW + 2 * CLAIM_US, RETENTION_US
    )
    expected = j.Effects(**case.effects)
    assert dataclasses.replace(effects, rows=[]) == expected
    wf = stored if stored is not None else case.current
    assert wf.status == case.status
    # The check sees the whole journal: the head's entries and the rows they moved into.
    assert case.check(replace(wf, entries=sorted([*wf.entries, *effects.rows], key=lambda e: e.seq)))


@dataclass(frozen=True)
class RefusedAppend:
    id: str
    current: Workflow
    entries: list[Entry]
    ending: j.Ending
    error: type[Exception]
    message: str
    fence: int = 1


REFUSED_APPENDS = [
    RefusedAppend(
        "another worker claimed it since",
        CLAIMED_WF,
        [],
        j.Ending(),
        Conflict,
        "^workflow claimed elsewhere; fence 0",
        fence=0,
    ),
    RefusedAppend(
        "a finished workflow takes no other ending",
        replace(CLAIMED_WF, status=COMPLETED),
        [],
        j.Ending(FAIL),
        Conflict,
        "^workflow claimed elsewhere;",
    ),
    RefusedAppend(
        "an entry contradicts a recorded one",
        replace(CLAIMED_WF, entries=[CHARGED]),
        [Entry(seq=1, kind=STEP, name="refund", state=DONE)],
        j.Ending(),
        Conflict,
        "^workflow claimed elsewhere; seq 1 is recorded already as step 'charge'$",
    ),
    RefusedAppend(
        "a seq below 1",
        CLAIMED_WF,
        [Entry(seq=0, kind=STEP, name="x")],
        j.Ending(),
        InvalidOption,
        "^entries are invalid; seq must be at least 1, got 0$",
    ),
    RefusedAppend(
        "a wait receives a signal nobody sent",
        CLAIMED_WF,
        [Entry(seq=1, kind=SIGNAL, name="go", state=DONE)],
        j.Ending(),
        Conflict,
        "^workflow claimed elsewhere; no signal 'go' is waiting to be received$",
    ),
    RefusedAppend(
        "a turn takes an update nobody sent",
        CLAIMED_WF,
        [Entry(seq=1, kind=UPDATE, name="add", state=DONE)],
        j.Ending(),
        Conflict,
        "^workflow claimed elsewhere; no update 'add' is waiting to be taken$",
    ),
    RefusedAppend(
        "an update entry that is not done",
        replace(CLAIMED_WF, updates=[Signal(id="u-1", name="add")]),
        [Entry(seq=1, kind=UPDATE, name="add", state=PENDING)],
        j.Ending(),
        InvalidOption,
        "^entries are invalid; an update entry is done, not pending$",
    ),
    RefusedAppend(
        "an unknown ending", CLAIMED_WF, [], j.Ending("explode"), InvalidOption, "^then is invalid; 'explode'"
    ),
    RefusedAppend(
        "a head past its size",
        CLAIMED_WF,
        [],
        j.Ending(COMPLETE, result=b"x" * (j.MAX_RECORD_BYTES + 1)),
        InvalidOption,
        f"^workflow is too large; its values pass {j.MAX_RECORD_BYTES} bytes in all$",
    ),
    RefusedAppend(
        "a journal past its size, its rows counted",
        replace(CLAIMED_WF, length=5, journal_bytes=j.MAX_JOURNAL_BYTES),
        [Entry(seq=6, kind=STEP, name="one", state=DONE, value=b"x")],
        j.Ending(),
        InvalidOption,
        f"^workflow is too large; its journal's values pass {j.MAX_JOURNAL_BYTES} bytes in all$",
    ),
    RefusedAppend(
        "a journal holding its most entries",
        replace(CLAIMED_WF, length=j.MAX_ENTRIES, journal_rows=j.MAX_ENTRIES),
        [Entry(seq=j.MAX_ENTRIES + 1, kind=STEP, name="one", state=DONE)],
        j.Ending(),
        InvalidOption,
        "^journal is full;",
    ),
    RefusedAppend(
        "an entry contradicts a recorded row",
        replace(CLAIMED_WF, length=1),
        [Entry(seq=1, kind=STEP, name="refund", state=DONE)],
        j.Ending(),
        Conflict,
        "^workflow claimed elsewhere; seq 1 is recorded already as step 'charge'$",
    ),
]


@pytest.mark.parametrize("case", REFUSED_APPENDS, ids=[c.id for c in REFUSED_APPENDS])
def test_append_refused(case: RefusedAppend) -> None:
    rows = {1: CHARGED} if case.current.length else {}
    with pytest.raises(case.error, match=case.message):
        j.append(case.current, "wf", case.fence, case.entries, case.ending, NOW, 0, RETENTION_US, rows)


# -- results recorded from outside the claim -----------------------------------------------------------


@dataclass(frozen=True)
class RecordCase:
    id: str
    current: Workflow
    entries: list[Entry]
    wake: bool
    stored: bool


PACKED = [replace(e, state=DONE, value=b"1") for e in PACKING]

RECORDS = [
    RecordCase(
        "a lone step's result wakes the workflow",
        replace(FRESH, entries=[replace(CHARGED, state=PENDING)]),
        [CHARGED],
        True,
        True,
    ),
    RecordCase("half a group does not wake it", replace(FRESH, entries=PACKING), [PACKED[0]], False, True),
    RecordCase("a group's first result before its entries does not wake it", FRESH, [PACKED[0]], False, True),
    RecordCase(
        "the last of a group wakes it",
        replace(FRESH, entries=[PACKED[0], PACKING[1]]),
        [PACKED[1]],
        True,
        True,
    ),
    RecordCase(
        "a result sent again wakes it again, stores nothing",
        replace(FRESH, entries=[CHARGED]),
        [CHARGED],
        True,
        False,
    ),
    RecordCase("a result for an unrecorded seq is taken", FRESH, [CHARGED], True, True),
    RecordCase("a finished workflow takes nothing", replace(FRESH, status=FAILED), [CHARGED], False, False),
]


@pytest.mark.parametrize("case", RECORDS, ids=[c.id for c in RECORDS])
def test_record(case: RecordCase) -> None:
    effects, stored = j.record(case.current, "wf", case.entries, NOW)
    assert effects.wake is case.wake
    assert (stored is not None) is case.stored
    if stored is not None:
        assert stored.changed
        recorded = {e.seq: e for e in stored.entries}
        assert all(recorded[e.seq].state == e.state for e in case.entries)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            replace(CHARGED, name="refund"),
            "^workflow entry recorded already; seq 1 is step 'charge', not step 'refund'$",
        ),
        (replace(CHARGED, value=b'"r-2"'), "^workflow entry recorded already; seq 1 holds another result"),
    ],
    ids=["another call", "another result"],
)
def test_record_refuses_what_contradicts_the_journal(entry: Entry, message: str) -> None:
    with pytest.raises(Conflict, match=message):
        j.record(replace(FRESH, entries=[CHARGED]), "wf", [entry], NOW)


def test_record_of_a_result_in_rows_stores_nothing_and_wakes() -> None:
    """A result sent again after the claimant moved it into rows: recorded already."""
    head = replace(FRESH, length=1)
    assert j.rows_to_read(head, [CHARGED]) == (1, 1)
    effects, stored = j.record(head, "wf", [CHARGED], NOW, {1: CHARGED})
    assert (effects.wake, stored) == (True, None)
    with pytest.raises(Conflict, match=r"^workflow entry recorded already; seq 1 holds another result"):
        j.record(head, "wf", [replace(CHARGED, value=b'"r-2"')], NOW, {1: CHARGED})


# -- the journal's rows (docs/adr/0046) ------------------------------------------------------------------


def test_an_append_moves_final_entries_into_rows_and_keeps_open_ones() -> None:
    timer = Entry(seq=4, kind=SLEEP, name="sleep", state=PENDING, wake_at=NOW + CLAIM_US)
    head = replace(CLAIMED_WF, entries=[PACKED[0], PACKING[1]], length=1, journal_rows=1, journal_bytes=5)
    effects, stored = j.append(head, "wf", 1, [timer], j.Ending(SUSPEND), NOW, 0, RETENTION_US)
    assert stored is not None
    # A group stays in the head until all of it is final: record counts it there.
    assert (effects.rows, stored.entries) == ([], [PACKED[0], PACKING[1], timer])
    _, recorded = j.record(stored, "wf", [PACKED[1]], NOW)
    assert recorded is not None and recorded.entries == [*PACKED, timer]
    claimed = replace(recorded, claim_deadline=NOW + CLAIM_US)
    done = replace(timer, state=DONE)
    effects, stored = j.append(claimed, "wf", 1, [done], j.Ending(), NOW, 0, RETENTION_US)
    assert stored is not None
    assert effects.rows == [*PACKED, done] and stored.entries == []
    assert (stored.length, stored.journal_rows, stored.journal_bytes) == (4, 4, 5 + 2)


def test_a_claimant_resends_an_entry_it_read_from_rows() -> None:
    head = replace(CLAIMED_WF, length=1)
    assert j.rows_to_read(head, [CHARGED, replace(CHARGED, seq=2)]) == (1, 1)
    assert j.rows_to_read(replace(head, length=0), [CHARGED]) is None
    pending = replace(CHARGED, state=PENDING)
    effects, stored = j.append(head, "wf", 1, [pending], j.Ending(), NOW, 0, RETENTION_US, {1: CHARGED})
    assert stored is not None and (effects.rows, stored.entries, stored.length) == ([], [], 1)


def row(version: int, entry: Entry) -> JournalRow:
    return JournalRow(version, entry)


def test_entries_of_reads_only_what_the_head_recorded() -> None:
    """Rows of a refused write (Cassandra writes them before the head's transaction) are never read:
    past the head's length, of a version it did not reach, or below the row of the one that won."""
    stale = replace(CHARGED, value=b'"stale"')
    head = replace(FRESH, version=7, length=3, entries=[replace(PACKING[1], seq=3)])
    rows = [
        row(4, stale),
        row(6, CHARGED),  # the write that succeeded
        row(5, stale),
        row(8, replace(CHARGED, seq=2)),  # a write still in flight
        row(6, replace(CHARGED, seq=3)),  # the head holds seq 3
        row(6, replace(CHARGED, seq=4)),  # past the head's length
    ]
    assert j.entries_of(head, rows) == [CHARGED, replace(PACKING[1], seq=3)]


def test_record_refuses_a_pending_entry() -> None:
    with pytest.raises(InvalidOption, match=r"^entries are invalid; a recorded entry must be done or error$"):
        j.record(FRESH, "wf", [replace(CHARGED, state=PENDING)], NOW)


# -- updates (docs/adr/0060) ----------------------------------------------------------------------------


ASKED = Signal(id="u-1", name="add", payload=b'["apple"]')


def test_an_update_is_kept_once_by_id_and_wakes() -> None:
    effects, stored = j.request_update(FRESH, "wf", ASKED, NOW)
    assert effects.wake and stored is not None and stored.changed
    assert stored.updates == [replace(ASKED, sent_at=NOW)]
    assert j.update_answer_seq(stored, "wf", "u-1") == 0  # not taken yet
    again, none = j.request_update(stored, "wf", ASKED, NOW + 1)
    assert again.wake and none is None


@dataclass(frozen=True)
class RefusedUpdate:
    id: str
    current: Workflow
    message: str


REFUSED_UPDATES = [
    RefusedUpdate(
        "a finished workflow", replace(FRESH, status=COMPLETED), r"^workflow is finished; 'wf' is completed$"
    ),
    RefusedUpdate(
        "too many not taken",
        replace(FRESH, updates=[Signal(id=f"u{i}", name="add") for i in range(j.MAX_SIGNALS)]),
        rf"^too many updates; 'wf' holds {j.MAX_SIGNALS} not yet taken$",
    ),
    RefusedUpdate(
        "arguments past the head's size",
        replace(FRESH, input=b"x" * j.MAX_RECORD_BYTES),
        f"^workflow is too large; its values pass {j.MAX_RECORD_BYTES} bytes in all$",
    ),
]


@pytest.mark.parametrize("case", REFUSED_UPDATES, ids=[c.id for c in REFUSED_UPDATES])
def test_an_update_refused(case: RefusedUpdate) -> None:
    with pytest.raises(InvalidOption, match=case.message):
        j.request_update(case.current, "wf", ASKED, NOW)


def test_an_update_sent_again_to_a_finished_workflow_is_no_error() -> None:
    """Its caller asks again for an answer: what it gets is the wait's (``update_answer_seq``)."""
    effects, none = j.request_update(replace(FRESH, status=COMPLETED, updates=[ASKED]), "wf", ASKED, NOW)
    assert not effects.wake and none is None


def test_a_turn_takes_the_oldest_update_of_its_name_with_its_arguments() -> None:
    later = Signal(id="u-2", name="add", payload=b'["pear"]')
    current = replace(CLAIMED_WF, updates=[ASKED, later])
    taken = [
        Entry(seq=1, kind=UPDATE, name="add", state=DONE),
        Entry(seq=2, kind=UPDATE_RESULT, name="add", state=DONE, value=b"1"),
    ]
    effects, stored = j.append(current, "wf", 1, taken, j.Ending(SUSPEND), NOW, 0, RETENTION_US)
    assert stored is not None
    assert [(u.id, u.taken_by) for u in stored.updates] == [("u-1", 1), ("u-2", 0)]
    assert [(e.seq, e.kind, e.value) for e in effects.rows] == [
        (1, UPDATE, b'["apple"]'),  # the caller's arguments, whatever the turn sent
        (2, UPDATE_RESULT, b"1"),
    ]
    assert j.update_answer_seq(stored, "wf", "u-1") == 2
    assert j.update_answer_seq(stored, "wf", "u-2") == 0
    # The same append again (its reply lost) takes nothing more.
    _, again = j.append(
        replace(stored, entries=[]),
        "wf",
        1,
        taken,
        j.Ending(),
        NOW,
        0,
        RETENTION_US,
        {e.seq: e for e in effects.rows},
    )
    assert again is not None and [u.taken_by for u in again.updates] == [1, 0]


@pytest.mark.parametrize(
    ("current", "message"),
    [
        (
            replace(FRESH, status=FAILED, updates=[ASKED]),
            r"^workflow ended before the update was answered; 'wf' is failed$",
        ),
        (FRESH, r"^update does not exist; 'wf' holds no update 'u-1'$"),
    ],
)
def test_an_update_that_cannot_be_answered(current: Workflow, message: str) -> None:
    with pytest.raises(InvalidOption, match=message):
        j.update_answer_seq(current, "wf", "u-1")


# -- signal, cancel, resume, terminate, start ----------------------------------------------------------


def test_signal_is_kept_once_by_id_and_wakes() -> None:
    sent = Signal(id="s-1", name="go", payload=b"1")
    effects, stored = j.signal(FRESH, "wf", sent, NOW)
    assert effects.wake and stored is not None and stored.changed
    assert stored.signals == [replace(sent, sent_at=NOW)]
    again, none = j.signal(stored, "wf", sent, NOW + 1)
    assert again.wake and none is None


def test_signal_to_a_finished_workflow_is_refused() -> None:
    with pytest.raises(InvalidOption, match=r"^workflow is finished; 'wf' is completed$"):
        j.signal(replace(FRESH, status=COMPLETED), "wf", Signal(id="s", name="go"), NOW)


@pytest.mark.parametrize(
    ("current", "wake", "stored"),
    [
        (FRESH, True, True),
        (replace(FRESH, cancel_requested=True), True, False),
        (replace(FRESH, status=FAILED), False, False),
    ],
    ids=["running", "asked before", "finished"],
)
def test_cancel(current: Workflow, wake: bool, stored: bool) -> None:
    effects, updated = j.cancel(current, "wf", NOW)
    assert effects.wake is wake
    assert (updated is not None) is stored
    if updated is not None:
        assert updated.cancel_requested and updated.changed


def test_resume_runs_a_code_failure_again() -> None:
    failed = replace(
        FRESH, status=FAILED, error="NonDeterminism: x", resumable=True, finished_at=NOW, expires_at=NOW + 1
    )
    effects, resumed = j.resume(failed, "wf", NOW)
    assert effects.wake and resumed is not None
    assert (resumed.status, resumed.error, resumed.resumable, resumed.expires_at) == (RUNNING, "", False, 0)


@pytest.mark.parametrize(
    "current", [FRESH, replace(FRESH, status=FAILED)], ids=["running", "failed by a step"]
)
def test_resume_refuses_other_workflows(current: Workflow) -> None:
    with pytest.raises(Conflict, match=r"^workflow cannot be resumed; 'wf' is"):
        j.resume(current, "wf", NOW)


def test_terminate_fails_it_with_the_reason_and_cancels_children() -> None:
    running = replace(FRESH, entries=[Entry(seq=1, kind=CHILD, name="ship")])
    effects, ended = j.terminate(running, "wf", "stuck", NOW, RETENTION_US)
    assert ended is not None and (ended.status, ended.error) == (FAILED, "Terminated: stuck")
    assert effects.cancel_children == ["wf/1"]
    assert j.terminate(ended, "wf", "again", NOW, RETENTION_US) == (j.Effects(), None)


def test_start_is_idempotent_by_id() -> None:
    created, stored = j.start(None, FRESH, NOW)
    assert created and stored is not None and (stored.status, stored.created_at) == (RUNNING, NOW)
    assert j.start(stored, FRESH, NOW + 1) == (False, None)
    with pytest.raises(Conflict, match=r"^workflow exists already; the id is a run of 'checkout'"):
        j.check_same_run(stored, replace(FRESH, name="refund"))


@pytest.mark.parametrize(
    ("current", "stranded"),
    [
        (replace(FRESH, updated_at=NOW - 120_000_000), True),  # never claimed
        (replace(FRESH, fence=1, updated_at=NOW - 120_000_000), False),  # waiting for something
        (replace(FRESH, fence=1, changed=True, updated_at=NOW - 120_000_000), True),
        (replace(FRESH, fence=1, timer_at=NOW - 120_000_000, updated_at=NOW - 120_000_000), True),
        (replace(FRESH, updated_at=NOW), False),  # too recent
        (replace(FRESH, claim_deadline=NOW + 1, updated_at=NOW - 120_000_000), False),  # claimed
        (replace(FRESH, fence=1, deadline=NOW - 120_000_000, updated_at=NOW - 120_000_000), True),
        (
            replace(FRESH, fence=1, deadline=NOW - 120_000_000, timed_out=True, updated_at=NOW - 120_000_000),
            False,
        ),
    ],
    ids=[
        "never claimed",
        "waiting",
        "something arrived",
        "timer overdue",
        "recent",
        "claimed",
        "deadline overdue",
        "timed out, waiting",
    ],
)
def test_stranded(current: Workflow, stranded: bool) -> None:
    assert j.stranded(current, NOW, 60_000_000) is stranded


# -- fork ----------------------------------------------------------------------------------------------

FORKABLE = replace(
    FRESH,
    id="ns\x1fwf",
    status=FAILED,
    input=b"[1]",
    timeout_us=60_000_000,
    entries=[CHARGED, *[replace(e, state=DONE) for e in PACKING], Entry(seq=4, kind=SLEEP, name="sleep")],
)


@pytest.mark.parametrize(("from_step", "seqs"), [(1, []), (2, [1]), (4, [1, 2, 3])])
def test_fork_copies_the_entries_before_its_step(from_step: int, seqs: list[int]) -> None:
    forked = j.fork(FORKABLE, "ns\x1fnew", from_step, NOW)
    assert [e.seq for e in forked.entries] == seqs
    assert (forked.id, forked.name, forked.queue, forked.input) == (
        "ns\x1fnew",
        "checkout",
        "durable",
        b"[1]",
    )
    assert (forked.status, forked.fence, forked.forked_from) == (RUNNING, 0, "wf")
    assert (forked.timeout_us, forked.deadline) == (60_000_000, NOW + 60_000_000)


@pytest.mark.parametrize(
    ("from_step", "message"),
    [
        (0, "the journal's steps are 1 to 5, not 0"),
        (6, "the journal's steps are 1 to 5, not 6"),
        (3, "3 is inside the gather that starts at seq 2"),
        (5, "seq 4, before 5, is sleep 'sleep' pending"),
    ],
)
def test_fork_refuses_a_step_it_cannot_start_from(from_step: int, message: str) -> None:
    with pytest.raises(InvalidOption, match=f"^from step is invalid; {message}$"):
        j.fork(FORKABLE, "new", from_step, NOW)


def test_a_new_run_of_an_id_ranks_its_rows_above_a_dropped_runs() -> None:
    """A dropped run's rows may outlive its record on Cassandra (a crash before their TTL was set): the
    new run's versions start at its creation time, above every version of the old run."""
    old = replace(FRESH, created_at=NOW, version=5_000, length=1)
    assert j.next_version(old, NOW + 1) == 5_001
    new_version = j.next_version(None, NOW + 86_400_000_000)
    new = replace(FRESH, created_at=NOW + 86_400_000_000, version=new_version + 3, length=1)
    rows = [row(old.version, replace(CHARGED, value=b'"old run"')), row(new_version + 2, CHARGED)]
    assert j.entries_of(new, rows) == [CHARGED]


def test_the_claims_a_lease_made_for_one_worker_count_it_lost_once() -> None:
    """A paused worker's waiting leases may each claim the workflow, and each claim runs out: one worker
    lost, not one per lease (docs/adr/0071). Another worker's, and a claim asked for alone, count."""
    wf: Workflow | None = FRESH
    lapses = []
    for now, claimant in [
        (NOW, "a"),
        (2 * NOW, "a"),
        (3 * NOW, "a"),
        (4 * NOW, "b"),
        (5 * NOW, ""),
        (6 * NOW, ""),
    ]:
        _, wf = j.claim(wf, "wf", now, now + CLAIM_US, claimant=claimant)
        assert wf is not None and wf.claimant == claimant
        lapses.append(wf.lapsed_claims)
    assert lapses == [0, 1, 1, 1, 2, 3]  # a ran out three times: once; then b, then a claim alone
    _, wf = j.append(wf, "wf", wf.fence, [CHARGED], j.Ending(), 6 * NOW, 0, RETENTION_US)
    assert wf is not None and (wf.lapsed_claims, wf.lost_claimant) == (0, "")


def test_a_claim_nobody_got_is_let_go_uncounted() -> None:
    _, claimed = j.claim(FRESH, "wf", NOW, NOW + CLAIM_US, claimant="a")
    assert claimed is not None
    assert j.release(claimed, "wf", claimed.fence - 1) == (None, None)  # not that claim: left alone
    _, released = j.release(claimed, "wf", claimed.fence)
    assert released is not None and released.claim_deadline == 0 and released.changed
    _, again = j.claim(released, "wf", 2 * NOW, 2 * NOW + CLAIM_US)
    assert again is not None and (again.fence, again.lapsed_claims) == (2, 0)
