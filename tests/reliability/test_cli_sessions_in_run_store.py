"""``sessions list|show|title|fork|delete`` on a database file that also holds a run store.

The run store is filled through its own API (runs that stored their messages and events, as a worker leaves
them), then the command runs as ``python -m orchestrator sessions`` does (``orchestrator.cli.main.command``);
what it prints and what is left in the file are checked. A web node on the same file sees what the command did.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from orchestrator.cli.main import command
from orchestrator.messages import AssistantMessage, Message, UserMessage
from orchestrator.store.runs import NewInboxItem, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore, sqlite_run_store
from tests.cluster.processes import Cluster


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def store(db: Path) -> Iterator[SQLRunStore]:
    opened = sqlite_run_store(str(db))
    try:
        yield opened
    finally:
        opened.close()


def finished(store: SQLRunStore, session_id: str, request_id: str, *messages: Message) -> None:
    """A run of ``session_id`` that stored ``messages`` and an event, had an answer posted, and completed."""
    store.create_run(session_id, request_id, {"role": "user", "content": "seeded"})
    store.post(NewInboxItem(session_id, request_id, "steering", {"content": "go on"}))
    for lease in store.claim("seeding", 30.0, limit=100):
        if lease.request_id != request_id:
            store.release(lease)  # another session's queued run stays queued
            continue
        event = StoredEvent(request_id, 1, "note", {"type": "note"})
        store.commit(lease, RunCommit(messages=messages, events=(event,), status="completed"))


def seed(store: SQLRunStore) -> None:
    finished(store, "trip", "r1", UserMessage("plan a trip"), AssistantMessage("where to?"))
    finished(store, "trip", "r2", UserMessage("to the sea"), AssistantMessage("booked"))
    finished(store, "taken", "r3", UserMessage("mine"))
    store.create_run("queued", "r4", {"role": "user", "content": "no worker yet"})


def sessions(db: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``python -m orchestrator sessions --db DB ARGS``: its exit status, stdout and stderr."""
    capsys.readouterr()
    code = command("sessions", ["--db", str(db), *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute(sql, params).fetchall())


def left_of(db: Path, session_id: str) -> dict[str, int]:
    """How many rows of ``session_id`` each table of the file still holds (only those with some)."""
    found = {}
    for table in (
        "messages",
        "orchestrator_runs",
        "orchestrator_inbox",
        "orchestrator_session_titles",
        "orchestrator_session_owners",
    ):
        [(count,)] = rows(db, f"SELECT COUNT(*) FROM {table} WHERE session_id = ?", session_id)
        if count:
            found[table] = int(str(count))
    [(events,)] = rows(
        db,
        "SELECT COUNT(*) FROM orchestrator_run_events WHERE request_id IN"
        " (SELECT request_id FROM orchestrator_runs WHERE session_id = ?)",
        session_id,
    )
    if events:
        found["orchestrator_run_events"] = int(str(events))
    return found


def listing(db: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The titles ``sessions list`` printed (it succeeded), by session id."""
    code, out, err = sessions(db, capsys, "list")
    assert (code, err) == (0, ""), err
    return listed(out)


def listed(out: str) -> dict[str, str]:
    """The titles in the output of ``sessions list``, by session id."""
    found = {}
    for line in out.splitlines()[:-1]:
        session_id, rest = line[2:].split(None, 1)
        found[session_id] = rest.split("messages", 1)[1].strip()
    return found


def test_list_and_show_give_the_titles_the_run_store_keeps(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    assert store.set_title("trip", "Seaside")
    code, out, err = sessions(db, capsys, "list")
    assert (code, err) == (0, "")
    assert listed(out) == {"trip": "Seaside", "taken": "mine", "queued": ""}  # the web node's titles
    assert " trip     4 messages  Seaside" in out
    code, out, err = sessions(db, capsys, "show", "trip")
    assert (code, err) == (0, "")
    assert out.splitlines()[:3] == ["session trip: 4 messages", "title: Seaside", "user: plan a trip"]
    code, out, _ = sessions(db, capsys, "show", "taken")
    assert out.splitlines()[1] == "title: mine"


def test_a_title_set_by_the_command_is_the_run_stores(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    assert sessions(db, capsys, "title", "taken", "Kept in the store") == (0, "Kept in the store\n", "")
    assert store.titles(["taken"]) == {"taken": "Kept in the store"}
    assert rows(db, "SELECT session_id, title FROM orchestrator_session_titles") == [("taken", "Kept in the store")]
    assert not (db.parent / "sessions.db.titles.json").exists()
    assert sessions(db, capsys, "title", "taken") == (0, "Kept in the store\n", "")
    assert sessions(db, capsys, "title", "queued", "Queued") == (0, "Queued\n", "")  # a run and no message yet
    assert store.titles(["queued"]) == {"queued": "Queued"}


def test_titles_kept_beside_the_file_by_earlier_versions_show_where_the_run_store_has_none(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    store.set_title("trip", "Seaside")
    (db.parent / "sessions.db.titles.json").write_text(json.dumps({"taken": "Old", "trip": "Older"}))
    assert listing(db, capsys) == {"trip": "Seaside", "taken": "Old", "queued": ""}
    assert sessions(db, capsys, "title", "taken") == (0, "Old\n", "")
    forked = sessions(db, capsys, "fork", "taken", "--as", "taken-2")
    assert forked == (0, "forked taken into taken-2 (1 messages)\n", "")
    assert store.set_titles(["taken-2"]) == {"taken-2": "Old (fork)"}
    assert sessions(db, capsys, "title", "taken", "New") == (0, "New\n", "")
    assert store.set_titles(["taken"]) == {"taken": "New"}


def test_a_fork_copies_the_run_stores_title_and_is_refused_while_a_run_has_not_ended(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    store.set_title("trip", "Seaside")
    code, out, err = sessions(db, capsys, "fork", "trip", "--as", "trip-2", "--turn", "1")
    assert (code, out, err) == (0, "forked trip into trip-2 (2 messages)\n", "")
    assert store.titles(["trip-2"]) == {"trip-2": "Seaside (fork)"}
    assert [m.text for m in store.history("trip-2") if isinstance(m, UserMessage)] == ["plan a trip"]
    finished(store, "chat", "r5", UserMessage("hello"))
    store.create_run("chat", "r6", {"role": "user", "content": "again"})
    code, out, err = sessions(db, capsys, "fork", "chat", "--as", "chat-2")
    assert (code, out) == (1, "")
    assert err == "sessions fork: session chat has a run that has not ended; not forked\n"
    assert "chat-2" not in store.sessions()


def test_delete_removes_the_sessions_runs_events_inbox_title_and_owner(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    store.set_title("trip", "Seaside")
    assert store.fork("trip", "alices", owner="alice") == 4
    finished(store, "alices", "r5", UserMessage("and back"))
    (db.parent / "sessions.db.titles.json").write_text(json.dumps({"alices": "Old", "taken": "Kept"}))
    assert left_of(db, "alices") == {
        "messages": 5,
        "orchestrator_runs": 1,
        "orchestrator_inbox": 1,
        "orchestrator_session_titles": 1,
        "orchestrator_session_owners": 1,
        "orchestrator_run_events": 1,
    }
    assert sessions(db, capsys, "delete", "alices") == (0, "deleted session alices\n", "")
    assert left_of(db, "alices") == {}
    assert rows(db, "SELECT COUNT(*) FROM orchestrator_run_events WHERE request_id = 'r5'") == [(0,)]
    assert store.run("r5") is None and "alices" not in store.sessions()
    assert json.loads((db.parent / "sessions.db.titles.json").read_text()) == {"taken": "Kept"}
    assert sessions(db, capsys, "delete", "trip") == (0, "deleted session trip\n", "")
    assert left_of(db, "trip") == {}
    assert store.run("r1") is None and store.run("r2") is None
    untouched = {"messages": 1, "orchestrator_runs": 1, "orchestrator_inbox": 1, "orchestrator_run_events": 1}
    assert left_of(db, "taken") == untouched
    assert listing(db, capsys) == {"taken": "Kept", "queued": ""}


@pytest.mark.parametrize("status", ["queued", "running", "parked"])
def test_delete_is_refused_while_a_run_of_the_session_has_not_ended(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str], status: str
) -> None:
    finished(store, "chat", "r1", UserMessage("hello"), AssistantMessage("hi"))
    store.create_run("chat", "r2", {"role": "user", "content": "again"})
    if status != "queued":
        [lease] = store.claim("worker", 60.0)
        if status == "parked":
            store.commit(lease, RunCommit(status="parked"))
    assert store.run("r2") is not None and store.run("r2").status == status  # type: ignore[union-attr]
    before = left_of(db, "chat")
    code, out, err = sessions(db, capsys, "delete", "chat")
    assert (code, out) == (1, "")
    assert err == f"sessions delete: session chat has a run that has not ended (r2, {status}); not deleted\n"
    assert left_of(db, "chat") == before
    assert len(store.history("chat")) == 2


def test_an_unknown_session_is_refused_in_one_line(
    db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    for args in (("delete", "nosuch"), ("show", "nosuch"), ("title", "nosuch", "x")):
        code, out, err = sessions(db, capsys, *args)
        assert (code, out, err) == (1, "", f"sessions {args[0]}: no session nosuch in {db}\n")
    code, out, err = sessions(db, capsys, "fork", "nosuch")
    assert (code, out, err) == (1, "", "sessions fork: no stored session 'nosuch' to fork\n")
    assert rows(db, "SELECT COUNT(*) FROM orchestrator_session_titles") == [(0,)]


def test_listing_a_file_without_a_run_store_makes_none(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore
    from orchestrator.store import SessionChange

    kept = SQLiteSessionStore(db)
    kept.store.apply("plain", SessionChange(replace=(UserMessage("just chat"),)))
    kept.close()
    for args in (("list",), ("show", "plain"), ("title", "plain", "Plain"), ("fork", "plain", "--as", "p2")):
        assert sessions(db, capsys, *args)[0] == 0
    assert listing(db, capsys) == {"p2": "Plain (fork)", "plain": "Plain"}
    assert rows(db, "SELECT name FROM sqlite_master WHERE name LIKE 'orchestrator%'") == []
    assert json.loads((db.parent / "sessions.db.titles.json").read_text()) == {"plain": "Plain", "p2": "Plain (fork)"}


def test_a_web_node_on_the_file_sees_what_the_command_did(
    tmp_path: Path, db: Path, store: SQLRunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(store)
    with Cluster(f"sqlite:///{db}", tmp_path, tmp_path / "marks") as cluster, httpx.Client(
        base_url=cluster.web("web").url, timeout=10
    ) as http:
        assert http.put("/sessions/trip/title", json={"title": "From the web"}).status_code == 200
        assert listing(db, capsys)["trip"] == "From the web"
        assert sessions(db, capsys, "title", "taken", "From the command line")[0] == 0
        titles = {s["session_id"]: s["title"] for s in http.get("/sessions").json()["sessions"]}
        assert titles == {"trip": "From the web", "taken": "From the command line", "queued": ""}
        assert sessions(db, capsys, "delete", "taken") == (0, "deleted session taken\n", "")
        assert http.get("/sessions/taken").status_code == 404
        assert http.get("/runs/r3").status_code in (404, 410)
        assert [s["session_id"] for s in http.get("/sessions").json()["sessions"]] == ["trip", "queued"]


async def chat_lines(db: Path, tmp_path: Path, session: str, *lines: str) -> str:
    """What ``chat --session SESSION --db DB`` prints for the typed ``lines`` (then the end of input)."""
    from orchestrator.cli.args import Options
    from orchestrator.cli.chat import chat

    typed = iter(lines)
    printed: list[str] = []

    async def read_line() -> str:
        return next(typed) + "\n"

    options = Options(None, db=str(db), session=session, root=str(tmp_path), project=None)
    with trio.fail_after(20):
        code = await chat(options, read_line=read_line, write=printed.append, err=printed.append, handle_sigint=False)
    assert code == 0
    return "".join(printed)


async def test_the_chats_title_fork_and_sessions_commands_use_the_run_stores_titles(
    tmp_path: Path, db: Path, store: SQLRunStore
) -> None:
    seed(store)
    store.set_title("trip", "Seaside")
    shown = await chat_lines(db, tmp_path, "trip", "/title", "/sessions", "/title From the chat", "/fork", "/quit")
    assert "title: Seaside" in shown
    assert re.search(r"\* trip +4 messages  Seaside", shown), shown
    assert "title: From the chat" in shown
    forked = re.search(r"forked trip into (trip-fork-[0-9a-f]{6}) \(4 messages\)", shown)
    assert forked is not None, shown
    fork_id = forked.group(1)
    assert store.set_titles(["trip", fork_id]) == {"trip": "From the chat", fork_id: "From the chat (fork)"}
    assert not (db.parent / "sessions.db.titles.json").exists()
    early = await chat_lines(db, tmp_path, "fresh", "/title Too early", "/quit")
    assert "cannot title fresh before its first turn is stored" in early
    assert store.set_titles(["fresh"]) == {} and "fresh" not in store.sessions()
