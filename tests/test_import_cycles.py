"""The modules of ``orchestrator/`` and ``machines/`` import each other without a cycle.

Every import counts: at module level, inside functions (loaded on first use) and under
``TYPE_CHECKING``. A cycle means some module reaches back up to one that depends on it; the
failure names each cycle and the imports that close it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "machines")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The modules of the tree that ``module`` imports, each with the line of the import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield submodule, node.lineno  # ``from package import module``
                elif base in modules:
                    yield base, node.lineno


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line in _imported(name, path, modules):
            if target != name:
                graph[name].setdefault(target, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(cycle)
    arrows = [
        f"    {source} -> {target} (line {line})"
        for source in cycle
        for target, line in sorted(graph[source].items())
        if target in members
    ]
    return f"a cycle of {len(cycle)} modules:\n" + "\n".join(arrows)


def test_the_cycle_finder_finds_a_cycle_and_passes_a_chain() -> None:
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []


def test_the_graph_sees_type_only_and_lazy_imports() -> None:
    graph = _graph()
    assert "orchestrator.runtime.ports" in graph["orchestrator.runtime.edges"]  # under TYPE_CHECKING
    assert "orchestrator.events.features" in graph["orchestrator.events"]  # inside a function, on first use
    assert "orchestrator.runtime.hooks" in graph["orchestrator.extensions.base"]  # the public name of the hooks


def test_no_module_of_the_package_imports_one_that_depends_on_it() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "\n".join(_describe(cycle, graph) for cycle in cycles)
