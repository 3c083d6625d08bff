"""The console's views of durable runs by app version, and its actions on one run, in a real headless
Chromium against a real ``querator serve`` and real ``querator worker`` processes running
tests/integration/durable_app.py (docs/console.md, "Workflows" and "One workflow"; issue 41): runs listed,
filtered and counted per app version, a version draining; one run's version, priority and timeout; a
run forked from a step of its timeline; a read-only key shown the API's refusal; ids and versions that
look like HTML shown as text."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from playwright.async_api import Browser, Page, expect

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient
from tests.integration import durable_app as wf

from .browser import browser, screenshot_path
from .conftest import ServerProcess, Servers, WorkerProcesses, eventually
from .test_console import _accept_dialogs, _page
from .test_console_durable import DEADLINE_S, _iso, _waiting_for_signal, worker
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


async def test_a_run_shows_its_version_priority_and_timeout_and_forks_from_a_step(
    browser: Browser,
    server: ServerProcess,
    worker: WorkerProcesses,
    client: AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A completed run forked from its step 3 from the timeline: the new run has steps 1 and 2 copied
    (not run again) and runs step 3 with a worker; a cut after a pending entry comes back as the 400."""
    monkeypatch.setattr(wf.app, "version", NEW)
    done = await wf.app.start(wf.three_steps, "f", workflow_id=ODD_ID, timeout="1h")
    assert await done.result(timeout=DEADLINE_S) == [3, 13, 113]
    # A high-priority run: on the app's level queue, which this test's workers do not poll.
    await client.create_queue("durable.high")  # (workers of an app with priorities make it)
    monkeypatch.setattr(wf.app, "priorities", True)
    await wf.app.start(wf.three_steps, "u", workflow_id="urgent", priority="high")
    monkeypatch.setattr(wf.app, "priorities", False)
    gathered = await wf.app.start(wf.fan_out, "g", 3, workflow_id="gathered")
    assert await gathered.result(timeout=DEADLINE_S) == 3

    page, problems = await _page(browser, server)
    questions: list[str] = []
    _accept_dialogs(page, questions)
    await page.goto(server.url + "/ui/#/workflow/urgent")
    await expect(page.locator("#workflow-priority")).to_have_text("high")
    await expect(page.locator("#workflow-timeout")).to_have_text("none")
    await expect(page.locator("#workflow-version")).to_have_text(NEW)

    await page.goto(server.url + "/ui/#/workflows")
    await page.get_by_role("link", name=ODD_ID, exact=True).click()
    await expect(page.locator("h1")).to_have_text(ODD_ID)
    await expect(page.locator("#workflow-version")).to_have_text(NEW)
    await expect(page.locator("#workflow-priority")).to_have_text("normal")
    deadline = (await client.workflow_info(ODD_ID)).deadline
    await expect(page.locator("#workflow-timeout")).to_contain_text("1h0m0s · deadline in ")
    await expect(page.locator("#workflow-timeout time")).to_have_attribute("datetime", _iso(deadline))
    await expect(page.locator("#main img, #main b")).to_have_count(0)
    await expect(page.get_by_role("button", name="Restart from here (#", exact=False)).to_have_count(3)

    await page.get_by_role("button", name="Restart from here (#3)…").click()
    assert questions[-1].startswith(
        f"Start a new run of workflow '{ODD_ID}' from step #3? The entries before #3"
    )
    await expect(page.locator("#workflow-forked-from")).to_have_text(ODD_ID)
    new_id = page.url.rsplit("/", 1)[1]
    forked = await client.workflow_info(unquote(new_id))
    assert forked.forked_from == ODD_ID
    await expect(page.locator("#workflow-status")).to_have_text("completed")
    await expect(page.locator("#workflow-result")).to_contain_text("113")
    await expect(page.locator("#journal li .entry-head strong")).to_have_text([wf.add.name] * 3)
    # Steps 1 and 2 ran once, for the original; step 3 again, for the fork.
    assert sorted(r["key"] for r in worker.records_of() if r["key"].startswith("f-")) == [
        "f-1",
        "f-2",
        "f-3",
        "f-3",
    ]
    await page.screenshot(path=screenshot_path("workflow-fork"), full_page=True)
    await page.locator("#workflow-forked-from").click()
    await expect(page.locator("h1")).to_have_text(ODD_ID)

    # From inside a gather (steps 1 to 3 awaited together): the server's 400 is shown, and no run starts.
    await page.goto(server.url + "/ui/#/workflow/gathered")
    await expect(page.locator("#journal li")).to_have_count(3)
    before = len(await client.list_workflows())
    await page.get_by_role("button", name="Restart from here (#2)…").click()
    await expect(page.locator("#main [role=alert]")).to_have_text(
        "from step is invalid; 2 is inside the gather that starts at seq 1"
    )
    await expect(page.locator("h1")).to_have_text("gathered")
    assert len(await client.list_workflows()) == before
    assert problems == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]


async def test_a_read_only_key_is_shown_the_apis_refusal(
    browser: Browser, servers: Servers, tmp_path: Path
) -> None:
    """A key whose role may list and read workflows only: the page shows the run, and each action
    comes back as the API's 403, changing nothing."""
    admin_key = generate_key("admin")
    server = await servers.astart("--storage", "sqlite", "--tenancy", "on", "--api-keys", key_hash(admin_key))
    records = tmp_path / "records"
    workers = WorkerProcesses(server, records, "tests.integration.durable_app:app", "DURABLE_RECORDS")
    try:
        workers.start(env={"QUERATOR_API_KEY": admin_key})
        async with AsyncClient(server.url, api_key=admin_key) as admin:
            await admin.create_role("_system", "Reader", ["queue.list", "queue.stats"])
            user_id = await admin.create_user("reader")
            await admin.create_role_binding("_system", "Reader", user_id)
            reader_key = (await admin.create_api_key(user_id)).key
            definition = wf.app.workflow_of(wf.waits_forever)
            encoding = wf.app.serializer.content_type
            await admin.start_workflow(
                "held", definition.name, "durable", definition.input(("h",), {}), encoding=encoding
            )
            await eventually(lambda: _waiting_for_signal(admin, "held/2"), DEADLINE_S, "held waits")

            page, problems = await _page(browser, server)
            questions: list[str] = []
            _accept_dialogs(page, questions)
            await page.goto(server.url + "/ui/#/workflow/held")
            await page.get_by_label("Key").fill(reader_key)
            await page.get_by_role("button", name="Use this key").click()
            await expect(page.locator("#journal li")).to_have_count(2)
            anonymous = len(problems)  # the anonymous user's refusals, before the key
            for n, button in enumerate(("Terminate…", "Restart from here (#2)…", "Restart…"), 1):
                await page.get_by_role("button", name=button, exact=True).click()

                async def refused(n: int = n) -> bool:
                    return len(problems) == anonymous + n

                await eventually(refused, DEADLINE_S, f"{button} refused")
                await expect(page.locator("#main [role=alert]")).to_have_text("access denied")
            await expect(page.locator("h1")).to_have_text("held")
            assert len(questions) == 3
            assert (await admin.workflow_info("held")).status == "running"
            assert [w.workflow_id for w in await admin.list_workflows()] == ["held", "held/2"]
        assert (
            problems[anonymous:]
            == ["Failed to load resource: the server responded with a status of 403 (Forbidden)"] * 3
        )
    finally:
        workers.close()
