"""The console's list of durable runs by app version, in a real headless
Chromium against a real ``querator serve`` and real ``querator worker`` processes running
tests/integration/durable_app.py (docs/console.md, "Workflows"; issue 41): runs listed, filtered and
counted per app version, a version draining; ids and versions that look like HTML shown as text."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from querator.client import AsyncClient
from tests.integration import durable_app as wf

from .browser import browser, screenshot_path
from .conftest import ServerProcess, WorkerProcesses, eventually
from .test_console import _page
from .test_console_durable import DEADLINE_S, _waiting_for_signal, worker
from .test_durable import client, server

__all__ = ["browser", "client", "server", "worker"]  # fixtures, for pytest

pytestmark = pytest.mark.integration

OLD = "2026-11-01"
NEW = "2026-11-29"
ODD_VERSION = "<img src=x onerror=alert(1)>&\"'"
ODD_ID = "<b>odd</b> & \"quoted\" 'id'"


async def _start_waiting(version: str, *workflow_ids: str) -> None:
    """Runs of ``version`` that wait for a signal (their child's) once a worker has run their first step."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wf.app, "version", version)
        for workflow_id in workflow_ids:
            await wf.app.start(wf.waits_forever, workflow_id, workflow_id=workflow_id)


async def _all_waiting(client: AsyncClient, *workflow_ids: str) -> None:
    async def waiting() -> bool:
        return all([await _waiting_for_signal(client, f"{w}/2") for w in workflow_ids])

    await eventually(waiting, DEADLINE_S, "every run waits")


async def _counts(page: Page, version: str, running: str, failed: str) -> None:
    row = page.locator(f"#versions-table tbody tr[data-version={_css_string(version)}]")
    await expect(row.locator('td[data-col="running"]')).to_have_text(running)
    await expect(row.locator('td[data-col="failed"]')).to_have_text(failed)


def _css_string(text: str) -> str:
    """``text`` as a CSS string (an attribute selector's value)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def test_runs_by_app_version_listed_filtered_and_counted(
    browser: Browser,
    server: ServerProcess,
    worker: WorkerProcesses,
    client: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker of no version runs every run; the console counts the running and failed runs of each
    version, lists one version's, and shows the old version draining as its runs end."""
    await _start_waiting(OLD, "old-1", "old-2", "old-3")
    await _start_waiting(NEW, "new-2")
    await _start_waiting(ODD_VERSION, ODD_ID)
    await _start_waiting("", "plain")
    monkeypatch.setattr(wf.app, "version", NEW)
    assert await (await wf.app.start(wf.three_steps, "n", workflow_id="new-1")).result(timeout=DEADLINE_S)
    await _all_waiting(client, "old-1", "old-2", "old-3", "new-2", ODD_ID, "plain")
    await client.terminate_workflow("old-3")

    page, problems = await _page(browser, server)
    await page.goto(server.url + "/ui/#/workflows/running")
    # Children have their parent's version: each waiting run's child is running too.
    await expect(page.locator("#versions-table tbody tr")).to_have_count(4)
    await expect(page.locator("#versions-table tbody th")).to_have_text(["none", OLD, NEW, ODD_VERSION])
    await _counts(page, "", "2", "0")
    await _counts(page, OLD, "4", "2")
    await _counts(page, NEW, "2", "0")
    await _counts(page, ODD_VERSION, "2", "0")
    versions = page.locator('#workflows-table td[data-col="version"]')
    await expect(
        page.locator(f'#workflows-table tr[data-id={_css_string(ODD_ID)}] td[data-col="version"]')
    ).to_have_text(ODD_VERSION)
    # Nothing of the odd id or version became an element: they are text.
    await expect(page.locator("#main img, #main b")).to_have_count(0)

    # Filtered by typing a version: the runs of that version, any status, and the filter is in the hash.
    await page.get_by_label("Status").select_option("")
    await page.get_by_label("App version", exact=True).fill(OLD)
    await page.get_by_label("App version", exact=True).press("Enter")
    ids = page.locator("#workflows-table tbody th")
    await expect(ids).to_have_text(["old-1", "old-1/2", "old-2", "old-2/2", "old-3", "old-3/2"])
    await expect(versions).to_have_text([OLD] * 6)
    assert page.url.endswith(f"#/workflows/any/{OLD}")
    await page.screenshot(path=screenshot_path("workflows-versions"), full_page=True)
    # The failed count of the new version's row leads to its failed runs; the odd version's to its own.
    await page.locator(f"#versions-table tbody tr[data-version={_css_string(ODD_VERSION)}] th a").click()
    await expect(ids).to_have_text([ODD_ID, f"{ODD_ID}/2"])
    await expect(page.get_by_label("App version", exact=True)).to_have_value(ODD_VERSION)
    await page.locator(f'#versions-table tbody tr[data-version="{OLD}"] td[data-col="failed"] a').click()
    await expect(ids).to_have_text(["old-3", "old-3/2"])
    await expect(page.get_by_label("Status")).to_have_value("failed")

    # The old version drains: its last running runs end, and its row says none run.
    await client.terminate_workflow("old-1")
    await client.cancel_workflow("old-2")
    await _counts(page, OLD, "0", "4")
    await expect(page.locator("#main img, #main b")).to_have_count(0)
    assert problems == []
