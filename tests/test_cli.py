"""The ``run`` command: output, terminal approvals, steering, Ctrl-C, stored sessions and model choice."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio
from support import asks, call

from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolMessage, ToolStatus, UserMessage
from orchestrator.cli import Options, main, run, word_count
from orchestrator.cli.signals import CANCELLING
from orchestrator.extensions.files.sandbox import find_bwrap
from orchestrator.extensions.sqlite_store import SQLiteSessionStore

REPO = Path(__file__).resolve().parents[1]


class Cli:
    """``python -m orchestrator run`` in a child process, read line by line."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.db = tmp_path / "sessions.db"
        environment = {**(env if env is not None else os.environ), "PYTHONPATH": str(REPO)}
        environment["XDG_DATA_HOME"] = str(tmp_path / "data")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "run", *args, "--db", str(self.db), "--root", str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=environment,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, text: str) -> str:
        while True:
            line = self.lines.get(timeout=20)
            if line is None:
                raise AssertionError(f"output ended before {text!r}:\n" + "\n".join(self.seen))
            self.seen.append(line)
            if text in line:
                return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self) -> tuple[int, str, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=20)
        while (line := self.lines.get(timeout=20)) is not None:
            self.seen.append(line)
        return code, "\n".join(self.seen), self.proc.stderr.read()


def test_scripted_run_is_stored_and_resumed_with_session(tmp_path: Path) -> None:
    first = Cli(tmp_path, "count these four words", "--trace")
    code, out, err = first.finish()
    assert code == 0, err
    assert '-> word_count(text="count these four words")' in out
    assert "<- word_count succeeded: 4" in out
    assert "Your message has 4 words." in out
    assert "request/phase: awaiting_model -> awaiting_tool (respond)" in out
    assert out.splitlines()[-1] == "* completed"
    session_line = out.splitlines()[0]
    assert session_line.startswith("session ")
    session_id = session_line.split()[1]

    again = Cli(tmp_path, "two words", "--session", session_id)
    code, out, err = again.finish()
    assert code == 0, err
    assert f"resuming session {session_id} (4 stored messages)" in out
    assert "Your message has 2 words." in out
    stored = SQLiteSessionStore(first.db).messages(session_id)
    assert [m for m in stored if isinstance(m, UserMessage)] == [
        UserMessage("count these four words"),
        UserMessage("two words"),
    ]
    assert len(stored) == 8


def test_plan_mode_approvals_are_asked_on_the_terminal(tmp_path: Path) -> None:
    cli = Cli(tmp_path, "add a feature", "--plan-mode", "--session", "p", "--trace")
    assert "no stored session p" in cli.expect("no stored session")
    cli.expect("? Enter Plan Mode? reason: plan before acting on: add a feature [y/n]")
    cli.send("maybe")
    cli.expect("please answer y or n")
    cli.send("y")
    cli.expect("* plan mode entered")
    cli.expect("? Approve this plan? [y/n]")
    cli.send("yes")
    code, out, err = cli.finish()
    assert code == 0, err
    assert '-> list_files(path=".")' in out
    assert "plan_mode/lifecycle: plan_active -> exit_awaiting_approval (propose_exit)" in out
    assert "* plan mode exited" in out
    assert "Plan approved; Plan Mode has ended." in out
    results = [m for m in SQLiteSessionStore(cli.db).messages("p") if isinstance(m, ToolMessage)]
    assert [(m.name, m.status) for m in results] == [
        ("enter_plan_mode", ToolStatus.SUCCEEDED),
        ("list_files", ToolStatus.SUCCEEDED),
        ("exit_plan_mode", ToolStatus.SUCCEEDED),
    ]


def test_declining_plan_mode_continues_normally(tmp_path: Path) -> None:
    cli = Cli(tmp_path, "add a feature", "--plan-mode")
    cli.expect("? Enter Plan Mode?")
    cli.send("n")
    code, out, _ = cli.finish()
    assert code == 0
    assert "<- enter_plan_mode failed: rejected: the user declined Plan Mode" in out
    assert "Understood, staying in normal mode." in out


