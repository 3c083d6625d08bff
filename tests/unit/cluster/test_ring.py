"""Placement: the ring is deterministic, moves about 1/N on a join, and honours the grace period."""

from __future__ import annotations

import subprocess
import sys

import pytest

from querator.clock import FakeClock
from querator.cluster.membership import Member, MemberSet
from querator.cluster.ring import Placement, Ring

QUEUES = [f"queue-{i}" for i in range(64)]
PARTITIONS = 8
KEYS = [(q, p) for q in QUEUES for p in range(PARTITIONS)]


def owners(ring: Ring) -> dict[tuple[str, int], str]:
    return {(q, p): ring.owner(q, p) for q, p in KEYS}


def member_set(revision: int, *node_ids: str) -> MemberSet:
    return MemberSet(revision, tuple(Member(n, f"{n}:2319", 0) for n in sorted(node_ids)))


def test_same_members_same_owners_whatever_the_order() -> None:
    a = Ring(["node-a", "node-b", "node-c"], 7)
    b = Ring(["node-c", "node-a", "node-b"], 7)
    assert owners(a) == owners(b)
    assert set(owners(a).values()) == {"node-a", "node-b", "node-c"}


def test_same_owners_in_another_process() -> None:
    """No per-process hash salt: a fresh interpreter (another PYTHONHASHSEED) agrees."""
    script = (
        "from querator.cluster.ring import Ring\n"
        "r = Ring(['node-a', 'node-b', 'node-c'], 1)\n"
        "print(','.join(r.owner(f'queue-{i}', p) for i in range(64) for p in range(8)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout.strip()
    assert out.split(",") == list(owners(Ring(["node-a", "node-b", "node-c"], 1)).values())


def test_spread_over_three_nodes_is_rough_but_fair() -> None:
    counts: dict[str, int] = {}
    for owner in owners(Ring(["node-a", "node-b", "node-c"], 1)).values():
        counts[owner] = counts.get(owner, 0) + 1
    assert min(counts.values()) > len(KEYS) / 3 * 0.6, counts


def test_a_fourth_node_takes_about_a_quarter_and_nothing_else_moves() -> None:
    before = owners(Ring(["node-a", "node-b", "node-c"], 1))
    after = owners(Ring(["node-a", "node-b", "node-c", "node-d"], 2))
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == "node-d" for k in moved)
    assert 0.15 < len(moved) / len(KEYS) < 0.35, len(moved)


def test_an_empty_ring_has_no_owner() -> None:
    with pytest.raises(LookupError):
        Ring([], 0).owner("q", 0)


async def test_a_vanished_member_keeps_its_partitions_for_the_grace_period() -> None:
    clock = FakeClock()
    placement = Placement(grace_period=20, clock=clock)
    full = placement.update(member_set(10, "node-a", "node-b", "node-c"))
    assert full.revision == 10

    during = placement.update(member_set(11, "node-a", "node-b"))
    assert during is full  # same ids, same ring: nothing moves
    assert placement.in_grace() == {"node-c"}
    assert placement.next_change_at() == clock.now() + 20_000_000

    clock.advance(19.9)
    assert placement.ring() is full
    clock.advance(0.1)
    after = placement.ring()
    assert after.node_ids == {"node-a", "node-b"}
    assert after.revision == 11
    assert placement.in_grace() == frozenset()
    assert placement.next_change_at() is None
    assert "node-c" not in set(owners(after).values())


async def test_a_rolling_restart_within_the_grace_period_moves_nothing() -> None:
    clock = FakeClock()
    placement = Placement(grace_period=20, clock=clock)
    ring = placement.update(member_set(10, "node-a", "node-b", "node-c"))
    for revision, node in enumerate(["node-a", "node-b", "node-c"], start=11):
        others = {"node-a", "node-b", "node-c"} - {node}
        assert placement.update(member_set(revision * 2, *others)) is ring
        clock.advance(15)
        assert placement.update(member_set(revision * 2 + 1, *others, node)) is ring
        clock.advance(15)  # past the grace it would have had, had it not come back
        assert placement.ring() is ring
    assert placement.in_grace() == frozenset()


async def test_a_new_member_joins_at_once_and_older_sets_are_ignored() -> None:
    clock = FakeClock()
    placement = Placement(grace_period=20, clock=clock)
    placement.update(member_set(10, "node-a"))
    joined = placement.update(member_set(12, "node-a", "node-b"))
    assert joined.node_ids == {"node-a", "node-b"} and joined.revision == 12
    assert placement.update(member_set(11, "node-a")) is joined


async def test_zero_grace_moves_at_once() -> None:
    placement = Placement(grace_period=0, clock=FakeClock())
    placement.update(member_set(1, "node-a", "node-b"))
    assert placement.update(member_set(2, "node-a")).node_ids == {"node-a"}


def test_rate_limit_keys_spread_over_the_members_and_are_placed_alike_everywhere() -> None:
    """docs/extensions.md, "Rate limits": a key's state lives at its ring owner, so every node must name
    the same owner for it, and keys must not all land on one node."""
    a = Ring(["node-a", "node-b", "node-c"], 7)
    b = Ring(["node-c", "node-b", "node-a"], 9)
    keys = [("q", f"task/{n}") for n in range(300)]
    assert [a.rate_limit_owner(q, k) for q, k in keys] == [b.rate_limit_owner(q, k) for q, k in keys]
    assert {a.rate_limit_owner(q, k) for q, k in keys} == {"node-a", "node-b", "node-c"}
    with pytest.raises(LookupError):
        Ring([], 1).rate_limit_owner("q", "k")
