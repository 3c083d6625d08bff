"""What start, claim, append, signal and cancel do to a workflow's record, written once.

Each rule takes the stored head (or None) and returns what the caller gets plus the head to store in
its place (None: nothing to write). The rules are pure, so a write that loses its compare-and-set is
retried by running the rule again on the head that won (``WorkflowRows.put_workflow``); every backend
gets the same semantics (docs/durable.md, "The journal", and docs/adr/0016).

The journal's final entries leave the head as rows, written with the claimant's appends
(``Effects.rows``); a rule reads a row only when a call names its seq (``rows_to_read``), and
``entries_of`` says which rows are recorded (docs/adr/0046).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from msgspec.structs import replace

from querator.errors import Conflict, InvalidOption
from querator.storage.operations import NEAR_NOW
from querator.storage.workflows import Entry, JournalRow, Signal, Workflow, split_stored_id
from querator.wire.search import decode_search_entry, merged_search_attributes
from querator.wire.workflows import (
    BUSY,
    CHILD,
    CLAIMED,
    COMPLETED,
    CONTINUE,
    CONTINUE_AS_NEW,
    DONE,
    ENDINGS,
    ERROR,
    FAIL,
    FAILED,
    FINAL_STATES,
    FINISHED,
    OTHER_VERSION,
    RUNNING,
    SEARCH,
    SIGNAL,
    SUSPEND,
    UPDATE,
    child_id,
)

MAX_ENTRIES: Final = 1_000_000
"""Journal entries of one workflow: a claim returns the whole journal, which the
worker replays at each activation, so a longer history belongs in a child workflow."""
MAX_OPEN_ENTRIES: Final = 10_000
"""Entries the head holds (open ones, and results recorded from outside not yet moved into rows): each
write of the head rewrites them."""
MAX_SIGNALS: Final = 1_000
"""Signals kept for a workflow (received or waiting)."""
MAX_RECORD_BYTES: Final = 8 * 1024 * 1024
"""Bytes of inputs, results, payloads and error texts the head may hold in all: each write rewrites
the head."""
MAX_JOURNAL_BYTES: Final = 64 * 1024 * 1024
"""Bytes of values and error texts a workflow may hold in all, its journal's rows with its head: a
claim returns all of them in one reply."""

INFO_ENTRIES: Final = 10_000
"""Entries ``workflows.info`` returns at most, the first of the journal: as many as a record held before
journals had rows (docs/adr/0046), so every journal of then is returned whole."""

FENCED = "workflow claimed elsewhere"
"""The stable prefix of an append refused because another worker has claimed the workflow since."""
RECORDED = "workflow entry recorded already"
"""The stable prefix of a result from outside the claim (fence 0) refused because its seq holds something
else: another call, or another result."""
TERMINATED = "Terminated"
"""How a terminated workflow's error starts (``<type name>: <message>``, as a step's failure)."""
NOT_RESUMABLE = "workflow cannot be resumed"
"""The stable prefix of a resume of a workflow that did not fail for its code."""
EXISTS = "workflow exists already"
"""The stable prefix of a start of an id whose run is of another workflow or queue."""
UPDATE_UNANSWERED = "workflow ended before the update was answered"
"""The stable prefix of an update whose workflow ended with the update taken by no turn."""
UPDATE_GONE = "update answer is gone"
"""The stable prefix of an update whose answer went with a run that continued as new."""
FORK_STEP = "from step is invalid"
"""The stable prefix of a fork whose step is not one the journal can be cut at."""
NOT_CONTINUED = "workflow cannot continue as new"
"""The stable prefix of a continue-as-new refused because a child or a dispatched step of the run is
not finished: its result would have no run to go to."""


def not_found(workflow_id: str) -> InvalidOption:
    return InvalidOption(f"workflow does not exist; no workflow '{workflow_id}'")


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim's outcome: ``claimed`` (the caller replays ``workflow``), ``busy`` (another claim holds
    until ``workflow.claim_deadline``) or ``finished``."""

    outcome: str
    workflow: Workflow


@dataclass(slots=True)
class Effects:
    """What the service must do besides storing the record: wake workflows (an activation each), schedule
    a timer, tell a parent how its child ended, cancel children."""

    wake: bool = False
    """Produce an activation for this workflow now."""
    timer_at: int = 0
    """Produce an activation for this workflow, delivered then."""
    resume: bool = False
    """A suspend was refused because something arrived: the claimant replays again."""
    parent: Entry | None = None
    """The entry to record in the parent (at ``Workflow.parent_seq``)."""
    cancel_children: list[str] = field(default_factory=list)
    rows: list[Entry] = field(default_factory=list)
    """Entries moved out of the head into the journal's rows: stored with the head, in its write."""
    drop_through: int = 0
    """The workflow continued as new: drop its journal's rows up to this seq, after the write."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How an append ends a claim: continue, suspend (until ``wake_at`` at the latest) or finish."""

    then: str = CONTINUE
    wake_at: int = 0
    result: bytes = b""
    error: str = ""
    resumable: bool = False
    """With fail: the failure is the code's, which a fix may cure (``resume``)."""


