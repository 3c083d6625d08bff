"""The console's workflows and schedules pages in a real headless Chromium (docs/console.md): against a
real ``querator serve`` and a real ``querator worker`` running tests/integration/durable_app.py,
workflows are listed by status, one's journal is shown as a timeline, a waiting one gets its signal from
the console and completes, another is cancelled from the console; a schedule is created (a bad cron is
refused with the server's message), shows its next tick, and is paused, resumed and deleted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from querator.client import AsyncClient
from querator.durable import WorkflowHandle
from querator.errors import InvalidOption
from querator.wire import messages as m
from tests.integration import durable_app as wf

from .browser import browser, screenshot_path
from .conftest import ServerProcess, Servers, WorkerProcesses, eventually
from .test_console import _accept_dialogs, _page
from .test_durable import client, server

__all__ = ["browser", "client", "server"]  # fixtures, for pytest (the node and client of test_durable.py)

pytestmark = pytest.mark.integration

DEADLINE_S = 30.0


@pytest.fixture
def worker(server: ServerProcess, tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(
        server, tmp_path / "records", "tests.integration.durable_app:app", "DURABLE_RECORDS"
    ) as workers:
        workers.start()
        yield workers


async def _waiting_for_signal(client: AsyncClient, workflow_id: str) -> bool:
    try:
        entries = (await client.workflow_info(workflow_id)).entries
    except InvalidOption:  # a child its parent has not started yet
        return False
    return any(e.kind == "signal" and e.state == "pending" for e in entries)


async def test_workflows_listed_signalled_and_cancelled(
    browser: Browser, server: ServerProcess, worker: WorkerProcesses, client: AsyncClient
) -> None:
    done = await wf.app.start(wf.three_steps, "d", workflow_id="order-1041")
    assert await done.result(timeout=DEADLINE_S) == [3, 13, 113]
    family = await wf.app.start(wf.parent, "p", workflow_id="family")
    assert await family.result(timeout=DEADLINE_S) == {"child": [3, 13, 113]}
    approved = await wf.app.start(wf.approved_order, "a", workflow_id="order-1042")
    await wf.app.start(wf.waits_forever, "w", workflow_id="stuck")
    await eventually(lambda: _waiting_for_signal(client, "order-1042"), DEADLINE_S, "order-1042 waits")
    await eventually(lambda: _waiting_for_signal(client, "stuck/2"), DEADLINE_S, "stuck's child waits")

    page, problems = await _page(browser, server)
    questions: list[str] = []
    _accept_dialogs(page, questions)
    await _listed_by_status(page)
    await _journal_result_and_family(page)
    await _signal_from_the_console(page, server, approved)
    await _cancel_from_the_console(page, server, client, questions)
    await _terminate_from_the_console(page, server, questions)
    await _resume_from_the_console(page, server, client, questions)
    assert problems == []


async def _resume_from_the_console(
    page: Page, server: ServerProcess, client: AsyncClient, questions: list[str]
) -> None:
    """A workflow failed on non-determinism offers "Resume…"; it runs again (issue 46)."""
    await client.start_workflow("broken", "no-such-code", "durable")
    fence = (await client.claim_workflow("broken")).workflow.fence
    failing = m.WorkflowsAppendRequest(
        workflow_id="broken", fence=fence, then="fail", error="NonDeterminism: changed", resumable=True
    )
    await client.append_workflow(failing)
    await page.goto(server.url + "/ui/#/workflow/broken")
    await expect(page.locator("#workflow-status")).to_have_text("failed")
    await page.get_by_role("button", name="Resume…").click()
    await expect(page.locator("#workflow-status")).to_have_text("running")
    await expect(page.get_by_role("button", name="Resume…")).to_be_hidden()
    assert questions[-1].startswith("Resume workflow 'broken'?")
    await client.terminate_workflow("broken")  # no worker has its code


async def _terminate_from_the_console(page: Page, server: ServerProcess, questions: list[str]) -> None:
    """Terminated from the console, after a confirmation: it ends failed at once, no worker involved."""
    await wf.app.start(wf.waits_forever, "t", workflow_id="doomed")
    await page.goto(server.url + "/ui/#/workflow/doomed")
    await expect(page.locator("#workflow-status")).to_have_text("running")
    await page.get_by_role("button", name="Terminate…").click()
    await expect(page.locator("#workflow-status")).to_have_text("failed")
    await expect(page.locator("#workflow-error")).to_contain_text("Terminated: terminated from the console")
    assert questions[-1].startswith("Terminate workflow 'doomed' now? No worker runs")


async def _listed_by_status(page: Page) -> None:
    await page.get_by_role("navigation").get_by_role("link", name="Workflows").click()
    ids = page.locator("#workflows-table tbody th")
    await expect(ids).to_have_text(["family", "family/1", "order-1041", "order-1042", "stuck", "stuck/2"])
    await expect(page.locator('#workflows-table tr[data-id="stuck/2"] a').last).to_have_text("stuck")
    await page.screenshot(path=screenshot_path("workflows"), full_page=True)
    # Paging from the last id: nothing after stuck/2.
    await page.get_by_role("button", name="Next →").click()
    await expect(page.locator("#workflows-table tbody")).to_have_text("No more workflows.")
    await page.get_by_role("button", name="← Previous").click()
    await expect(ids).to_have_count(6)
    await page.get_by_label("Status").select_option("running")
    await expect(ids).to_have_text(["order-1042", "stuck", "stuck/2"])
    await page.get_by_label("Status").select_option("completed")
    await expect(ids).to_have_text(["family", "family/1", "order-1041"])


async def _journal_result_and_family(page: Page) -> None:
    """A finished one: its journal by seq, its result, its child and back to its parent."""
    await page.locator("#workflows-table tbody th a", has_text="family").first.click()
    await expect(page.locator("#workflow-status")).to_have_text("completed")
    await expect(page.locator("#journal li")).to_have_count(1)
    await expect(page.locator('#journal li[data-seq="1"]')).to_contain_text("child")
    await page.locator("#workflow-children a").click()
    await expect(page.locator("h1")).to_have_text("family/1")
    await expect(page.locator("#journal li .entry-head strong")).to_have_text([wf.add.name] * 3)
    await expect(page.locator("#workflow-result")).to_contain_text("113")
    await page.locator("#workflow-parent").click()
    await expect(page.locator("h1")).to_have_text("family")


async def _signal_from_the_console(page: Page, server: ServerProcess, approved: WorkflowHandle) -> None:
    """The one waiting for a signal: its timeline, then the signal sent from the console completes it."""
    await page.goto(server.url + "/ui/#/workflow/order-1042")
    entries = page.locator("#journal li")
    await expect(entries).to_have_count(2)
    await expect(entries.nth(0)).to_have_attribute("data-state", "done")
    await expect(entries.nth(0).locator("pre")).to_have_text("42")
    await expect(entries.nth(1)).to_have_attribute("data-kind", "signal")
    await expect(entries.nth(1)).to_have_attribute("data-state", "pending")
    # By keyboard alone: open the form, type, Tab to the next field and to the button.
    await page.get_by_role("button", name="Send signal…").focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_label("Signal name")).to_be_focused()
    await page.keyboard.type("approval")
    await page.keyboard.press("Tab")
    await page.keyboard.type("{not json")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Send signal", exact=True)).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#signal-form [role=alert]")).to_contain_text("payload is not JSON; ")
    await page.get_by_label("Payload (JSON)").fill('{"approved": true, "by": "console"}')
    await page.screenshot(path=screenshot_path("workflow"), full_page=True)
    await page.get_by_role("button", name="Send signal", exact=True).click()
    await expect(page.locator("#workflow-status")).to_have_text("completed")
    decision = {"approved": True, "by": "console"}
    assert await approved.result(timeout=DEADLINE_S) == {"total": 42, "decision": decision}
    await expect(entries).to_have_count(3)
    await expect(page.locator("#signals-table tbody td").nth(1)).to_have_text("approval")
    await expect(page.locator("#signals-table tbody td").nth(3)).to_have_text("#2")
    await expect(page.locator("#workflow-result")).to_contain_text('"decision"')
    await expect(page.get_by_role("button", name="Cancel workflow…")).to_be_hidden()
    await page.emulate_media(color_scheme="dark")
    await page.screenshot(path=screenshot_path("workflow-dark"), full_page=True)
    await page.emulate_media(color_scheme="light")


async def _cancel_from_the_console(
    page: Page, server: ServerProcess, client: AsyncClient, questions: list[str]
) -> None:
    """Cancelled from the console, after a confirmation: it and its child end cancelled."""
    await page.goto(server.url + "/ui/#/workflow/stuck")
    await expect(page.locator("#workflow-status")).to_have_text("running")
    await page.get_by_role("button", name="Cancel workflow…").click()
    await expect(page.locator("#workflow-status")).to_have_text("cancelled")
    await expect(page.locator("#workflow-error")).to_be_visible()
    assert questions == ["Cancel workflow 'stuck'? Its compensations run and its children are cancelled."]

    async def child_cancelled() -> bool:
        return (await client.workflow_info("stuck/2")).status == "cancelled"

    await eventually(child_cancelled, DEADLINE_S, "the child is cancelled")
    await page.get_by_role("navigation").get_by_role("link", name="Workflows").click()
    await page.get_by_label("Status").select_option("cancelled")
    await expect(page.locator("#workflows-table tbody th")).to_have_text(["stuck", "stuck/2"])


def _iso(instant: datetime | None) -> str:
    """A time as the page's <time datetime> writes it (ISO in UTC, milliseconds, Z)."""
    assert instant is not None
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


