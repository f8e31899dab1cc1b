"""Project configuration: real files in a temporary project, read by run, chat, config, serve and worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp_servers.harness import npm_server

from orchestrator import AssistantMessage, ScriptedModel, SystemMessage
from orchestrator.cli import Options, run
from orchestrator.project.config import Flags, load_config
from orchestrator.project.settings import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_user_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user configuration directory of the test's own (empty unless a test writes settings.toml in it)."""
    home = tmp_path / "xdg"
    (home / "orchestrator").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home / "orchestrator" / "settings.toml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    (top / "src").mkdir()
    return top


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def values(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, str]]:
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    return {row["key"]: (row["value"], row["source"]) for row in body["values"]}


# bad configuration fails at start, naming the file, the line and the reason ----------------------------------


@pytest.mark.parametrize(
    ("file", "text", "said"),
    [
        (".orchestrator.toml", 'model = "scripted"\nmodle = "x"\n', ".orchestrator.toml:2: modle: unknown key"),
        (
            ".orchestrator.toml",
            '[compaction]\nkeep_last = "four"\n',
            ".orchestrator.toml:2: compaction.keep_last: must be a whole number, got 'four'",
        ),
        (".orchestrator.toml", "[permissions\n", ".orchestrator.toml:1: is not valid TOML"),
        (
            ".mcp.json",
            '{"mcpServers": {\n  "files": "npx server-filesystem"\n}}',
            ".mcp.json:2: mcpServers.files: a server must be an object, got str",
        ),
        (".mcp.json", '{"mcpServers": {"x": {"command": "a", "tools": 1}}}', "mcpServers.x.tools: unknown key"),
    ],
)
def test_bad_configuration_fails_run_at_start_with_file_line_and_reason(
    repo: Path, file: str, text: str, said: str
) -> None:
    (repo / file).write_text(text)
    result = cli("run", "hello", "--db", str(repo / "s.db"), cwd=repo / "src")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {repo / file}") and said in lines[0], result.stderr
    assert not (repo / "s.db").exists()  # nothing started


def test_a_bad_user_settings_file_names_itself(repo: Path, no_user_settings: Path) -> None:
    no_user_settings.write_text('trusted_projects = "/"\n')
    result = cli("config", cwd=repo)
    assert result.returncode == 2
    assert (
        result.stderr
        == f"config: {no_user_settings}:1: trusted_projects: must be a list of non-empty strings, got '/'\n"
    )


def test_only_the_user_file_may_trust_projects(repo: Path) -> None:
    (repo / ".orchestrator.toml").write_text(f'trusted_projects = ["{repo}"]\n')
    with pytest.raises(ConfigError) as refused:
        load_config(Flags(), repo)
    assert refused.value.key == "trusted_projects" and refused.value.line == 1
    assert "only the user's settings may trust projects" in refused.value.reason


# precedence: flags, then project, then user -------------------------------------------------------------------


def test_flags_then_project_then_user_each_value_with_its_source(repo: Path, no_user_settings: Path) -> None:
    no_user_settings.write_text(
        '[permissions]\nallow = ["bash"]\ndeny = ["web_*"]\n[compaction]\nkeep_last = 9\nthreshold_tokens = 100\n'
    )
    (repo / ".orchestrator.toml").write_text('[permissions]\nask = ["bash"]\n[compaction]\nkeep_last = 3\n')
    (repo / "src" / ".orchestrator.toml").write_text('[plan_mode]\nwritable = ["docs/**"]\n')
    found = values(cli("config", "--json", cwd=repo / "src"))
    assert found["permissions.bash"] == ("ask", str(repo / ".orchestrator.toml"))
    assert found["permissions.web_*"] == ("deny", str(no_user_settings))
    assert found["compaction.keep_last"] == ("3", str(repo / ".orchestrator.toml"))
    assert found["compaction.threshold_tokens"] == ("100", str(no_user_settings))
    assert found["plan_mode.writable"] == ("docs/**", str(repo / "src" / ".orchestrator.toml"))
    assert found["model"] == ("scripted", "default")
    flagged = values(cli("config", "--json", "--allow", "bash", "--model", "openai:gpt-x", cwd=repo / "src"))
    assert flagged["permissions.bash"] == ("allow", "flag --allow")
    assert flagged["model"] == ("openai:gpt-x", "flag --model")


def test_the_fingerprint_is_stable_and_follows_the_configuration(repo: Path) -> None:
    (repo / "AGENTS.md").write_text("Use tabs.\n")
    first = load_config(Flags(), repo / "src").fingerprint()
    assert load_config(Flags(), repo / "src").fingerprint() == first
    printed = cli("config", cwd=repo / "src").stdout.splitlines()[0]
    assert printed == f"configuration {first}"
    (repo / "AGENTS.md").write_text("Use spaces.\n")
    assert load_config(Flags(), repo / "src").fingerprint() != first
    (repo / "AGENTS.md").write_text("Use tabs.\n")
    assert load_config(Flags(yes=True), repo / "src").fingerprint() != first