def start(current: Workflow | None, new: Workflow, now: int) -> tuple[bool, Workflow | None]:
    """Stores ``new`` (True) unless a workflow of its id exists: start is idempotent by id (False)."""
    if current is not None:
        return False, None
    _check_size(new)
    return True, replace(new, status=RUNNING, created_at=now, updated_at=now, version=0)


def stranded(wf: Workflow, now: int, grace_us: int) -> bool:
    """Whether a workflow may have no activation left to move it on (one lost with a crash between its
    record's write and the produce, or taken out of its queue by hand): running, no claim holds it, it
    has not changed for ``grace_us``, and it has something to do -- it was never claimed, something
    arrived that no turn saw, its timer is overdue, or its last claim ran out. A workflow waiting for a
    signal, a child or a dispatched step has nothing to do until that arrives, which wakes it."""
    if wf.status != RUNNING or wf.claim_deadline > now or wf.updated_at > now - grace_us:
        return False
    overdue = now - grace_us
    timeout_unseen = 0 < wf.deadline < overdue and not wf.timed_out
    return (
        wf.fence == 0
        or wf.changed
        or timeout_unseen
        or 0 < wf.timer_at < overdue
        or 0 < wf.claim_deadline < overdue
    )


def fork(original: Workflow, key: str, from_step: int, now: int) -> Workflow:
    """A new run (stored as ``key``) of ``original``'s workflow with its input and the journal entries
    before seq ``from_step``: its worker replays those and runs from ``from_step`` on (DBOS's fork,
    docs/adr/0048). A top workflow of its own, whatever ``original`` was; its timeout counts from now.

    Raises:
        InvalidOption: ``from_step`` is not a seq the journal can be cut at: past its end, after an
            entry still pending (a step, timer, wait or child not finished), or inside a gather.
    """
    first = original.seq_base + 1  # the run's first seq (docs/adr/0059)
    last = max((e.seq for e in original.entries), default=original.seq_base)
    if not first <= from_step <= last + 1:
        raise InvalidOption(f"{FORK_STEP}; the journal's steps are {first} to {last + 1}, not {from_step}")
    kept = [e for e in original.entries if e.seq < from_step]
    for e in kept:
        if e.state not in FINAL_STATES:
            raise InvalidOption(
                f"{FORK_STEP}; seq {e.seq}, before {from_step}, is {e.kind} '{e.name}' pending"
            )
        if e.group and any(o.group == e.group and o.seq >= from_step for o in original.entries):
            raise InvalidOption(f"{FORK_STEP}; {from_step} is inside the gather that starts at seq {e.group}")
    _, forked_from = split_stored_id(original.id)
    new = Workflow(
        id=key,
        name=original.name,
        queue=original.queue,
        input=original.input,
        encoding=original.encoding,
        entries=kept,
        timeout_us=original.timeout_us,
        deadline=now + original.timeout_us if original.timeout_us else 0,
        forked_from=forked_from,
        search_attributes=original.search_attributes,
        seq_base=original.seq_base,
        length=original.seq_base,
    )
    _check_size(new)
    return new


def check_same_run(found: Workflow, started: Workflow) -> None:
    """A start of an id that exists must name the same workflow and queue as its run, or the caller would
    take another workflow's result for its own.

    Raises:
        Conflict: another workflow, or another queue, holds the id.
    """
    if (found.name, found.queue) != (started.name, started.queue):
        raise Conflict(
            f"{EXISTS}; the id is a run of '{found.name}' on queue '{found.queue}', not of "
            f"'{started.name}' on '{started.queue}'"
        )


