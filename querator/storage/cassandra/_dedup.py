"""Produce de-duplication on Cassandra: queue-wide claims, proven by markers written with the items.

A dedup id must enqueue once per window across every partition and node of a queue, and a produce that
failed must leave nothing that makes its retry look like a duplicate. Cassandra cannot write the claim
and the items in one transaction (a conditional batch stays in one partition), so the two are split:

- the **claim** (table ``dedup``, one row per (queue, dedup id)) is taken with a lightweight
  transaction (``IF NOT EXISTS``), so of two producers racing on two nodes only one gets it; it names
  the claimant (partition, owner epoch, segment) and the window's end, and expires by TTL;
- the **marker** (an ``items`` row with ``record = 2``, id = the dedup id) is written in the
  claimant's fenced batch, together with the items: it exists if and only if the items were stored.

A producer that finds someone else's claim looks for its marker (a serial read, which also completes a
Paxos round still in flight). Marker found: a duplicate. Not found: the claim is stale, and taken over
with another lightweight transaction, when the claimant can no longer be writing it (it was this very
partition and epoch, whose runs are sequential, or an older owner of this partition, fenced out by this
one's claim; its segment was reset; or it is older than ``CLAIM_TIMEOUT``); otherwise the claimant may
still be writing it, and the run fails with a storage error (454: the client retries and then finds the
marker, or a stale claim), giving back the claims it took itself, so that two producers of the same ids
in another order do not hold each other up.
Segments holding markers of an open window are not dropped, so a marker outlives its claim.

``claim`` does no I/O: it is an ``Exchange`` that yields the requests it needs sent and gets their rows
back; the partition whose run claims the ids sends them (``Cql.exchange``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from querator.errors import StorageError
from querator.storage.cassandra._session import Exchange, Request, Rows
from querator.storage.cassandra._statements import Statement

CLAIM_TIMEOUT: Final = 60 * 1_000_000
"""Microseconds after which a claim without a marker is stale: far longer than any produce's writes
(Cassandra's request timeout is 10 s), so its claimant has given up on it."""

MAX_TTL: Final = 630_720_000
"""Cassandra's largest TTL (20 years)."""

LAST_EXPIRY: Final = 2**31 - 1 - 86_400
"""The latest expiry (seconds since the epoch) to ask for: Cassandra refuses a TTL that ends after
2038-01-19 unless its storage is out of 4.x compatibility mode (CASSANDRA-14092); a day of margin for
the clocks' difference."""


def max_ttl(now: int) -> int:
    """The longest TTL Cassandra accepts at ``now`` (microseconds): 20 years, ending before 2038-01-19."""
    return max(1, min(MAX_TTL, LAST_EXPIRY - now // 1_000_000))


class DedupInFlight(StorageError):
    """Another producer holds a fresh claim on a dedup id and may still be storing its item."""


def ttl_seconds(duration: int, now: int) -> int:
    """The TTL of a claim made at ``now`` whose window lasts ``duration`` microseconds. The window's end
    is decided by ``expires_at`` on the queue's clock; the TTL only collects the row, a margin later, so
    that a claim being judged does not vanish under the judge."""
    return min(max_ttl(now), -(-duration // 1_000_000) + CLAIM_TIMEOUT // 1_000_000)


@dataclass(frozen=True, slots=True)
class Claimant:
    """The partition, and its owner's epoch, that claims dedup ids for its run."""

    queue: str
    partition: int
    epoch: int


# Long on purpose: the claim protocol's steps in order, each a yield to the caller who sends it.
def claim(  # noqa: C901
    me: Claimant, dedup_ids: Collection[str], segment: int, now: int, expires_at: int
) -> Exchange[set[str]]:
    """Claims each id for ``me`` until ``expires_at``; returns the ids already stored within their
    window by anyone (the duplicates).

    Raises:
        DedupInFlight: another producer's fresh claim has no marker yet.
        CassandraStorageError: Cassandra failed, or a racing producer took a stale claim first.
    """
    mine = (me.partition, me.epoch, segment, now, expires_at)
    ttl = ttl_seconds(expires_at - now, now)
    ids = list(dedup_ids)
    # Every id at once: the Paxos rounds of different ids do not contend.
    answers = yield [Request(Statement.CLAIM_DEDUP, (me.queue, d, *mine, ttl)) for d in ids]
    seen: set[str] = set()
    taken: list[str] = []
    takeovers = []
    in_flight: DedupInFlight | None = None
    for dedup_id, rows in zip(ids, answers, strict=True):
        row = _verdict(rows)
        if row["[applied]"]:
            taken.append(dedup_id)
        elif row["expires_at"] > now and (yield from _stored(me.queue, dedup_id, row)):
            seen.add(dedup_id)
        elif (yield from _stale(me, row, now)):
            takeovers.append((dedup_id, row))
        elif in_flight is None:
            in_flight = DedupInFlight(
                f"cassandra storage error; dedup id '{dedup_id}' is being produced by partition "
                f"{row['partition']} of '{me.queue}'; try again"
            )
    for dedup_id, row in takeovers if in_flight is None else ():
        old = (row["partition"], row["epoch"], row["claimed_at"])
        [rows] = yield [Request(Statement.TAKE_DEDUP, (ttl, *mine, me.queue, dedup_id, *old))]
        current = _verdict(rows)
        if not current["[applied]"] and "partition" not in current:
            # The stale claim's TTL ran out meanwhile: claim the id afresh.
            [rows] = yield [Request(Statement.CLAIM_DEDUP, (me.queue, dedup_id, *mine, ttl))]
            current = _verdict(rows)
        if not current["[applied]"]:
            in_flight = DedupInFlight(
                f"cassandra storage error; dedup id '{dedup_id}' was claimed by another producer; try again"
            )
            break
        taken.append(dedup_id)
    if in_flight is not None:
        # Give back what this run took: two producers sending the same ids in another order would
        # otherwise each hold some of the other's, and both answer 454 until the claims go stale.
        for dedup_id in taken:
            yield [Request(Statement.RELEASE_DEDUP, (me.queue, dedup_id, me.partition, me.epoch, now))]
        raise in_flight
    return seen


def _verdict(rows: Rows) -> dict[str, Any]:
    """A conditional write's answer: ``[applied]``, and the row it found when not applied."""
    return rows[0] if rows else {"[applied]": False}


def _stored(queue: str, dedup_id: str, claim: dict[str, Any]) -> Exchange[bool]:
    """Whether the claimant's marker exists: its items were stored."""
    [rows] = yield [Request(Statement.PARTITION_SEGMENTS, (queue, claim["partition"]))]
    if not rows:
        return False
    for segment in sorted(n for n in rows[0]["segments"] or () if n >= claim["segment"]):
        # Serial: a fenced batch whose Paxos round is still in flight is completed (or dropped) before
        # the marker is looked for, so "not found" is final for a claimant that gave up.
        find = Request(Statement.FIND_MARKER, (queue, claim["partition"], segment, dedup_id), serial=True)
        [markers] = yield [find]
        if any(row["expire_deadline"] == claim["expires_at"] for row in markers):
            return True
    return False


def _stale(me: Claimant, claim: dict[str, Any], now: int) -> Exchange[bool]:
    """Whether nobody can still be storing the items of a claim whose marker is missing."""
    if claim["expires_at"] <= now:
        return True
    if claim["partition"] == me.partition and claim["epoch"] <= me.epoch:
        # An earlier run of this very owner (runs are sequential, so it failed), or of an owner this
        # one's claim fenced out: its batch can no longer commit, and the serial read that found no
        # marker completed any round of it still in flight.
        return True
    [rows] = yield [Request(Statement.PARTITION_SEGMENTS, (me.queue, claim["partition"]))]
    if not rows or claim["segment"] < (rows[0]["base"] or 0):
        return True  # the partition was reset (queue deleted or cleared) since
    return bool(now - claim["claimed_at"] > CLAIM_TIMEOUT)
