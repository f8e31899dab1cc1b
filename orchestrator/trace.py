"""A request's own path through its machine, as a Mermaid flowchart.

Every state and edge of the definition is drawn; the edges the request took
are highlighted (``linkStyle``) and labelled with the order in which they were
taken, visited states get the ``visited`` class and each region's current
state the ``current`` class. Works on a finished or a running request:
``trace_mermaid(client.transitions(session_id))``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from machines.build import Step
from machines.definition import MachineDefinition, Region
from machines.request import REQUEST
from orchestrator.events import AgentEvent, TransitionEvent

_INDENT = "  "
_SHOWN_STEPS = 4

STYLE_TAKEN = "stroke:#1f6feb,stroke-width:3px"
STYLE_UNKNOWN = "stroke:#d1242f,stroke-width:3px,stroke-dasharray:4"
CLASS_DEFS = (
    "classDef visited fill:#dbe9ff,stroke:#1f6feb",
    "classDef current fill:#ffd8a8,stroke:#d9480f,stroke-width:3px",
)


def steps_from_events(events: Iterable[AgentEvent]) -> list[Step]:
    """The Steps carried by the TransitionEvents among ``events``, in order."""
    return [Step(e.machine, e.region, e.source, e.trigger, e.dest) for e in events if isinstance(e, TransitionEvent)]


def _node(region: Region, state: str) -> str:
    return f"{region.name}__{state}"


def _numbers(positions: list[int]) -> str:
    if len(positions) <= _SHOWN_STEPS:
        return ", ".join(map(str, positions))
    shown = ", ".join(map(str, positions[: _SHOWN_STEPS - 1]))
    return f"{shown} … {positions[-1]}, {len(positions)} times"


def _region_lines(region: Region) -> list[str]:
    lines = [f'subgraph region_{region.name}["{region.name}"]', f"{_INDENT}direction LR"]
    lines.append(f'{_INDENT}{region.name}__start((" "))')
    for state in region.states:
        shape = ('(["', '"])') if state.final else ('("', '")')
        lines.append(f"{_INDENT}{_node(region, state.name)}{shape[0]}{state.name}{shape[1]}")
    lines.append("end")
    return lines


def trace_mermaid(steps: Sequence[Step], definition: MachineDefinition = REQUEST) -> str:
    """Mermaid flowchart of ``definition`` with the path of ``steps`` highlighted.

    Steps of other machines are left out; a step that matches no edge of the
    definition is drawn as a red dashed edge, so a broken path shows.
    """
    mine = [s for s in steps if s.machine == definition.name]
    taken: dict[tuple[str, str, str, str], list[int]] = {}
    for position, step in enumerate(mine, start=1):
        taken.setdefault((step.region, step.source, step.trigger, step.dest), []).append(position)

    edges: list[tuple[str, str, str, str]] = []
    for region in definition.regions:
        for transition in region.transitions:
            for source in transition.source:
                key = (region.name, source, transition.trigger, transition.dest)
                if key not in edges:
                    edges.append(key)
    unknown = [key for key in taken if key not in edges]

    lines = ["---", f"title: {definition.name} trace", "---", "flowchart LR"]
    lines.append(f"{_INDENT}%% {len(mine)} transitions taken")
    for region in definition.regions:
        lines += [_INDENT + line for line in _region_lines(region)]
    link = 0
    taken_links: list[int] = []
    unknown_links: list[int] = []
    for region in definition.regions:
        lines.append(f"{_INDENT}{region.name}__start --> {_node(region, region.initial)}")
        link += 1
    regions = {region.name: region for region in definition.regions}
    for key in [*edges, *unknown]:
        region_name, source, trigger, dest = key
        if region_name not in regions:
            continue
        region = regions[region_name]
        positions = taken.get(key)
        label = trigger if positions is None else f"{trigger} ({_numbers(positions)})"
        if key in unknown:
            label += " not in definition"
            unknown_links.append(link)
        elif positions is not None:
            taken_links.append(link)
        arrow = "-.->" if key in unknown else "-->"
        lines.append(f'{_INDENT}{_node(region, source)} {arrow}|"{label}"| {_node(region, dest)}')
        link += 1

    if taken_links:
        lines.append(f"{_INDENT}linkStyle {','.join(map(str, taken_links))} {STYLE_TAKEN}")
    if unknown_links:
        lines.append(f"{_INDENT}linkStyle {','.join(map(str, unknown_links))} {STYLE_UNKNOWN}")
    lines += [_INDENT + line for line in CLASS_DEFS]
    current: list[str] = []
    visited: list[str] = []
    for region in definition.regions:
        in_region = [s for s in mine if s.region == region.name]
        now = in_region[-1].dest if in_region else region.initial
        current.append(_node(region, now))
        for state in region.state_names:
            seen = any(state in (s.source, s.dest) for s in in_region)
            if seen and state != now:
                visited.append(_node(region, state))
    if visited:
        lines.append(f"{_INDENT}class {','.join(visited)} visited")
    lines.append(f"{_INDENT}class {','.join(current)} current")
    return "\n".join(lines) + "\n"