def claim(
    current: Workflow | None,
    workflow_id: str,
    now: int,
    claim_until: int,
    app_version: str = "",
    claimant: str = "",
) -> tuple[Claim, Workflow | None]:
    """Makes the caller the one worker that advances the workflow until ``claim_until`` (renewed by its
    appends), unless another claim still holds, or the run is of another app version than the
    caller's (both set: a version "" goes with any, docs/adr/0049). ``claimant``: the worker process a
    lease claims for (docs/adr/0071)."""
    wf = _existing(current, workflow_id)
    if wf.status != RUNNING:
        return Claim(FINISHED, wf), None
    if app_version and wf.app_version and app_version != wf.app_version:
        return Claim(OTHER_VERSION, wf), None  # nothing written: no claim, no lapse counted
    if wf.claim_deadline > now:
        return Claim(BUSY, wf), None
    # A timer due now may be the activation being claimed (the queue delivers one due within NEAR_NOW
    # at once): it no longer counts as scheduled, so a suspend until then schedules another.
    timer_at = 0 if wf.timer_at <= now + NEAR_NOW else wf.timer_at
    # A claim that ran out instead of being released: its worker was lost mid-turn. Once per worker
    # process a lease claimed for: a paused worker's waiting leases may each claim, and none runs a turn.
    lapsed, lost = wf.lapsed_claims, wf.lost_claimant
    if wf.claim_deadline and not (wf.claimant and wf.claimant == wf.lost_claimant):
        lapsed, lost = lapsed + 1, wf.claimant
    claimed = replace(
        wf,
        fence=wf.fence + 1,
        claim_deadline=claim_until,
        changed=False,
        timer_at=timer_at,
        updated_at=now,
        lapsed_claims=lapsed,
        claimant=claimant,
        lost_claimant=lost,
        # Its deadline's activation may be delivered early, as a timer's is (NEAR_NOW).
        timed_out=wf.timed_out or _past_deadline(wf, now + NEAR_NOW),
    )
    return Claim(CLAIMED, claimed), claimed


def release(current: Workflow | None, workflow_id: str, fence: int) -> tuple[None, Workflow | None]:
    """Lets go of the claim of ``fence`` that no worker got (a ``workflows.lease`` whose reply was not
    delivered, or had no room for its journal: docs/adr/0071): no turn ran under it, so it is not
    counted as a worker lost, as a claim that runs out is. Nothing is written when the claim is not
    that one any more."""
    wf = _existing(current, workflow_id)
    if fence != wf.fence or wf.status != RUNNING or not wf.claim_deadline:
        return None, None
    # Whatever arrived since the claim is still to be replayed: the activation goes back to the queue.
    return None, replace(wf, claim_deadline=0, changed=True)


def append(
    current: Workflow | None,
    workflow_id: str,
    fence: int,
    entries: Sequence[Entry],
    ending: Ending,
    now: int,
    claim_until: int,
    retention_us: int,
    recorded: Mapping[int, Entry] | None = None,
) -> tuple[Effects, Workflow | None]:
    """The claimant's write: new journal entries, then the claim's turn continues, suspends or finishes
    the workflow. ``recorded``: the journal's rows at the seqs ``rows_to_read`` names for ``entries``.
    The final entries of the head move into rows (``Effects.rows``).

    Raises:
        Conflict: ``fence`` is not the current claim's (another worker claimed it since; this one must
            stop), or an entry contradicts one recorded already.
    """
    wf = _existing(current, workflow_id)
    if fence == wf.fence and wf.status != RUNNING and ENDINGS.get(ending.then) == wf.status:
        # The same ending again (its reply was lost): what it set off is set off again, harmlessly.
        again = Effects(parent=child_result(wf) if wf.parent_id else None)
        again.cancel_children = _unfinished_children(wf)
        return again, None
    if fence != wf.fence or wf.status != RUNNING:
        raise Conflict(f"{FENCED}; fence {fence} is not the workflow's current claim")
    journal = {e.seq: e for e in wf.entries}
    signals = list(wf.signals)
    attributes = _searched(wf, journal, recorded or {}, entries)
    updates = list(wf.updates)
    for entry in entries:
        _put_entry(journal, recorded or {}, signals, entry, wf.journal_rows, wf.seq_base, updates)
    kept, rows = _moved(journal.values())
    wf = replace(
        wf,
        search_attributes=attributes,
        entries=kept,
        signals=signals,
        updates=updates,
        length=max([wf.length, *(e.seq for e in rows)]),
        journal_rows=wf.journal_rows + len(rows),
        journal_bytes=wf.journal_bytes + _values_bytes(rows),
        updated_at=now,
        # The turn got on: a claim lost before this was not lost in what comes next.
        lapsed_claims=0 if entries else wf.lapsed_claims,
        lost_claimant="" if entries else wf.lost_claimant,
    )
    if claim_until:
        wf = replace(wf, claim_deadline=claim_until)
    # The deadline passed during the turn: the worker learns it from the reply (``timed_out``), and a
    # suspend replays at once instead, so that the workflow ends now rather than at its next wake-up.
    timing_out = not wf.timed_out and _past_deadline(wf, now)
    if timing_out:
        wf = replace(wf, timed_out=True)
    effects = Effects(rows=rows)
    if ending.then == SUSPEND:
        wf = _suspend(wf, ending.wake_at, timing_out, effects)
    elif ending.then == CONTINUE_AS_NEW:
        wf = continue_as_new(wf, ending.result, now, effects)
    elif ending.then in ENDINGS:
        wf = _finish(wf, ENDINGS[ending.then], ending.result, ending.error, now, retention_us, effects)
        # A child's failure is its parent's to handle (recorded there): only a top workflow resumes.
        wf = replace(wf, resumable=ending.resumable and ending.then == FAIL and not wf.parent_id)
    elif ending.then != CONTINUE:
        raise InvalidOption(
            f"then is invalid; '{ending.then}' is not suspend, complete, fail, cancel or continue_as_new"
        )
    _check_size(wf)
    return effects, wf


