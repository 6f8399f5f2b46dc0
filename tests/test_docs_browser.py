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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The docs site, built as `make docs` builds it, served on a loopback port."""
    import functools
    import http.server
    import subprocess
    import sys
    import threading
    from pathlib import Path

    from test_docs import ROOT, child_env

    try:
        import mkdocs  # noqa: F401
    except ImportError as e:
        from conftest import need_service

        need_service("the docs toolchain", f"{e}; pip install 'tidelog[docs]'")
    built = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(built)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(Path(built)))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_home_page_diagram_renders_offline(site, page):
    """The Mermaid diagram renders as SVG from the site's own script: every
    request to another host is refused, as on a machine without a network."""
    elsewhere: list[str] = []

    def only_the_site(route):
        if route.request.url.startswith(site):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_site)
    # The theme draws each diagram in a closed shadow root: open it, for the test to look in.
    page.add_init_script(
        "const attach = Element.prototype.attachShadow;"
        "Element.prototype.attachShadow = function (init) { return attach.call(this, {...init, mode: 'open'}); };"
    )
    try:
        page.goto(site + "/")
        page.wait_for_selector(".mermaid svg", state="attached", timeout=20_000)
        assert "partition 0" in page.locator(".mermaid svg").first.text_content()
        assert not [u for u in elsewhere if "mermaid" in u], elsewhere
    finally:
        page.unroute("**/*")
