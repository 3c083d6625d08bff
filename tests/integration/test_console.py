"""The web console in a real headless Chromium against a real ``querator serve`` (docs/console.md):
queues are created from the console, their counts follow produce and lease, items that died are
redriven and retried from the dead-letter page, and an API key is asked for and kept out of URLs.
Each page is screenshotted (``tests/integration/browser.py``)."""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from playwright.async_api import Browser, Dialog, Page, expect

from querator.auth import generate_key, key_hash
from querator.client import AsyncClient

from .browser import DESKTOP, PHONE, SCREENSHOTS, WAIT_MS, browser, screenshot_path
from .conftest import ServerProcess, Servers, eventually

__all__ = ["browser"]  # the fixture, for pytest

pytestmark = pytest.mark.integration

PAYLOADS: list[str | bytes] = ['{"order": 1}', '{"order": 2}', "plain text", b"\x00\x01binary"]


async def _page(browser: Browser, server: ServerProcess, **options: object) -> tuple[Page, list[str]]:
    """A page on the console; the list collects the page's script errors and failed requests."""
    page = await browser.new_page(viewport=DESKTOP, **options)  # type: ignore[arg-type]
    page.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    await page.goto(server.url + "/ui/")
    return page, problems


def _accept_dialogs(page: Page, questions: list[str]) -> None:
    """Confirms every confirmation the console asks for, keeping its question."""

    async def accept(dialog: Dialog) -> None:
        questions.append(dialog.message)
        await dialog.accept()

    page.on("dialog", accept)


def _cell(page: Page, queue: str, column: str) -> object:
    return page.locator(f'#queues-table tr[data-queue="{queue}"] td[data-col="{column}"]')


async def _create_queue(page: Page, name: str, fill: Callable[[Page], object] | None = None) -> None:
    await page.get_by_role("button", name="New queue…").click()
    await page.get_by_label("Name", exact=True).fill(name)
    if fill is not None:
        await fill(page)  # type: ignore[misc]
    await page.get_by_role("button", name="Create…").click()
    await expect(page.locator(f'#queues-table tr[data-queue="{name}"]')).to_be_visible()


async def test_queues_counts_dead_letters_and_redrive(browser: Browser, servers: Servers) -> None:
    server = await servers.astart("--storage", "memory")
    page, problems = await _page(browser, server)
    questions: list[str] = []
    _accept_dialogs(page, questions)
    await _create_queues(page, server, questions)
    await _watch_counts(page, server)
    await _dead_letters_go_back(page, server, questions)
    await _screenshots(page, server)
    assert problems == []


async def _create_queues(page: Page, server: ServerProcess, questions: list[str]) -> None:
    """Queues are created from the console, each after a confirmation."""
    await _create_queue(page, "jobs-dead")

    async def jobs_settings(p: Page) -> None:
        await p.get_by_label("Partitions").fill("2")
        await p.get_by_label("Lease timeout").fill("10s")
        await p.get_by_label("Max attempts (0: no limit)").fill("1")
        await p.get_by_label("Dead-letter queue").fill("jobs-dead")

    await _create_queue(page, "jobs", jobs_settings)
    assert questions == [
        "Create queue 'jobs-dead' with 1 partition(s)?",
        "Create queue 'jobs' with 2 partition(s)?",
    ]
    async with AsyncClient(server.url) as client:
        info = await client.queue_info("jobs")
        assert (info.dead_queue, info.max_attempts, info.lease_timeout) == ("jobs-dead", 1, "10s")


async def _watch_counts(page: Page, server: ServerProcess) -> None:
    """The counts follow produce and lease as the page refreshes itself."""
    async with AsyncClient(server.url) as client:
        await client.produce("jobs", PAYLOADS)
        await expect(_cell(page, "jobs", "queued")).to_have_text("4")
        await page.screenshot(path=screenshot_path("queues"))
        leased = 0
        while leased < 4:  # a lease takes from one partition at a time
            leased += len((await client.lease("jobs", batch_size=4, request_timeout="5s")).items)
        await page.get_by_role("button", name="Refresh now").click()  # well before the leases expire
        await expect(_cell(page, "jobs", "leased")).to_have_text("4")
        await expect(_cell(page, "jobs", "queued")).to_have_text("0")
    # One queue: partitions with their owner.
    await page.get_by_role("link", name="jobs", exact=True).click()
    await expect(page.locator("#partitions-table tbody tr")).to_have_count(2)
    await expect(page.locator('#partitions-table td[data-col="owner"]').first).to_have_text("local")


