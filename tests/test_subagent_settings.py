"""A subagent of the settings with its own ``model`` and ``tools``: real settings files in a temporary project;
the child's model calls go to LLMock (a real HTTP server on loopback), whose journal shows which model they name
and which tools they offer; what cannot be used stops the command at start with the file, line, key and reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from test_project_config import cli, values

from orchestrator import AssistantMessage, ScriptedModel, ToolMessage
from orchestrator.cli import Options, run
from orchestrator.extensions.files.filesystem import filesystem_tools
from orchestrator.messages import ToolCall, ToolStatus
from orchestrator.project.config import Flags, load_config
from orchestrator.project.settings import SUBAGENT_TOOLS, ConfigError

llmock_testing = pytest.importorskip(
    "llmock.testing", reason="llmock is not installed (pip install -e '.[test]'): the child's model is not served"
)
from llmock.pytest_plugin import LLMock  # noqa: E402


@pytest.fixture(autouse=True)
def no_user_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user configuration directory of the test's own, empty; no provider keys from the machine."""
    (tmp_path / "xdg" / "orchestrator").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    (top / "src").mkdir()
    return top


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with llmock_testing.LLMockServer() as running:
        yield running


@pytest.fixture
def mock(server: Any, monkeypatch: pytest.MonkeyPatch) -> LLMock:
    chosen = LLMock(server).reset()
    monkeypatch.setenv("OPENAI_BASE_URL", chosen.base_url("openai"))
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    return chosen


SETTINGS = """\
model = "scripted"

[subagents.reviewer]
description = "Reviews a change"
system_prompt = "You review."
model = "openai:child-model-1"
tools = ["read_file", "grep"]

[subagents.helper]
description = "Helps"
system_prompt = "You help."
"""


async def _run(repo: Path, parent: ScriptedModel) -> tuple[int, str]:
    written: list[str] = []
    options = Options("review it", db=str(repo / "s.db"), session="s", root=str(repo), project=str(repo / "src"))

    async def no_lines() -> str | None:
        return None

    with trio.fail_after(60):
        code = await run(options, model=parent, read_line=no_lines, write=written.append, handle_sigint=False)
    return code, "".join(written)


def _offered(body: Any) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools", [])}


async def test_the_subagent_calls_its_own_model_offering_only_its_tools(repo: Path, mock: LLMock) -> None:
    (repo / ".orchestrator.toml").write_text(SETTINGS)
    mock.reply("The change looks fine.")
    parent = ScriptedModel(
        [
            AssistantMessage("", tool_calls=[ToolCall("c1", "reviewer", {"task": "review src"})]),
            AssistantMessage("done"),
        ]
    )
    code, screen = await _run(repo, parent)
    assert code == 0, screen
    requests = mock.requests
    assert len(requests) == 1, requests
    assert requests[0].model == "child-model-1" and requests[0].body["model"] == "child-model-1"
    assert _offered(requests[0].body) == {"read_file", "grep"}
    assert "You review." in json.dumps(requests[0].body["messages"])
    # the parent stayed on its own model, which got the child's answer as the tool's result
    assert len(parent.requests) == 2
    assert {"reviewer", "helper", "write_file", "bash"} <= {tool.name for tool in parent.requests[0].tools}
    results = [m for m in parent.requests[1].messages if isinstance(m, ToolMessage)]
    assert [(r.status, r.content) for r in results] == [(ToolStatus.SUCCEEDED, "The change looks fine.")]


async def test_a_subagent_without_model_or_tools_runs_on_the_agents_model_with_every_file_tool(
    repo: Path, mock: LLMock
) -> None:
    (repo / ".orchestrator.toml").write_text(SETTINGS)
    parent = ScriptedModel(
        [
            AssistantMessage("", tool_calls=[ToolCall("c1", "helper", {"task": "help"})]),
            AssistantMessage("helped"),  # the child's request, on the same model
            AssistantMessage("done"),
        ]
    )
    code, screen = await _run(repo, parent)
    assert code == 0, screen
    assert mock.requests == []
    child = parent.requests[1]
    assert {tool.name for tool in child.tools} == set(SUBAGENT_TOOLS)


def test_the_known_tools_are_the_file_tools() -> None:
    assert set(SUBAGENT_TOOLS) == {tool.name for tool in filesystem_tools(".")}


@pytest.mark.parametrize(
    ("body", "key", "line", "reason"),
    [
        ('tools = ["read_file", "rm_rf"]', "subagents.r.tools", 5, "unknown tool 'rm_rf' (a subagent may have: read_file"),
        ('tools = "read_file"', "subagents.r.tools", 5, "must be a list of non-empty strings, got 'read_file'"),
        ('model = "gpt-4"', "subagents.r.model", 5, "unknown model 'gpt-4': use scripted or openai:NAME"),
        ('model = ""', "subagents.r.model", 5, "must be a non-empty string"),
        ('modle = "openai:x"', "subagents.r.modle", 5, "unknown key (known: description, model, system_prompt, tools)"),
    ],
)
def test_a_bad_model_or_tool_list_names_the_file_line_key_and_reason(
    repo: Path, body: str, key: str, line: int, reason: str
) -> None:
    path = repo / ".orchestrator.toml"
    path.write_text(f'model = "scripted"\n[subagents.r]\ndescription = "d"\nsystem_prompt = "p"\n{body}\n')
    with pytest.raises(ConfigError) as refused:
        load_config(Flags(), repo)
    assert (refused.value.path, refused.value.key, refused.value.line) == (path, key, line)
    assert refused.value.reason.startswith(reason), refused.value.reason
    result = cli("run", "hello", "--db", str(repo / "s.db"), cwd=repo / "src")
    assert result.returncode == 2 and result.stderr == f"error: {refused.value}\n"
    assert not (repo / "s.db").exists()


@pytest.mark.parametrize("command", ["run", "chat", "serve", "worker"])
def test_a_subagent_model_without_its_key_stops_each_front_end_at_start(repo: Path, command: str) -> None:
    path = repo / ".orchestrator.toml"
    path.write_text(SETTINGS)
    db = repo / "s.db"
    given = {
        "run": ["run", "hello", "--db", str(db)],
        "chat": ["chat", "--db", str(db)],
        "serve": ["serve", "--port", "0", "--no-token", "--db", str(db), "--project", str(repo)],
        "worker": ["worker", "--db", f"sqlite:///{db}", "--project", str(repo)],
    }[command]
    result = cli(*given, cwd=repo / "src")
    assert result.returncode == 2, result.stderr
    name = f"{command}: " if command in ("serve", "worker") else "error: "
    assert result.stderr == (
        f"{name}{path}:6: subagents.reviewer.model: openai:child-model-1: set OPENAI_API_KEY"
        " (or OPENAI_BASE_URL for a local server)\n"
    ), result.stderr
    assert not db.exists()


def test_config_shows_the_subagents_model_and_tools_with_their_source(repo: Path) -> None:
    path = repo / ".orchestrator.toml"
    path.write_text(SETTINGS)
    found = values(cli("config", "--json", cwd=repo / "src"))
    assert found["subagents.reviewer.model"] == ("openai:child-model-1", str(path))
    assert found["subagents.reviewer.tools"] == ("read_file, grep", str(path))
    assert "subagents.helper.model" not in found and "subagents.helper.tools" not in found
    first = load_config(Flags(), repo).fingerprint()
    path.write_text(SETTINGS.replace('"grep"]', '"glob"]'))
    assert load_config(Flags(), repo).fingerprint() != first
