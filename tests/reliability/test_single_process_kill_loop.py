"""SIGKILL, again and again, of the one process that keeps its runs in an SQLite file and carries them itself.

A child process opens the file with ``open_durable_agent`` and an agent whose runs ask a question
(``ask_user``), then call ``charge``, which needs a person's approval and writes one ledger line per
real execution. The test kills the child with SIGKILL at random moments, and while no process runs
it answers, through the store, the questions and approvals the runs' checkpoints say are waiting;
then it starts a new child, which resumes the runs by itself. At the end every run completed once,
no run's log holds a question twice, no charge ran twice, and each answer posted while no process
ran was applied after a restart without any new user message. (A call the kill cut off after it
started and before its question was written ends with a result saying it was cut off: it is not
asked again, as any started call is not run again.)
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from orchestrator.cluster.webnode import StoreBackend, keyed_request_id
from orchestrator.config import ExternalEvent
from orchestrator.messages import ToolMessage
from orchestrator.store.runs_sql import sqlite_run_store

REPO = Path(__file__).resolve().parents[2]
RUNS = 6
KILLS = 12
LEASE = 600.0
"""Longer than the test: a run of a killed child is resumed by the next one at once (it takes the run over), never by
its lease running out."""
CUT_OFF = "may or may not have taken effect"

CHILD = textwrap.dedent(
    """
    import os
    import sys
    import time

    import trio

    from orchestrator import AssistantMessage, ModelRequest, ScriptedModel, ToolCall, ToolMessage, create_agent, tool
    from orchestrator.cluster import open_durable_agent
    from orchestrator.extensions.ask_user import AskUserExtension
    from orchestrator.extensions.tool_approval import ToolApprovalExtension

    path, ledger, runs, lease = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

    @tool(thread=True)
    def charge(order: str, card: str) -> str:
        '''Charge an order: one ledger line per real execution, then it takes a moment.

        Args:
            order: the order to charge
            card: the card to charge it to
        '''
        with open(ledger, "a", encoding="utf-8") as written:
            written.write(order + "\\n")
            written.flush()
            os.fsync(written.fileno())
        time.sleep(0.2)
        return f"charged {order} to {card}"

    def step(request: ModelRequest) -> AssistantMessage:
        results = {m.tool_call_id: m for m in request.messages if isinstance(m, ToolMessage)}
        order = [m for m in request.messages if m.role == "user"][0].text
        if "q1" not in results:
            asked = {"question": "Which card?", "options": ["visa", "amex"]}
            return AssistantMessage("", (ToolCall("q1", "ask_user", asked),))
        if "c1" not in results:
            card = results["q1"].text
            return AssistantMessage("", (ToolCall("c1", "charge", {"order": order, "card": card}),))
        return AssistantMessage(f"Result: {results['c1'].text}")

    async def main() -> None:
        agent = await create_agent(
            ScriptedModel([step], repeat_last=True),
            tools=[charge],
            extensions=[AskUserExtension(), ToolApprovalExtension({"charge": "ask"})],
        )
        async with open_durable_agent(agent, path, lease_seconds=lease) as client:
            for number in range(runs):
                await client.start(f"s{number}", f"order-{number}", idempotency_key="first")
            print("carrying", flush=True)
            await trio.sleep_forever()

    trio.run(main)
    """
)


class Child:
    """One process of the application, started on the file and killed (or stopped) by the test."""

    def __init__(self, path: Path, ledger: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(ledger), str(RUNS), str(LEASE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    def wait_carrying(self, seconds: float = 60.0) -> None:
        """Until the child has opened the store and queued its runs (it prints ``carrying``)."""
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], seconds)
        line = self.process.stdout.readline() if readable else b""
        if line.strip() != b"carrying":
            self.kill()
            raise AssertionError(f"the child did not start: {self.stderr()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stderr(self) -> str:
        assert self.process.stderr is not None
        self.kill()
        return self.process.stderr.read().decode(errors="replace")[-4000:]


def request_ids() -> dict[str, str]:
    return {f"s{number}": keyed_request_id(f"s{number}", "first") for number in range(RUNS)}


def answer_for(call: dict[str, Any], chance: random.Random) -> dict[str, Any]:
    if call["response_event"] == "ask_user_response":
        return {"tool_call_id": call["tool_call_id"], "answer": chance.choice(["visa", "amex"])}
    return {"tool_call_id": call["tool_call_id"], "approved": True}


async def answer_waiting(backend: StoreBackend, chance: random.Random, share: float) -> dict[tuple[str, str], str]:
    """Answer about ``share`` of the calls waiting now; the accepted ones as (request id, call id) -> answer."""
    posted: dict[tuple[str, str], str] = {}
    for call in await backend.pending(None):
        if chance.random() > share:
            continue
        payload = answer_for(call, chance)
        event = ExternalEvent(call["response_event"], payload)
        delivery = await backend.deliver(call["session_id"], call["request_id"], event, None)
        if delivery:
            posted[(call["request_id"], call["tool_call_id"])] = str(payload.get("answer", "approved"))
    return posted


def test_the_one_process_resumes_its_runs_after_every_kill(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    ledger = tmp_path / "charges.log"
    chance = random.Random(20261205)
    backend = StoreBackend(sqlite_run_store(str(path)))
    posted_while_down: dict[tuple[str, str], str] = {}

    for _ in range(KILLS):
        child = Child(path, ledger)
        child.wait_carrying()
        time.sleep(chance.uniform(0.0, 2.0))  # a random moment of its work
        child.kill()
        # Nobody carries the runs now: what their checkpoints say is waiting is answered through the store.
        posted_while_down |= trio.run(answer_waiting, backend, chance, 0.8)

    # The last process runs until every run has ended; questions asked from now on are answered while it runs.
    child = Child(path, ledger)
    child.wait_carrying()
    ids = request_ids()
    deadline = time.monotonic() + 120
    try:
        while True:
            records = [backend.store.run(request_id) for request_id in ids.values()]
            if all(record is not None and record.final for record in records):
                break
            assert child.process.poll() is None, child.stderr()
            assert time.monotonic() < deadline, [(r.request_id, r.status) for r in records if r is not None]
            trio.run(answer_waiting, backend, chance, 1.0)
            time.sleep(0.2)
    finally:
        child.kill()

    assert posted_while_down, "no answer was posted while no process ran: the kills came at the wrong moments"
    charges = Counter(ledger.read_text().split()) if ledger.exists() else Counter()
    assert all(count == 1 for count in charges.values()), f"a charge ran twice: {charges}"
    for session_id, request_id in ids.items():
        record = backend.store.run(request_id)
        assert record is not None and record.status == "completed", (request_id, record)
        events = backend.store.events(request_id, 0, limit=100_000)
        own = [e for e in events if e.body.get("session_id", session_id) == session_id]
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), "the log skips or repeats a position"
        terminal = [e.type for e in own if e.type in ("run_completed", "run_failed", "run_cancelled")]
        assert terminal == ["run_completed"], (request_id, terminal)
        questions = Counter(e.body.get("tool_call_id") for e in own if e.type in ("ask_user", "tool_approval"))
        logged = " ".join(f"{e.seq}:{e.type}" for e in own if e.type != "transition")
        assert set(questions.values()) <= {1}, (request_id, questions, logged)  # no question asked twice
        history = backend.store.history(session_id)
        assert [m.role for m in history if m.role == "user"] == ["user"], "a new user message was needed"
        results = {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}
        assert set(results) == {"q1", "c1"}, (session_id, [m.role for m in history])
        # A call cut off before its question was written asks it when the run resumes: each is asked once.
        assert questions == {"q1": 1, "c1": 1}, (request_id, questions, logged)
        assert CUT_OFF not in results["q1"].text, (results["q1"].text, logged)  # asking again has no effect
        order = f"order-{session_id[1:]}"
        charged = results["c1"].text
        if charged.startswith("charged"):
            assert charges[order] == 1, (order, charged)  # a charge that reported its result ran, once
        else:
            assert CUT_OFF in charged, charged  # its body was entered when a kill cut it off: said so
        assert str(history[-1].content).startswith("Result: "), history[-1]
        for (answered_run, call_id), answer in posted_while_down.items():
            if answered_run == request_id and call_id == "q1":
                assert results["q1"].text == answer, "an answer posted while no process ran was not the one applied"
    backend.store.close()