def _searched(
    wf: Workflow, journal: Mapping[int, Entry], recorded: Mapping[int, Entry], entries: Iterable[Entry]
) -> dict[str, str]:
    """The run's search attributes after the ``search`` entries of ``entries`` that are new to its
    journal, in seq order: an entry recorded already (an append sent again after a lost reply, a replay)
    was merged when it was recorded, so it is not merged twice over a later one."""
    attributes = wf.search_attributes
    for entry in sorted(entries, key=_seq):
        if entry.kind == SEARCH and entry.seq not in journal and entry.seq not in recorded:
            attributes = merged_search_attributes(attributes, decode_search_entry(entry.value))
    return attributes


def continue_as_new(wf: Workflow, new_input: bytes, now: int, effects: Effects) -> Workflow:
    """The run ends and the same workflow starts over with ``new_input`` and an empty journal, in the
    head's one write (docs/adr/0059): its seqs go on from the run's last (``seq_base``), so that nothing
    of the run -- its rows, a late result of one of its steps, its children's ids -- is ever taken for
    the new run's. The signals and updates no turn took stay for the new run (the answers of those it
    took go with it: ``UPDATE_GONE``); the claim is released and its fence bumped (a retry of this
    append is refused, not continued twice); the new run is woken. The rows of the earlier runs are
    dropped after the write (``Effects.drop_through``).

    Raises:
        InvalidOption: a child or a dispatched step of the run is not finished.
    """
    for e in wf.entries:
        if e.state not in FINAL_STATES and (e.kind == CHILD or e.group):
            raise InvalidOption(f"{NOT_CONTINUED}; seq {e.seq}, {e.kind} '{e.name}', is not finished")
    base = max([wf.length, *(e.seq for e in wf.entries), *(e.seq for e in effects.rows)])
    effects.rows = []  # the run's entries are never read again: not written as rows
    effects.wake = True
    effects.drop_through = base
    return replace(
        wf,
        input=new_input,
        entries=[],
        seq_base=base,
        length=base,
        journal_rows=0,
        journal_bytes=0,
        # A received signal's payload went to its run; its id stays, so that a retried send counts once.
        signals=[s if not s.taken_by else replace(s, payload=b"") for s in wf.signals],
        updates=[u if not u.taken_by else replace(u, payload=b"") for u in wf.updates],
        fence=wf.fence + 1,
        claim_deadline=0,
        timer_at=0,
        lapsed_claims=0,
        lost_claimant="",
        # Something to do, so that a sweep wakes it if the wake-up is lost (``stranded``).
        changed=True,
        runs=wf.runs + 1,
        updated_at=now,
    )


def _suspend(wf: Workflow, wake_at: int, timing_out: bool, effects: Effects) -> Workflow:
    """A suspend releases the claim, and schedules its timer, unless something arrived since the claim
    (or the deadline passed during the turn): then the claimant replays again (``resume``)."""
    if wf.changed or timing_out:
        effects.resume = True
        return replace(wf, changed=False)
    wf = replace(wf, claim_deadline=0)
    if wake_at and wake_at != wf.timer_at:
        effects.timer_at = wake_at
        wf = replace(wf, timer_at=wake_at)
    return wf