# what the agent gets ------------------------------------------------------------------------------------------


async def _run(repo: Path, model: ScriptedModel, **given: object) -> tuple[int, str]:
    written: list[str] = []
    options = Options("hi", db=str(repo / "s.db"), session="s", root=str(repo), project=str(repo / "src"), **given)  # type: ignore[arg-type]

    async def no_lines() -> str | None:
        return None

    with trio.fail_after(60):
        code = await run(options, model=model, read_line=no_lines, write=written.append, handle_sigint=False)
    return code, "".join(written)


async def test_agents_md_of_the_project_reaches_the_system_prompt(repo: Path) -> None:
    (repo / "AGENTS.md").write_text("Run the tests with make test.\n")
    (repo / "src" / "AGENTS.md").write_text("In src, use tabs.\n")
    model = ScriptedModel([AssistantMessage("ok")])
    code, _ = await _run(repo, model)
    assert code == 0
    system = "\n".join(m.content for m in model.requests[0].messages if isinstance(m, SystemMessage))
    assert system.index("Run the tests with make test.") < system.index("In src, use tabs.")


async def test_subagents_of_the_settings_are_offered_as_tools(repo: Path) -> None:
    (repo / ".orchestrator.toml").write_text(
        '[subagents.reviewer]\ndescription = "Reviews a change"\nsystem_prompt = "You review."\n'
    )
    model = ScriptedModel([AssistantMessage("ok")])
    code, _ = await _run(repo, model)
    assert code == 0 and "reviewer" in {tool.name for tool in model.requests[0].tools}


def _mcp_json(repo: Path) -> None:
    command = npm_server("server-filesystem")
    (repo / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"files": {"command": command[0], "args": [*command[1:], str(repo)]}}})
    )


async def test_a_trusted_mcp_server_of_mcp_json_offers_its_tools(repo: Path) -> None:
    _mcp_json(repo)
    model = ScriptedModel([AssistantMessage("ok")])
    code, _ = await _run(repo, model, trust_project=True)
    assert code == 0
    names = {tool.name for tool in model.requests[0].tools}
    assert {"files__read_text_file", "files__list_directory"} <= names


async def test_an_untrusted_mcp_server_is_listed_as_not_started(repo: Path, no_user_settings: Path) -> None:
    _mcp_json(repo)
    model = ScriptedModel([AssistantMessage("ok")])
    code, text = await _run(repo, model)
    assert code == 0
    assert not any(tool.name.startswith("files__") for tool in model.requests[0].tools)
    assert "MCP server files not started: the project is not trusted" in text
    listed = values(cli("config", "--json", cwd=repo / "src"))
    assert listed["mcp.files"][0].endswith(
        "(not started: the project is not trusted (pass --trust-project, or list"
        f" it in trusted_projects of {no_user_settings}))"
    )
    no_user_settings.write_text(f'trusted_projects = ["{repo}"]\n')
    trusted = values(cli("config", "--json", cwd=repo / "src"))
    assert trusted["mcp.files"][0].endswith("(starts with the first request)")
    assert trusted["trusted"] == ("yes", f"{no_user_settings} trusted_projects")


# serve and worker read project files only from --project ------------------------------------------------------


def test_serve_and_worker_read_project_files_only_from_an_explicit_project(repo: Path) -> None:
    (repo / ".orchestrator.toml").write_text("nonsense = 1\n")
    for command in (
        ["serve", "--port", "0", "--no-token", "--db", str(repo / "s.db")],
        ["worker", "--db", f"sqlite:///{repo / 'runs.db'}"],
    ):
        refused = cli(*command, "--project", str(repo), cwd=REPO)
        assert refused.returncode == 2, refused.stderr
        assert (
            refused.stderr == f"{command[0]}: {repo / '.orchestrator.toml'}:1: nonsense: unknown key (known:"
            " compaction, model, permissions, plan_mode, subagents)\n"
        )
    assert not (repo / "s.db").exists() and not (repo / "runs.db").exists()
    # without --project the working directory's files are not read: serve starts
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "serve", "--port", "0", "--no-token", "--db", str(repo / "s.db")],
        cwd=repo,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        while line and not line.startswith("serving on"):
            line = process.stderr.readline()
        assert line.startswith("serving on"), line
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_app_excludes_project(repo: Path) -> None:
    result = cli("worker", "--db", "sqlite:///x.db", "--app", "m:a", "--project", str(repo), cwd=repo)
    assert result.returncode == 2 and "--project and --trust-project do not apply" in result.stderr


async def test_the_default_agent_carries_the_fingerprint_of_its_configuration(repo: Path) -> None:
    from orchestrator.project.agent import open_default_agent

    (repo / "AGENTS.md").write_text("Use tabs.\n")
    config = load_config(Flags(), repo / "src")
    async with open_default_agent(config, ScriptedModel([]), root=str(repo), surface="service") as built:
        assert built.fingerprint == config.fingerprint() == load_config(Flags(), repo / "src").fingerprint()
        assert built.approvals is None  # a service asks only when a settings file gives permissions