async def _dead_letters_go_back(page: Page, server: ServerProcess, questions: list[str]) -> None:
    """The leases expire and, with one attempt allowed, the items die into jobs-dead; from the dead
    letters page one is retried and the rest redriven, and jobs holds the four again."""
    async with AsyncClient(server.url) as client:

        async def all_dead() -> bool:
            return len((await client.list_items("jobs-dead", 0)).items) == 4

        await eventually(all_dead, 2 * WAIT_MS / 1000, "the items are in jobs-dead")
    await page.get_by_role("link", name="Dead letters").click()
    rows = page.locator("#dead-table tbody tr[data-id]")
    await expect(rows).to_have_count(4)
    # Why each died: its lease ran out on its one attempt (issue 45: dead letters carried no reason).
    await expect(rows.first.locator("td.failure")).to_have_text("lease expired")
    await page.locator("#dead-table button.linkish").first.click()
    await expect(page.locator("#item-detail pre.payload")).to_contain_text('"order"')
    await expect(page.locator("#item-failures li")).to_have_count(1)
    await expect(page.locator("#item-failures li p")).to_have_text(
        re.compile(r"Attempt 1 · .*\d{4}-\d\d-\d\d")
    )
    await expect(page.locator("#item-failures li pre")).to_have_text("lease expired")
    await page.screenshot(path=screenshot_path("dead-letters"), full_page=True)

    first = await rows.first.get_attribute("data-id")
    await page.get_by_role("button", name=f"Retry {first}").click()
    await expect(rows).to_have_count(3)
    await page.get_by_role("button", name="Redrive all to jobs…").click()
    await expect(page.locator("#status")).to_have_text("3 item(s) moved to jobs.")
    await expect(rows).to_have_count(0)
    assert questions[2:] == [
        f"Put item {first} back in 'jobs'?",
        "Move every queued item of 'jobs-dead' back to 'jobs'?",
    ]
    async with AsyncClient(server.url) as client:
        stats = await client.stats("jobs")
        parts = [p for lq in stats.logical_queues for p in lq.partitions]
        assert sum(p.total for p in parts) == 4 and sum(p.total_leased for p in parts) == 0
        payloads: set[bytes] = set()
        for partition in range(2):
            payloads |= {i.payload for i in (await client.list_items("jobs", partition)).items}
        assert payloads == {p if isinstance(p, bytes) else p.encode() for p in PAYLOADS}
        assert (await client.list_items("jobs-dead", 0)).items == []
    # Back on the queues page, the items are queued again.
    await page.get_by_role("link", name="Queues", exact=True).first.click()
    await expect(_cell(page, "jobs", "queued")).to_have_text("4")


async def _screenshots(page: Page, server: ServerProcess) -> None:
    """The queue page with an item open, in light and dark, and the queues page on a phone."""
    await page.goto(server.url + "/ui/#/queue/jobs")
    await page.locator("#items-table button.linkish").first.click()
    await expect(page.locator("#item-detail")).to_be_visible()
    await page.screenshot(path=screenshot_path("queue"), full_page=True)
    await page.emulate_media(color_scheme="dark")
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=screenshot_path("queue-dark"))
    await page.emulate_media(color_scheme="light")
    await page.set_viewport_size(PHONE)
    await page.goto(server.url + "/ui/#/queues")
    await expect(_cell(page, "jobs", "queued")).to_have_text("4")
    await page.screenshot(path=screenshot_path("queues-phone"))


async def test_sort_filter_and_keyboard(browser: Browser, servers: Servers) -> None:
    server = await servers.astart("--storage", "memory")
    async with AsyncClient(server.url) as client:
        for name, items in (("alpha", 1), ("beta", 3), ("gamma", 2)):
            await client.create_queue(name)
            await client.produce(name, ["x"] * items)
    page, problems = await _page(browser, server)
    rows = page.locator("#queues-table tbody tr")
    await expect(rows).to_have_count(3)
    await page.get_by_role("button", name="Queued").click()
    await expect(page.locator("#queues-table tbody th")).to_have_text(["alpha", "gamma", "beta"])
    await page.get_by_role("button", name="Queued ▲").click()
    await expect(page.locator("#queues-table tbody th")).to_have_text(["beta", "gamma", "alpha"])
    await page.get_by_label("Filter").fill("mm")
    await expect(page.locator("#queues-table tbody th")).to_have_text(["gamma"])
    # The keyboard alone reaches the queue: Tab to its link, Enter to follow it.
    await page.get_by_label("Filter").fill("")
    link = page.locator("#queues-table tbody th a").first
    await link.focus()
    # A live refresh redraws the table and leaves the focus where it was.
    loaded = await page.locator("#main").get_attribute("data-loaded")
    await expect(page.locator("#main")).not_to_have_attribute("data-loaded", loaded or "")
    await expect(link).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("h1")).to_have_text("beta")
    assert problems == []


