"""``chat`` on a pseudo-terminal (pexpect), piped, and as the transcript of the terminal agent's page.

Every wait is bounded (pexpect timeouts, subprocess timeouts); the scripted
model's slow tool takes ``--scripted-delay`` seconds, long enough to type a
steering line or press Ctrl-C while it runs.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import ToolMessage, ToolStatus, UserMessage
from orchestrator.extensions.files.sandbox import find_bwrap
from orchestrator.extensions.sqlite_store import SQLiteSessionStore

pexpect = pytest.importorskip("pexpect", reason="pexpect is needed to drive the CLI through a pseudo-terminal")

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPT_PAGE = REPO / "docs" / "terminal.md"
WAIT = 20  # seconds, for any one expected output
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "NO_COLOR"))}
    env.update(PYTHONPATH=str(REPO), XDG_DATA_HOME=str(tmp_path / "data"), TERM="xterm-256color", **extra)
    env.setdefault("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return env


class Chat:
    """``python -m orchestrator chat`` on a 120x40 pseudo-terminal."""

    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        self.root = tmp_path / "work"
        self.root.mkdir(exist_ok=True)
        self.db = tmp_path / "data" / "orchestrator" / "sessions.db"
        self.log = io.StringIO()
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "orchestrator", "chat", "--root", str(self.root), "--scripted-delay", "3", *args],
            cwd=str(tmp_path),
            env=environment(tmp_path, **env),
            dimensions=(40, 120),
            encoding="utf-8",
            timeout=WAIT,
        )
        self.child.logfile_read = self.log
        self.expect("type /help for commands")

    def expect(self, text: str) -> None:
        self.child.expect_exact(text, timeout=WAIT)

    def expect_pattern(self, pattern: str) -> None:
        self.child.expect(pattern, timeout=WAIT)

    def send(self, line: str) -> None:
        self.child.sendline(line)

    def turn_done(self) -> None:
        self.expect_pattern(r"\* (completed|failed|cancelled) in ")

    def quit(self) -> int:
        self.send("/quit")
        self.child.expect(pexpect.EOF, timeout=WAIT)
        self.child.close()
        code: int = self.child.exitstatus
        return code

    @property
    def screen(self) -> str:
        """Everything shown so far, escape sequences removed."""
        return ANSI.sub("", self.log.getvalue())

    def messages(self, session_id: str) -> list[object]:
        store = SQLiteSessionStore(self.db)
        try:
            return list(store.messages(session_id))
        finally:
            store.close()


def tool_results(messages: list[object], name: str) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage) and m.name == name]


def test_a_plan_is_declined_then_one_asked_for_with_slash_plan_is_approved(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "plans")
    chat.send("plan add a search box")
    chat.expect("? Enter Plan Mode? reason: plan before acting on: add a search box [y/n]")
    chat.send("y")
    chat.expect("* plan mode entered")
    chat.expect("? Approve this plan? [y/n]")
    chat.send("n")
    chat.expect("Plan not approved")
    chat.turn_done()
    assert chat.screen.count("Make the change for: add a search box") == 1  # the plan, shown once

    chat.send("/new")
    chat.expect("new session session-")
    chat.send("/plan tidy the parser")
    chat.expect("(approved: you asked for Plan Mode with /plan)")
    chat.expect("? Approve this plan? [y/n]")
    chat.send("y")
    chat.expect("* plan mode exited")
    chat.expect("Plan approved")
    chat.turn_done()
    assert chat.quit() == 0
    assert "exit_plan_mode(plan: shown below)" in chat.screen
    declined = tool_results(chat.messages("plans"), "exit_plan_mode")
    assert [m.status for m in declined] == [ToolStatus.FAILED]
    assert (chat.root / "PLAN.md").exists() is False  # planning changed nothing


def test_ask_user_is_answered_by_option_number(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "ask")
    chat.send("ask about storage")
    chat.expect("? Which database should I use?  1) sqlite  2) postgres")
    chat.expect_pattern(r"awaiting_approval \d+\.\ds")
    chat.send("3")
    chat.expect("please answer with a number or one of: sqlite, postgres")
    chat.send("2")
    chat.expect_pattern(r"You chose \S*postgres")
    chat.turn_done()
    assert chat.quit() == 0
    [answer] = tool_results(chat.messages("ask"), "ask_user")
    assert (answer.content, answer.status) == ("postgres", ToolStatus.SUCCEEDED)


def test_a_permission_prompt_accepted_with_always_is_not_asked_again(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "perm")
    chat.send("write first line")
    chat.expect('? Allow write_file(path="notes.txt", content="first line\\n")?')
    chat.send("a")
    chat.expect("Wrote")
    chat.turn_done()
    before = chat.screen.count("? Allow write_file")
    chat.send("write second line")
    chat.expect("Wrote")
    chat.turn_done()
    assert chat.screen.count("? Allow write_file") == before == 1
    assert (chat.root / "notes.txt").read_text() == "second line\n"
    assert chat.quit() == 0


def test_a_declined_permission_tells_the_model_the_reason(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "deny")
    chat.send("write secret")
    chat.expect("? Allow write_file")
    chat.send("n, not in this folder")
    chat.expect("I did not write")
    chat.turn_done()
    assert chat.quit() == 0
    [result] = tool_results(chat.messages("deny"), "write_file")
    assert result.content == "rejected: the user declined write_file: not in this folder"
    assert not (chat.root / "notes.txt").exists()


def test_a_line_typed_during_a_slow_tool_steers_and_the_screen_says_so(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "steer")
    chat.send("slow work")
    chat.expect("slow_step(")
    chat.expect_pattern(r"awaiting_tool \d+\.\ds")  # the status line: the request machine's state, time in it
    chat.send("focus on tests")
    chat.expect("> steering: focus on tests")
    chat.expect("(sent to the running turn: the agent reads it after its current step)")
    chat.expect("Your message has 3 words.")
    chat.turn_done()
    assert chat.quit() == 0
    messages = chat.messages("steer")
    assert [m.text for m in messages if isinstance(m, UserMessage)] == ["slow work", "focus on tests"]
    [slow] = tool_results(messages, "slow_step")
    assert slow.status == ToolStatus.SUCCEEDED  # steering never cancels a running call


def test_ctrl_c_cancels_the_turn_and_the_next_prompt_works_then_twice_exits(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "intr")
    chat.send("slow work")
    chat.expect("slow_step(")
    chat.child.sendintr()
    chat.expect("(Ctrl-C: cancelling the turn)")
    chat.expect("* cancelled in")
    chat.send("count these three")
    chat.expect("Your message has 3 words.")
    chat.turn_done()
    chat.child.sendintr()
    chat.expect("(Ctrl-C again to exit, or /quit)")
    chat.child.sendintr()
    chat.child.expect(pexpect.EOF, timeout=WAIT)
    chat.child.close()
    assert chat.child.exitstatus == 0
    [slow] = tool_results(chat.messages("intr"), "slow_step")
    assert slow.status == ToolStatus.CANCELLED


def test_dash_c_continues_the_last_session(tmp_path: Path) -> None:
    first = Chat(tmp_path)
    first.send("count alpha beta")
    first.turn_done()
    assert first.quit() == 0
    session_id = re.search(r"session (session-[0-9a-f]+) \(continue it", first.screen).group(1)  # type: ignore[union-attr]

    again = Chat(tmp_path, "-c")
    assert f"resuming session {session_id} (4 stored messages)" in again.screen
    again.send("count gamx\x7fma")  # a typo, erased with Backspace
    again.expect("Your message has 2 words.")
    again.turn_done()
    assert again.quit() == 0
    texts = [m.text for m in again.messages(session_id) if isinstance(m, UserMessage)]
    assert texts == ["count alpha beta", "count gamma"]


def test_no_color_keeps_the_terminal_free_of_colours(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "plain", NO_COLOR="1")
    chat.send("count one two")
    chat.turn_done()
    assert chat.quit() == 0
    assert not re.search(r"\x1b\[[0-9;]*(3[0-9]|9[0-7])m", chat.log.getvalue())


# piped ---------------------------------------------------------------------------


def piped(tmp_path: Path, command: str, lines: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "work"
    root.mkdir(exist_ok=True)
    where = ["--root", str(root)] if command in ("run", "chat") else []
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", command, *where, *args],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
        timeout=60,
    )


def test_piped_lines_never_steer_they_wait_for_the_next_prompt(tmp_path: Path) -> None:
    done = piped(tmp_path, "chat", ["slow work", "focus on tests", "/quit"], "--session", "p", "--scripted-delay", "1")
    assert done.returncode == 0, done.stderr
    assert "steering" not in done.stdout
    assert "\x1b" not in done.stdout  # no colours, no redraws
    store = SQLiteSessionStore(tmp_path / "data" / "orchestrator" / "sessions.db")
    messages = store.messages("p")
    store.close()
    [slow] = tool_results(messages, "slow_step")
    assert slow.status == ToolStatus.SUCCEEDED
    # "focus on tests" was the next prompt, answered after the slow turn had completed
    users = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    assert [messages[i].text for i in users] == ["slow work", "focus on tests"]  # type: ignore[attr-defined]
    assert messages.index(slow) < users[1]


def test_sessions_list_show_and_delete(tmp_path: Path) -> None:
    assert piped(tmp_path, "run", [], "count one two three", "--session", "keep").returncode == 0
    assert piped(tmp_path, "run", [], "count four", "--session", "drop").returncode == 0
    listed = piped(tmp_path, "sessions", [], "list")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("c drop") and "4 messages" in lines[0] and lines[0].endswith("count four")
    assert lines[1].startswith("  keep")
    shown = piped(tmp_path, "sessions", [], "show", "keep")
    assert "user: count one two three" in shown.stdout
    assert '-> word_count(text="count one two three")' in shown.stdout
    assert "<- word_count succeeded: 4" in shown.stdout
    assert piped(tmp_path, "sessions", [], "delete", "drop").stdout == "deleted session drop\n"
    again = piped(tmp_path, "sessions", [], "delete", "drop")
    assert again.returncode == 1 and "no session drop" in again.stderr
    assert "drop" not in piped(tmp_path, "sessions", [], "list").stdout


def test_sessions_are_stored_outside_the_root_by_default(tmp_path: Path) -> None:
    assert piped(tmp_path, "run", [], "count one").returncode == 0
    assert (tmp_path / "data" / "orchestrator" / "sessions.db").exists()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "slow work", "--scripted-delay", "1", "--root", "work"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=environment(tmp_path),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("session ")
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(timeout=30) == 141
    assert "Traceback" not in proc.stderr.read()


def test_json_prints_wire_events_one_per_line(tmp_path: Path) -> None:
    import json

    from orchestrator.wire.format import decode_event

    done = piped(tmp_path, "run", [], "count a b", "--json", "--session", "j")
    assert done.returncode == 0, done.stderr
    events = [decode_event(json.loads(line)) for line in done.stdout.splitlines()]
    assert events[0].name == "transition" and events[-1].name == "run_completed"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert "* completed" in done.stderr


# The terminal page's transcript --------------------------------------------------------

TRANSCRIPT_INPUT = [
    "count these four words",
    "write buy milk",
    "y",
    "ask which storage",
    "1",
    "/plan add a search box",
    "y",
    "/quit",
]
BEGIN, END = "<!-- cli-transcript: produced by tests/test_cli_terminal.py -->", "<!-- /cli-transcript -->"


def transcript(tmp_path: Path) -> str:
    done = piped(tmp_path, "chat", TRANSCRIPT_INPUT, "--session", "demo")
    assert done.returncode == 0, done.stderr
    command = "$ python -m orchestrator chat --session demo"
    return "\n".join(["```console", command, done.stderr.rstrip("\n"), done.stdout.rstrip("\n"), "```"])


@pytest.mark.skipif(
    find_bwrap().path is None,
    reason=f"the transcript shows bash sandboxed; here the CLI would add that it is not: {find_bwrap().problem}",
)
def test_the_terminal_page_transcript_is_what_the_cli_prints(tmp_path: Path) -> None:
    """Regenerate: ORCHESTRATOR_UPDATE_TRANSCRIPT=1 .venv/bin/python -m pytest tests/test_cli_terminal.py -k terminal_page"""
    produced = transcript(tmp_path)
    text = TRANSCRIPT_PAGE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if os.environ.get("ORCHESTRATOR_UPDATE_TRANSCRIPT"):
        TRANSCRIPT_PAGE.write_text(text[:start] + "\n" + produced + "\n" + text[end:], encoding="utf-8")
        text = TRANSCRIPT_PAGE.read_text(encoding="utf-8")
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    assert text[start:end].strip("\n") == produced
