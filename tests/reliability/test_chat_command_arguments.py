"""Every slash command of ``chat`` given a bad argument (unknown, missing, extra or malformed, a number out of
range, a path that cannot be written) says why in one line and the session goes on: driven through a
pseudo-terminal, each case is followed by a turn that still completes and a clean /quit."""

from __future__ import annotations

from pathlib import Path

from test_cli_terminal import Chat

TRACEBACK_MARKS = ("Traceback", "ORCHESTRATOR_TRACEBACK", "chat: ")


def refused(chat: Chat, line: str, said: str) -> None:
    chat.send(line)
    chat.expect(said)


def still_usable(chat: Chat) -> None:
    """A turn still runs, /quit leaves with 0, and nothing printed a traceback or an error that ended the chat."""
    chat.send("count these four words")
    chat.expect("Your message has 4 words.")
    chat.turn_done()
    assert chat.quit() == 0
    assert not any(mark in chat.screen for mark in TRACEBACK_MARKS), chat.screen


def test_unknown_commands_and_arguments_to_commands_that_take_none(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "extras")
    refused(chat, "/nosuch", "unknown command /nosuch (try /help)")
    refused(chat, "/", "unknown command / (try /help)")
    for name in ("/usage", "/context", "/mcp", "/help", "/new", "/sessions", "/compact", "/diagram", "/quit"):
        refused(chat, f"{name} now please", f"{name} takes no arguments (got 'now please'); /help lists the commands")
    refused(chat, "/title", "no title yet")  # /new x did not switch sessions
    refused(chat, "/plan", "usage: /plan WHAT TO PLAN")
    still_usable(chat)
    assert chat.messages("extras")  # the turn ran in the session the chat started with


def test_fork_with_a_bad_turn(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "forks")
    chat.send("count these words")
    chat.turn_done()
    for bad in ("abc", "-1", "1 2", "²", "99999999999999999999"):
        refused(chat, f"/fork {bad}", "usage: /fork [TURN] (a turn number; /usage lists them)")
    for out_of_range in ("999", "0"):
        refused(chat, f"/fork {out_of_range}", "cannot fork: the session 'forks' has 1 turns; fork from turn 1 to 1")
    refused(chat, "/title", "title: count these words")  # still in the session, not a fork
    still_usable(chat)


def test_model_with_a_bad_spec_or_effort(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "models")
    refused(chat, "/model nosuch", "unknown model 'nosuch': use scripted or openai:NAME")
    refused(chat, "/model gpt-4o", "unknown model 'gpt-4o'")
    refused(chat, "/model scripted high", "the scripted model has no reasoning effort")
    refused(chat, "/model openai:gpt-x high extra", "usage: /model [SPEC [EFFORT]] (one spec and at most one effort)")
    refused(chat, "/model anthropic:claude-x lots", "model not switched:")  # no key here, and not a budget
    refused(chat, "/model", "model: scripted")
    still_usable(chat)


def test_permissions_with_a_bad_tool_or_verdict(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "rules")
    usage = "usage: /permissions TOOL allow|ask|deny (a tool name or pattern)"
    refused(chat, "/permissions bash", usage)
    refused(chat, "/permissions bash maybe", usage)
    refused(chat, "/permissions bash allow extra", usage)
    refused(chat, "/permissions allow", usage)
    refused(chat, "/permissions [ allow", "permissions not changed: '[' is not a tool name or pattern")
    refused(chat, "/permissions b/ash deny", "permissions not changed: 'b/ash' is not a tool name or pattern")
    refused(chat, "/permissions exit_plan_mode deny", "exit_plan_mode: deny for the rest of this session")
    chat.send("count these words")
    chat.turn_done()  # the model has been offered the tools now
    refused(chat, "/permissions no_such_tool allow", "permissions not changed: no tool matches 'no_such_tool' (the")
    refused(chat, "/permissions nosuch_* deny", "permissions not changed: no tool matches 'nosuch_*'")
    refused(chat, "/permissions word_* deny", "word_*: deny for the rest of this session")
    chat.send("/permissions")
    chat.expect("every other tool:")
    listing = chat.screen.rsplit("> /permissions\r\n", 1)[1]
    assert "no_such_tool" not in listing and "nosuch_*" not in listing and "[ " not in listing
    chat.send("count these four words")
    chat.expect("word_count is denied by the tool policy")  # the rule that was taken applies
    chat.turn_done()
    assert chat.quit() == 0
    assert not any(mark in chat.screen for mark in TRACEBACK_MARKS), chat.screen


def test_resume_a_number_or_id_that_is_not_there(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "third")
    refused(chat, "/resume 1", "no stored sessions in")
    for _ in range(3):
        chat.send("count these words")
        chat.turn_done()
        chat.send("/new")
        chat.expect("new session session-")
    refused(chat, "/resume 42", "no session number 42: there are 3 (/resume lists them)")
    refused(chat, "/resume 0", "no session number 0: there are 3 (/resume lists them)")
    refused(chat, "/resume ²", "no stored session '²' (/resume lists them)")
    refused(chat, "/resume 1 2", "no stored session '1 2' (/resume lists them)")
    refused(chat, "/resume nosuch-id", "no stored session 'nosuch-id' (/resume lists them)")
    chat.send("/resume")
    chat.expect("resume which (number or id; empty keeps this one)> ")
    refused(chat, "7", "no session number 7: there are 3 (/resume lists them)")
    still_usable(chat)


def test_export_and_title_where_nothing_can_be_written(tmp_path: Path) -> None:
    chat = Chat(tmp_path, "--session", "files")
    chat.send("count these words")
    chat.turn_done()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    refused(chat, f"/export {blocker}/out.md", f"cannot write {blocker}/out.md: Not a directory")
    refused(chat, f"/export {tmp_path}", f"cannot write {tmp_path}: Is a directory")
    titles = Path(f"{chat.db}.titles.json")
    titles.mkdir()  # the titles file cannot be replaced
    refused(chat, "/title Counting", "cannot keep the title of files: Is a directory")
    refused(chat, "/fork", "forked files into files-fork-")
    assert [p.name for p in titles.parent.iterdir() if ".titles.json." in p.name] == []  # no half-written file
    still_usable(chat)
    assert not (blocker.parent / "out.md").exists()
