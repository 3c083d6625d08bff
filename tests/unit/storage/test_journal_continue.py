"""Continue-as-new and the journal's pages (querator/storage/journal.py), pure functions of a record
(docs/durable.md, "Continuing as new"; docs/adr/0059-continue-as-new-numbers-a-run-on-from-the-last.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from msgspec.structs import replace

from querator.errors import Conflict, InvalidOption
from querator.storage import journal as j
from querator.storage.workflows import Entry, JournalRow, Signal, Workflow
from querator.wire.workflows import CHILD, CONTINUE_AS_NEW, DONE, RUNNING, SIGNAL, SLEEP, STEP

NOW = 1_000_000_000
CLAIM_US = 30_000_000
RETENTION_US = 86_400_000_000

RUN = Workflow(
    id="wf",
    name="poller",
    queue="durable",
    input=b'{"args":[0]}',
    fence=4,
    claim_deadline=NOW + CLAIM_US,
    length=3,
    journal_rows=3,
    journal_bytes=30,
    timer_at=NOW + 5,
    lapsed_claims=1,
    signals=[
        Signal(id="s1", name="stop", payload=b'"taken"', taken_by=2),
        Signal(id="s2", name="stop", payload=b'"waiting"'),
    ],
    version=9,
)
SLEPT = Entry(seq=4, kind=SLEEP, name="sleep", state=DONE)


def continue_as_new(wf: Workflow, entries: list[Entry]) -> tuple[j.Effects, Workflow]:
    ending = j.Ending(CONTINUE_AS_NEW, result=b'{"args":[1]}')
    effects, write = j.append(wf, "wf", wf.fence, entries, ending, NOW, NOW + CLAIM_US, RETENTION_US)
    assert write is not None
    return effects, write


def test_a_continue_starts_the_run_over_in_the_same_record() -> None:
    """The run's journal goes, the new input comes, the seqs go on past the run's last; the write moves
    no row, asks for the run's rows to be dropped and wakes the new run."""
    effects, wf = continue_as_new(RUN, [SLEPT])
    assert (wf.status, wf.input, wf.entries) == (RUNNING, b'{"args":[1]}', [])
    assert (wf.seq_base, wf.length, wf.journal_rows, wf.journal_bytes, wf.runs) == (4, 4, 0, 0, 1)
    assert (effects.rows, effects.drop_through, effects.wake) == ([], 4, True)
    # Claimed anew by the next worker: this claim's fence is spent (a retried continue is refused).
    assert (wf.fence, wf.claim_deadline, wf.timer_at, wf.lapsed_claims) == (5, 0, 0, 0)
    assert wf.changed  # a sweep wakes it if the wake-up is lost
    # A signal no wait took stays for the new run; a taken one keeps its id (dedup), not its payload.
    assert wf.signals == [
        Signal(id="s1", name="stop", payload=b"", taken_by=2),
        Signal(id="s2", name="stop", payload=b'"waiting"'),
    ]


def test_a_retried_continue_is_fenced() -> None:
    _, wf = continue_as_new(RUN, [SLEPT])
    with pytest.raises(Conflict, match=r"^workflow claimed elsewhere; fence 4 is not"):
        j.append(wf, "wf", 4, [], j.Ending(CONTINUE_AS_NEW, result=b"[]"), NOW, 0, RETENTION_US)


def test_the_base_counts_open_entries_past_the_rows() -> None:
    """A timer the run left pending (seq 5, in the head) is the run's too: the next run starts past it."""
    pending = Entry(seq=5, kind=SLEEP, name="sleep", wake_at=NOW + 1)
    _, wf = continue_as_new(replace(RUN, entries=[pending]), [])
    assert wf.seq_base == 5


@dataclass(frozen=True)
class RefusedContinue:
    id: str
    entry: Entry
    message: str


REFUSED = [
    RefusedContinue(
        "a child not finished",
        Entry(seq=4, kind=CHILD, name="fetch"),
        "seq 4, child 'fetch', is not finished",
    ),
    RefusedContinue(
        "a dispatched step not finished",
        Entry(seq=4, kind=STEP, name="pack", group=4, group_size=1),
        "seq 4, step 'pack', is not finished",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_a_continue_waits_for_what_reports_back(case: RefusedContinue) -> None:
    """A child's or a dispatched step's result would have no run to go to."""
    with pytest.raises(InvalidOption, match=f"^workflow cannot continue as new; {case.message}$"):
        continue_as_new(replace(RUN, entries=[case.entry]), [])


CONTINUED = replace(RUN, fence=5, claim_deadline=0, entries=[], seq_base=4, length=4, journal_rows=0)


def test_a_late_result_of_an_earlier_run_is_dropped() -> None:
    late = Entry(seq=2, kind=STEP, name="pack", state=DONE, value=b'"late"', group=2, group_size=1)
    effects, write = j.record(CONTINUED, "wf", [late], NOW)
    assert (effects.wake, write) == (False, None)


def test_an_entry_of_an_earlier_run_is_refused_from_the_claimant() -> None:
    with pytest.raises(InvalidOption, match=r"^entries are invalid; seq must be at least 5, got 4$"):
        j.append(CONTINUED, "wf", 5, [SLEPT], j.Ending(), NOW, 0, RETENTION_US)


def test_an_earlier_runs_rows_are_never_read() -> None:
    run = replace(CONTINUED, length=5, version=20)
    old = [JournalRow(8, Entry(seq=s, kind=STEP, name="old", state=DONE)) for s in (3, 4)]
    new = JournalRow(15, Entry(seq=5, kind=STEP, name="new", state=DONE))
    assert j.entries_of(run, [*old, new]) == [new.entry]
    assert j.rows_to_read(run, [Entry(seq=s, kind=STEP) for s in (4, 5)]) == (5, 5)


def test_a_fork_of_a_continued_run_numbers_from_its_base() -> None:
    run = replace(CONTINUED, entries=[Entry(seq=5, kind=SIGNAL, name="go", state=DONE)])
    forked = j.fork(run, "new", 6, NOW)
    assert (forked.seq_base, forked.length, [e.seq for e in forked.entries]) == (4, 4, [5])
    with pytest.raises(InvalidOption, match=r"^from step is invalid; the journal's steps are 5 to 6, not 4$"):
        j.fork(run, "new", 4, NOW)


@dataclass(frozen=True)
class SpanCase:
    id: str
    wf: Workflow
    after: int
    limit: int
    span: tuple[int, int]


SPANS = [
    SpanCase("the first page", replace(RUN, length=25_000), 0, j.INFO_ENTRIES, (1, 10_000)),
    SpanCase("a page after a seq", replace(RUN, length=25_000), 20_000, j.INFO_ENTRIES, (20_001, 25_000)),
    SpanCase("a page of a limit", replace(RUN, length=25_000), 10, 5, (11, 15)),
    SpanCase("past the rows: none", replace(RUN, length=3), 3, 10, (4, 3)),
    SpanCase("a continued run's first", replace(CONTINUED, length=9), 0, 10, (5, 9)),
]


@pytest.mark.parametrize("case", SPANS, ids=[c.id for c in SPANS])
def test_info_span(case: SpanCase) -> None:
    assert j.info_span(case.wf, case.after, case.limit) == case.span


def test_an_info_page_ends_at_its_limit() -> None:
    journal = [Entry(seq=s, kind=STEP, name="s", state=DONE) for s in range(1, 8)]
    assert [e.seq for e in j.info_page(journal, 3)] == [1, 2, 3]
    assert [e.seq for e in j.info_page(journal)] == list(range(1, 8))
