"""Every command that opens a sessions location ends with one line naming it, not a traceback, when it cannot.

Three unusable places: a path under a regular file, a path in /proc, and a read-only bind mount
(which needs root; without it those cases skip saying so). Commands that make or write the
database exit 2 with ``cannot use the store at PATH: REASON``; ``sessions`` on a database that is
not there says so and exits 1, as it does for any missing database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]

# (name, arguments; "{db}" stands for the database path, and without it the default location is used)
COMMANDS: list[tuple[str, list[str]]] = [
    ("run", ["run", "hello", "--db", "{db}"]),
    ("run -c", ["run", "again", "-c", "--db", "{db}"]),
    ("run (default location)", ["run", "hello"]),
    ("chat", ["chat", "--db", "{db}"]),
    ("sessions list", ["sessions", "--db", "{db}", "list"]),
    ("sessions show", ["sessions", "--db", "{db}", "show", "s1"]),
    ("sessions delete", ["sessions", "--db", "{db}", "delete", "s1"]),
    ("serve", ["serve", "--port", "0", "--db", "{db}"]),
    ("serve (default location)", ["serve", "--port", "0"]),
    ("serve (web node)", ["serve", "--port", "0", "--db", "sqlite:///{db}"]),
    ("worker", ["worker", "--db", "sqlite:///{db}"]),
]


@pytest.fixture(scope="module")
def read_only_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A read-only bind mount holding an existing session database ``sessions.db`` (skips without root)."""
    source = tmp_path_factory.mktemp("ro-source")
    SQLiteStore(str(source / "sessions.db")).close()
    target = tmp_path_factory.mktemp("ro")
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (a chmod 0555 directory is writable by root)")
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount: {mounted.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def _place(kind: str, tmp_path: Path, read_only_dir: Path | None) -> Path:
    """An unusable directory of ``kind``: a regular file, a /proc directory, or the read-only mount."""
    if kind == "under a file":
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory\n")
        return blocker
    if kind == "in /proc":
        return Path("/proc/sys")
    assert read_only_dir is not None
    return read_only_dir


@pytest.mark.parametrize("kind", ["under a file", "in /proc", "read-only mount"])
@pytest.mark.parametrize(("name", "argv"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_each_command_says_in_one_line_why_the_location_is_unusable(
    kind: str, name: str, argv: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    read_only = request.getfixturevalue("read_only_dir") if kind == "read-only mount" else None
    place = _place(kind, tmp_path, read_only)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if any("{db}" in part for part in argv):
        db = place / "sessions.db"
    else:  # the default database: $XDG_DATA_HOME/orchestrator/sessions.db
        env["XDG_DATA_HOME"] = str(place)
        db = place / "orchestrator" / "sessions.db"
    args = [part.replace("{db}", str(db)) for part in argv]
    if args[0] != "sessions":
        args += ["--root", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.rstrip().splitlines()[-1]
    if args[0] == "sessions" and not db.exists():
        assert (done.returncode, last) == (1, f"no session database at {db}"), done.stderr
    else:
        assert done.returncode == 2, done.stderr
        assert last.startswith(f"{args[0]}: cannot use the store at {db}: "), done.stderr
