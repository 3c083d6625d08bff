"""The history checker finds what it is meant to find (and only that)."""

from __future__ import annotations

from .checker import check
from .history import History, Op


def history(*ops: tuple[str, str, float, tuple[str, ...]]) -> History:
    h = History()
    for kind, outcome, at, payloads in ops:
        h.ops.append(Op(kind, "c", at, at + 0.5, outcome, payloads))  # type: ignore[arg-type]
    return h


def test_a_clean_history_has_no_problems() -> None:
    report = check(
        history(
            ("produce", "ok", 0, ("a", "b")),
            ("lease", "ok", 1, ("a", "b")),
            ("retry", "ok", 2, ("b",)),
            ("lease", "ok", 3, ("b",)),
            ("complete", "ok", 4, ("a", "b")),
        ),
        stranded=0,
    )
    assert report.problems() == [] and report.deliveries == 3 and sum(report.explained.values()) == 0


def test_each_problem_is_found() -> None:
    report = check(
        history(
            ("produce", "ok", 0, ("lost", "dup", "expired")),
            ("produce", "fail", 0, ("refused",)),
            ("lease", "ok", 1, ("dup", "expired", "ghost", "refused")),
            ("complete", "ok", 2, ("dup", "ghost", "refused")),
            ("lease", "ok", 5, ("dup", "expired")),
            ("complete", "ok", 6, ("expired",)),
        ),
        stranded=1,
    )
    assert report.lost == ["lost"]
    assert sorted(report.unexpected) == ["ghost", "refused"]
    assert report.duplicated == ["dup"]
    assert report.explained == {"lease expired or answer lost": 1}  # "expired": leased, never acked, again
    assert report.stranded == 1 and len(report.problems()) == 4


def test_an_unanswered_complete_counts_only_if_the_item_never_came_back() -> None:
    gone = history(
        ("produce", "ok", 0, ("a",)), ("lease", "ok", 1, ("a",)), ("complete", "unknown", 2, ("a",))
    )
    assert check(gone, stranded=0).lost == []
    back = history(
        ("produce", "ok", 0, ("a",)),
        ("lease", "ok", 1, ("a",)),
        ("complete", "unknown", 2, ("a",)),
        ("lease", "ok", 3, ("a",)),
    )
    assert check(back, stranded=0).lost == ["a"]


def test_a_delivery_within_the_previous_lease_is_found_only_without_a_settle_between() -> None:
    # Each op returns 0.5 s after its call; the lease is 2 s long.
    overlapping = history(
        ("produce", "ok", 0, ("a",)), ("lease", "ok", 1, ("a",)), ("lease", "ok", 2, ("a",))
    )
    assert check(overlapping, stranded=0, lease_s=2.0).within_lease == ["a"]
    assert check(overlapping, stranded=0).within_lease == []  # checked only when the lease is known
    after_expiry = history(
        ("produce", "ok", 0, ("a",)), ("lease", "ok", 1, ("a",)), ("lease", "ok", 3, ("a",))
    )
    assert check(after_expiry, stranded=0, lease_s=2.0).within_lease == []
    retried_unanswered = history(
        ("produce", "ok", 0, ("a",)),
        ("lease", "ok", 1, ("a",)),
        ("retry", "unknown", 1.6, ("a",)),
        ("lease", "ok", 2, ("a",)),
    )
    assert check(retried_unanswered, stranded=0, lease_s=2.0).within_lease == []
