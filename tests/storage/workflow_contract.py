"""The storage contract for durable workflows (``Store.workflows``), part of ``StoreContract``.

The journal's rules (``querator.storage.journal``) are run against each backend's rows, so a backend that
stores or compares versions wrongly fails here, whichever backend it is.
"""

from __future__ import annotations

import asyncio

import pytest
from msgspec.structs import replace

from querator.service._workflows import _namespace_page
from querator.storage.base import Store
from querator.storage.journal import BUSY, CLAIMED, SUSPEND, Ending, append, claim, entries_of, start
from querator.storage.workflows import LIST_PAGE_RECORD_BYTES, SYSTEM_NAMESPACE, Entry, JournalRow, Workflow
from querator.wire.search import SEARCH_ENTRY_NAME, encode_search_entry
from querator.wire.workflows import COMPLETED, DONE, RUNNING, SEARCH, STEP
from tests.conftest import eventually

SECOND = 1_000_000
NOW = 1_700_000_000 * SECOND
DAY = 86_400 * SECOND


def new(workflow_id: str, **fields: object) -> Workflow:
    return replace(
        Workflow(id=workflow_id, name="checkout", queue="durable", input=b'{"args":[1]}'), **fields
    )


def step(seq: int) -> Entry:
    return Entry(seq=seq, kind=STEP, name=f"s{seq}", state=DONE, value=b'"r-%d"' % seq)


