"""The console in a real browser: Debian's Chromium driven by Playwright.

Start a run on the scripted model, see the request machine's diagram highlight
awaiting_approval, approve, see plan_active highlighted, reload mid-run and see
every event exactly once, approve the plan and see the answer streamed. The
screenshot is kept as a test artefact (``.artifacts/console.png``);
``ORCHESTRATOR_UPDATE_SCREENSHOT=1`` also writes README's ``docs/console.png``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.plan_mode import PlanModeExtension
from tests.server.support import ServerThread
from tests.support import asks, call

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts"
README_SCREENSHOT = ROOT / "docs" / "console.png"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "browser test skipped: Chromium is not installed (apt-get install chromium; scripts/test does it as root)"
    )


@pytest.fixture
def browser_page():  # type: ignore[no-untyped-def]
    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser test skipped: playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
        finally:
            browser.close()


def test_the_console_runs_a_plan_mode_request_highlights_the_machine_and_survives_a_reload(
    browser_page,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel(
            [
                asks(
                    call("c1", "enter_plan_mode", reason="the change touches three modules"), text="Let me plan first."
                ),
                asks(call("c2", "exit_plan_mode", plan="1. Read the parser.\n2. Split it.\n3. Test it.")),
                AssistantMessage("The plan is approved and Plan Mode has ended."),
            ]
        )
        return await create_agent(model, extensions=[PlanModeExtension(root=tmp_path)])

    page = browser_page
    page.set_default_timeout(15_000)
    with ServerThread(make_client) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "browser-session")
        page.fill("#prompt-input", "Refactor the parser")
        page.click("#start-button")

        page.wait_for_selector('.question[data-event="enter_plan_mode"]')
        page.wait_for_selector('#diagram g.node.current[data-state="awaiting_approval"]')
        page.click('.question[data-event="enter_plan_mode"] button.approve')
        page.wait_for_selector('#diagram g.node.current[data-state="plan_active"]')
        page.wait_for_selector('.question[data-event="exit_plan_mode"]')
        before = page.eval_on_selector_all("#event-log li", "items => items.map(i => Number(i.dataset.seq))")

        page.reload()
        page.wait_for_selector('.question[data-event="exit_plan_mode"]')
        page.wait_for_selector('#diagram g.node.current[data-state="plan_active"]')
        after = page.eval_on_selector_all("#event-log li", "items => items.map(i => Number(i.dataset.seq))")
        assert after[: len(before)] == before
        assert after == list(range(1, len(after) + 1))

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
        if os.environ.get("ORCHESTRATOR_UPDATE_SCREENSHOT") == "1":
            README_SCREENSHOT.parent.mkdir(exist_ok=True)
            shutil.copyfile(ARTIFACTS / "console.png", README_SCREENSHOT)

        page.click('.question[data-event="exit_plan_mode"] button.approve')
        page.wait_for_selector(".notice.end")
        assert page.inner_text(".notice.end") == "run completed"
        assert "The plan is approved and Plan Mode has ended." in page.inner_text("#transcript")
        final = page.eval_on_selector_all("#event-log li", "items => items.map(i => Number(i.dataset.seq))")
        assert final == list(range(1, len(final) + 1))
        assert page.eval_on_selector_all("#diagram g.node.current", "ns => ns.map(n => n.dataset.state)") == [
            "completed",
            "normal",
        ] or set(page.eval_on_selector_all("#diagram g.node.current", "ns => ns.map(n => n.dataset.state)")) == {
            "completed",
            "normal",
        }
