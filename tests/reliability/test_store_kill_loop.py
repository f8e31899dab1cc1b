"""SIGKILL, again and again: a session in SQLite keeps every acknowledged message and stays well-formed.

A child process runs requests of one session in a loop (concurrent tool calls,
one of them returning a file name with lone surrogates) and prints each
message once the store has committed it. The parent kills it with SIGKILL at a
different point each trial, checks the file, continues the session itself
(a well-formed history, nothing acknowledged lost), and starts the next child
at once: a killed process holds no lock.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import trio

from orchestrator import AgentRunConfig, AssistantMessage, Message, ScriptedModel, ToolMessage, create_agent
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.store import decode_message, problems

REPO = Path(__file__).resolve().parents[2]
TRIALS = 20
SESSION = "loop"
CHILD_SECONDS = 60.0

CHILD = textwrap.dedent(
    """
    import random
    import sys

    import trio

    from orchestrator import AgentExtension, AgentRunConfig, AssistantMessage, ScriptedModel, ToolCall, UserMessage
    from orchestrator import create_agent, tool
    from orchestrator.events import MessageAppendedEvent
    from orchestrator.extensions.sqlite_store import SQLiteSessionStore
    from orchestrator.store import encode_message

    path, trial = sys.argv[1], int(sys.argv[2])
    chance = random.Random(trial)

    @tool
    async def nap(ms: int) -> str:
        '''Sleep a little.

        Args:
            ms: milliseconds
        '''
        await trio.sleep(ms / 1000)
        return f"napped {ms}"

    @tool
    def odd_name() -> str:
        '''A directory entry whose name is not UTF-8 (as os.fsdecode gives it).'''
        return "entry-\\udc80\\udcff-\\ud83d-end"

    class Ack(AgentExtension):
        priority = 100  # after the store: printed once committed

        async def on_event(self, context, event):
            if isinstance(event, MessageAppendedEvent):
                # one write per line (print writes its pieces one by one when unbuffered)
                sys.stdout.write("ACK " + encode_message(event.message) + "\\n")
                sys.stdout.flush()

    def step(request):
        turn = sum(isinstance(m, UserMessage) for m in request.messages)
        tag = f"t{trial}-{turn}"
        if isinstance(request.messages[-1], UserMessage):
            calls = [
                ToolCall(f"a-{tag}", "nap", {"ms": chance.randint(0, 20)}),
                ToolCall(f"b-{tag}", "odd_name", {}),
                ToolCall(f"c-{tag}", "nap", {"ms": chance.randint(0, 20)}),
            ]
            return AssistantMessage(f"working on {tag}", calls)
        return AssistantMessage(f"done with {tag}")

    async def main():
        store = SQLiteSessionStore(path)
        client = await create_agent(
            ScriptedModel([step], repeat_last=True), tools=[nap, odd_name], history=None, extensions=[store, Ack()]
        )
        for number in range(10_000):
            await client.run(f"trial {trial} request {number}", config=AgentRunConfig(sys.argv[3]))

    trio.run(main)
    """
)


def _reader(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)
    lines.put(None)


def run_child_until(script: Path, db: Path, trial: int, acks: int) -> list[Message]:
    """Start a child, let it acknowledge ``acks`` messages, SIGKILL it; the messages it acknowledged."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(db), str(trial), SESSION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        encoding="utf-8",
    )
    guard = threading.Timer(CHILD_SECONDS, child.kill)
    guard.start()
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(child.stdout, lines), daemon=True).start()
    acknowledged: list[Message] = []
    try:
        while len(acknowledged) < acks:
            line = lines.get(timeout=CHILD_SECONDS)
            if line is None:
                error = child.stderr.read() if child.stderr else ""
                raise AssertionError(f"trial {trial}: the child ended after {len(acknowledged)} acks:\n{error}")
            if is_ack(line):
                acknowledged.append(decode_message(line[4:]))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=CHILD_SECONDS) == -signal.SIGKILL
    finally:
        guard.cancel()
        child.kill()
        child.wait()
    # What it printed after the last counted ack was committed too (the kill came later).
    while (line := lines.get(timeout=CHILD_SECONDS)) is not None:
        if is_ack(line):
            acknowledged.append(decode_message(line[4:]))
    return acknowledged


def is_ack(line: str) -> bool:
    """A whole acknowledgement line: one the kill cut short (no newline yet) acknowledged nothing."""
    return line.startswith("ACK ") and line.endswith("\n")


def lost(acknowledged: list[Message], stored: list[Message]) -> list[Message]:
    """Acknowledged messages ``stored`` lacks.

    Every one must be there, and all but tool results in the order acknowledged
    (results of concurrent calls are acknowledged as each commit returns, which
    need not be the order they were appended in).
    """
    missing = [m for m in acknowledged if isinstance(m, ToolMessage) and m not in stored]
    at = 0
    for message in acknowledged:
        if isinstance(message, ToolMessage):
            continue
        try:
            at = stored.index(message, at) + 1
        except ValueError:
            missing.append(message)
    return missing


async def continue_session(db: Path, number: int) -> list[Message]:
    """Run one request of the session in this process; the messages the model saw."""
    model = ScriptedModel([AssistantMessage(f"checked {number}")])
    client = await create_agent(model, history=None, extensions=[SQLiteSessionStore(db)])
    with trio.fail_after(CHILD_SECONDS):
        await client.run(f"check {number}", config=AgentRunConfig(SESSION))
    return list(model.requests[0].messages)


def test_sigkill_loop_keeps_every_acknowledged_message_and_a_well_formed_history(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    chance = random.Random(20261203)
    acknowledged: list[Message] = []
    for trial in range(TRIALS):
        acknowledged += run_child_until(script, db, trial, chance.randint(1, 30))
        stored = SQLiteSessionStore(db).messages(SESSION)
        assert lost(acknowledged, stored) == [], f"trial {trial}: acknowledged messages lost"
        seen = trio.run(continue_session, db, trial)
        assert problems(seen) == [], f"trial {trial}: the model saw a malformed history"
        after = SQLiteSessionStore(db).messages(SESSION)
        assert problems(after) == [], f"trial {trial}: the stored history is malformed"
        assert lost(acknowledged, after) == [], f"trial {trial}: acknowledged messages lost after the restore"
    odd = [m for m in acknowledged if isinstance(m, ToolMessage) and m.name == "odd_name"]
    assert odd and all(m.content == "entry-\ufffd\ufffd-\ufffd-end" for m in odd)
    assert acknowledged.index(odd[0]) < len(acknowledged) - 1  # writes went on after a surrogate-bearing result
