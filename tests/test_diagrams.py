"""Generated diagrams: committed files are current, every edge is drawn, traces follow real requests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from support import asks, call

from machines.build import Step
from machines.diagrams import COMPOSED, LINKS, all_diagrams, composed_diagram, graphviz_available, machine_diagram
from machines.registry import all_definitions
from orchestrator import AgentRunConfig, AssistantMessage, ScriptedModel, create_agent, tool
from orchestrator import diagrams as cli
from orchestrator.events import AgentEvent
from orchestrator.trace import steps_from_events, trace_mermaid

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "diagrams"
REGENERATE = "python -m orchestrator diagrams"
DEFINITIONS = all_definitions()
NAMES = [*DEFINITIONS, COMPOSED]

needs_graphviz = pytest.mark.skipif(
    not graphviz_available(), reason="the graphviz Python package (extra 'diagrams') is not installed"
)
needs_dot = pytest.mark.skipif(cli.dot_program() is None, reason="Graphviz's dot program is not installed")


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    return {d.name: d for d in all_diagrams(dot=graphviz_available())}


def stale_message(path: Path) -> str:
    return f"{path.relative_to(ROOT)} differs from the definitions; regenerate with `{REGENERATE}`"


# committed files -----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_committed_mermaid_is_current(name: str, generated: dict[str, Any]) -> None:
    path = COMMITTED / f"{name}.mmd"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing; generate it with `{REGENERATE}`"
    assert path.read_text(encoding="utf-8") == generated[name].mermaid, stale_message(path)


@needs_graphviz
@pytest.mark.parametrize("name", NAMES)
def test_committed_dot_is_current(name: str, generated: dict[str, Any]) -> None:
    path = COMMITTED / f"{name}.dot"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing; generate it with `{REGENERATE}`"
    assert path.read_text(encoding="utf-8") == generated[name].dot, stale_message(path)


@needs_graphviz
@needs_dot
@pytest.mark.parametrize("name", NAMES)
def test_committed_svg_matches_a_fresh_rendering(name: str, generated: dict[str, Any]) -> None:
    path = COMMITTED / f"{name}.svg"
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing; generate it with `{REGENERATE}`"
    fresh = cli.render_svg(generated[name].dot)
    committed = path.read_text(encoding="utf-8")
    assert committed.lstrip().startswith("<?xml") and "<svg" in committed
    assert cli.svg_signature(committed) == cli.svg_signature(fresh), stale_message(path)


def test_generation_is_deterministic() -> None:
    with_dot = graphviz_available()
    assert all_diagrams(dot=with_dot) == all_diagrams(dot=with_dot)


# content ---------------------------------------------------------------------


def edge_lines(mermaid: str) -> list[tuple[str, str, str]]:
    found = []
    for line in mermaid.splitlines():
        match = re.fullmatch(r"\s*(\S+) --> (\S+): (.*)", line)
        if match:
            found.append((match[1], match[2], match[3]))
    return found


def expected_label(transition: Any) -> str:
    label = transition.trigger
    if transition.guards:
        label += f" [{' & '.join(transition.guards)}]"
    if transition.callbacks:
        label += f" / {', '.join(transition.callbacks)}"
    return label


@pytest.mark.parametrize("name", list(DEFINITIONS))
def test_every_edge_is_drawn_with_its_guards_and_callbacks(name: str) -> None:
    definition = DEFINITIONS[name]
    diagram = machine_diagram(definition, dot=False)
    drawn = {(source, dest): label.split(" | ") for source, dest, label in edge_lines(diagram.mermaid)}
    for region in definition.regions:
        for transition in region.transitions:
            for source in transition.source:
                labels = drawn.get((source, transition.dest), [])
                assert expected_label(transition) in labels, (name, source, transition.trigger)
        assert f"[*] --> {region.initial}" in diagram.mermaid
        for state in region.final_states:
            assert f"{state} --> [*]" in diagram.mermaid
            assert f"class {state} s_final" in diagram.mermaid
    assert diagram.mermaid.startswith(f"---\ntitle: {name}\n---\nstateDiagram-v2\n")
    assert REGENERATE in diagram.mermaid


@needs_graphviz
def test_dot_labels_carry_guards_and_callbacks_and_mark_final_states() -> None:
    dot = machine_diagram(DEFINITIONS["request"]).dot
    assert dot is not None
    assert 'awaiting_model -> awaiting_tool [label="respond [has_tool_calls]\\n/ append_response' in dot
    assert re.search(r"\bcompleted \[label=\"completed\\l\"[^\]]*peripheries=2", dot)
    assert "subgraph cluster_request__phase" in dot and "subgraph cluster_request__mode" in dot


def test_composed_view_nests_every_machine_and_links_them_to_request_states() -> None:
    diagram = composed_diagram(DEFINITIONS, dot=graphviz_available())
    text = diagram.mermaid
    for name, definition in DEFINITIONS.items():
        assert f'state "{name}" as {name} {{' in text
        for region in definition.regions:
            for state in region.state_names:
                assert f"as {name}__{region.name}__{state}\n" in text
    request = text.index('state "request" as request {')
    assert text.index("--\n", request) < text.index('state "mode" as request__mode')
    links = [link for link in LINKS if link.machine in DEFINITIONS]
    assert {link.machine for link in links} >= {"approval", "plan_mode", "steering_inbox"}
    for link in links:
        assert f"{link.machine} --> request: {link.state} {link.verb} {link.region}.{link.target}" in text
        if diagram.dot is not None:
            source = f"{link.machine}__{DEFINITIONS[link.machine].main.name}__{link.state}"
            assert f"{source} -> request__{link.region}__{link.target} [label=" in diagram.dot


def test_drawing_loads_no_diagram_code_into_the_library_import() -> None:
    code = (
        "import sys, orchestrator, orchestrator.trace, machines.registry, machines.diagrams;"
        "machines.registry.all_definitions();"
        "print(sorted(m for m in sys.modules if m.startswith(('transitions.extensions', 'graphviz', 'asyncio'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"


# the command -----------------------------------------------------------------


def test_command_writes_checks_and_reports_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    assert cli.main(["--out", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    expected = {f"{n}.mmd" for n in NAMES}
    if graphviz_available():
        expected |= {f"{n}.dot" for n in NAMES}
        if cli.dot_program():
            expected |= {f"{n}.svg" for n in NAMES}
    assert set(written) == expected
    assert cli.main(["--out", str(out), "--check"]) == (0 if cli.dot_program() and graphviz_available() else 1)
    capsys.readouterr()

    (out / "request.mmd").write_text("stateDiagram-v2\n", encoding="utf-8")
    (out / "gone.mmd").write_text("old\n", encoding="utf-8")
    assert cli.main(["--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert REGENERATE in err
    assert f"{out / 'request.mmd'} (differs)" in err
    assert f"{out / 'gone.mmd'} (no machine generates it)" in err
    assert "approval.mmd" not in err


def test_without_dot_the_sources_are_written_and_the_reason_is_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    assert cli.main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert not list(tmp_path.glob("*.svg"))
    assert {p.name for p in tmp_path.glob("*.mmd")} == {f"{n}.mmd" for n in NAMES}
    if graphviz_available():
        assert {p.name for p in tmp_path.glob("*.dot")} == {f"{n}.dot" for n in NAMES}
        assert "no .svg made: Graphviz's dot program is not on PATH" in printed
    else:
        assert "graphviz Python package is missing" in printed


def test_module_entry_point_dispatches_to_the_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "diagrams", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"diagram sources to {tmp_path}/" in done.stdout
    assert (tmp_path / "request.mmd").read_text(encoding="utf-8") == (COMMITTED / "request.mmd").read_text(
        encoding="utf-8"
    )


# traces ----------------------------------------------------------------------


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


def highlighted(trace: str) -> tuple[list[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """All drawn edges (source, trigger, dest) in link order, and the highlighted ones."""
    edges: list[tuple[str, str, str]] = []
    for line in trace.splitlines():
        match = re.fullmatch(r'\s*(\S+) -(?:->|\.->)(?:\|"([^"]*)"\|)? (\S+)', line)
        if match:
            trigger = (match[2] or "").split(" (")[0]
            edges.append((match[1], trigger, match[3]))
    lit: set[tuple[str, str, str]] = set()
    for line in trace.splitlines():
        match = re.fullmatch(r"\s*linkStyle ([\d,]+) stroke:#1f6feb.*", line)
        if match:
            lit |= {edges[int(i)] for i in match[1].split(",")}
    return edges, lit


def classes(trace: str, name: str) -> set[str]:
    for line in trace.splitlines():
        match = re.fullmatch(rf"\s*class (\S+) {name}", line)
        if match:
            return set(match[1].split(","))
    return set()


async def test_trace_of_a_finished_request_highlights_exactly_the_taken_edges() -> None:
    model = ScriptedModel([asks(call("1", "echo", text="a"), call("2", "echo", text="b")), AssistantMessage("done")])
    client = await create_agent(model, tools=[echo])
    events: list[AgentEvent] = [e async for e in client.stream("hi", config=AgentRunConfig("s"))]
    steps = client.transitions("s")
    assert steps_from_events(events) == steps
    trace = trace_mermaid(steps)
    edges, lit = highlighted(trace)
    taken = {(f"{s.region}__{s.source}", s.trigger, f"{s.region}__{s.dest}") for s in steps}
    assert lit == taken
    request = DEFINITIONS["request"]
    drawn = {
        (f"{r.name}__{source}", t.trigger, f"{r.name}__{t.dest}")
        for r in request.regions
        for t in r.transitions
        for source in t.source
    }
    assert set(edges) - {e for e in edges if e[1] == ""} == drawn
    assert len(edges) == len(drawn) + len(request.regions)
    assert ("mode__normal", "admit_tool", "mode__normal") in lit
    assert '"admit_tool (4, 5)"' in trace
    assert classes(trace, "current") == {"phase__completed", "mode__normal"}
    assert classes(trace, "visited") == {
        f"phase__{s}" for s in ("idle", "setup", "awaiting_model", "awaiting_tool", "answered", "concluding")
    }
    assert f"%% {len(steps)} transitions taken" in trace
    assert trace == trace_mermaid(list(steps))


async def test_trace_of_a_running_request_shows_where_it_is_now() -> None:
    traces: list[str] = []
    client: Any = None

    @tool
    async def look() -> str:
        """Trace the request from inside one of its tools."""
        await trio.lowlevel.checkpoint()
        traces.append(trace_mermaid(client.transitions("live")))
        return "looked"

    model = ScriptedModel([asks(call("1", "look")), AssistantMessage("done")])
    client = await create_agent(model, tools=[look])
    await client.run("go", config=AgentRunConfig("live"))
    (trace,) = traces
    assert classes(trace, "current") == {"phase__awaiting_tool", "mode__normal"}
    _, lit = highlighted(trace)
    assert ("phase__awaiting_model", "respond", "phase__awaiting_tool") in lit
    assert not any(dest.endswith("completed") for _, _, dest in lit)


def test_a_step_outside_the_definition_is_drawn_as_broken() -> None:
    steps = [
        Step("request", "phase", "idle", "start", "setup"),
        Step("request", "phase", "setup", "teleport", "completed"),
        Step("approval", "response", "waiting", "answer", "answered"),
    ]
    trace = trace_mermaid(steps)
    assert 'phase__setup -.->|"teleport (2) not in definition"| phase__completed' in trace
    assert re.search(r"linkStyle \d+ stroke:#d1242f", trace)
    assert "%% 2 transitions taken" in trace
    approval = trace_mermaid(steps, DEFINITIONS["approval"])
    assert classes(approval, "current") == {"response__answered"}


def test_readme_embeds_the_current_request_diagram() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    start = readme.index("<!-- request-diagram: diagrams/request.mmd -->\n```mermaid\n")
    body = readme[start:].split("```mermaid\n", 1)[1].split("\n```", 1)[0]
    assert body + "\n" == (root / "diagrams" / "request.mmd").read_text(), (
        "README's request diagram is stale: paste diagrams/request.mmd (python -m orchestrator diagrams)"
    )
