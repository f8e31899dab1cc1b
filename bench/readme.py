"""The results section of bench/README.md, written only from a run's figures.

``python -m bench --readme`` replaces the section with the run it just made;
``python -m bench.readme FILE`` rebuilds it from the JSON a full run wrote to
bench/results/. The text between the markers is never edited by hand.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "bench" / "README.md"
BEFORE = ROOT / "bench" / "profiles" / "before.txt"
BEGIN = "<!-- results: written by `python -m bench --readme`; do not edit by hand -->"
END = "<!-- end of results -->"


def machine_note(document: dict[str, Any]) -> str:
    """When, where and under what load the run was made."""
    machine, load = document["machine"], document["load"]
    pinned = "not pinned" if document["cpu"] is None else f"every cell pinned to CPU {document['cpu']}"
    before = ", ".join(f"{value:.2f}" for value in load["before"])
    after = ", ".join(f"{value:.2f}" for value in load["after"])
    note = f" Note: {document['note']}" if document.get("note") else ""
    return (
        f"Run {document['when']} (UTC), commit {document['commit']}, `{document['command']}`, "
        f"{document['seconds']:.0f} s. Machine: {machine['cpus']} x {machine['processor']}, "
        f"{machine['platform']}, Python {machine['python']}, {pinned}. "
        f"Load average (1, 5, 15 min) {before} at the start and {after} at the end.{note}"
    )


def section(document: dict[str, Any], tables: str) -> str:
    """The generated text between the markers."""
    parts = [BEGIN, "", machine_note(document), "", "```text", tables.strip("\n"), "```"]
    profile = next((row for row in document["results"].get("profile", []) if "text" in row), None)
    if profile is not None:
        parts += [
            "",
            "Profile of orchestrator's streamed per-turn workload, taken in this run "
            "(`python -m bench.profiling --mode stream`):",
            "",
            "```text",
            profile["text"],
            "```",
        ]
    if BEFORE.exists():
        parts += [
            "",
            f"The same profile before these changes ({BEFORE.relative_to(ROOT)}, kept as that command printed it):",
            "",
            "```text",
            BEFORE.read_text(encoding="utf-8").strip("\n"),
            "```",
        ]
    parts += ["", END]
    return "\n".join(parts)


def write(document: dict[str, Any], tables: str) -> None:
    """Replace the section between the markers of bench/README.md."""
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    README.write_text(text[:start] + section(document, tables) + text[end:], encoding="utf-8")


def main(argv: Sequence[str]) -> int:
    from bench.report import render
    from bench.run import Plan

    if len(argv) != 1:
        print("usage: python -m bench.readme bench/results/FILE.json", file=sys.stderr)
        return 2
    document = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    fields = {key: tuple(value) if isinstance(value, list) else value for key, value in document["plan"].items()}
    plan = Plan(**fields)
    if plan.name != "full":
        print("only a full run may fill bench/README.md", file=sys.stderr)
        return 2
    write(document, render(document["results"], plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