async def test_schedules_created_paused_resumed_and_deleted(browser: Browser, servers: Servers) -> None:
    server = await servers.astart("--storage", "memory")
    async with AsyncClient(server.url) as client:
        await client.create_queue("reports")
        await client.create_schedule("hourly", "0 * * * *", "reports")
        page, problems = await _page(browser, server)
        questions: list[str] = []
        _accept_dialogs(page, questions)
        await page.get_by_role("navigation").get_by_role("link", name="Schedules").click()
        await expect(page.locator("#schedules-table tbody th")).to_have_text(["hourly"])

        # A bad cron comes back as the server's 400 message; corrected, the schedule is created.
        await page.get_by_role("button", name="New schedule…").click()
        await page.get_by_label("Name").fill("nightly")
        await page.get_by_label("Cron").fill("61 2 * * *")
        await page.get_by_label("Time zone").fill("Europe/Berlin")
        await page.get_by_label("Queue").fill("reports")
        await page.get_by_label("Item kind").fill("report")
        await page.get_by_role("button", name="Create", exact=True).click()
        await expect(page.locator("#schedule-form [role=alert]")).to_have_text(
            "cron is invalid; '61 2 * * *': Bad minute"
        )
        await page.get_by_label("Cron").fill("30 2 * * *")
        await page.get_by_role("button", name="Create", exact=True).click()
        row = page.locator('#schedules-table tr[data-schedule="nightly"]')
        await expect(row).to_contain_text("30 2 * * *")
        await expect(row).to_contain_text("Europe/Berlin")
        info = await client.schedule_info("nightly")
        assert (info.kind, info.time_zone, info.paused) == ("report", "Europe/Berlin", False)
        next_tick = row.locator('td[data-col="next"] time')
        await expect(next_tick).to_have_attribute("datetime", _iso(info.next_tick))
        await expect(next_tick).to_contain_text("in ")
        await expect(row.locator('td[data-col="owner"]')).to_have_text(info.owner)
        await page.screenshot(path=screenshot_path("schedules"), full_page=True)

        await page.get_by_role("button", name="Pause nightly").click()
        await expect(row.locator('td[data-col="state"]')).to_have_text("paused")
        await expect(row.locator('td[data-col="next"]')).to_have_text("—")
        assert (await client.schedule_info("nightly")).paused
        await page.get_by_role("button", name="Resume nightly").click()
        await expect(row.locator('td[data-col="state"]')).to_have_text("active")
        await expect(next_tick).to_be_visible()
        assert not (await client.schedule_info("nightly")).paused
        await page.get_by_role("button", name="Delete nightly").click()
        await expect(row).to_have_count(0)
        assert questions == ["Delete schedule 'nightly'? Its ticks stop; the items it produced stay."]
        assert [s.name for s in (await client.list_schedules()).items] == ["hourly"]
    # The only error on the page is the refused cron's 400.
    assert problems == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
