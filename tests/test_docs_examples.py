"""Every Python example in README.md and docs/ is a complete program the tests run, or a marked fragment.

The conventions (docs/contributing.md): HTML comments on the lines right above a ```python block
mark it. ``<!-- fragment: what it needs -->`` makes it a fragment, which must still compile
(``await`` allowed at top level). Any other block is a complete program: it runs in a fresh
interpreter in an empty folder and must exit 0, and a ```text block that follows it (with at most
one line of prose between them) is exactly what it prints. ``<!-- run-by: tests/FILE.py -->`` leaves
the run to that test, which provides what the program needs and names it by its ``example:`` name.
``<!-- serves: /PATH -->`` marks a server on
127.0.0.1:8000: the test runs it on a free port instead, waits until GET /PATH answers, and stops it.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!--\s*(?P<kind>fragment|run-by|serves|example):\s*(?P<value>.*?)\s*-->")
FENCE = re.compile(r"^(?P<fence>```+)(?P<lang>[\w-]*)")
RUNNERS = ("trio.run(", "asyncio.run(")
TIMEOUT = 120


@attrs.frozen
class Block:
    """A fenced block of a page: its language, its text, its line, and the markers right above it."""

    page: str
    line: int
    lang: str
    code: str
    markers: dict[str, str]
    prose_lines_before: int


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the marker comments just above it."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    name = str(page.relative_to(REPO))
    index = 0
    above: list[str] = []
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            if lines[index].strip():
                above.append(lines[index])
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith(opened["fence"]):
            end += 1
        markers: dict[str, str] = {}
        for text in reversed(above):
            marker = MARKER.fullmatch(text.strip())
            if marker is None:
                break
            markers.setdefault(marker["kind"], marker["value"])
        code = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(name, index + 1, opened["lang"], code, markers, len(above) - len(markers)))
        above = []
        index = end + 1
    return found


def python_examples() -> list[tuple[Block, Block | None]]:
    """Each ```python block with the ```text block that shows its output, if one follows it."""
    found: list[tuple[Block, Block | None]] = []
    for page in pages():
        found_blocks = blocks(page)
        for position, block in enumerate(found_blocks):
            if block.lang != "python":
                continue
            after = found_blocks[position + 1] if position + 1 < len(found_blocks) else None
            shown = after is not None and after.lang == "text" and after.prose_lines_before <= 1
            output = after if shown else None
            found.append((block, output))
    return found


EXAMPLES = python_examples()
PROGRAMS = [(block, output) for block, output in EXAMPLES if "fragment" not in block.markers]
FRAGMENTS = [block for block, _ in EXAMPLES if "fragment" in block.markers]


def label(block: Block) -> str:
    return f"{block.page}:{block.line}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def test_the_examples_are_found() -> None:
    assert len(PROGRAMS) >= 10 and len(FRAGMENTS) >= 1
    assert any(block.page == "README.md" for block, _ in PROGRAMS)


@pytest.mark.parametrize("block", FRAGMENTS, ids=label)
def test_a_fragment_says_what_it_needs_and_compiles(block: Block) -> None:
    assert len(block.markers["fragment"]) >= 8, f"{label(block)}: say what the fragment needs"
    compile(block.code, label(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.parametrize(("block", "output"), PROGRAMS, ids=lambda value: label(value) if value else "")
def test_a_program_runs_and_prints_what_its_page_shows(block: Block, output: Block | None, tmp_path: Path) -> None:
    where = label(block)
    runner = block.markers.get("run-by")
    # A program another test runs may be a module that test serves (an ASGI app under uvicorn).
    assert runner is not None or any(runner in block.code for runner in RUNNERS), (
        f"{where}: a complete program runs with trio.run or asyncio.run; "
        "mark a block that is not one with <!-- fragment: what it needs -->"
    )
    if runner is not None:
        assert "example" in block.markers, f"{where}: name the program with <!-- example: NAME --> for {runner}"
        assert f"example: {block.markers['example']}" in (REPO / runner).read_text(encoding="utf-8"), (
            f"{where}: {runner} does not run the example {block.markers['example']!r}"
        )
        return
    if "serves" in block.markers:
        serve_and_stop(block, tmp_path)
        return
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stderr}"
    if output is not None:
        assert done.stdout == output.code, f"{where} printed something else than its page shows"


def serve_and_stop(block: Block, tmp_path: Path) -> None:
    """Run a server example on a free port, wait until its path answers, then stop it."""
    assert "127.0.0.1:8000" in block.code, f"{label(block)}: a server example binds 127.0.0.1:8000"
    port = free_port()
    code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}{block.markers['serves']}"
    server = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=environment(), stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            assert server.poll() is None, f"{label(block)} exited: {server.communicate()[1]}"
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    assert answer.status == 200
                    return
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"{url} did not answer within {TIMEOUT} s"
                time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def test_every_page_is_in_the_site_navigation() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_IgnoringTags)

    def listed(entries: object) -> set[str]:
        if isinstance(entries, str):
            return {entries}
        if isinstance(entries, list):
            return set().union(*(listed(entry) for entry in entries))
        if isinstance(entries, dict):
            return set().union(*(listed(value) for value in entries.values()))
        return set()

    in_nav = listed(config["nav"])
    on_disk = {str(page.relative_to(REPO / "docs")) for page in (REPO / "docs").rglob("*.md")}
    assert on_disk - in_nav == set(), "add these pages to mkdocs.yml's nav"
    assert in_nav - on_disk == set(), "mkdocs.yml's nav names pages that do not exist"


class _IgnoringTags(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:``); reading the nav needs none of them."""


_IgnoringTags.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def test_the_site_draws_every_machine_from_its_committed_diagram() -> None:
    included: set[str] = set()
    for page in sorted((REPO / "docs").rglob("*.md")):
        for block in blocks(page):
            if block.lang != "mermaid":
                continue
            include = re.fullmatch(r'--8<-- "diagrams/(?P<name>\w+)\.mmd"\n', block.code)
            assert include is not None, f"{label(block)}: include the committed diagram instead of a copy"
            assert (REPO / "diagrams" / f"{include['name']}.mmd").is_file(), label(block)
            included.add(include["name"])
    assert {path.stem for path in (REPO / "diagrams").glob("*.mmd")} <= included
