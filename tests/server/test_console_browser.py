"""The console in a real browser: Debian's Chromium driven by Playwright.

Start a run on the scripted model, see the request machine's diagram highlight
awaiting_approval, approve, see plan_active highlighted, reload mid-run and see
every event exactly once, approve the plan and see the answer streamed; decline
a proposal; with a token, answer ask_user by its option buttons, steer a working
run and cancel another. The screenshot is kept as a test artefact
(``.artifacts/console.png``); ``ORCHESTRATOR_UPDATE_SCREENSHOT=1`` also writes
the console page's ``docs/console.png``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.plan_mode import PlanModeExtension
from tests.server.support import ServerThread, UvicornServer
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


# The console served by hypercorn's trio worker at the root, and by uvicorn mounted under a prefix.
CONSOLE_HOSTS = [("hypercorn", ""), ("uvicorn", "/agent")]


def _console_server(host: tuple[str, str], make_client, **settings):  # type: ignore[no-untyped-def]
    name, prefix = host
    if name == "hypercorn":
        return ServerThread(make_client, **settings)
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[test]')")
    return UvicornServer(make_client, prefix, **settings)


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


@pytest.mark.parametrize("host", CONSOLE_HOSTS, ids=["hypercorn", "uvicorn-mounted"])
def test_the_console_runs_a_plan_mode_request_highlights_the_machine_and_survives_a_reload(
    browser_page,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    host: tuple[str, str],
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
    with _console_server(host, make_client) as server:
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


@pytest.mark.parametrize("host", CONSOLE_HOSTS, ids=["hypercorn", "uvicorn-mounted"])
def test_the_console_with_a_token_answers_by_option_steers_a_working_run_and_cancels_one(
    browser_page,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    host: tuple[str, str],
) -> None:
    import threading

    import trio

    from orchestrator import ModelRequest, ToolMessage, tool
    from orchestrator.extensions.ask_user import AskUserExtension
    from orchestrator.extensions.steering import SteeringExtension

    started = {n: threading.Event() for n in (1, 2, 3)}
    release = threading.Event()

    @tool(serial=True, loop="trio")
    async def slow(n: int) -> str:
        """Work slowly.

        Args:
            n: which piece
        """
        started[n].set()
        with trio.fail_after(30):
            while not release.is_set() or n == 3:
                await trio.sleep(0.02)
        return f"piece {n}"

    def after_answer(request: ModelRequest) -> AssistantMessage:
        chosen = [m for m in request.messages if isinstance(m, ToolMessage)][-1].content
        return asks(call("t1", "slow", n=1), call("t2", "slow", n=2), text=f"You chose {chosen}.")

    def after_steering(request: ModelRequest) -> AssistantMessage:
        return AssistantMessage(f"Now: {[m for m in request.messages if m.role == 'user'][-1].text}")

    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel(
            [
                asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])),
                after_answer,
                after_steering,
                asks(call("t3", "slow", n=3)),
            ]
        )
        return await create_agent(model, tools=[slow], extensions=[AskUserExtension(), SteeringExtension()])

    page = browser_page
    page.set_default_timeout(15_000)
    with _console_server(host, make_client, token="browser token") as server:
        page.goto(server.url + "/?access_token=browser%20token")
        page.fill("#session-input", "b2")
        page.fill("#prompt-input", "Paint it")
        page.click("#start-button")

        question = '.question[data-event="ask_user"]'
        page.wait_for_selector(question)
        assert page.eval_on_selector_all(f"{question} button", "bs => bs.map(b => b.textContent)") == ["red", "blue"]
        page.click(f'{question} button:text-is("blue")')
        page.locator("#transcript", has_text="You chose blue.").wait_for()

        assert started[1].wait(15)
        page.fill("#steer-input", "stop, do this instead")
        page.click("#steer-button")
        page.locator("#transcript .notice", has_text="steering sent: stop, do this instead").wait_for()
        release.set()
        page.locator("#transcript .notice", has_text="steering accepted: stop, do this instead").wait_for()
        page.locator("#transcript", has_text="Now: stop, do this instead").wait_for()
        page.locator(".notice.end", has_text="run completed").wait_for()
        page.wait_for_selector('#sessions li[data-session="b2"]')

        page.fill("#prompt-input", "Work on")
        page.click("#start-button")
        assert started[3].wait(15)
        page.wait_for_selector("#cancel-button:not([disabled])")
        page.click("#cancel-button")
        page.locator(".notice.end", has_text="run cancelled").wait_for()
        assert page.is_disabled("#steer-input")


def test_the_console_declines_a_plan_mode_proposal_and_the_run_goes_on(
    browser_page,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel(
            [
                asks(call("c1", "enter_plan_mode", reason="the change is large")),
                AssistantMessage("Carrying on without a plan."),
            ]
        )
        return await create_agent(model, extensions=[PlanModeExtension(root=tmp_path)])

    page = browser_page
    page.set_default_timeout(15_000)
    with ServerThread(make_client) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "decline-session")
        page.fill("#prompt-input", "Refactor everything")
        page.click("#start-button")
        page.wait_for_selector('#diagram g.node.current[data-state="awaiting_approval"]')
        page.click('.question[data-event="enter_plan_mode"] button.decline')
        page.locator(".notice.end", has_text="run completed").wait_for()
        transcript = page.inner_text("#transcript")
        assert "Carrying on without a plan." in transcript
        assert "enter_plan_mode" in transcript and "failed" in transcript
        assert "plan_active" not in page.eval_on_selector_all(
            "#diagram g.node.current", "ns => ns.map(n => n.dataset.state)"
        )


def test_the_console_shows_why_a_stream_ended_early_and_keeps_its_place(
    browser_page,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    from orchestrator.runtime.handle import EventsExpired
    from orchestrator.server.backend import LocalBackend
    from tests.server.test_sse_end import FallsBehind

    async def make_backend():  # type: ignore[no-untyped-def]
        client = await create_agent(ScriptedModel([AssistantMessage("hello")]))
        return FallsBehind(LocalBackend(client), EventsExpired("r", 2, 40))

    page = browser_page
    page.set_default_timeout(15_000)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.headers.get("last-event-id", "")))
    with ServerThread(make_backend) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "behind")
        page.fill("#prompt-input", "hi")
        page.click("#start-button")
        notice = page.locator(".stream-error").first
        notice.wait_for()
        assert "EventsExpired" in notice.inner_text() and "no longer retained" in notice.inner_text()
        for _ in range(150):  # the console reconnects from where it was (after seq 2)
            if "2" in requests:
                break
            page.wait_for_timeout(100)
        assert "2" in requests, requests
        seqs = page.eval_on_selector_all("#event-log li", "items => items.map(i => i.dataset.seq)")
    assert seqs[:2] == ["1", "2"] and all(seq.isdigit() for seq in seqs)
    assert "undefined" not in requests and "NaN" not in requests


def test_the_console_describes_the_images_of_a_tool_result(browser_page) -> None:  # type: ignore[no-untyped-def]
    from orchestrator import ImagePart, tool

    @tool
    def screenshot() -> list[object]:
        """Take a screenshot."""
        return ["captured ", ImagePart(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 92, media_type="image/png")]

    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel([asks(call("s1", "screenshot")), AssistantMessage("Looks empty.")])
        return await create_agent(model, tools=[screenshot])

    page = browser_page
    page.set_default_timeout(15_000)
    with ServerThread(make_client) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "images")
        page.fill("#prompt-input", "Show me")
        page.click("#start-button")
        page.locator(".notice.end", has_text="run completed").wait_for()
        line = page.inner_text('#transcript .tool[data-call="s1"] .status')
        assert line == "succeeded: captured [image: image/png, 100 bytes]"


def test_the_console_asks_a_subagents_question_and_ends_with_the_parent_run(browser_page) -> None:  # type: ignore[no-untyped-def]
    from orchestrator import agent_tool
    from orchestrator.extensions.ask_user import AskUserExtension

    async def make_client():  # type: ignore[no-untyped-def]
        child = await create_agent(
            ScriptedModel(
                [
                    asks(call("q1", "ask_user", question="Which city?", options=["Oslo", "Paris"])),
                    AssistantMessage("Oslo it is."),
                ]
            ),
            extensions=[AskUserExtension()],
        )
        model = ScriptedModel([asks(call("r1", "research", task="pick a city")), AssistantMessage("We go to Oslo.")])
        return await create_agent(model, extensions=[agent_tool(child, name="research", description="Research.")])

    page = browser_page
    page.set_default_timeout(15_000)
    with ServerThread(make_client) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "b-sub")
        page.fill("#prompt-input", "Where do we go?")
        page.click("#start-button")

        question = '.question[data-event="ask_user"][data-session="b-sub:r1"]'
        page.wait_for_selector(question)
        page.locator("#transcript .notice", has_text="subagent research started (session b-sub:r1)").wait_for()
        assert page.eval_on_selector_all(".notice.end", "ns => ns.length") == 0
        page.click(f'{question} button:text-is("Oslo")')
        page.locator("#transcript .notice", has_text="subagent research completed").wait_for()
        page.locator(".notice.end", has_text="run completed").wait_for()
        assert "We go to Oslo." in page.inner_text("#transcript")
        assert page.eval_on_selector_all(".notice.end", "ns => ns.length") == 1  # the child's end is not the run's
        assert page.eval_on_selector_all(".question", "qs => qs.length") == 0
        final = page.eval_on_selector_all("#event-log li", "items => items.map(i => Number(i.dataset.seq))")
        assert final == list(range(1, len(final) + 1))


def test_the_console_names_the_tool_a_tool_approval_asks_about(browser_page) -> None:  # type: ignore[no-untyped-def]
    from orchestrator import tool
    from orchestrator.extensions.tool_approval import ToolApprovalExtension

    ran: list[str] = []

    @tool
    def paint(colour: str) -> str:
        """Paint the wall.

        Args:
            colour: which colour
        """
        ran.append(colour)
        return f"painted {colour}"

    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel([asks(call("p1", "paint", colour="blue")), AssistantMessage("The wall is blue.")])
        return await create_agent(model, tools=[paint], extensions=[ToolApprovalExtension({"paint": "ask"})])

    page = browser_page
    page.set_default_timeout(15_000)
    with ServerThread(make_client) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "approve-tool")
        page.fill("#prompt-input", "Paint it blue")
        page.click("#start-button")
        card = '.question[data-event="tool_approval"]'
        page.wait_for_selector(card)
        assert page.inner_text(f"{card} h3") == "Allow paint?"
        assert '"colour": "blue"' in page.inner_text(f"{card} pre")
        page.click(f"{card} button.approve")
        page.locator(".notice.end", has_text="run completed").wait_for()
    assert ran == ["blue"]


def test_the_console_says_why_the_server_closed_its_stream_and_resumes_after_its_last_event(
    browser_page,  # type: ignore[no-untyped-def]
) -> None:
    from orchestrator.extensions.ask_user import AskUserExtension

    async def make_client():  # type: ignore[no-untyped-def]
        model = ScriptedModel(
            [asks(call("q1", "ask_user", question="Which colour?", options=["red", "blue"])), AssistantMessage("blue")]
        )
        return await create_agent(model, extensions=[AskUserExtension()])

    closing: list[str] = []
    page = browser_page
    page.set_default_timeout(15_000)
    resumed: list[str] = []
    page.on("request", lambda request: resumed.append(request.headers.get("last-event-id", "")))
    with ServerThread(make_client, stop_streams=lambda: closing[0] if closing else None) as server:
        page.goto(server.url + "/")
        page.fill("#session-input", "closing-session")
        page.fill("#prompt-input", "Paint it")
        page.click("#start-button")
        question = '.question[data-event="ask_user"]'
        page.wait_for_selector(question)
        seen = int(page.inner_text("#event-count"))
        closing.append("the server is shutting down")
        page.locator(".notice.stream-closing", has_text="the server is shutting down").wait_for()
        closing.clear()
        page.click(f'{question} button:text-is("blue")')
        page.locator(".notice.end", has_text="run completed").wait_for()
    reconnects = [header for header in resumed if header]
    assert reconnects and all(header.isdigit() for header in reconnects), resumed
    assert str(seen) in reconnects