def record(
    current: Workflow | None,
    workflow_id: str,
    entries: Sequence[Entry],
    now: int,
    recorded: Mapping[int, Entry] | None = None,
) -> tuple[Effects, Workflow | None]:
    """Results recorded from outside the claim: a dispatched step's, or a child workflow's. The first
    final result at a seq wins; the same result again is ignored (its sender retried after a lost reply).
    The workflow is woken when the entry is alone or completes its group. ``recorded``: the journal's
    rows at the seqs ``rows_to_read`` names for ``entries``. The results stay in the head until the
    claimant's next append moves them: two writers from outside may race for one version, and only one
    writer per version may add rows (docs/adr/0046).

    Raises:
        Conflict: an entry is not what its seq holds: another kind or name, or a different result than
            the one recorded (nothing from outside the claim replaces a recorded result, a timer or a
            wait).
    """
    wf = _existing(current, workflow_id)
    effects = Effects()
    if wf.status != RUNNING:
        return effects, None
    journal = {e.seq: e for e in wf.entries}
    # A late result of an earlier run (it continued as new) is dropped: nothing waits for it.
    entries = [e for e in entries if e.seq > wf.seq_base]
    groups: set[int] = set()
    applied = False
    for entry in entries:
        if entry.state not in FINAL_STATES:
            raise InvalidOption(f"entries are invalid; a recorded entry must be {DONE} or {ERROR}")
        row = (recorded or {}).get(entry.seq) if entry.seq not in journal else None
        if row is not None:
            # Moved into rows, so final, and its group complete (``_moved``): recorded before, it wakes
            # the workflow again as below.
            _check_recorded(row, entry)
            effects.wake = True
            continue
        found = journal.get(entry.seq)
        if found is not None:
            _check_recorded(found, entry)
        if found is None or found.state not in FINAL_STATES:
            applied = True
            journal[entry.seq] = replace(
                entry,
                group=found.group if found else entry.group,
                group_size=found.group_size if found else entry.group_size,
            )
        # A result recorded before (its sender retried) wakes the workflow again: the first wake-up
        # may be what was lost.
        if journal[entry.seq].group:
            groups.add(journal[entry.seq].group)
        else:
            effects.wake = True
    if groups - _open_groups(journal.values()):
        effects.wake = True
    if not applied:
        return effects, None  # every entry was recorded already
    updated = replace(wf, entries=sorted(journal.values(), key=_seq), changed=True, updated_at=now)
    _check_size(updated)
    return effects, updated


def _check_recorded(found: Entry, entry: Entry) -> None:
    """A result from outside the claim fits the entry at its seq: the same call (a pending step or child
    it is the result of), and, once recorded, the same result (attempts aside: a step run twice counts
    its own)."""
    if (found.kind, found.name) != (entry.kind, entry.name):
        raise Conflict(
            f"{RECORDED}; seq {entry.seq} is {found.kind} '{found.name}', not {entry.kind} '{entry.name}'"
        )
    if found.state in FINAL_STATES and (found.state, found.value, found.error) != (
        entry.state,
        entry.value,
        entry.error,
    ):
        raise Conflict(f"{RECORDED}; seq {entry.seq} holds another result of {found.kind} '{found.name}'")


def signal(
    current: Workflow | None, workflow_id: str, sent: Signal, now: int
) -> tuple[Effects, Workflow | None]:
    """Keeps a signal until a wait takes it, and wakes the workflow. A signal id seen before is not kept
    twice (its sender retried after a lost reply)."""
    wf = _existing(current, workflow_id)
    if wf.status != RUNNING:
        raise InvalidOption(f"workflow is finished; '{workflow_id}' is {wf.status}")
    effects = Effects(wake=True)
    if any(s.id == sent.id for s in wf.signals):
        return effects, None
    if sum(1 for s in wf.signals if not s.taken_by) >= MAX_SIGNALS:
        raise InvalidOption(f"too many signals; '{workflow_id}' holds {MAX_SIGNALS} not yet received")
    updated = replace(
        wf, signals=_trimmed([*wf.signals, replace(sent, sent_at=now)]), changed=True, updated_at=now
    )
    _check_size(updated)
    return effects, updated


def cancel(current: Workflow | None, workflow_id: str, now: int) -> tuple[Effects, Workflow | None]:
    """Asks the workflow to stop: its worker raises ``Cancelled`` in it at its next durable call, its
    compensations run and it ends cancelled. A finished workflow is left as it is."""
    wf = _existing(current, workflow_id)
    if wf.status != RUNNING:
        return Effects(), None
    if wf.cancel_requested:
        return Effects(wake=True), None  # asked before; its wake-up may be what was lost
    return Effects(wake=True), replace(wf, cancel_requested=True, changed=True, updated_at=now)


