"""The console's workflows filtered by search attributes, in a real headless Chromium against a real
``querator serve`` (docs/console.md, "Workflows" and "One workflow"; docs/durable.md, "Search
attributes"; issue 41): a typed filter lists only the runs that hold every condition, is kept in the
hash, pages with the filter applied, and a bad one shows its refusal; one run shows its attributes,
markup and quotes as text. The console parses a condition by the CLI's rule, pinned here by that rule's
own cases (tests/unit/wire/test_search.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from playwright.async_api import Browser, Page, expect

from querator.client import AsyncClient
from querator.errors import InvalidOption
from querator.wire.search import parse_search_condition
from tests.integration import durable_app as wf
from tests.unit.wire.test_search import CONDITIONS

from .browser import browser, screenshot_path
from .conftest import ServerProcess
from .test_console import _page
from .test_durable import client, server

__all__ = ["browser", "client", "server"]  # fixtures, for pytest

pytestmark = pytest.mark.integration

MATCHING = [f"m-{i:02d}" for i in range(52)]
"""More than a page (50) of runs that hold the filter's conditions."""
ODD_VALUE = '<b>"q"</b>&\'<img/src=x/onerror=alert(1)>é✓'
"""A value that looks like markup, with quotes and unicode (no whitespace: the filter could not hold it)."""
REFUSED_KEY = (
    "search attributes are invalid; key '{}' is not a letter or '_' followed by letters, digits, '_', "
    "'.' or '-', at most 64 characters"
)


async def _start(workflow_id: str, attributes: dict[str, Any]) -> None:
    # Nobody runs them: their first attributes are the start's, listed while they wait for a worker.
    await wf.app.start(wf.waits_forever, workflow_id, workflow_id=workflow_id, search_attributes=attributes)


async def _filter(page: Page, text: str) -> None:
    await page.get_by_label("Search attributes").fill(text)
    await page.get_by_label("Search attributes").press("Enter")


async def test_runs_filtered_by_search_attributes_paged_and_shown_as_text(
    browser: Browser, server: ServerProcess, client: AsyncClient
) -> None:
    await asyncio.gather(*(_start(w, {"customer": "c-1", "amount": 30}) for w in MATCHING))
    await _start("m-25-other", {"customer": "c-2", "amount": 30})
    await _start("m-99", {"customer": "c-1", "amount": 31})
    await _start("odd", {"note": ODD_VALUE, "customer": "c-1"})

    page, problems = await _page(browser, server)
    await page.goto(server.url + "/ui/#/workflows")
    ids = page.locator("#workflows-table tbody th")
    await expect(ids).to_have_count(50)
    await _filter(page, " customer=c-1\tamount=30 ")
    await expect(ids).to_have_text(MATCHING[:50])
    assert page.url.endswith("#/workflows/any//customer%3Dc-1%09amount%3D30")
    # The next page is of the filter too: neither m-99 nor odd, which sort after.
    await page.get_by_role("button", name="Next →").click()
    await expect(ids).to_have_text(MATCHING[50:])
    # A status chosen keeps the filter; a reload or a shared link shows it.
    await page.get_by_label("Status").select_option("running")
    assert page.url.endswith("#/workflows/running//customer%3Dc-1%09amount%3D30")
    await page.reload()
    await expect(page.get_by_label("Search attributes")).to_have_value("customer=c-1\tamount=30")
    await expect(ids).to_have_text(MATCHING[:50])

    # The odd value found by typing it; its run shows its attributes as text, and links to the filter.
    await _filter(page, f"note={ODD_VALUE}")
    await expect(ids).to_have_text(["odd"])
    await ids.get_by_role("link").click()
    attributes = page.locator("#workflow-search li")
    await expect(attributes).to_have_text(["customer = c-1", f"note = {ODD_VALUE}"])
    await expect(page.locator("#main img, #main b")).to_have_count(0)
    await page.screenshot(path=screenshot_path("workflow-search"), full_page=True)
    await page.locator('#workflow-search li[data-key="note"] a').click()
    await expect(ids).to_have_text(["odd"])
    await expect(page.get_by_label("Search attributes")).to_have_value(f"note={ODD_VALUE}")
    await page.goto(server.url + "/ui/#/workflow/m-99")
    await expect(attributes).to_have_text(["amount = 31", "customer = c-1"])

    # Refused, as the server says (keys that look like markup are text) or as the CLI's rule does; the
    # page keeps its filter to correct.
    await page.goto(server.url + "/ui/#/workflows")
    for typed, refusal in [
        ("customer=c-1 1bad=x", REFUSED_KEY.format("1bad")),
        ("<b>=1", REFUSED_KEY.format("<b>")),
        ("customer=c-1 oops", 'search attributes are invalid; "oops" is not KEY=VALUE'),
    ]:
        await _filter(page, typed)
        await expect(page.locator("#main [role=alert]")).to_have_text(refusal)
        await expect(page.get_by_label("Search attributes")).to_have_value(typed)
    await expect(page.locator("#main b")).to_have_count(0)
    await _filter(page, "customer=c-2")
    await expect(ids).to_have_text(["m-25-other"])
    await expect(page.locator("#main [role=alert]")).to_have_count(0)
    await page.screenshot(path=screenshot_path("workflows-search"), full_page=True)
    # The server's two refusals, and nothing else (the third never left the browser).
    assert (
        problems == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"] * 2
    )


async def test_the_console_parses_a_condition_by_the_clis_rule(
    browser: Browser, server: ServerProcess
) -> None:
    """search.js's copy of ``parse_search_condition`` gives what it gives, refusal word for word; the
    filter splits at ASCII whitespace, the last of a key given twice counts, ``__proto__`` is a key."""
    page, problems = await _page(browser, server)
    texts = [c.text for c in CONDITIONS]
    filters = ["", "  customer=c-1\tamount=30\n", "a=1 a=2", "__proto__=x", "a=1\u00a0b=2", "a=1 b"]
    got = await page.evaluate(
        """async ([texts, filters]) => {
          const search = await import("/ui/search.js");
          const attempt = (f) => { try { return { ok: f() }; } catch (e) { return { refusal: e.message }; } };
          return JSON.stringify({
            conditions: texts.map((t) => attempt(() => search.parseSearchCondition(t))),
            filters: filters.map((t) => attempt(() => search.parseSearchFilter(t))),
          });
        }""",
        [texts, filters],
    )
    decoded = msgspec.json.decode(got)
    assert decoded["conditions"] == [_python(t) for t in texts]
    assert decoded["filters"] == [
        {"ok": {}},
        {"ok": {"customer": "c-1", "amount": "30"}},
        {"ok": {"a": "2"}},
        {"ok": {"__proto__": "x"}},
        {"ok": {"a": "1\u00a0b=2"}},
        {"refusal": 'search attributes are invalid; "b" is not KEY=VALUE'},
    ]
    assert problems == []


def _python(text: str) -> dict[str, Any]:
    try:
        return {"ok": list(parse_search_condition(text))}
    except InvalidOption as e:
        return {"refusal": e.message}