async def test_an_api_key_is_asked_for_and_never_in_a_url(browser: Browser, servers: Servers) -> None:
    key = generate_key("console")
    server = await servers.astart("--storage", "memory", "--api-keys", key_hash(key))
    page, problems = await _page(browser, server)
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    await expect(page.get_by_role("heading", name="API key")).to_be_visible()
    await page.screenshot(path=screenshot_path("api-key"))
    await page.get_by_label("Key").fill(generate_key("wrong"))
    await page.get_by_role("button", name="Use this key").click()
    await expect(page.locator(".key-form [role=alert]")).to_have_text("api key does not exist")
    await page.get_by_label("Key").fill(key)
    await page.get_by_role("button", name="Use this key").click()
    await expect(page.locator("#queues-summary")).to_contain_text("0 of 0 queues")
    async with AsyncClient(server.url, api_key=key) as client:
        await client.create_queue("secret-jobs")
    await expect(page.locator('#queues-table tr[data-queue="secret-jobs"]')).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('querator.apiKey')") == key
    assert urls and not any(key in url for url in urls)
    await page.get_by_role("button", name="Forget API key").click()
    await expect(page.get_by_role("heading", name="API key")).to_be_visible()
    assert key not in server.stderr()
    # Only the wrong key's refusals are errors on the page.
    assert all("401" in p for p in problems), problems


async def test_a_node_with_tenancy_asks_for_a_key(browser: Browser, servers: Servers) -> None:
    """With tenancy a call without a key is the anonymous user's, refused 403 (docs/tenancy.md): the
    console asks for a key instead of showing the refusal (a key's own 403 is shown as it is:
    test_console_workflow_runs.py)."""
    admin_key = generate_key("admin")
    server = await servers.astart("--storage", "memory", "--tenancy", "on", "--api-keys", key_hash(admin_key))
    page, problems = await _page(browser, server)
    await expect(page.get_by_role("heading", name="API key")).to_be_visible()
    await page.get_by_label("Key").fill(admin_key)
    await page.get_by_role("button", name="Use this key").click()
    await expect(page.locator("#queues-summary")).to_contain_text("0 of 0 queues")
    assert problems and all("403" in p for p in problems), problems


async def test_a_thousand_queues(browser: Browser, servers: Servers) -> None:
    """Renders 1,000 queues; the time is recorded (docs/console.md), not asserted."""
    server = await servers.astart("--storage", "memory")
    async with AsyncClient(server.url) as client:
        for start in range(0, 1000, 50):
            await asyncio.gather(*(client.create_queue(f"queue-{n:04}") for n in range(start, start + 50)))
    page, problems = await _page(browser, server)
    await expect(page.locator("#queues-table tbody tr")).to_have_count(1000)
    render_ms = await page.locator("#main").get_attribute("data-render-ms")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "thousand-queues.txt").write_text(f"queues page, 1000 queues: {render_ms} ms\n")
    assert problems == []


async def test_the_admin_address_serves_the_console(browser: Browser, servers: Servers) -> None:
    from .conftest import free_port

    admin_port = free_port()
    api = await servers.astart("--storage", "memory", "--admin-address", f"127.0.0.1:{admin_port}")
    admin = ServerProcess(api.proc, admin_port, api.stdout_path, api.stderr_path, api.cwd)

    async def ready() -> bool:
        return admin.healthy()

    await eventually(ready, 10, "the admin address answers")
    async with AsyncClient(api.url) as client:
        await client.create_queue("via-admin")
    page, problems = await _page(browser, admin)
    await expect(page.locator('#queues-table tr[data-queue="via-admin"]')).to_be_visible()
    assert problems == []


async def test_no_ui_turns_it_off(servers: Servers) -> None:
    server = await servers.astart("--storage", "memory", "--no-ui")
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(urllib.request.urlopen, server.url + "/ui/")
    refused.value.close()
    assert refused.value.code == 400  # any GET but the probes: "only POST"
    assert "console at" not in server.stderr()


async def test_items_page_on_past_a_page_that_ended_early(browser: Browser, servers: Servers) -> None:
    """items.list ends a page at 4 MiB of payloads, however many items were asked for: a short page is
    not the last one. Next was disabled on any page shorter than the console's page size before, and
    the items after the first 4 MiB could not be reached."""
    server = await servers.astart("--storage", "memory")
    async with AsyncClient(server.url) as client:
        await client.create_queue("big")
        for n in range(7):
            await client.produce("big", [bytes([n]) * 700_000])  # 6 would pass 4 MiB: a page of 5
    page, problems = await _page(browser, server)
    await page.goto(server.url + "/ui/#/queue/big")
    rows = page.locator("#items-table tbody tr[data-id]")
    await expect(rows).to_have_count(5)
    next_page = page.get_by_role("button", name="Next →")
    await expect(next_page).to_be_enabled()
    await next_page.click()
    await expect(rows).to_have_count(2)
    await next_page.click()
    await expect(rows).to_have_count(0)
    await expect(next_page).to_be_disabled()
    assert problems == []
