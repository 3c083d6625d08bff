"""A real headless Chromium for the console's tests, driven by Playwright.

Chromium is Debian's, unpacked under ``.cache/chromium/`` by ``scripts/chromium.sh`` (``scripts/test``
runs it); Playwright's own browser download is not used. Without it the tests skip, unless ``CI`` is
set: then they fail, so nothing passes by accident. Screenshots go to ``.cache/console-screenshots/``
(docs/console.md says how the committed ones are refreshed).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.async_api import async_playwright, expect

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = ROOT / ".cache" / "chromium" / "chromium"
SCREENSHOTS = ROOT / ".cache" / "console-screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 20_000
"""How long an expectation on the page may take: the console refreshes every 3 to 5 seconds."""

expect.set_options(timeout=WAIT_MS)

if TYPE_CHECKING:
    from playwright.async_api import Browser


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """A headless Chromium of this test's own."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("no Chromium: run scripts/chromium.sh (scripts/test does)")
        pytest.skip("no Chromium (scripts/chromium.sh installs it)")
    async with async_playwright() as playwright:
        # No sandbox: the tests run as root, which Chromium's sandbox refuses.
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            await chromium.close()


def screenshot_path(name: str) -> str:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return str(SCREENSHOTS / f"{name}.png")
