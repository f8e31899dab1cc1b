"""Mermaid and Graphviz diagrams drawn from machine definitions.

Each region is handed to ``transitions``' own ``GraphMachine`` (mermaid and
graphviz engines) with its guards as condition names and its callbacks as
``after`` names, so edges read ``trigger [guard & !other] / callback, ...``.
Multi-region machines and the composed view nest those region graphs.
The diagram extension of ``transitions`` (which imports asyncio) and the
``graphviz`` package are imported only when a diagram is drawn.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from machines.definition import MachineDefinition, Region

COMPOSED = "composed"
NOTICE = "generated from the machine definitions by `python -m orchestrator diagrams`; do not edit"

_INDENT = "  "


class DiagramDependencyMissing(RuntimeError):
    """The ``graphviz`` Python package, needed for DOT output, is not installed."""


@attrs.frozen
class Link:
    """A machine's state that acts while the request is in ``region``.``target``."""

    machine: str
    state: str
    region: str
    target: str
    verb: str


LINKS: tuple[Link, ...] = (
    Link("approval", "waiting", "phase", "awaiting_approval", "holds the request in"),
    Link("plan_mode", "entry_awaiting_approval", "phase", "awaiting_approval", "holds the request in"),
    Link("plan_mode", "exit_awaiting_approval", "phase", "awaiting_approval", "holds the request in"),
    Link("plan_mode", "plan_active", "mode", "plan_active", "holds the request in"),
    Link("tool_approval", "deciding", "phase", "awaiting_tool", "decides each call in"),
    Link("tool_approval", "asking", "phase", "awaiting_approval", "holds the request in"),
    Link("steering_inbox", "open", "phase", "setup", "starts as the request enters"),
    Link("steering_inbox", "holding", "phase", "awaiting_tool", "is taken after each call in"),
    Link("steering_inbox", "holding", "phase", "answered", "is taken in"),
    Link("steering_inbox", "holding", "phase", "steering_interrupt", "moves the request to"),
    Link("steering_inbox", "closed", "phase", "answered", "is reached when nothing waits in"),
    Link("agent_host", "closing", "phase", "cancelled", "sends every running request to"),
    Link("mcp_connection", "connecting", "phase", "setup", "is started (or restarted) in"),
    Link("subagent", "running", "phase", "awaiting_tool", "runs a child request for a call in"),
)
"""How the other machines attach to the request machine in the composed view."""


@attrs.frozen
class Diagram:
    """One diagram as Mermaid and as Graphviz DOT source."""

    name: str
    mermaid: str
    dot: str | None


_NODE_STYLE = {"style": "rounded,filled", "shape": "rectangle", "color": "black", "peripheries": "1"}
_STYLES: dict[str, Any] = {
    "node": {
        "default": {**_NODE_STYLE, "fillcolor": "white"},
        "final": {**_NODE_STYLE, "fillcolor": "lightgrey", "peripheries": "2"},
    },
    "edge": {"default": {"color": "black"}},
    "graph": {"default": {"color": "black", "fillcolor": "white", "style": "solid"}},
}