def test_ctrl_c_cancels_the_request_cleanly(tmp_path: Path) -> None:
    cli = Cli(tmp_path, "add a feature", "--plan-mode", "--session", "c", "--trace")
    cli.expect("? Enter Plan Mode?")
    cli.proc.send_signal(signal.SIGINT)
    code, out, err = cli.finish()
    assert code == 130, err
    assert out.splitlines()[-1] == "* cancelled"
    assert CANCELLING in out
    assert "plan_mode/lifecycle: entry_awaiting_approval -> normal (withdraw)" in out
    assert "<- enter_plan_mode cancelled: not completed: request cancelled" in out
    assert "request/phase: awaiting_tool -> cancelled (cancel)" in out
    store = SQLiteSessionStore(cli.db)
    assert store.messages("c")[-1] == ToolMessage(
        "call_2", "enter_plan_mode", "not completed: request cancelled", ToolStatus.CANCELLED
    )
    assert store.pending_approvals() == []


def test_a_question_left_by_a_killed_run_is_asked_again_and_resumed(tmp_path: Path) -> None:
    killed = Cli(tmp_path, "add a feature", "--plan-mode", "--session", "k")
    killed.expect("? Enter Plan Mode?")
    killed.proc.kill()
    assert killed.proc.wait(timeout=20) == -signal.SIGKILL
    [pending] = SQLiteSessionStore(killed.db).pending_approvals("k")
    assert (pending.event, pending.tool_call_id) == ("enter_plan_mode", "call_2")

    cli = Cli(tmp_path, "go on", "--plan-mode", "--session", "k")
    cli.expect("resuming session k (2 stored messages)")
    cli.expect("(the previous run stopped while waiting for enter_plan_mode call_2)")
    cli.expect("? Enter Plan Mode? reason: plan before acting on: add a feature [y/n]")
    cli.send("y")
    cli.expect("* resumed call_2 with the answer given before")
    cli.expect("* plan mode entered")
    cli.expect("[y/n]")
    cli.send("y")
    code, out, err = cli.finish()
    assert code == 0, err
    assert "* plan mode exited" in out
    stored = SQLiteSessionStore(cli.db).messages("k")
    assert [m.text for m in stored if isinstance(m, UserMessage)] == ["add a feature", "go on"]
    results = [(m.tool_call_id, m.name, m.status) for m in stored if isinstance(m, ToolMessage)]
    assert results[0] == ("call_2", "enter_plan_mode", ToolStatus.SUCCEEDED)
    assert [name for _, name, _ in results] == ["enter_plan_mode", "list_files", "exit_plan_mode"]


def test_a_plan_awaiting_approval_when_killed_is_approved_after_the_restart(tmp_path: Path) -> None:
    killed = Cli(tmp_path, "add a feature", "--plan-mode", "--session", "x")
    killed.expect("? Enter Plan Mode?")
    killed.send("y")
    killed.expect("? Approve this plan? [y/n]")
    killed.proc.kill()
    assert killed.proc.wait(timeout=20) == -signal.SIGKILL
    [pending] = SQLiteSessionStore(killed.db).pending_approvals("x")
    assert pending.event == "exit_plan_mode"

    cli = Cli(tmp_path, "go on", "--plan-mode", "--session", "x", "--trace")
    cli.expect(f"(the previous run stopped while waiting for exit_plan_mode {pending.tool_call_id})")
    cli.expect("[y/n]")
    cli.send("y")
    code, out, err = cli.finish()
    assert code == 0, err
    assert f"* resumed {pending.tool_call_id} with the answer given before" in out
    assert "* plan mode exited" in out
    assert "* plan mode restored" not in out  # the approved plan ended Plan Mode before the new input
    assert "Plan approved; Plan Mode has ended." in out
    assert out.splitlines()[-1] == "* completed"
    stored = SQLiteSessionStore(cli.db)
    [exit_result] = [m for m in stored.messages("x") if isinstance(m, ToolMessage) and m.name == "exit_plan_mode"]
    assert (exit_result.tool_call_id, exit_result.status) == (pending.tool_call_id, ToolStatus.SUCCEEDED)
    assert stored.plan_mode("x") == "normal"