def resume(current: Workflow | None, workflow_id: str, now: int) -> tuple[Effects, Workflow | None]:
    """Runs a workflow that failed for its code (``resumable``) again: running, its error cleared, woken
    to replay its journal with the code the workers have now. Its journal, claims and signals stay.

    Raises:
        Conflict: it is running, ended another way, or is a child (whose parent recorded its failure).
    """
    wf = _existing(current, workflow_id)
    if wf.status != FAILED or not wf.resumable:
        raise Conflict(
            f"{NOT_RESUMABLE}; '{workflow_id}' is {wf.status} and did not fail for its code (non-determinism)"
        )
    resumed = replace(
        wf,
        status=RUNNING,
        error="",
        resumable=False,
        finished_at=0,
        expires_at=0,
        claim_deadline=0,
        changed=True,
        updated_at=now,
    )
    return Effects(wake=True), resumed


def terminate(
    current: Workflow | None, workflow_id: str, reason: str, now: int, retention_us: int
) -> tuple[Effects, Workflow | None]:
    """Ends a running workflow at once, failed with ``TERMINATED`` and ``reason``, with no worker: its
    code and compensations do not run (a workflow no worker has the code of ends this way too). Its
    parent hears of it; its unfinished children are to be terminated as well (``cancel_children``). A
    finished workflow is left as it is."""
    wf = _existing(current, workflow_id)
    if wf.status != RUNNING:
        return Effects(), None
    effects = Effects()
    error = f"{TERMINATED}: {reason or 'no reason given'}"
    return effects, _finish(wf, FAILED, b"", error, now, retention_us, effects)


def _finish(
    wf: Workflow, status: str, result: bytes, error: str, now: int, retention_us: int, effects: Effects
) -> Workflow:
    """The workflow ended: its parent hears how, its unfinished children are cancelled."""
    effects.cancel_children = _unfinished_children(wf)
    ended = replace(
        wf,
        status=status,
        result=result,
        error=error,
        claim_deadline=0,
        finished_at=now,
        expires_at=now + retention_us,
    )
    effects.parent = child_result(ended) if wf.parent_id else None
    return ended


def child_result(wf: Workflow) -> Entry:
    """What a finished child workflow records in its parent's journal."""
    state = DONE if wf.status == COMPLETED else ERROR
    return Entry(seq=wf.parent_seq, kind=CHILD, name=wf.name, state=state, value=wf.result, error=wf.error)


def _unfinished_children(wf: Workflow) -> list[str]:
    return [child_id(wf.id, e.seq) for e in wf.entries if e.kind == CHILD and e.state not in FINAL_STATES]


def _put_entry(
    journal: dict[int, Entry],
    recorded: Mapping[int, Entry],
    signals: list[Signal],
    entry: Entry,
    rows: int,
    seq_base: int,
    updates: list[Signal],
) -> None:
    """Puts ``entry`` into the head's ``journal`` (the journal's ``rows`` hold as many others; the run's
    seqs are past ``seq_base``)."""
    if entry.seq <= seq_base:
        raise InvalidOption(f"entries are invalid; seq must be at least {seq_base + 1}, got {entry.seq}")
    found = journal.get(entry.seq)
    row = recorded.get(entry.seq) if found is None else None
    if row is not None:
        # Recorded as a row: final, and never written again (whatever this entry holds, the replay of
        # this claim read the row).
        if (row.kind, row.name) != (entry.kind, entry.name) or (
            entry.state in FINAL_STATES and entry.state != row.state
        ):
            raise Conflict(f"{FENCED}; seq {entry.seq} is recorded already as {row.kind} '{row.name}'")
        return
    if found is not None and found.state in FINAL_STATES:
        if entry.state not in FINAL_STATES and (found.kind, found.name) == (entry.kind, entry.name):
            return  # its result was recorded from outside first (a fast step or child)
        if (found.kind, found.name, found.state) != (entry.kind, entry.name, entry.state):
            raise Conflict(f"{FENCED}; seq {entry.seq} is recorded already as {found.kind} '{found.name}'")
        return
    if entry.kind == SIGNAL and entry.state == DONE:
        entry = _take_signal(signals, entry)
    if entry.kind == UPDATE:
        entry = _take_update(updates, entry)
    if found is None and (rows + len(journal) >= MAX_ENTRIES or len(journal) >= MAX_OPEN_ENTRIES):
        raise InvalidOption(
            f"journal is full; a workflow holds at most {MAX_ENTRIES} entries,"
            f" {MAX_OPEN_ENTRIES} of them open"
        )
    journal[entry.seq] = entry


def _take_signal(signals: list[Signal], entry: Entry) -> Entry:
    """A wait receives the oldest signal of its name that no wait has received."""
    for i, s in enumerate(signals):
        if s.name == entry.name and not s.taken_by:
            signals[i] = replace(s, taken_by=entry.seq)
            return replace(entry, value=s.payload)
    raise Conflict(f"{FENCED}; no signal '{entry.name}' is waiting to be received")