@functools.cache
def _graph_machine_class() -> type[Any]:
    from transitions import State
    from transitions.extensions.diagrams import GraphMachine

    class LabelledState(State):
        """A state whose diagram label may differ from its (prefixed) name."""

        def __init__(self, *args: Any, label: str | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.label = label

    class DefinitionGraphMachine(GraphMachine):
        state_cls = LabelledState
        style_attributes = _STYLES

    return DefinitionGraphMachine


@functools.cache
def _annotated(base: type[Any], separator: str) -> type[Any]:
    """``base`` (an engine's Graph class) with callbacks appended to edge labels."""

    class Annotated(base):  # type: ignore[misc]
        def _transition_label(self, tran: dict[str, Any]) -> str:
            label: str = super()._transition_label(tran)
            after: list[str] = tran.get("after", [])
            return f"{label}{separator}/ {', '.join(after)}" if after else label

    return Annotated


def _graphviz() -> Any:
    """The graphviz package (imported only when DOT is drawn)."""
    try:
        return importlib.import_module("graphviz")
    except ImportError:
        raise DiagramDependencyMissing(
            "DOT output needs the graphviz Python package: pip install 'orchestrator[diagrams]'"
        ) from None


def _region_graph(region: Region, engine: str, ids: Callable[[str], str], title: str) -> Any:
    """transitions' graph of one region, final states styled, nothing active."""
    machine = _graph_machine_class()(
        model=None,
        states=[{"name": ids(s.name), "label": s.name, "final": s.final} for s in region.states],
        initial=ids(region.initial),
        transitions=[
            {
                "trigger": t.trigger,
                "source": [ids(s) for s in t.source],
                "dest": ids(t.dest),
                "conditions": list(t.conditions),
                "unless": list(t.unless),
                "after": list(t.callbacks),
            }
            for t in region.transitions
        ],
        auto_transitions=False,
        show_conditions=True,
        graph_engine=engine,
        title=title,
    )
    graph = _annotated(machine.graph_cls, "\\n" if engine == "graphviz" else " ")(machine)
    for state in region.states:
        if state.final:
            graph.set_node_style(ids(state.name), "final")
    return graph.get_graph(title=title)


def _state_ids(definition: MachineDefinition, region: Region, qualified: bool) -> Callable[[str], str]:
    """Node ids: ``machine__region__state`` when qualified, else plain unless regions share a name."""
    if qualified:
        return lambda name: f"{definition.name}__{region.name}__{name}"
    names = [s.name for r in definition.regions for s in r.states]
    if len(names) == len(set(names)):
        return lambda name: name
    return lambda name: f"{region.name}__{name}"


# mermaid ---------------------------------------------------------------------


@attrs.frozen
class _MermaidParts:
    class_defs: tuple[str, ...]
    body: tuple[str, ...]
    classes: tuple[str, ...]


def _mermaid_region(region: Region, ids: Callable[[str], str]) -> _MermaidParts:
    source: str = _region_graph(region, "mermaid", ids, region.name).source
    class_defs: list[str] = []
    body: list[str] = []
    classes: list[str] = []
    lines = [line.strip() for line in source.splitlines()]
    header_end = lines.index("stateDiagram-v2")
    for line in lines[header_end + 1 :]:
        if not line or line.startswith("direction "):
            continue
        if line.startswith("classDef "):
            class_defs.append(line)
        elif line.startswith("Class "):
            classes.append("class " + line.removeprefix("Class "))
        else:
            body.append(line)
    body.extend(f"{ids(s.name)} --> [*]" for s in region.states if s.final)
    return _MermaidParts(tuple(class_defs), tuple(body), tuple(classes))


def _indent(lines: list[str] | tuple[str, ...], depth: int) -> list[str]:
    return [_INDENT * depth + line for line in lines]


def _mermaid_document(title: str, parts: list[_MermaidParts], body: list[str], extra: tuple[str, ...] = ()) -> str:
    lines = ["---", f"title: {title}", "---", "stateDiagram-v2", f"{_INDENT}%% {NOTICE}", f"{_INDENT}direction LR"]
    lines += _indent(parts[0].class_defs, 1)
    lines += _indent(body, 1)
    lines += _indent(extra, 1)
    lines += _indent([c for p in parts for c in p.classes], 1)
    return "\n".join(lines) + "\n"


def _mermaid_machine_body(definition: MachineDefinition, qualified: bool) -> tuple[list[_MermaidParts], list[str]]:
    """One region inline; several as concurrent composites inside a composite of the machine."""
    parts = [_mermaid_region(r, _state_ids(definition, r, qualified)) for r in definition.regions]
    if len(parts) == 1:
        return parts, list(parts[0].body)
    body: list[str] = []
    for index, (region, part) in enumerate(zip(definition.regions, parts, strict=True)):
        if index:
            body.append("--")
        body += [f'state "{region.name}" as {definition.name}__{region.name} {{', *_indent(part.body, 1), "}"]
    return parts, _composite(definition, body)


def _composite(definition: MachineDefinition, body: list[str]) -> list[str]:
    return [f'state "{definition.name}" as {definition.name} {{', *_indent(body, 1), "}"]


def _mermaid_machine(definition: MachineDefinition) -> str:
    parts, body = _mermaid_machine_body(definition, qualified=False)
    return _mermaid_document(definition.name, parts, body)


# graphviz --------------------------------------------------------------------


def _dot_region(region: Region, ids: Callable[[str], str], name: str, label: str) -> Any:
    graph = _region_graph(region, "graphviz", ids, name)
    graph.graph_attr["label"] = label
    start = f"{name}__start"
    graph.node(start, label="", shape="point", width="0.15", style="filled", fillcolor="black")
    graph.edge(start, ids(region.initial))
    return graph


def _dot_machine_cluster(definition: MachineDefinition, qualified: bool, name: str) -> Any:
    """A machine as a graph: one region directly, several as clusters inside it."""
    if len(definition.regions) == 1:
        region = definition.main
        return _dot_region(region, _state_ids(definition, region, qualified), name, definition.name)
    outer = _graphviz().Digraph(name=name, graph_attr={"label": definition.name, "style": "rounded"})
    for region in definition.regions:
        ids = _state_ids(definition, region, qualified)
        outer.subgraph(_dot_region(region, ids, f"cluster_{definition.name}__{region.name}", region.name))
    return outer


def _dot_document(graph: Any) -> str:
    source: str = graph.source
    return f"// {NOTICE}\n{source}"


def _dot_machine(definition: MachineDefinition) -> str:
    _graphviz()
    graph = _dot_machine_cluster(definition, False, definition.name)
    graph.graph_attr.update(rankdir="LR", label=definition.name)
    return _dot_document(graph)


# composed --------------------------------------------------------------------


def _state_id(machine: str, region: str, state: str) -> str:
    return f"{machine}__{region}__{state}"


def _links(definitions: Mapping[str, MachineDefinition], host: MachineDefinition) -> list[Link]:
    """LINKS whose machine is defined; a link naming a missing state is an error."""
    present: list[Link] = []
    for link in LINKS:
        machine = definitions.get(link.machine)
        if machine is None:
            continue
        if link.state not in machine.main.state_names:
            raise ValueError(f"link from {link.machine}: no state {link.state!r}")
        if link.target not in host.region(link.region).state_names:
            raise ValueError(f"link to {host.name}.{link.region}: no state {link.target!r}")
        present.append(link)
    return present


def _composed_order(definitions: Mapping[str, MachineDefinition], host: str) -> list[MachineDefinition]:
    if COMPOSED in definitions:
        raise ValueError(f"a machine may not be named {COMPOSED!r}: that name is the composed view's")
    return [definitions[host], *(d for name, d in sorted(definitions.items()) if name != host)]


def _mermaid_composed(definitions: Mapping[str, MachineDefinition], host: str) -> str:
    parts: list[_MermaidParts] = []
    body: list[str] = []
    for definition in _composed_order(definitions, host):
        machine_parts, machine_body = _mermaid_machine_body(definition, qualified=True)
        parts += machine_parts
        body += machine_body if len(definition.regions) > 1 else _composite(definition, machine_body)
    links = tuple(
        f"{link.machine} --> {host}: {link.state} {link.verb} {link.region}.{link.target}"
        for link in _links(definitions, definitions[host])
    )
    return _mermaid_document(COMPOSED, parts, body, links)


def _dot_composed(definitions: Mapping[str, MachineDefinition], host: str) -> str:
    graph = _graphviz().Digraph(name=COMPOSED, graph_attr={"label": COMPOSED, "rankdir": "LR", "compound": "true"})
    for definition in _composed_order(definitions, host):
        graph.subgraph(_dot_machine_cluster(definition, True, f"cluster_{definition.name}"))
    for link in _links(definitions, definitions[host]):
        graph.edge(
            _state_id(link.machine, definitions[link.machine].main.name, link.state),
            _state_id(host, link.region, link.target),
            label=f"{link.verb}",
            style="dashed",
            color="grey40",
            fontcolor="grey40",
            constraint="false",
        )
    return _dot_document(graph)


# public ----------------------------------------------------------------------


def machine_diagram(definition: MachineDefinition, *, dot: bool = True) -> Diagram:
    """One machine's diagram; ``dot=False`` leaves DOT out (no graphviz package needed)."""
    return Diagram(definition.name, _mermaid_machine(definition), _dot_machine(definition) if dot else None)


def composed_diagram(
    definitions: Mapping[str, MachineDefinition], host: str = "request", *, dot: bool = True
) -> Diagram:
    """The host machine with its regions side by side and every other machine linked to it."""
    return Diagram(COMPOSED, _mermaid_composed(definitions, host), _dot_composed(definitions, host) if dot else None)


def all_diagrams(definitions: Mapping[str, MachineDefinition] | None = None, *, dot: bool = True) -> list[Diagram]:
    """A diagram per machine, sorted by name, then the composed view."""
    if definitions is None:
        from machines.registry import all_definitions

        definitions = all_definitions()
    machines = [machine_diagram(d, dot=dot) for _, d in sorted(definitions.items())]
    return [*machines, composed_diagram(definitions, dot=dot)]


def graphviz_available() -> bool:
    """Whether the graphviz Python package (for DOT output) can be imported."""
    try:
        _graphviz()
    except DiagramDependencyMissing:
        return False
    return True
