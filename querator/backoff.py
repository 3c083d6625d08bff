"""Exponential back-off, once for every caller: the client's retries, the worker's lease loop and its
task policies (which durable steps use too), and the node's restarts of its processes.

A wait after the ``failures``-th failure in a row is bounded by ``first_s * factor ** (failures - 1)``,
never more than ``cap_s``, and drawn at random in the top ``jitter`` share of that bound, so that the
callers one outage failed together do not all return at once: ``jitter`` 1 ("full jitter") draws from 0
to the bound, 0.5 from half of it, 0 waits the bound itself.

It imports nothing of Querator, so the client (and everything built on it) may use it as the server does.
"""

from __future__ import annotations

import random


def bound_s(failures: int, first_s: float, cap_s: float, factor: float = 2.0) -> float:
    """The longest wait after ``failures`` failures in a row (``first_s`` after the first, and after
    none); as large as ``cap_s`` however many failures, where the power alone would overflow a float."""
    try:
        grown_s = first_s * float(factor) ** max(failures - 1, 0)
    except OverflowError:  # a long outage: the bound is the cap long before this
        return cap_s
    return min(cap_s, grown_s)


def wait_s(failures: int, first_s: float, cap_s: float, factor: float = 2.0, jitter: float = 1.0) -> float:
    """A wait after ``failures`` failures in a row: at random in the top ``jitter`` share of
    ``bound_s``."""
    bound = bound_s(failures, first_s, cap_s, factor)
    return random.uniform(bound * (1.0 - jitter), bound) if jitter else bound


__all__ = ["bound_s", "wait_s"]
