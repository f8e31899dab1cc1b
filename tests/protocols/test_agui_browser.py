"""A page of ours built on @ag-ui/client (bundled by esbuild, offline), served from another origin the service
allows, in Debian's Chromium through Playwright: it starts a run, approves the tool call, and shows the answer."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.protocols.agui_support import Ledger, approval_client
from tests.protocols.node_clients import CLIENTS, node_or_skip
from tests.server.support import ServerThread
from tests.server.test_console_browser import CHROMIUM_FLAGS, _chromium


@pytest.fixture
def page_dir(tmp_path: Path) -> Path:
    """The page and its bundle, built here with esbuild from tests/protocols/clients."""
    node_or_skip("esbuild")
    node_or_skip("@ag-ui/client")
    esbuild = CLIENTS / "node_modules" / ".bin" / "esbuild"
    out = tmp_path / "page"
    out.mkdir()
    subprocess.run(
        [
            str(esbuild),
            "agui_page.mjs",
            "--bundle",
            "--format=iife",
            "--platform=browser",
            f"--outfile={out / 'agui_page.js'}",
            "--log-level=warning",
        ],
        cwd=CLIENTS,
        check=True,
        timeout=60,
    )
    shutil.copyfile(CLIENTS / "agui_page.html", out / "index.html")
    return out


@pytest.fixture
def page_origin(page_dir: Path) -> Iterator[str]:
    """The page served from an origin of its own (another port of the loopback address)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(page_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *args: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_an_allowed_origin_approves_a_tool_call_in_chromium(page_origin: str) -> None:
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser test skipped: playwright is not installed")
    ledger = Ledger()
    with (
        ServerThread(lambda: approval_client(ledger), allowed_origins=[page_origin]) as server,
        sync_api.sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.goto(f"{page_origin}/index.html?agent={server.url}&thread=browser-thread")
            page.click("#start")
            page.wait_for_selector('.interrupt[data-tool-call-id="c1"] button.approve')
            assert ledger.deleted == []
            page.click('.interrupt[data-tool-call-id="c1"] button.approve')
            page.wait_for_function("document.getElementById('status').textContent === 'done'")
            assert page.text_content("#result") == "Tool said: deleted a.txt"
        finally:
            browser.close()
    assert ledger.deleted == ["a.txt"]
