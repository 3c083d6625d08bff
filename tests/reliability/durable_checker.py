"""The durable-execution checker: did every workflow finish once, with results its steps really made, and
did a step run twice only when it was in flight at a kill?

What it reads, after the run:

- **runs**: every step run, as its process recorded it before doing any work: the workflow, the step's
  seq, a run id of its own (the step returns it, so a recorded result names the one run that made it),
  the process, the record's place among that process's records (a process's records are in the order
  it made them, whatever other processes did meanwhile) and when it began by the host's monotonic clock,
  which every process of the host shares;
- **finished**: every workflow as the server tells at the end: status, result, journal;
- **killed**: the processes killed with SIGKILL; **lost_turns**: (process, workflow) pairs whose worker
  logged that it stopped its turn on the workflow early: another worker had claimed it (its late append
  was refused), or the server failed (the activation comes back).

What it reports:

- **unfinished**: a workflow not completed;
- **bad_journal**: a journal that is not one done step entry per seq, 1 to ``steps``;
- **wrong_result**: a result other than the recorded step results in order;
- **invented**: a recorded result no run of that workflow's step at that seq made, or one that two runs
  claim (a run id is unique);
- **unexplained**: a run whose result was not recorded, and that was not in flight when its process
  lost the workflow. In flight means: its process then wrote no further record for that workflow (had
  the run ended and its result been recorded, the process would have gone on to the next step), and the
  process was killed (**at_kill**) or logged that its turn on the workflow ended early (**at_lost_turn**).
  A process that went on after an unrecorded run, or stopped for no reason, is a step run again by
  replay: the bug this checker is for. So is a run that began after a run of the workflow's next step
  began, in flight at a kill or not: the next step runs only once this one is recorded, and a recorded
  step must never run again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One step run, as its process recorded it when it began."""

    pid: int
    order: int
    """Its place among its process's records."""
    workflow: str
    seq: int
    run: str
    at: float = 0.0
    """When it began, in seconds of the host's monotonic clock."""


@dataclass(frozen=True)
class Finished:
    """A workflow as the server tells at the end; ``journal``: (seq, kind, state, decoded value)."""

    status: str
    result: object
    journal: tuple[tuple[int, str, str, object], ...]
    error: str = ""


@dataclass
class DurableReport:
    workflows: int = 0
    runs: int = 0
    unfinished: list[str] = field(default_factory=list)
    bad_journal: list[str] = field(default_factory=list)
    wrong_result: list[str] = field(default_factory=list)
    invented: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    at_kill: int = 0
    """Runs again of a step that was in flight when its process was killed."""
    at_lost_turn: int = 0
    """Runs again of a step that was in flight when its process's turn on the workflow ended early."""

    def problems(self) -> list[str]:
        found = []
        for name in ("unfinished", "bad_journal", "wrong_result", "invented", "unexplained"):
            items: list[str] = getattr(self, name)
            if items:
                found.append(f"{len(items)} {name.replace('_', ' ')}: {items[:10]}")
        return found

    def summary(self) -> str:
        return (
            f"workflows {self.workflows}, step runs {self.runs}, unfinished {len(self.unfinished)}, "
            f"bad journals {len(self.bad_journal)}, wrong results {len(self.wrong_result)}, "
            f"invented {len(self.invented)}, unexplained runs again {len(self.unexplained)}, "
            f"runs again after a kill {self.at_kill}, after a lost turn {self.at_lost_turn}"
        )


def check_workflows(
    steps: int,
    finished: Mapping[str, Finished | None],
    runs: Iterable[Run],
    killed: AbstractSet[int],
    lost_turns: AbstractSet[tuple[int, str]] = frozenset(),
) -> DurableReport:
    """Checks workflows of ``steps`` steps each; ``finished`` has every workflow started (None: the server
    does not know it)."""
    report = DurableReport(workflows=len(finished))
    by_step: dict[tuple[str, int], list[Run]] = defaultdict(list)
    last: dict[tuple[int, str], int] = {}
    """The place of each process's last record of each workflow."""
    for r in runs:
        report.runs += 1
        by_step[r.workflow, r.seq].append(r)
        last[r.pid, r.workflow] = max(last.get((r.pid, r.workflow), -1), r.order)
    began: dict[tuple[str, int], float] = {key: min(r.at for r in found) for key, found in by_step.items()}
    """When each step's first run began: its previous step was recorded by then."""
    for workflow, wf in sorted(finished.items()):
        completed = wf is not None and wf.status == "completed"
        if not completed:
            report.unfinished.append(f"{workflow} ({wf.status}: {wf.error})" if wf is not None else workflow)
        recorded = _recorded(wf, steps) if wf is not None else None
        if recorded is None:
            report.bad_journal.append(workflow)
        elif completed and wf is not None and wf.result != [recorded[seq] for seq in range(1, steps + 1)]:
            report.wrong_result.append(workflow)
        for seq in range(1, steps + 1):
            seq_runs = by_step.get((workflow, seq), [])
            after = began.get((workflow, seq + 1), float("inf"))
            _check_step(report, f"{workflow}/{seq}", seq_runs, recorded, seq, after, last, killed, lost_turns)
    return report


def _check_step(
    report: DurableReport,
    name: str,
    runs: list[Run],
    recorded: dict[int, object] | None,
    seq: int,
    recorded_by: float,
    last: dict[tuple[int, str], int],
    killed: AbstractSet[int],
    lost_turns: AbstractSet[tuple[int, str]],
) -> None:
    """One step's runs: the recorded one made by exactly one run, every other one in flight at a loss and
    begun before ``recorded_by`` (when the next step began)."""
    value = recorded.get(seq) if recorded is not None else None
    if recorded is not None and sum(1 for r in runs if r.run == value) != 1:
        report.invented.append(name)
    for r in runs:
        in_flight = last[r.pid, r.workflow] == r.order
        if r.at > recorded_by:  # the recorded run too: the next step may not run before this one ends
            report.unexplained.append(f"{name} run {r.run} by {r.pid} began after the next step's")
        elif r.run == value:
            continue
        elif in_flight and r.pid in killed:
            report.at_kill += 1
        elif in_flight and (r.pid, r.workflow) in lost_turns:
            report.at_lost_turn += 1
        else:
            report.unexplained.append(f"{name} run {r.run} by {r.pid}")


def _recorded(wf: Finished, steps: int) -> dict[int, object] | None:
    """The recorded step results by seq, if the journal is one done step per seq from 1 to ``steps``."""
    if [(seq, kind, state) for seq, kind, state, _ in wf.journal] != [
        (seq, "step", "done") for seq in range(1, steps + 1)
    ]:
        return None
    return {seq: value for seq, _, _, value in wf.journal}
