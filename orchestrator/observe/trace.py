"""A request's own path through its machine, as a Mermaid flowchart.

Every state and edge of the definition is drawn; the edges the request took
are highlighted (``linkStyle``) and labelled with the order in which they were
taken, visited states get the ``visited`` class and each region's current
state the ``current`` class. Works on a finished or a running request:
``trace_mermaid(client.transitions(session_id))``. The requests its subagents
ran (``children``) are drawn inside it, each as a nested subgraph with its own
machine and path, linked from the parent's ``awaiting_tool`` state; a request's
event stream alone gives them too (``children_from_events``), as a web node of
the cluster draws a run a worker carried.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from machines.build import Step
from machines.definition import MachineDefinition, Region
from machines.request import REQUEST
from orchestrator.events import AgentEvent, SubagentStartedEvent, TransitionEvent

_INDENT = "  "
_SHOWN_STEPS = 4

STYLE_TAKEN = "stroke:#1f6feb,stroke-width:3px"
STYLE_UNKNOWN = "stroke:#d1242f,stroke-width:3px,stroke-dasharray:4"
STYLE_DELEGATION = "stroke:#8250df,stroke-width:2px,stroke-dasharray:3"
CLASS_DEFS = (
    "classDef visited fill:#dbe9ff,stroke:#1f6feb",
    "classDef current fill:#ffd8a8,stroke:#d9480f,stroke-width:3px",
)


def steps_from_events(events: Iterable[AgentEvent], session_id: str | None = None) -> list[Step]:
    """The Steps carried by the TransitionEvents among ``events``, in order.

    With ``session_id``, only that session's: a stream also carries the events its
    subagents' requests forwarded, under their own sessions.
    """
    return [
        Step(e.machine, e.region, e.source, e.trigger, e.dest)
        for e in events
        if isinstance(e, TransitionEvent) and session_id in (None, e.session_id)
    ]


def _node(region: Region, state: str, prefix: str = "") -> str:
    return f"{prefix}{region.name}__{state}"


def _numbers(positions: list[int]) -> str:
    if len(positions) <= _SHOWN_STEPS:
        return ", ".join(map(str, positions))
    shown = ", ".join(map(str, positions[: _SHOWN_STEPS - 1]))
    return f"{shown} … {positions[-1]}, {len(positions)} times"


def _label(text: str) -> str:
    """Text safe inside a quoted Mermaid label (ids come from models and users)."""
    return text.replace('"', "#quot;").replace("\n", " ").replace("\r", " ")


def _region_lines(region: Region, prefix: str = "") -> list[str]:
    lines = [f'subgraph {prefix}region_{region.name}["{region.name}"]', f"{_INDENT}direction LR"]
    lines.append(f'{_INDENT}{prefix}{region.name}__start((" "))')
    for state in region.states:
        shape = ('(["', '"])') if state.final else ('("', '")')
        lines.append(f"{_INDENT}{_node(region, state.name, prefix)}{shape[0]}{state.name}{shape[1]}")
    lines.append("end")
    return lines


@attrs.frozen
class NestedTrace:
    """A child request's path (a subagent's), drawn inside its parent's trace.

    ``label`` names it (tool and call), ``steps`` are its transitions and
    ``children`` its own children's paths.
    """

    label: str
    session_id: str
    tool_call_id: str
    steps: tuple[Step, ...]
    children: tuple[NestedTrace, ...] = ()


@runtime_checkable
class ChildTraces(Protocol):
    """An extension that started child requests (subagents) of a session's requests."""

    def child_traces(self, session_id: str, request_id: str | None = None) -> list[NestedTrace]:
        """The paths of the children of ``session_id``'s latest request (if it is ``request_id``), in start order."""
        ...


def children_from_events(events: Iterable[AgentEvent], session_id: str) -> list[NestedTrace]:
    """The paths of the child requests (subagents) of ``session_id``'s request, nested, from its event stream.

    A request's stream carries its children's events under their own sessions: each ``subagent_started`` names
    a child session and the call that ran it, and the child's TransitionEvents give its path. Children are in
    start order; a child session started twice (its call run again after a resume) is drawn once, with every
    step of it.
    """
    started: dict[str, list[SubagentStartedEvent]] = {}
    steps: dict[str, list[Step]] = {}
    seen: set[str] = set()
    for event in events:
        if isinstance(event, SubagentStartedEvent) and event.child_session_id not in seen:
            seen.add(event.child_session_id)
            started.setdefault(event.session_id, []).append(event)
        elif isinstance(event, TransitionEvent):
            steps.setdefault(event.session_id, []).append(_step(event))

    def under(parent: str, depth: int) -> tuple[NestedTrace, ...]:
        if depth > len(seen):  # a cycle of session ids cannot come from a real stream; stop rather than loop
            return ()
        return tuple(
            NestedTrace(
                label=f"{child.agent} {child.tool_call_id}",
                session_id=child.child_session_id,
                tool_call_id=child.tool_call_id,
                steps=tuple(steps.get(child.child_session_id, ())),
                children=under(child.child_session_id, depth + 1),
            )
            for child in started.get(parent, ())
        )

    return list(under(session_id, 0))


def _step(event: TransitionEvent) -> Step:
    return Step(event.machine, event.region, event.source, event.trigger, event.dest)


