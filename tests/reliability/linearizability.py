"""A linearizability checker for one partition against the reference's FIFO model.

The model (docs/semantics.md §9): produce appends its items to the tail, in order; a lease takes exactly the
head (one or more items, the first ones); complete removes leased items; retry (now) moves leased items to
the tail; a lease that found nothing saw an empty queue. A concurrent history is linearizable when its
operations can be put in one order, each at a point between its call and its return, that the model
accepts (Wing & Gong's search, with Lowe's memoisation of visited (linearized set, state) pairs, as
Porcupine does). Only operations that succeeded are checked; the workload runs without faults and
with leases long enough never to expire, so every operation's effect is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from .history import Op

State = tuple[tuple[str, ...], frozenset[str]]
"""(queued payloads in FIFO order, leased payloads)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    linearizable: bool
    order: tuple[int, ...] = ()
    """One valid order (indexes into the checked ops) when linearizable."""


def step(state: State, op: Op) -> State | None:
    """The model: the state after ``op``, or None when ``op``'s result is impossible from ``state``."""
    queued, leased = state
    if op.kind == "produce":
        return queued + op.payloads, leased
    if op.kind == "lease":
        k = len(op.payloads)
        if k == 0:
            return state if not queued else None
        if queued[:k] != op.payloads:
            return None
        return queued[k:], leased | frozenset(op.payloads)
    if op.kind in ("complete", "retry"):
        if not leased.issuperset(op.payloads):
            return None
        left = leased.difference(op.payloads)
        return (queued + op.payloads, left) if op.kind == "retry" else (queued, left)
    raise ValueError(f"no model for {op.kind}")


def check(ops: list[Op]) -> Verdict:
    """Whether ``ops`` (all answered) is a linearizable history of one FIFO partition."""
    n = len(ops)
    # An op may go next only if no other remaining op returned before it was called.
    order = sorted(range(n), key=lambda i: ops[i].called)
    seen: set[tuple[int, State]] = set()
    path: list[int] = []

    def search(done: int, state: State) -> bool:
        if done == (1 << n) - 1:
            return True
        key = (done, state)
        if key in seen:
            return False
        seen.add(key)
        remaining = [i for i in order if not done >> i & 1]
        deadline = min(ops[i].returned for i in remaining)
        for i in remaining:
            if ops[i].called > deadline:
                break  # sorted by call time: every later op was called after some op returned
            after = step(state, ops[i])
            if after is not None:
                path.append(i)
                if search(done | 1 << i, after):
                    return True
                path.pop()
        return False

    found = search(0, ((), frozenset()))
    return Verdict(found, tuple(path) if found else ())
