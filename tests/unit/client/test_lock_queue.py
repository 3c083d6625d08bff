"""The pure rules of a lock's queue (querator/client/_lock_queue.py): its name, its checks, its record."""

from __future__ import annotations

from datetime import timedelta

import pytest

from querator.client import LockMismatch
from querator.client._lock_queue import check, queue_name, reference, settings
from querator.wire import messages as m


def test_a_lock_queue_is_named_with_the_prefix_and_never_empty() -> None:
    assert queue_name("invoice-42") == "lock.invoice-42"
    with pytest.raises(ValueError, match=r"^lock name is invalid; cannot be empty$"):
        queue_name("")


def test_check_gives_the_ttl_as_a_go_duration() -> None:
    assert [check(1, "30s"), check(4, timedelta(minutes=2)), check(2, 1.5)] == ["30s", "2m0s", "1.5s"]


@pytest.mark.parametrize("limit", [0, -1, True, 2.0])
def test_a_limit_must_be_a_positive_integer(limit: int) -> None:
    with pytest.raises(ValueError, match=r"^limit is invalid; must be an integer of at least 1"):
        check(limit, "30s")


def test_the_reference_records_limit_and_generation_and_reads_back() -> None:
    info = m.QueueInfo(queue_name="lock.gpu", lease_timeout="30s", reference=reference(4, 7))
    assert tuple(settings(info)) == ("lock.gpu", 4, 7, "30s")
    with pytest.raises(LockMismatch, match=r"^not a lock queue; 'lock.gpu' has reference 'mine'$"):
        settings(m.QueueInfo(queue_name="lock.gpu", reference="mine"))
