"""Headless Chromium for the browser tests (/docs, the console).

Playwright drives Debian's `chromium` package (`apt-get install chromium`;
`make test` installs it): the browser builds Playwright would download come
from a CDN a CI machine may not reach, so `playwright install` is never run.
A missing browser skips the tests on a laptop and fails them under CI.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conftest import need_service

# Where the tests write the pages' screenshots: a temporary folder, so that a run leaves
# the checkout as it found it (each run's pixels differ: times, rates, ids);
# TIDELOG_SCREENSHOTS=docs/screenshots refreshes the ones the README and the docs show.
SCREENSHOTS = Path(
    os.environ.get("TIDELOG_SCREENSHOTS") or Path(tempfile.gettempdir()) / "tidelog-screenshots"
)


def chromium_path() -> str | None:
    for candidate in (os.environ.get("TIDELOG_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's Browser), closed on exit."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        need_service("playwright", f"{e}; pip install 'tidelog[dev]'")
    path = chromium_path()
    if path is None:
        need_service("chromium", "apt-get install chromium (Debian's package)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    """Write the page's screenshot to SCREENSHOTS/NAME.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    return target
