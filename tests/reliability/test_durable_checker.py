"""The durable-execution checker finds what it is meant to find (and only that)."""

from __future__ import annotations

from .durable_checker import Finished, Run, check_workflows


def done(*runs: str) -> Finished:
    """A completed workflow whose steps recorded ``runs``, returned in order."""
    journal = tuple((seq, "step", "done", run) for seq, run in enumerate(runs, 1))
    return Finished("completed", list(runs), journal)


def test_clean_runs_and_runs_again_in_flight_at_a_kill_or_a_lost_turn() -> None:
    runs = [
        Run(pid=1, order=0, workflow="w", seq=1, run="a"),
        Run(pid=1, order=1, workflow="w", seq=2, run="b-killed"),  # its process died during it
        Run(pid=1, order=2, workflow="v", seq=1, run="c-killed"),  # (another workflow of that process)
        Run(pid=2, order=0, workflow="w", seq=2, run="b"),
        Run(pid=2, order=1, workflow="v", seq=1, run="c"),
        Run(pid=3, order=0, workflow="v", seq=2, run="d-late"),  # its claim ran out meanwhile (logged)
        Run(pid=2, order=2, workflow="v", seq=2, run="d"),
    ]
    report = check_workflows(
        2, {"w": done("a", "b"), "v": done("c", "d")}, runs, killed={1}, lost_turns={(3, "v")}
    )
    assert report.problems() == [], report.summary()
    assert (report.workflows, report.runs, report.at_kill, report.at_lost_turn) == (2, 7, 2, 1)


def test_each_problem_is_found() -> None:
    runs = [
        Run(pid=1, order=0, workflow="again", seq=1, run="a-first"),
        Run(pid=1, order=1, workflow="again", seq=2, run="b"),  # went on: a-first was not in flight
        Run(pid=2, order=0, workflow="again", seq=1, run="a"),
        Run(pid=3, order=0, workflow="stopped", seq=1, run="s-first"),  # never killed, no lost turn
        Run(pid=2, order=1, workflow="stopped", seq=1, run="s"),
        Run(pid=2, order=2, workflow="invented", seq=1, run="i"),
        Run(pid=2, order=3, workflow="wrong", seq=1, run="w"),
        Run(pid=4, order=0, workflow="twice", seq=1, run="t"),
        Run(pid=5, order=0, workflow="twice", seq=1, run="t"),
    ]
    finished = {
        "again": done("a", "b"),
        "stopped": Finished("running", None, ((1, "step", "done", "s"),)),
        "invented": done("made-up"),
        "wrong": Finished("completed", ["x"], ((1, "step", "done", "w"),)),
        "twice": done("t"),
        "missing": None,
        "short": Finished("completed", [], ()),
    }
    report = check_workflows(1, {k: v for k, v in finished.items() if k != "again"}, runs, killed={1, 2, 4})
    assert report.unfinished == ["missing", "stopped (running: )"]
    assert report.bad_journal == ["missing", "short"]
    assert report.wrong_result == ["wrong"]
    assert report.invented == ["invented/1", "twice/1"]
    assert report.unexplained == ["stopped/1 run s-first by 3"]
    both = check_workflows(2, {"again": finished["again"]}, runs, killed={1})
    assert both.unexplained == ["again/1 run a-first by 1"] and both.at_kill == 0


def test_a_run_begun_after_the_next_step_began_is_found_even_at_a_kill() -> None:
    runs = [
        Run(pid=1, order=0, workflow="w", seq=1, run="a", at=1.0),
        Run(pid=1, order=1, workflow="w", seq=2, run="b", at=2.0),  # step 1 was recorded by then
        Run(pid=2, order=0, workflow="w", seq=1, run="a-again", at=3.0),  # and ran again: a bug
    ]
    report = check_workflows(2, {"w": done("a", "b")}, runs, killed={2})
    assert report.unexplained == ["w/1 run a-again by 2 began after the next step's"]
    assert report.at_kill == 0
    early = [Run(pid=1, order=0, workflow="w", seq=2, run="b", at=1.0), Run(1, 1, "w", 1, "a", at=2.0)]
    assert check_workflows(2, {"w": done("a", "b")}, early, killed=set()).unexplained == [
        "w/1 run a by 1 began after the next step's"
    ]