class WorkflowContract:
    """Every backend's workflow rows."""

    async def put_new(self, store: Store, wf: Workflow) -> Workflow:
        _, write = start(None, wf, NOW)
        assert write is not None
        stored = replace(write, version=1)
        assert await store.workflows.put_workflow(stored, 0)
        return stored

    async def test_a_new_workflow_round_trips(self, store: Store) -> None:
        wf = await self.put_new(store, new("wf-1", encoding="application/json", parent_id="p", parent_seq=3))
        got = await store.workflows.get_workflow("wf-1")
        assert got == wf
        assert (got.status, got.created_at, got.version) == (RUNNING, NOW, 1)
        assert await store.workflows.get_workflow("wf-2") is None

    async def test_put_replaces_only_the_version_it_read(self, store: Store) -> None:
        wf = await self.put_new(store, new("wf-1"))
        assert not await store.workflows.put_workflow(new("wf-1", version=1), 0)  # exists already
        claimed, write = claim(wf, "wf-1", NOW, NOW + 30 * SECOND)
        assert claimed.outcome == CLAIMED and write is not None
        first = replace(write, version=2)
        assert await store.workflows.put_workflow(first, 1)
        stale = replace(first, fence=9)
        assert not await store.workflows.put_workflow(stale, 1)  # a second writer that read version 1
        got = await store.workflows.get_workflow("wf-1")
        assert got is not None and (got.fence, got.version) == (1, 2)
        again, no_write = claim(got, "wf-1", NOW + SECOND, NOW + 31 * SECOND)
        assert again.outcome == BUSY and no_write is None

    async def test_a_claim_keeps_its_claimant_and_the_one_last_counted_lost(self, store: Store) -> None:
        """A lease's claim names its worker process, and the head keeps the claimant whose lapsed claim
        was counted last (docs/adr/0071): both round trip on every backend."""
        wf = await self.put_new(store, new("wf-1"))
        _, first = claim(wf, "wf-1", NOW, NOW + 30 * SECOND, claimant="w-1")
        assert first is not None
        assert await store.workflows.put_workflow(replace(first, version=2), 1)
        got = await store.workflows.get_workflow("wf-1")
        assert got is not None and (got.claimant, got.lost_claimant) == ("w-1", "")
        later = NOW + 60 * SECOND  # w-1's claim ran out: counted, and named
        _, second = claim(got, "wf-1", later, later + 30 * SECOND, claimant="w-2")
        assert second is not None
        assert await store.workflows.put_workflow(replace(second, version=3), 2)
        got = await store.workflows.get_workflow("wf-1")
        assert got is not None
        assert (got.claimant, got.lost_claimant, got.lapsed_claims) == ("w-2", "w-1", 1)

    async def test_concurrent_writers_of_one_version_one_wins(self, store: Store) -> None:
        wf = await self.put_new(store, new("wf-1"))
        writes = [store.workflows.put_workflow(replace(wf, fence=f, version=2), 1) for f in range(1, 6)]
        results = await asyncio.gather(*writes)
        assert sorted(results) == [False, False, False, False, True]

    async def test_a_journal_round_trips(self, store: Store) -> None:
        wf = await self.put_new(store, new("wf-1"))
        _, claimed = claim(wf, "wf-1", NOW, NOW + 30 * SECOND)
        assert claimed is not None
        write = replace(claimed, version=2)
        assert await store.workflows.put_workflow(write, 1)
        entries = [Entry(seq=1, kind=STEP, name="charge", state=DONE, value=b'"r-1"', attempts=2)]
        effects, appended = append(write, "wf-1", 1, entries, Ending(SUSPEND, wake_at=NOW + DAY), NOW, 0, DAY)
        assert appended is not None and effects.rows == entries
        assert await store.workflows.put_workflow(replace(appended, version=3), 2, effects.rows)
        got = await store.workflows.get_workflow("wf-1")
        assert got is not None
        assert (got.entries, got.length) == ([], 1)
        assert entries_of(got, await store.workflows.get_entries("wf-1", 1, got.length)) == entries
        assert (got.claim_deadline, got.timer_at) == (0, NOW + DAY)

    async def test_journal_rows_are_written_with_their_head_by_version(self, store: Store) -> None:
        """docs/adr/0046: a put stores its rows tagged with the head's version; a row of a seq written
        again by a later version is kept beside or in place of the first; a range reads by seq."""
        wf = await self.put_new(store, new("wf-1"))
        first = [step(1), step(2)]
        assert await store.workflows.put_workflow(replace(wf, version=2, length=2), 1, first)
        assert await store.workflows.put_workflow(replace(wf, version=3, length=3), 2, [step(3)])
        rows = await store.workflows.get_entries("wf-1", 1, 3)
        assert rows == [JournalRow(2, step(1)), JournalRow(2, step(2)), JournalRow(3, step(3))]
        assert await store.workflows.get_entries("wf-1", 2, 2) == [JournalRow(2, step(2))]
        assert await store.workflows.get_entries("wf-1", 4, 10) == []
        assert await store.workflows.get_entries("wf-2", 1, 10) == []
        again = replace(step(2), value=b'"again"')
        assert await store.workflows.put_workflow(replace(wf, version=4, length=3), 3, [again])
        head = await store.workflows.get_workflow("wf-1")
        assert head is not None
        assert entries_of(head, await store.workflows.get_entries("wf-1", 1, 3)) == [step(1), again, step(3)]

    async def test_a_refused_put_records_no_row(self, store: Store) -> None:
        """A writer whose compare-and-set is refused may leave its rows (Cassandra writes them before the
        head's transaction); what the head recorded is read all the same."""
        wf = await self.put_new(store, new("wf-1", fence=1))
        assert await store.workflows.put_workflow(replace(wf, version=2, fence=2), 1)  # another claim
        # The first claimant, paused, appends on the version it read.
        stale = [replace(step(1), value=b'"stale"'), step(2)]
        assert not await store.workflows.put_workflow(replace(wf, version=2, length=2), 1, stale)
        head = await store.workflows.get_workflow("wf-1")
        assert head is not None and (head.version, head.length) == (2, 0)
        assert entries_of(head, await store.workflows.get_entries("wf-1", 1, 2)) == []
        # The new claimant records seq 1: its row, not the stale one, is the journal's.
        assert await store.workflows.put_workflow(replace(head, version=3, length=1), 2, [step(1)])
        head = await store.workflows.get_workflow("wf-1")
        assert head is not None
        assert entries_of(head, await store.workflows.get_entries("wf-1", 1, 2)) == [step(1)]

    async def test_drop_entries_drops_the_rows_up_to_a_seq(self, store: Store) -> None:
        """A workflow that continued as new drops its earlier runs' rows (seqs up to its ``seq_base``),
        of every version, and nothing past them nor of another workflow."""
        wf = await self.put_new(store, new("wf-1"))
        assert await store.workflows.put_workflow(replace(wf, version=2, length=2), 1, [step(1), step(2)])
        assert await store.workflows.put_workflow(replace(wf, version=3, length=3), 2, [step(2), step(3)])
        other = await self.put_new(store, new("wf-2"))
        assert await store.workflows.put_workflow(replace(other, version=2, length=1), 1, [step(1)])
        await store.workflows.drop_entries("wf-1", 2)
        assert await store.workflows.get_entries("wf-1", 1, 3) == [JournalRow(3, step(3))]
        assert await store.workflows.get_entries("wf-2", 1, 3) == [JournalRow(2, step(1))]
        await store.workflows.drop_entries("wf-3", 10)  # none: nothing to drop, no error

    async def test_a_long_journal_reads_whole(self, store: Store) -> None:
        """More rows than one read of a backend returns (Cassandra reads them a page at a time)."""
        wf = await self.put_new(store, new("wf-1"))
        journal = [step(seq) for seq in range(1, 2501)]
        assert await store.workflows.put_workflow(replace(wf, version=2, length=2500), 1, journal)
        rows = await store.workflows.get_entries("wf-1", 1, 2500)
        assert [r.entry for r in rows] == journal
        assert [r.entry.seq for r in await store.workflows.get_entries("wf-1", 999, 1002)] == [
            999,
            1000,
            1001,
            1002,
        ]

    async def test_lists_by_status_in_id_order(self, store: Store) -> None:
        for workflow_id in ("c", "a", "b", "d"):
            await self.put_new(store, new(workflow_id))
        done = await store.workflows.get_workflow("b")
        assert done is not None
        assert await store.workflows.put_workflow(replace(done, status=COMPLETED, version=2), 1)
        assert [w.id for w in await store.workflows.list_workflows("", "", 10)] == ["a", "b", "c", "d"]
        assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 10)] == ["a", "c", "d"]
        assert [w.id for w in await store.workflows.list_workflows(RUNNING, "b", 1)] == ["c"]
        assert [w.id for w in await store.workflows.list_workflows(COMPLETED, "", 10)] == ["b"]

    async def test_search_attributes_are_stored_merged_and_filtered(self, store: Store) -> None:
        """docs/adr/0061: a run's search attributes are stored with its head, a ``search`` entry's are
        merged into them by the append rule, and ``workflows.list`` (``_namespace_page``) finds runs by
        them with ``matches_search``, ANDed and with the status, on every backend."""
        await self.put_new(store, new("a", search_attributes={"customer": "c-1", "amount": "30"}))
        b = await self.put_new(store, new("b", search_attributes={"customer": "c-2"}))
        c = await self.put_new(store, new("c", search_attributes={"customer": "c-1"}))
        assert await store.workflows.put_workflow(replace(b, status=COMPLETED, version=2), 1)
        _, claimed = claim(c, "c", NOW, NOW + 30 * SECOND)
        assert claimed is not None and await store.workflows.put_workflow(replace(claimed, version=2), 1)
        value = encode_search_entry({"amount": "40", "vip": "true"})
        entry = Entry(seq=1, kind=SEARCH, name=SEARCH_ENTRY_NAME, state=DONE, value=value)
        ending = Ending(SUSPEND, wake_at=NOW + DAY)
        effects, appended = append(replace(claimed, version=2), "c", 1, [entry], ending, NOW, 0, DAY)
        assert appended is not None
        assert await store.workflows.put_workflow(replace(appended, version=3), 2, effects.rows)
        got = await store.workflows.get_workflow("c")
        assert got is not None and got.search_attributes == {"customer": "c-1", "amount": "40", "vip": "true"}
        listed = {w.id: w.search_attributes for w in await store.workflows.list_workflows("", "", 10)}
        assert listed == {
            "a": {"customer": "c-1", "amount": "30"},
            "b": {"customer": "c-2"},
            "c": got.search_attributes,
        }

        async def found(status: str = "", **search: str) -> list[str]:
            page = await _namespace_page(store.workflows, SYSTEM_NAMESPACE, status, "", 10, "", search)
            return [w.id for w in page]

        assert await found(customer="c-1") == ["a", "c"]
        assert await found(customer="c-1", amount="40") == ["c"]
        assert await found(customer="c-1", amount="50") == []
        assert await found(COMPLETED, customer="c-2") == ["b"]
        assert await found(RUNNING, customer="c-2") == []
        assert await found() == ["a", "b", "c"]

    async def test_lists_end_a_page_at_its_bytes(self, store: Store) -> None:
        """A page holds about ``LIST_PAGE_RECORD_BYTES`` of records however high its limit, and at least
        one record however large: a list never holds a thousand megabyte journals in memory."""
        third = LIST_PAGE_RECORD_BYTES // 3 - 1000  # three records fit, with their few bytes of fields
        for workflow_id in ("a", "b", "c", "d"):
            await self.put_new(store, new(workflow_id, input=bytes([ord(workflow_id)]) * third))
        await self.put_new(store, new("e", input=b"e" * (LIST_PAGE_RECORD_BYTES + 1)))
        pages = [await store.workflows.list_workflows("", pivot, 100) for pivot in ("", "c", "d", "e")]
        # From "d", the pivot and "e" though "e" alone is over the bytes: a page of only the pivot hid
        # every record after a large one from a caller paging on (issue 46).
        assert [[w.id for w in page] for page in pages] == [["a", "b", "c"], ["c", "d"], ["d", "e"], ["e"]]
        assert pages[0][1].input == b"b" * third
        running = await store.workflows.list_workflows(RUNNING, "c", 100)
        assert [w.id for w in running] == ["c", "d"]

    @pytest.mark.parametrize("expired", [True, False])
    async def test_purge_drops_expired_records(self, store: Store, expired: bool) -> None:
        wf = await self.put_new(store, new("wf-1"))
        # Expires long after a backend's own TTL could act (a year): only purge may drop it.
        expires_at = NOW + (-SECOND if expired else 365 * DAY)
        ended = replace(wf, status=COMPLETED, version=2, expires_at=expires_at, length=1)
        assert await store.workflows.put_workflow(ended, 1, [step(1)])
        purged = await store.workflows.purge_workflows(NOW)
        # Rows first: a TTL (Cassandra's) drops them a moment after the record, never before it, so a
        # record still there after this read had its rows at the read.
        rows = await store.workflows.get_entries("wf-1", 1, 1)
        remaining = await store.workflows.get_workflow("wf-1")
        if expired and (purged or remaining is None):  # dropped by the purge, or by the backend's TTL

            async def rows_gone() -> bool:  # with it, or by their TTL a moment later
                return await store.workflows.get_entries("wf-1", 1, 1) == []

            await eventually(rows_gone, timeout=30)
        else:
            assert remaining is not None and rows == [JournalRow(2, step(1))]

    async def test_a_workflow_dropped_after_its_retention_starts_again(self, store: Store) -> None:
        """Once its record is dropped (a purge, or a TTL on Cassandra), the id starts a fresh workflow:
        on Cassandra the row the first write made used to outlive the TTL and refuse the start."""
        wf = await self.put_new(store, new("wf-1"))
        ended = replace(wf, status=COMPLETED, version=2, expires_at=NOW + SECOND)
        assert await store.workflows.put_workflow(ended, 1)

        async def dropped() -> bool:
            await store.workflows.purge_workflows(NOW + 2 * SECOND)
            return await store.workflows.get_workflow("wf-1") is None

        await eventually(dropped, timeout=30)
        again = await self.put_new(store, new("wf-1", input=b'{"args":[2]}'))
        got = await store.workflows.get_workflow("wf-1")
        assert got == again
        assert (got.status, got.version, got.input, got.expires_at) == (RUNNING, 1, b'{"args":[2]}', 0)
        assert await store.workflows.list_workflows("", "", 10) == [again]
        assert await store.workflows.list_workflows(COMPLETED, "", 10) == []

    async def test_a_page_of_running_ones_is_not_cut_short_by_finished_ones(self, store: Store) -> None:
        """docs/adr/0041: finishing a workflow no longer removes its row from Cassandra's index of running
        ones (it marks it): a page must read past finished rows, in every partition, to the ids asked."""
        kept = {"w05", "w17", "w29"}
        for n in range(30):
            wf = await self.put_new(store, new(f"w{n:02}"))
            if wf.id not in kept:
                assert await store.workflows.put_workflow(replace(wf, status=COMPLETED, version=2), 1)
        assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 2)] == ["w05", "w17"]
        assert [w.id for w in await store.workflows.list_workflows(RUNNING, "w06", 5)] == ["w17", "w29"]
        assert len(await store.workflows.list_workflows("", "", 100)) == 30
        assert len(await store.workflows.list_workflows(COMPLETED, "w05", 100)) == 22

    async def test_running_ones_stay_listed_across_purges_for_days(self, store: Store) -> None:
        """Cassandra carries the running ones into a new generation every hour (``purge_workflows``) and
        drops the old generations: a workflow that runs for days stays listed, one that finished goes."""
        for workflow_id in ("a", "b", "c"):
            await self.put_new(store, new(workflow_id))
        b = await store.workflows.get_workflow("b")
        assert b is not None
        ended = replace(b, status=COMPLETED, version=2, expires_at=NOW + 365 * DAY)
        assert await store.workflows.put_workflow(ended, 1)
        for hour in range(1, 30, 3):
            await store.workflows.purge_workflows(NOW + hour * 3600 * SECOND)
            assert [w.id for w in await store.workflows.list_workflows(RUNNING, "", 10)] == ["a", "c"]
        assert [w.id for w in await store.workflows.list_workflows("", "", 10)] == ["a", "b", "c"]