def _take_update(updates: list[Signal], entry: Entry) -> Entry:
    """A turn takes the oldest update of its name that no turn has taken, as a wait takes a signal: the
    entry gets the caller's arguments, which a replay applies again (docs/adr/0060)."""
    if entry.state != DONE:
        raise InvalidOption(f"entries are invalid; an {UPDATE} entry is {DONE}, not {entry.state}")
    for i, u in enumerate(updates):
        if u.name == entry.name and not u.taken_by:
            updates[i] = replace(u, taken_by=entry.seq)
            return replace(entry, value=u.payload)
    raise Conflict(f"{FENCED}; no update '{entry.name}' is waiting to be taken")


def request_update(
    current: Workflow | None, workflow_id: str, sent: Signal, now: int
) -> tuple[Effects, Workflow | None]:
    """Keeps an update (its id, name and arguments) until a turn of the workflow takes it, and wakes the
    workflow, as ``signal`` keeps a signal. An update id seen before is not kept twice (its caller asked
    again, after a lost reply or a timeout, to wait for its answer).

    Raises:
        InvalidOption: the workflow has ended, or holds ``MAX_SIGNALS`` updates not taken yet.
    """
    wf = _existing(current, workflow_id)
    if any(u.id == sent.id for u in wf.updates):
        return Effects(wake=wf.status == RUNNING), None
    if wf.status != RUNNING:
        raise InvalidOption(f"workflow is finished; '{workflow_id}' is {wf.status}")
    if sum(1 for u in wf.updates if not u.taken_by) >= MAX_SIGNALS:
        raise InvalidOption(f"too many updates; '{workflow_id}' holds {MAX_SIGNALS} not yet taken")
    updated = replace(
        wf, updates=_trimmed([*wf.updates, replace(sent, sent_at=now)]), changed=True, updated_at=now
    )
    _check_size(updated)
    return Effects(wake=True), updated


def update_answer_seq(wf: Workflow, workflow_id: str, update_id: str) -> int:
    """The seq of the ``update_result`` entry that answers the update ``update_id``: 0 while no turn has
    taken it.

    Raises:
        InvalidOption: the workflow ended with the update not taken (``UPDATE_UNANSWERED``), its answer
            went with a run that continued as new (``UPDATE_GONE``), or it holds no update of that id
            (dropped among the oldest taken ones).
    """
    for u in wf.updates:
        if u.id == update_id:
            if u.taken_by and u.taken_by <= wf.seq_base:
                raise InvalidOption(
                    f"{UPDATE_GONE}; '{workflow_id}' continued as new after answering '{u.id}'"
                )
            if u.taken_by:
                return u.taken_by + 1
            if wf.status != RUNNING:
                raise InvalidOption(f"{UPDATE_UNANSWERED}; '{workflow_id}' is {wf.status}")
            return 0
    raise InvalidOption(f"update does not exist; '{workflow_id}' holds no update '{update_id}'")


def _trimmed(signals: list[Signal]) -> list[Signal]:
    """At most ``MAX_SIGNALS`` kept: the oldest received ones go first (their ids stop de-duplicating)."""
    extra = len(signals) - MAX_SIGNALS
    if extra <= 0:
        return signals
    kept: list[Signal] = []
    for s in signals:
        if s.taken_by and extra > 0:
            extra -= 1
            continue
        kept.append(s)
    return kept


def _past_deadline(wf: Workflow, now: int) -> bool:
    return 0 < wf.deadline <= now


def _existing(current: Workflow | None, workflow_id: str) -> Workflow:
    if current is None:
        raise not_found(workflow_id)
    return current


def head_bytes(wf: Workflow) -> int:
    """Bytes of the values and texts the head holds (not its journal's rows)."""
    # Errors count as values do: a worker's exception message is as unbounded as a result. (Names and
    # ids are bounded one by one, and in number by MAX_ENTRIES and MAX_SIGNALS.)
    size = len(wf.input) + len(wf.result) + _utf8_bytes(wf.error) + _utf8_bytes(wf.encoding)
    size += _values_bytes(wf.entries)
    return size + sum(len(s.payload) for s in (*wf.signals, *wf.updates))


def _check_size(wf: Workflow) -> None:
    size = head_bytes(wf)
    if size > MAX_RECORD_BYTES:
        raise InvalidOption(f"workflow is too large; its values pass {MAX_RECORD_BYTES} bytes in all")
    if size + wf.journal_bytes > MAX_JOURNAL_BYTES:
        raise InvalidOption(
            f"workflow is too large; its journal's values pass {MAX_JOURNAL_BYTES} bytes in all"
        )


