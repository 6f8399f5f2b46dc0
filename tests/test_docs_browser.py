"""/docs in a real browser: Swagger UI renders the OpenAPI 3.1 document the
server emits, with its operations listed (not only a 200)."""

from __future__ import annotations

import pytest

from browser import chromium, screenshot


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tidelog.server.http.thread import ServerThread

    with ServerThread(str(tmp_path_factory.mktemp("docs") / "log.db"), clean_interval=0) as server:
        yield server


@pytest.fixture(scope="module")
def page():
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        yield page


def test_docs_render_the_operations(server, page):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}/docs")
    page.wait_for_selector(".opblock", timeout=15_000)
    text = page.inner_text("body")
    assert "Unable to render this definition" not in text
    assert "OAS 3.1" in text
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    # Every route group shows up: topics, records, groups, queues.
    for path in (
        "/v1/topics",
        "/v1/topics/{topic}/records",
        "/v1/groups/{group}/seek",
        "/v1/queues/{topic}/ack",
    ):
        assert any(p.replace("\u200b", "") == path for p in paths), path
    methods = set(page.locator(".opblock-summary-method").all_inner_texts())
    assert {"GET", "POST", "DELETE"} <= methods
    assert errors == []
    screenshot(page, "docs")