LINK_FROM = ("phase", "awaiting_tool")
"""The parent's state (region, state) a child's machine is linked from: its call ran there."""


class _Chart:
    """The lines and link numbers of one trace, its machines drawn one after another."""

    def __init__(self, definition: MachineDefinition) -> None:
        self.definition = definition
        self.edges: list[tuple[str, str, str, str]] = []
        for region in definition.regions:
            for transition in region.transitions:
                for source in transition.source:
                    key = (region.name, source, transition.trigger, transition.dest)
                    if key not in self.edges:
                        self.edges.append(key)
        self.links: list[str] = []
        self.taken: list[int] = []
        self.unknown: list[int] = []
        self.delegations: list[int] = []
        self.current: list[str] = []
        self.visited: list[str] = []

    def _link(self, line: str) -> int:
        self.links.append(_INDENT + line)
        return len(self.links) - 1

    def machine(self, steps: Sequence[Step], prefix: str) -> list[str]:
        """The region subgraphs of one request (their edges go to ``links``)."""
        definition = self.definition
        mine = [s for s in steps if s.machine == definition.name]
        taken: dict[tuple[str, str, str, str], list[int]] = {}
        for position, step in enumerate(mine, start=1):
            taken.setdefault((step.region, step.source, step.trigger, step.dest), []).append(position)
        unknown = [key for key in taken if key not in self.edges]
        lines: list[str] = []
        for region in definition.regions:
            lines += _region_lines(region, prefix)
        for region in definition.regions:
            self._link(f"{prefix}{region.name}__start --> {_node(region, region.initial, prefix)}")
        regions = {region.name: region for region in definition.regions}
        for key in [*self.edges, *unknown]:
            region_name, source, trigger, dest = key
            if region_name not in regions:
                continue
            region = regions[region_name]
            positions = taken.get(key)
            label = trigger if positions is None else f"{trigger} ({_numbers(positions)})"
            if key in unknown:
                label += " not in definition"
            arrow = "-.->" if key in unknown else "-->"
            link = self._link(f'{_node(region, source, prefix)} {arrow}|"{label}"| {_node(region, dest, prefix)}')
            if key in unknown:
                self.unknown.append(link)
            elif positions is not None:
                self.taken.append(link)
        for region in definition.regions:
            in_region = [s for s in mine if s.region == region.name]
            now = in_region[-1].dest if in_region else region.initial
            self.current.append(_node(region, now, prefix))
            for state in region.state_names:
                seen = any(state in (s.source, s.dest) for s in in_region)
                if seen and state != now:
                    self.visited.append(_node(region, state, prefix))
        return lines

    def children(self, children: Sequence[NestedTrace], prefix: str) -> list[str]:
        """Each child as a subgraph holding its machine (and its own children), linked from the parent."""
        lines: list[str] = []
        names = {region.name: region for region in self.definition.regions}
        region = names.get(LINK_FROM[0])
        for number, child in enumerate(children, start=1):
            inner = f"{prefix}c{number}_"
            title = _label(f"{child.label} · session {child.session_id}")
            lines.append(f'subgraph {inner}machine["{title}"]')
            lines.append(f"{_INDENT}direction LR")
            if region is not None and LINK_FROM[1] in region.state_names:
                link = self._link(
                    f'{_node(region, LINK_FROM[1], prefix)} -.->|"{_label(child.tool_call_id)}"| {inner}machine'
                )
                self.delegations.append(link)
            lines += [_INDENT + line for line in self.machine(child.steps, inner)]
            lines += [_INDENT + line for line in self.children(child.children, inner)]
            lines.append("end")
        return lines


def trace_mermaid(
    steps: Sequence[Step], definition: MachineDefinition = REQUEST, children: Sequence[NestedTrace] = ()
) -> str:
    """Mermaid flowchart of ``definition`` with the path of ``steps`` highlighted.

    Steps of other machines are left out; a step that matches no edge of the
    definition is drawn as a red dashed edge, so a broken path shows. Each of
    ``children`` (subagent requests) is drawn as a nested subgraph holding its
    own machine and path, linked by a dotted edge (labelled with the tool call)
    from the parent's ``awaiting_tool`` state.
    """
    chart = _Chart(definition)
    mine = [s for s in steps if s.machine == definition.name]
    lines = ["---", f"title: {definition.name} trace", "---", "flowchart LR"]
    lines.append(f"{_INDENT}%% {len(mine)} transitions taken")
    body = chart.machine(steps, "")
    body += chart.children(children, "")
    lines += [_INDENT + line for line in body]
    lines += chart.links
    if chart.taken:
        lines.append(f"{_INDENT}linkStyle {','.join(map(str, chart.taken))} {STYLE_TAKEN}")
    if chart.unknown:
        lines.append(f"{_INDENT}linkStyle {','.join(map(str, chart.unknown))} {STYLE_UNKNOWN}")
    if chart.delegations:
        lines.append(f"{_INDENT}linkStyle {','.join(map(str, chart.delegations))} {STYLE_DELEGATION}")
    lines += [_INDENT + line for line in CLASS_DEFS]
    if chart.visited:
        lines.append(f"{_INDENT}class {','.join(chart.visited)} visited")
    lines.append(f"{_INDENT}class {','.join(chart.current)} current")
    return "\n".join(lines) + "\n"
