"""``python -m orchestrator diagrams [--out DIR] [--check]``.

Writes ``NAME.mmd``, ``NAME.dot`` and ``NAME.svg`` for every machine and for
the composed view. SVG needs Graphviz's ``dot`` program; without it the
command still writes the text sources and says why no SVG was made. With
``--check`` nothing is written: the command exits 1 listing stale files.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from machines.diagrams import Diagram, all_diagrams, graphviz_available

REGENERATE = "python -m orchestrator diagrams"
SUFFIXES = (".mmd", ".dot", ".svg")

_SVG_TEXT = re.compile(r"<(title|text)\b[^>]*>([^<]*)</\1>")


def dot_program() -> str | None:
    """Path of Graphviz's ``dot``, or None when it is not installed."""
    return shutil.which("dot")


def render_svg(dot_source: str, program: str = "dot") -> str:
    """SVG of a DOT source, rendered by ``program``."""
    done = subprocess.run([program, "-Tsvg"], input=dot_source, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dot failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def svg_signature(svg: str) -> list[tuple[str, str]]:
    """Titles and texts of an SVG in order: what must match across Graphviz versions."""
    return _SVG_TEXT.findall(svg)


def text_files(diagrams: list[Diagram]) -> dict[str, str]:
    """File name to content of every Mermaid and DOT source."""
    files: dict[str, str] = {}
    for diagram in diagrams:
        files[f"{diagram.name}.mmd"] = diagram.mermaid
        if diagram.dot is not None:
            files[f"{diagram.name}.dot"] = diagram.dot
    return files


def _orphans(out: Path, names: set[str]) -> list[str]:
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if p.suffix in SUFFIXES and p.name not in names)


def stale_files(out: Path) -> tuple[list[str], list[str]]:
    """Files under ``out`` that differ from what the definitions generate, and notes on what was not compared."""
    notes: list[str] = []
    with_dot = graphviz_available()
    if not with_dot:
        notes.append("DOT and SVG not compared: the graphviz Python package is not installed")
    diagrams = all_diagrams(dot=with_dot)
    stale: list[str] = []
    for name, content in text_files(diagrams).items():
        path = out / name
        if not path.is_file():
            stale.append(f"{path} (missing)")
        elif path.read_text(encoding="utf-8") != content:
            stale.append(f"{path} (differs)")
    program = dot_program()
    if with_dot and program is None:
        notes.append("SVG not compared: Graphviz's dot program is not installed")
    for diagram in diagrams:
        path = out / f"{diagram.name}.svg"
        if not path.is_file():
            stale.append(f"{path} (missing)")
        elif program is not None and diagram.dot is not None:
            fresh = svg_signature(render_svg(diagram.dot, program))
            if svg_signature(path.read_text(encoding="utf-8")) != fresh:
                stale.append(f"{path} (differs)")
    names = {f"{d.name}{suffix}" for d in diagrams for suffix in SUFFIXES}
    stale += [f"{out / name} (no machine generates it)" for name in _orphans(out, names)]
    return stale, notes


def write_files(out: Path) -> list[str]:
    """Write every diagram under ``out``; lines that report what was written and what was not."""
    report: list[str] = []
    with_dot = graphviz_available()
    diagrams = all_diagrams(dot=with_dot)
    out.mkdir(parents=True, exist_ok=True)
    files = text_files(diagrams)
    for name, content in files.items():
        (out / name).write_text(content, encoding="utf-8")
    report.append(f"wrote {len(files)} diagram sources to {out}/")
    program = dot_program()
    if not with_dot:
        report.append(
            "no .dot or .svg made: the graphviz Python package is missing (pip install 'orchestrator[diagrams]')"
        )
    elif program is None:
        report.append(
            "no .svg made: Graphviz's dot program is not on PATH (install Graphviz, e.g. apt-get install graphviz)"
        )
    else:
        for diagram in diagrams:
            assert diagram.dot is not None
            (out / f"{diagram.name}.svg").write_text(render_svg(diagram.dot, program), encoding="utf-8")
        report.append(f"rendered {len(diagrams)} SVG files with {program}")
    names = {f"{d.name}{suffix}" for d in diagrams for suffix in SUFFIXES}
    report += [f"not generated any more (remove it): {out / name}" for name in _orphans(out, names)]
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator diagrams", description="Draw every machine definition as Mermaid, DOT and SVG."
    )
    parser.add_argument("--out", type=Path, default=Path("diagrams"), help="output folder (default: diagrams)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 listing stale files")
    args = parser.parse_args(argv)
    out: Path = args.out
    if args.check:
        stale, notes = stale_files(out)
        for note in notes:
            print(note, file=sys.stderr)
        if stale:
            print(f"stale diagrams; regenerate with `{REGENERATE} --out {out}`:", file=sys.stderr)
            for line in stale:
                print(f"  {line}", file=sys.stderr)
            return 1
        print(f"diagrams in {out}/ are up to date")
        return 0
    for line in write_files(out):
        print(line)
    return 0
