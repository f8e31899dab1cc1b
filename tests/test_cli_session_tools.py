"""The session tools of ``chat`` (title, usage, context, model, permissions, mcp, fork, export, resume) driven
through a pseudo-terminal, the ``sessions`` subcommands, and fork and export as library functions."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
import sys
from pathlib import Path

import pytest
from test_cli_terminal import REPO, Chat, environment

from orchestrator import AssistantMessage, ToolMessage, UserMessage
from orchestrator.messages import ToolCall
from orchestrator.observe.export import to_html, to_markdown
from orchestrator.store.fork import ForkRefused, fork_session
from orchestrator.store.interface import SessionChange
from orchestrator.store.memory import MemoryStore
from orchestrator.store.restore import read_row


def sessions(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "sessions", *args],
        cwd=tmp_path,
        env=environment(tmp_path, NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_each_session_command_in_chat(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "words")
    chat.send("count these four words")
    chat.turn_done()
    chat.send("/title")
    chat.expect("title: count these four words")
    chat.send("/title Word counting")
    chat.expect("title: Word counting")
    chat.send("/usage")
    chat.expect_pattern(
        r"turn 1: 'count these four words'  \d+ in, \d+ out, cache 0 read / 0 written \(2 model calls\)"
    )
    chat.expect_pattern(r"total  \d+ in, \d+ out, cache 0 read / 0 written \(2 model calls\)")
    chat.send("/context")
    chat.expect_pattern(r"context: about \d+ tokens in 4 messages")
    chat.expect_pattern(r"user +1 messages  about +\d+ tokens")
    chat.expect_pattern(r"tool results +1 messages")
    chat.send("/model")
    chat.expect("model: scripted")
    chat.send("/model openai:gpt-test")
    chat.expect("model not switched: --model openai:gpt-test:")  # no key in this environment
    chat.send("/mcp")
    chat.expect("no MCP servers (a project's .mcp.json names them)")
    chat.send("/permissions")
    chat.expect_pattern(r"write_file +ask +\[default\]")
    chat.send("/permissions write_file allow")
    chat.expect("write_file: allow for the rest of this session")
    chat.send("write buy milk")
    chat.turn_done()
    assert (chat.root / "notes.txt").read_text() == "buy milk\n"
    assert "? Allow write_file" not in chat.screen
    chat.send("/fork 1")
    chat.expect_pattern(r"forked words up to turn 1 into (words-fork-[0-9a-f]{6}) \(4 messages\); you are in the fork")
    fork_id = chat.child.match.group(1)
    chat.send("/export " + str(tmp_path / "fork.md"))
    chat.expect("exported 4 messages to")
    chat.send("/export " + str(tmp_path / "fork.html"))
    chat.expect("exported 4 messages to")
    chat.send("/resume")
    chat.expect("resume which (number or id; empty keeps this one)> ")
    listing = chat.screen.rsplit("/resume", 1)[1]
    number = next(line.split()[0] for line in listing.splitlines() if re.search(r"\bwords\s+\d+ messages", line))
    chat.send(number)
    chat.expect("resuming session words (8 stored messages): Word counting")
    assert chat.quit() == 0
    markdown = (tmp_path / "fork.md").read_text()
    assert markdown.startswith("# Word counting (fork)\n\n## User\n\ncount these four words\n")
    assert "Tool call `word_count`" in markdown and "## Tool result `word_count` (succeeded)" in markdown
    page = (tmp_path / "fork.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "count these four words" in page
    listed = sessions(tmp_path, "list")
    assert re.search(rf"{fork_id}\s+4 messages  Word counting \(fork\)", listed.stdout), listed.stdout
    assert re.search(r"words\s+8 messages  Word counting", listed.stdout), listed.stdout


class _Recorder(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that records each request's body and refuses it with a 400."""

    bodies: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        length = int(self.headers.get("content-length", "0"))
        self.bodies.append(json.loads(self.rfile.read(length)))
        answer = json.dumps({"error": {"message": "recorded", "type": "invalid_request_error"}}).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_model_and_reasoning_effort_switch_for_the_next_turn(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        env = environment(tmp_path, OPENAI_API_KEY="test", OPENAI_BASE_URL=base, NO_COLOR="1")
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator", "chat"],
            input="count one\n/model openai:gpt-test high\n/model\ncount two\n/model anthropic:x high\n/quit\n",
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.split("> count two", 1)
    assert "Your message has 2 words." in first and "model: openai:gpt-test high from the next turn" in first
    assert "model: openai:gpt-test high\n" in first
    assert "* failed" in second
    assert [(body["model"], body["reasoning_effort"]) for body in _Recorder.bodies] == [("gpt-test", "high")]
    assert "model not switched: --model anthropic:x: set ANTHROPIC_API_KEY" in second


def test_sessions_title_export_and_fork_subcommands(tmp_path: Path) -> None:
    env = environment(tmp_path, NO_COLOR="1")
    for line in ("count one", "count two three"):
        subprocess.run(
            [sys.executable, "-m", "orchestrator", "run", line, "--session", "s"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    assert sessions(tmp_path, "title", "s").stdout == "count one\n"
    assert sessions(tmp_path, "title", "s", "Counting").stdout == "Counting\n"
    forked = sessions(tmp_path, "fork", "s", "--turn", "1", "--as", "t")
    assert forked.stdout == "forked s into t (4 messages)\n"
    again = sessions(tmp_path, "fork", "s", "--as", "t")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == "sessions fork: the session 't' exists already\n"
    assert sessions(tmp_path, "fork", "s", "--turn", "3").stderr == (
        "sessions fork: the session 's' has 2 turns; fork from turn 1 to 2\n"
    )
    exported = sessions(tmp_path, "export", "t", str(tmp_path / "t.md"))
    assert exported.stdout == f"exported 4 messages to {tmp_path / 't.md'}\n"
    assert (tmp_path / "t.md").read_text().startswith("# Counting (fork)\n")
    listed = sessions(tmp_path, "list").stdout
    assert re.search(r"t\s+4 messages  Counting \(fork\)", listed) and re.search(r"s\s+8 messages  Counting", listed)


# the library ------------------------------------------------------------------------------------------------


def _conversation() -> tuple[MemoryStore, list[object]]:
    store = MemoryStore()
    call = ToolCall("c1", "note", {"text": "<b>&"})
    messages = [
        UserMessage("first"),
        AssistantMessage("", tool_calls=(call,)),
        ToolMessage("c1", "note", "</pre><script>alert(1)</script>"),
        AssistantMessage("done"),
        UserMessage("second"),
        AssistantMessage("ok"),
    ]
    store.apply("a", SessionChange(replace=tuple(messages)))
    return store, messages


def test_fork_session_copies_up_to_a_turn_and_refuses_what_it_cannot_do() -> None:
    store, messages = _conversation()
    assert fork_session(store, "a", "b", turns=1) == 4
    assert [type(read_row(row)[0]).__name__ for row in store.rows("b")] == [type(m).__name__ for m in messages[:4]]
    assert fork_session(store, "a", "c") == 6
    for source, target, turns, reason, kind in (
        ("missing", "d", None, "no stored session 'missing' to fork", "unknown"),
        ("a", "b", None, "the session 'b' exists already", "exists"),
        ("a", "d", 0, "the session 'a' has 2 turns; fork from turn 1 to 2", "turn"),
    ):
        with pytest.raises(ForkRefused) as refused:
            fork_session(store, source, target, turns=turns)
        assert (refused.value.reason, refused.value.kind) == (reason, kind)


def test_exports_escape_what_the_conversation_holds() -> None:
    _, messages = _conversation()
    page = to_html(messages, "<Title>")  # type: ignore[arg-type]
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<title>&lt;Title&gt;</title>" in page
    markdown = to_markdown(messages, "T")  # type: ignore[arg-type]
    assert '"text": "<b>&"' in markdown and "## Tool result `note` (succeeded)" in markdown
    assert REPO.is_dir()
