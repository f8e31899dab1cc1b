"""``${VAR}`` and ``${VAR:-default}`` in a project's ``.mcp.json``: real files in a temporary project, read by
``load_config``, ``config`` and ``run``; a variable with no value and no default stops the command at start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from mcp_servers.harness import npm_server
from test_project_config import cli, values

from orchestrator import AssistantMessage, ScriptedModel, ToolMessage
from orchestrator.cli import Options, run
from orchestrator.extensions.mcp.servers import HttpServer, StdioServer
from orchestrator.messages import ToolCall, ToolStatus
from orchestrator.project.config import Flags, load_config
from orchestrator.project.settings import ConfigError


@pytest.fixture(autouse=True)
def no_user_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user configuration directory of the test's own, empty."""
    (tmp_path / "xdg" / "orchestrator").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    (top / "src").mkdir()
    return top


ENTRIES = {
    "mcpServers": {
        "local": {
            "command": "${MCP_NODE:-node}",
            "args": ["server.js", "--root", "${MCP_ROOT}", "--mode=${MCP_MODE:-fast}"],
            "env": {"TOKEN": "${MCP_TOKEN}", "LEVEL": "${MCP_LEVEL:-info}", "PLAIN": "x"},
        },
        "remote": {
            "type": "http",
            "url": "https://${MCP_HOST:-tracker.example}/mcp",
            "headers": {"Authorization": "Bearer ${MCP_TOKEN}"},
        },
    }
}


def write(repo: Path, data: object) -> Path:
    path = repo / ".mcp.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def test_variables_are_taken_from_the_environment_or_their_default(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(repo, ENTRIES)
    monkeypatch.setenv("MCP_ROOT", "/srv/data")
    monkeypatch.setenv("MCP_TOKEN", "s3cret")
    monkeypatch.setenv("MCP_LEVEL", "")  # empty: the default is used
    monkeypatch.delenv("MCP_NODE", raising=False)
    monkeypatch.delenv("MCP_MODE", raising=False)
    monkeypatch.setenv("MCP_HOST", "mcp.internal")
    servers = {entry.server.name: entry.server for entry in load_config(Flags(), repo).mcp}
    local, remote = servers["local"], servers["remote"]
    assert isinstance(local, StdioServer) and isinstance(remote, HttpServer)
    assert local.command == "node"
    assert list(local.args) == ["server.js", "--root", "/srv/data", "--mode=fast"]
    assert dict(local.env or {}) == {"TOKEN": "s3cret", "LEVEL": "info", "PLAIN": "x"}
    assert remote.url == "https://mcp.internal/mcp"
    assert dict(remote.headers) == {"Authorization": "Bearer s3cret"}


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"command": "${MCP_MISSING}"}, "command"),
        ({"command": "node", "args": ["a", "--root=${MCP_MISSING}"]}, "args[1]"),
        ({"command": "node", "env": {"KEY": "${MCP_MISSING}"}}, "env.KEY"),
        ({"type": "http", "url": "https://${MCP_MISSING}/mcp"}, "url"),
        ({"type": "http", "url": "https://x.example/mcp", "headers": {"X-Key": "${MCP_MISSING}"}}, "headers.X-Key"),
    ],
)
def test_a_variable_without_value_or_default_names_the_file_server_field_and_variable(
    repo: Path, monkeypatch: pytest.MonkeyPatch, entry: dict[str, object], field: str
) -> None:
    monkeypatch.delenv("MCP_MISSING", raising=False)
    path = write(repo, {"mcpServers": {"tools": entry}})
    with pytest.raises(ConfigError) as refused:
        load_config(Flags(), repo)
    error = refused.value
    assert error.path == path and error.key == f"mcpServers.tools.{field}"
    assert "${MCP_MISSING} is not set in the environment and has no default" in error.reason
    assert error.line is not None and "${MCP_MISSING}" in path.read_text().splitlines()[error.line - 1]


def test_run_stops_at_start_on_a_missing_variable_in_one_line(repo: Path) -> None:
    path = write(repo, {"mcpServers": {"files": {"command": "node", "args": ["server.js", "${MCP_UNSET_ROOT}"]}}})
    result = cli("run", "hello", "--trust-project", "--db", str(repo / "s.db"), cwd=repo / "src")
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {path}:7: mcpServers.files.args[1]: ${{MCP_UNSET_ROOT}} is not set in the environment and has"
        " no default (write ${MCP_UNSET_ROOT:-DEFAULT})\n"
    )
    assert not (repo / "s.db").exists()  # nothing started


def test_config_shows_each_variable_and_where_its_value_came_from_never_the_value(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(repo, ENTRIES)
    monkeypatch.setenv("MCP_ROOT", "/srv/data")
    monkeypatch.setenv("MCP_TOKEN", "s3cret")
    for name in ("MCP_NODE", "MCP_MODE", "MCP_LEVEL", "MCP_HOST"):
        monkeypatch.delenv(name, raising=False)
    result = cli("config", "--json", cwd=repo)
    found = values(result)
    default = f"default in {path}"
    assert found["mcp.local.command"] == ("${MCP_NODE}", default)
    assert found["mcp.local.args[2]"] == ("${MCP_ROOT}", "environment")
    assert found["mcp.local.args[3]"] == ("${MCP_MODE}", default)
    assert found["mcp.local.env.TOKEN"] == ("${MCP_TOKEN}", "environment")
    assert found["mcp.local.env.LEVEL"] == ("${MCP_LEVEL}", default)
    assert found["mcp.remote.url"] == ("${MCP_HOST}", default)
    assert found["mcp.remote.headers.Authorization"] == ("${MCP_TOKEN}", "environment")
    assert "s3cret" not in result.stdout


async def test_a_server_whose_args_use_a_variable_starts_and_serves_that_folder(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = npm_server("server-filesystem")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "found-by-variable.txt").write_text("x")
    monkeypatch.setenv("MCP_SHARED_DIR", str(shared))
    server = {"command": "${MCP_NODE:-" + command[0] + "}", "args": [command[1], "${MCP_SHARED_DIR}"]}
    write(repo, {"mcpServers": {"files": server}})
    call = ToolCall("c1", "files__list_directory", {"path": str(shared)})
    model = ScriptedModel([AssistantMessage("", tool_calls=[call]), AssistantMessage("listed")])
    options = Options(
        "list", db=str(repo / "s.db"), session="s", root=str(repo), project=str(repo / "src"), trust_project=True
    )
    written: list[str] = []

    async def no_lines() -> str | None:
        return None

    with trio.fail_after(60):
        code = await run(options, model=model, read_line=no_lines, write=written.append, handle_sigint=False)
    assert code == 0, "".join(written)
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [r.status for r in results] == [ToolStatus.SUCCEEDED], results
    assert "found-by-variable.txt" in results[0].content