def _values_bytes(entries: Iterable[Entry]) -> int:
    return sum(len(e.value) + _utf8_bytes(e.error) for e in entries)


def _moved(entries: Iterable[Entry]) -> tuple[list[Entry], list[Entry]]:
    """The entries the head keeps, and those that move into rows: the final ones, but a group's only
    once all of it is final (``record`` wakes the workflow on a complete group, counted in the head)."""
    journal = sorted(entries, key=_seq)
    open_groups = _open_groups(journal)
    kept: list[Entry] = []
    rows: list[Entry] = []
    for e in journal:
        moves = e.state in FINAL_STATES and e.group not in open_groups
        (rows if moves else kept).append(e)
    return kept, rows


def _open_groups(journal: Iterable[Entry]) -> set[int]:
    """The groups some of whose members are missing or not final, in one pass."""
    members: dict[int, int] = {}
    size: dict[int, int] = {}
    unfinished: set[int] = set()
    for e in journal:
        if e.group:
            members[e.group] = members.get(e.group, 0) + 1
            size[e.group] = max(size.get(e.group, 0), e.group_size)
            if e.state not in FINAL_STATES:
                unfinished.add(e.group)
    return unfinished | {g for g, n in members.items() if n < size[g]}


def rows_to_read(wf: Workflow | None, entries: Iterable[Entry]) -> tuple[int, int] | None:
    """The seqs (first, last) of the journal's rows a rule needs for ``entries``: those the head does
    not hold and the rows may (up to ``length``). None, the usual case, when it needs none: a claimant
    sends new entries, and results arrive for entries the head holds."""
    if wf is None:
        return None
    held = {e.seq for e in wf.entries}
    seqs = [e.seq for e in entries if wf.seq_base < e.seq <= wf.length and e.seq not in held]
    return (min(seqs), max(seqs)) if seqs else None


def recorded_rows(wf: Workflow, rows: Iterable[JournalRow]) -> dict[int, Entry]:
    """The recorded entry of each seq of ``rows``: of a seq up to the head's ``length``, the row of the
    highest version up to the head's ``version``; never one the head holds (docs/adr/0046).

    Only the claimant's write moves entries into rows, and it writes a seq once: when the head is at
    ``version`` and a seq up to ``length`` is not in the head, its row was written with a version that
    succeeded, and any other row of that seq (of a write refused, which Cassandra writes before the head's
    transaction) was written for an older version, or a newer one not reached (a write still in
    flight)."""
    held = {e.seq for e in wf.entries}
    best: dict[int, JournalRow] = {}
    for row in rows:
        seq = row.entry.seq
        if seq > wf.length or seq <= wf.seq_base or seq in held or row.version > wf.version:
            continue
        if seq not in best or row.version > best[seq].version:
            best[seq] = row
    return {seq: row.entry for seq, row in best.items()}


def next_version(current: Workflow | None, now: int) -> int:
    """The version a write stores: one more than the stored head's. A new record's is ``now`` (its
    creation, in microseconds), above any version a dropped run of the same id reached, so that no
    journal row that run left (on Cassandra, one whose TTL a crash kept from being set) ranks above the
    new run's rows (``recorded_rows``)."""
    return current.version + 1 if current is not None else max(1, now)


def info_page(journal: Sequence[Entry], limit: int = INFO_ENTRIES) -> list[Entry]:
    """The first entries of ``journal`` that ``workflows.info`` returns: at most ``limit``, and
    ending before the entry that would pass ``MAX_RECORD_BYTES`` of values (never before the first)."""
    page: list[Entry] = []
    size = 0
    for entry in journal[:limit]:
        size += _values_bytes((entry,))
        if size > MAX_RECORD_BYTES and page:
            break
        page.append(entry)
    return page


def info_span(wf: Workflow, after: int, limit: int) -> tuple[int, int]:
    """The seqs (first, last) of the rows a page of ``workflows.info`` reads: the ``limit`` after seq
    ``after`` (of the run: never an earlier run's, docs/adr/0059). ``last < first`` when it needs none."""
    first = max(after, wf.seq_base) + 1
    return first, min(wf.length, first + limit - 1)


def entries_of(wf: Workflow, rows: Iterable[JournalRow]) -> list[Entry]:
    """The workflow's journal, in seq order: its recorded rows (``recorded_rows``) and the head's."""
    journal = recorded_rows(wf, rows)
    journal.update((e.seq, e) for e in wf.entries)
    return [journal[seq] for seq in sorted(journal)]


def _utf8_bytes(text: str) -> int:
    return len(text.encode())


def _seq(entry: Entry) -> int:
    return entry.seq