def test_an_explicit_model_without_a_key_exits_with_2_and_says_why(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    for spec, variable in (("openai:gpt-4o-mini", "OPENAI_API_KEY"), ("anthropic:claude-x", "ANTHROPIC_API_KEY")):
        code, out, err = Cli(tmp_path, "hello there", "--model", spec, env=env).finish()
        assert code == 2
        assert f"error: --model {spec}: set {variable}" in err
        assert "scripted" not in err and out == ""


def test_without_a_model_the_scripted_one_runs_and_says_so(tmp_path: Path) -> None:
    code, out, err = Cli(tmp_path, "hello there").finish()
    assert code == 0
    assert "no --model given: running on the scripted model" in err
    assert "Your message has 2 words." in out
    assert "request/phase" not in out  # transitions only with --trace


def test_without_bwrap_the_cli_says_once_that_bash_is_not_sandboxed(tmp_path: Path) -> None:
    no_bwrap = tmp_path / "bin"  # a PATH with bash on it and no bwrap
    no_bwrap.mkdir()
    (no_bwrap / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    code, out, err = Cli(tmp_path, "two words", env={**os.environ, "PATH": str(no_bwrap)}).finish()
    assert code == 0, err
    said = "* bash is not sandboxed (workspace-write asked): 'bwrap' was not found (install bubblewrap)"
    assert out.splitlines().count(said) == 1
    assert "Your message has 2 words." in out


def test_bad_arguments_exit_with_usage_error(capsys: object) -> None:
    assert main(["hi", "--model", "gpt"]) == 2
    assert main(["hi", "--sandbox", "loose"]) == 2
    assert main([]) == 2
    assert main(["hi", "--root", "/no/such/folder"]) == 2
    assert main(["hi", "--session", "a", "-c"]) == 2


def test_a_session_id_that_is_not_utf8_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from orchestrator.cli.main import command

    odd = os.fsdecode(b"bad\xff")  # as argv carries bytes that are not UTF-8
    assert main(["hi", "--session", odd, "--root", str(tmp_path), "--db", str(tmp_path / "s.db")]) == 2
    assert "is not valid UTF-8" in capsys.readouterr().err
    assert command("sessions", ["show", odd, "--db", str(tmp_path / "s.db")]) == 2
    assert "is not valid UTF-8" in capsys.readouterr().err


# in-process: steering and ask_user -------------------------------------------


class FakeTerminal:
    """Collects output and hands out lines once given text has been printed."""

    def __init__(self) -> None:
        self.text = ""
        self.changed = trio.Event()
        self.script: list[tuple[str, str | None]] = []  # (printed text to wait for, line; None = end of input)

    def write(self, text: str) -> None:
        self.text += text
        self.changed.set()
        self.changed = trio.Event()

    async def printed(self, text: str) -> None:
        while text not in self.text:
            await self.changed.wait()

    async def read_line(self) -> str:
        if not self.script:
            await trio.sleep_forever()
        after, line = self.script.pop(0)
        await self.printed(after)
        return "" if line is None else line + "\n"


async def test_a_line_typed_while_the_agent_works_steers_it(tmp_path: Path) -> None:
    terminal = FakeTerminal()
    terminal.script = [("setup -> awaiting_model (request_model)", "focus on tests")]  # typed while the model works

    async def first(request: ModelRequest) -> AssistantMessage:
        await terminal.printed("> steering: focus on tests")
        return asks(call("w1", "word_count", text="x y"), text="counting")

    model = ScriptedModel([first, AssistantMessage("Focusing on tests.")])
    options = Options("do everything", db=str(tmp_path / "s.db"), session="st", trace=True)
    with trio.fail_after(10):
        code = await run(
            options,
            model=model,
            tools=(word_count,),
            read_line=terminal.read_line,
            write=terminal.write,
            handle_sigint=False,
            interactive=True,
        )
    assert code == 0
    assert "<- word_count skipped" in terminal.text
    assert "request/phase: awaiting_tool -> steering_interrupt (steer)" in terminal.text
    assert model.requests[1].messages[-1] == UserMessage("focus on tests")
    assert "Focusing on tests." in terminal.text


async def test_ask_user_is_answered_on_the_terminal(tmp_path: Path) -> None:
    terminal = FakeTerminal()
    terminal.script = [
        ("? Which database?  1) sqlite  2) postgres", "mysql"),
        ("please answer with a number or one of: sqlite, postgres", "sqlite"),
    ]
    model = ScriptedModel(
        [
            asks(call("q", "ask_user", question="Which database?", options=["sqlite", "postgres"])),
            AssistantMessage("ok"),
        ]
    )
    options = Options("set up storage", db=str(tmp_path / "s.db"), session="a")
    with trio.fail_after(10):
        code = await run(options, model=model, read_line=terminal.read_line, write=terminal.write, handle_sigint=False)
    assert code == 0
    assert "answer not accepted" not in terminal.text  # checked on the terminal before it is sent
    assert model.requests[1].messages[-1] == ToolMessage("q", "ask_user", "sqlite", ToolStatus.SUCCEEDED)


async def test_input_ending_while_a_question_waits_cancels_the_request(tmp_path: Path) -> None:
    terminal = FakeTerminal()
    terminal.script = [("? Name?", None)]
    model = ScriptedModel([asks(call("q", "ask_user", question="Name?", options=[]))])
    options = Options("hi", db=str(tmp_path / "s.db"), session="e")
    with trio.fail_after(10):
        code = await run(options, model=model, read_line=terminal.read_line, write=terminal.write, handle_sigint=False)
    assert code == 130
    assert "(input ended before the question was answered)" in terminal.text
    assert terminal.text.endswith("* cancelled\n")
    stored = SQLiteSessionStore(tmp_path / "s.db").messages("e")
    assert stored[-1] == ToolMessage("q", "ask_user", "not completed: request cancelled", ToolStatus.CANCELLED)


# in-process: retries, tool policy flags, slash commands, rich missing -----------------


async def test_a_provider_retry_is_shown(tmp_path: Path) -> None:
    from provider_mock import Server, error, sse

    from orchestrator.providers.openai import OpenAIChatModel

    stream = (REPO / "tests" / "fixtures" / "providers" / "openai_text.sse").read_text()
    server = Server(error(503, {"error": {"message": "overloaded", "type": "server_error"}}), sse(stream))
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    model = OpenAIChatModel("gpt-4o-mini", client=server.client(), sleep=sleep, api_key="sk-test")
    terminal = FakeTerminal()
    options = Options("hello", db=str(tmp_path / "s.db"), session="r")
    with trio.fail_after(10):
        code = await run(options, model=model, read_line=terminal.read_line, write=terminal.write, handle_sigint=False)
    assert code == 0
    assert len(waited) == 1
    assert f"retrying in {waited[0]:.1f} s)" in terminal.text
    assert "503" in terminal.text
    assert "tokens: " in terminal.text and "(1 model call)" in terminal.text


async def _run_writing(tmp_path: Path, **flags: object) -> tuple[int, str]:
    terminal = FakeTerminal()
    terminal.script = [("? Allow write_file", None)]  # input ends when asked
    model = ScriptedModel([asks(call("w", "write_file", path="out.txt", content="x")), AssistantMessage("done")])
    options = Options("go", db=str(tmp_path / "s.db"), session="f", root=str(tmp_path), **flags)  # type: ignore[arg-type]
    with trio.fail_after(10):
        code = await run(options, model=model, read_line=terminal.read_line, write=terminal.write, handle_sigint=False)
    return code, terminal.text


async def test_yes_allow_and_deny_set_the_tool_policy(tmp_path: Path) -> None:
    code, text = await _run_writing(tmp_path, yes=True)
    assert code == 0 and "? Allow" not in text and (tmp_path / "out.txt").exists()
    (tmp_path / "out.txt").unlink()
    code, text = await _run_writing(tmp_path, allow=("write_*",))
    assert "? Allow" not in text and (tmp_path / "out.txt").exists()
    (tmp_path / "out.txt").unlink()
    code, text = await _run_writing(tmp_path, yes=True, deny=("write_file",))
    assert "<- write_file failed: rejected: write_file is denied by the tool policy" in text
    assert not (tmp_path / "out.txt").exists()
    code, text = await _run_writing(tmp_path)  # the default asks; input ends, so it is declined
    assert "? Allow write_file" in text and "(input ended: declining)" in text
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.skipif(find_bwrap().path is None, reason=f"no working bwrap: {find_bwrap().problem}")
async def test_the_sandbox_flag_confines_bash_and_the_file_tools(tmp_path: Path) -> None:
    terminal = FakeTerminal()
    calls = (call("b", "bash", command="echo x > out.txt"), call("w", "write_file", path="out.txt", content="x"))
    model = ScriptedModel([asks(*calls), AssistantMessage("done")])
    options = Options("go", db=str(tmp_path / "s.db"), session="f", root=str(tmp_path), yes=True, sandbox="read-only")
    with trio.fail_after(20):
        code = await run(options, model=model, read_line=terminal.read_line, write=terminal.write, handle_sigint=False)
    assert code == 0
    results = {m.tool_call_id: m for m in SQLiteSessionStore(options.db).messages("f") if isinstance(m, ToolMessage)}
    assert "Read-only file system" in str(results["b"].content)
    assert "the workspace is read-only (sandbox level read-only)" in str(results["w"].content)
    assert not (tmp_path / "out.txt").exists()


async def test_slash_commands_in_chat(tmp_path: Path) -> None:
    from orchestrator.cli.chat import chat

    lines = ["/help", "count one two", "count three", "count four five six", "/diagram", "/compact", "/sessions"]
    lines += ["/nope", "/plan", "/new", "/quit", "never read"]
    script = iter(lines)

    async def read_line() -> str:
        return next(script) + "\n"

    terminal = FakeTerminal()
    options = Options(None, db=str(tmp_path / "s.db"), session="sc", root=str(tmp_path))
    with trio.fail_after(20):
        code = await chat(options, read_line=read_line, write=terminal.write, err=terminal.write, handle_sigint=False)
    assert code == 0
    text = terminal.text
    assert "/plan TASK" in text and "/quit" in text  # the help
    assert "last run: idle -start-> setup -request_model-> awaiting_model" in text
    assert "[awaiting_tool]" in text and "[completed]" in text and "[failed]" not in text
    assert "compacted: 12 messages -> " in text
    assert "* sc " in text  # /sessions marks the current one
    assert "unknown command /nope (try /help)" in text
    assert "usage: /plan WHAT TO PLAN" in text
    assert "new session session-" in text
    assert next(script) == "never read"
    stored = SQLiteSessionStore(tmp_path / "s.db").messages("sc")
    assert len(stored) < 12 and "Summary of earlier conversation" in str(stored[0])


def test_without_rich_the_cli_says_how_to_get_it(monkeypatch: object, capsys: object) -> None:
    import pytest

    from orchestrator.cli.main import command

    mp = pytest.MonkeyPatch()
    mp.setitem(sys.modules, "rich", None)
    try:
        assert command("chat", []) == 2
    finally:
        mp.undo()
    assert "pip install 'orchestrator[cli]'" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_a_permission_left_waiting_by_a_killed_run_is_asked_again_and_settled(tmp_path: Path) -> None:
    killed = Cli(tmp_path, "write draft", "--session", "w")
    killed.expect("? Allow write_file")
    killed.proc.kill()
    assert killed.proc.wait(timeout=20) == -signal.SIGKILL
    [pending] = SQLiteSessionStore(killed.db).pending_approvals("w")
    assert (pending.event, pending.payload["name"]) == ("tool_approval", "write_file")

    cli = Cli(tmp_path, "count one", "--session", "w")
    cli.expect(f"(the previous run stopped while waiting for tool_approval {pending.tool_call_id})")
    cli.expect("? Allow write_file")
    cli.send("y")
    code, out, err = cli.finish()
    assert code == 0, err
    assert "Your message has 2 words." in out
    results = [m for m in SQLiteSessionStore(cli.db).messages("w") if isinstance(m, ToolMessage)]
    assert (results[0].name, results[0].status) == ("write_file", ToolStatus.FAILED)
    assert results[0].content == "not run: write_file was approved after its process stopped; call it again"
    assert not (tmp_path / "notes.txt").exists()


def test_the_responses_and_gemini_adapters_can_be_named_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.providers import GeminiModel, OpenAIResponsesModel
    from orchestrator.providers.choice import ModelUnavailable, build_model

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GEMINI_", "GOOGLE_"))}
    for spec, variable in (
        ("openai-responses:gpt-5-mini", "OPENAI_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY"),
    ):
        code, out, err = Cli(tmp_path, "hello there", "--model", spec, env=env).finish()
        assert code == 2
        assert f"error: --model {spec}: set {variable}" in err and out == ""
    for name in ("GEMINI_API_KEY", "GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    monkeypatch.setenv("OPENAI_API_KEY", "o-key")
    gemini = build_model("gemini:gemini-2.5-pro", plan_mode=False)
    assert isinstance(gemini, GeminiModel) and gemini.model == "gemini-2.5-pro" and gemini.api_key == "g-key"
    responses = build_model("openai-responses:gpt-5-mini", plan_mode=False)
    assert isinstance(responses, OpenAIResponsesModel) and responses.model == "gpt-5-mini"
    with pytest.raises(ModelUnavailable, match="gemini:NAME"):
        build_model("mistral:large", plan_mode=False)
    assert main(["hi", "--model", "gemini"]) == 2  # no name part: a usage error
