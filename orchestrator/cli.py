"""``python -m orchestrator run "PROMPT"``: one request in the terminal.

Text streams to stdout with tool calls and state transitions between it.
Plan Mode proposals and ``ask_user`` questions are answered on the terminal;
a line typed while the agent works (and nothing is asked) is sent as
steering. Ctrl-C cancels the request (exit code 130). Sessions live in an
SQLite file, so ``--session ID`` continues a stored conversation; questions
a stopped run left waiting are asked again first, and their answers become
the waiting calls' results before the new prompt.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from orchestrator.agent import AgentClient, create_agent
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.events import AgentEvent, ExtensionEvent, TransitionEvent
from orchestrator.extensions.ask_user import AskUserExtension
from orchestrator.extensions.base import AgentExtension
from orchestrator.extensions.filesystem import FilesystemExtension
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.extensions.steering import SteeringExtension
from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage, ToolStatus, UserMessage
from orchestrator.model import Model, ModelRequest, ScriptedModel
from orchestrator.stream import RunStream
from orchestrator.tools import ToolDefinition, tool

DEFAULT_DB = os.path.join(".orchestrator", "sessions.db")
SYSTEM_PROMPT = "You are a helpful assistant working in a terminal. Be concise."

ReadLine = Callable[[], Awaitable[str]]
Write = Callable[[str], None]


@attrs.frozen
class Options:
    """The parsed command line of ``run``."""

    prompt: str
    model: str = "scripted"
    session: str | None = None
    plan_mode: bool = False
    root: str = "."
    db: str = DEFAULT_DB


def parse(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="python -m orchestrator run", description="Run one request.")
    parser.add_argument("prompt", help="the user input")
    parser.add_argument("--model", default="scripted", help="scripted, openai:NAME or anthropic:NAME")
    parser.add_argument("--session", help="continue this stored session (a new one is created otherwise)")
    parser.add_argument("--plan-mode", action="store_true", help="let the model propose Plan Mode")
    parser.add_argument("--root", default=".", help="workspace of the filesystem tools (and of bash in Plan Mode)")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"session database (default {DEFAULT_DB})")
    args = parser.parse_args(argv)
    if args.model != "scripted" and not args.model.startswith(("openai:", "anthropic:")):
        parser.error(f"unknown --model {args.model!r}: use scripted, openai:NAME or anthropic:NAME")
    return Options(args.prompt, args.model, args.session, args.plan_mode, args.root, args.db)


# models -----------------------------------------------------------------------


@tool
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count
    """
    return len(text.split())


def _since_input(messages: tuple[Message, ...]) -> tuple[str, list[Message]]:
    """The latest user text, and what came since the last final answer.

    Results a restart settled (recorded before the new input) count as part of the current work.
    """
    prompt = next((m.text for m in reversed(messages) if isinstance(m, UserMessage)), "")
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage) and not message.tool_calls:
            return prompt, list(messages[index + 1 :])
    return prompt, list(messages)


def _result(messages: list[Message], name: str) -> ToolMessage | None:
    found = [m for m in messages if isinstance(m, ToolMessage) and m.name == name]
    return found[-1] if found else None


def scripted_step(plan_mode: bool) -> Callable[[ModelRequest], AssistantMessage]:
    """A small deterministic policy standing in for a model."""

    def step(request: ModelRequest) -> AssistantMessage:
        prompt, turn = _since_input(request.messages)
        call_id = f"call_{len(request.messages)}"
        if not plan_mode:
            counted = _result(turn, "word_count")
            if counted is None:
                return AssistantMessage("Let me count.", [ToolCall(call_id, "word_count", {"text": prompt})])
            return AssistantMessage(f"Your message has {counted.content} words.")
        exited = _result(turn, "exit_plan_mode")
        if exited is not None:  # also a plan approved after a restart, in a later request
            if exited.status == ToolStatus.SUCCEEDED:
                return AssistantMessage("Plan approved; Plan Mode has ended.")
            return AssistantMessage("Plan not approved; stopping here.")
        entered = _result(turn, "enter_plan_mode")
        if entered is None:
            reason = f"plan before acting on: {prompt}"
            return AssistantMessage(
                "I'd like to plan first.", [ToolCall(call_id, "enter_plan_mode", {"reason": reason})]
            )
        if entered.status != ToolStatus.SUCCEEDED:
            return AssistantMessage("Understood, staying in normal mode.")
        listed = _result(turn, "list_files")
        if listed is None:
            return AssistantMessage("Looking around.", [ToolCall(call_id, "list_files", {"path": "."})])
        entries = len(listed.content.splitlines())
        plan = f"1. Review the {entries} entries of the workspace.\n2. Make the change for: {prompt}\n3. Test it."
        return AssistantMessage("Here is my plan.", [ToolCall(call_id, "exit_plan_mode", {"plan": plan})])

    return step


def scripted_model(plan_mode: bool) -> ScriptedModel:
    return ScriptedModel([scripted_step(plan_mode)], repeat_last=True)


def build_model(spec: str, plan_mode: bool, err: Write) -> tuple[Model, bool]:
    """The model ``spec`` names and whether it is the scripted one (a fallback is reported on ``err``)."""
    if spec == "scripted":
        err("running on the scripted model (choose a real one with --model openai:NAME or anthropic:NAME)\n")
        return scripted_model(plan_mode), True
    provider, _, name = spec.partition(":")
    problem: str
    try:
        if provider == "openai":
            if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
                raise LookupError("OPENAI_API_KEY (or OPENAI_BASE_URL) is not set")
            from orchestrator.providers.openai import OpenAIChatModel

            return OpenAIChatModel(name or None), False
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise LookupError("ANTHROPIC_API_KEY is not set")
        from orchestrator.providers.anthropic import AnthropicModel

        return AnthropicModel(name or None), False
    except LookupError as missing:
        problem = str(missing)
    except (ImportError, ValueError) as unusable:
        problem = f"{provider} provider unavailable: {unusable}"
    err(f"{problem}; running on the scripted model instead\n")
    return scripted_model(plan_mode), True


# the terminal -----------------------------------------------------------------


@attrs.define
class _Question:
    event: AgentEvent
    answers: trio.MemorySendChannel[str | None]
    receive: trio.MemoryReceiveChannel[str | None]


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class Terminal:
    """Shows one request's events and turns typed lines into answers or steering."""

    def __init__(self, client: AgentClient, config: AgentRunConfig, read_line: ReadLine, write: Write) -> None:
        self.client = client
        self.config = config
        self.read_line = read_line
        self.write = write
        self.questions: collections.deque[_Question] = collections.deque()
        self.closed = False
        self.mid_text = False
        self.outcome = "unknown"
        self.interrupted = False
        self.stream: RunStream | None = None

    def say(self, line: str) -> None:
        if self.mid_text:
            self.write("\n")
            self.mid_text = False
        self.write(line + "\n")

    async def cancel(self, why: str) -> None:
        """Stop asking and cancel the request; its remaining events still show."""
        if self.interrupted:
            return
        self.interrupted = True
        self.say(why)
        for question in self.questions:
            question.answers.send_nowait(None)
        if self.stream is not None:
            await self.stream.aclose()

    # input ----------------------------------------------------------------

    async def route_lines(self) -> None:
        """Deliver each typed line to the oldest open question, else as steering."""
        while True:
            line = await self.read_line()
            if not line:
                self.closed = True
                for question in self.questions:
                    question.answers.send_nowait(None)
                return
            text = line.rstrip("\r\n")
            if self.questions:
                self.questions[0].answers.send_nowait(text)
            elif text.strip():
                steering = ExternalEvent("steering_message", {"content": text})
                taken = self.client.agent.emit_external_event(steering, config=self.config)
                self.say("(steering sent)" if taken else "(steering not taken: no request is listening)")

    async def ask(self, event: AgentEvent) -> None:
        """Put the question of ``event`` to the user until an answer is accepted."""
        send, receive = trio.open_memory_channel[str | None](math.inf)
        question = _Question(event, send, receive)
        self.questions.append(question)
        try:
            yes_no = event.name in ("enter_plan_mode", "exit_plan_mode")
            self._show_question(event)
            while True:
                text = None if self.closed or self.interrupted else await receive.receive()
                if self.interrupted:
                    return
                if text is None and not yes_no:
                    await self.cancel("(input closed before the question was answered)")
                    return
                payload = self._payload(event, text, yes_no)
                if payload is None:
                    options = ", ".join(event.payload.get("options") or ())
                    self.say("please answer y or n" if yes_no else f"please answer one of: {options}")
                    continue
                reply = ExternalEvent(str(event.payload["response_event"]), payload)
                if self.client.agent.emit_external_event(reply, config=self.config):
                    return
                if text is None:
                    await self.cancel("(input closed before the question was answered)")
                    return
                self.say("answer not accepted, try again")
        finally:
            self.questions.remove(question)

    def _show_question(self, event: AgentEvent) -> None:
        payload = event.payload
        if event.name == "enter_plan_mode":
            self.say(f"? Enter Plan Mode? reason: {payload.get('reason', '')} [y/n]")
        elif event.name == "exit_plan_mode":
            self.say("? Approve this plan?")
            for line in str(payload.get("plan", "")).splitlines():
                self.write(f"    {line}\n")
            self.write("[y/n]\n")
        else:
            options = tuple(payload.get("options") or ())
            self.say(f"? {payload.get('question', '')}" + (f" (options: {', '.join(options)})" if options else ""))

    def _payload(self, event: AgentEvent, text: str | None, yes_no: bool) -> dict[str, Any] | None:
        call_id = event.payload["tool_call_id"]
        if yes_no:
            if text is None:
                self.say("(input closed: declining)")
                return {"tool_call_id": call_id, "approved": False}
            choice = text.strip().lower()
            if choice in ("y", "yes", "n", "no"):
                return {"tool_call_id": call_id, "approved": choice.startswith("y")}
            return None
        answer = (text or "").strip()
        options = tuple(event.payload.get("options") or ())
        if text is not None and options and answer not in options:
            return None
        return {"tool_call_id": call_id, "answer": answer}

    # output ---------------------------------------------------------------

    async def show(self, event: AgentEvent) -> None:
        payload = event.payload
        if event.name == "text_delta":
            self.write(str(payload["text"]))
            self.mid_text = True
        elif isinstance(event, TransitionEvent):
            if event.trigger != "admit_tool":
                self.say(f"  . {event.machine}/{event.region}: {event.source} -> {event.dest} ({event.trigger})")
        elif event.name == "tool_started":
            call: ToolCall = payload["call"]
            self.say(f"-> {call.name} {_short(json.dumps(call.arguments, default=str))}")
        elif event.name in ("tool_completed", "tool_failed", "tool_skipped", "tool_cancelled"):
            result: ToolMessage = payload["result"]
            self.say(f"<- {result.name} {result.status}: {_short(result.content)}")
        elif event.name in ("enter_plan_mode", "exit_plan_mode", "ask_user"):
            await self.ask(event)
        elif event.name == "approval_resumed":
            self.say(f"* resumed {payload['tool_call_id']} with the answer given before")
        elif event.name in ("plan_mode_entered", "plan_mode_exited"):
            self.say(f"* {event.name.replace('_', ' ')}")
        elif event.name == "plan_mode_restored":
            self.say("* plan mode restored (the session was in Plan Mode when it stopped)")
        elif event.name == "run_completed":
            self.outcome = "completed"
            self.say("* completed")
        elif event.name == "run_failed":
            self.outcome = "failed"
            self.say(f"* failed: {payload['error']}")
        elif event.name == "run_cancelled":
            self.outcome = "cancelled"
            self.say("* cancelled")


async def _read_stdin() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


def _write_stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


async def _cancel_on_sigint(terminal: Terminal, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Cancel the request on the first Ctrl-C; a second one interrupts the cleanup."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            break
    await terminal.cancel("(interrupted: cancelling the request)")


async def run(
    options: Options,
    *,
    model: Model | None = None,
    tools: tuple[ToolDefinition, ...] = (),
    read_line: ReadLine = _read_stdin,
    write: Write = _write_stdout,
    err: Write = _write_stderr,
    handle_sigint: bool = True,
) -> int:
    """Run ``options.prompt`` as one request; the exit code."""
    scripted = False
    if model is None:
        model, scripted = build_model(options.model, options.plan_mode, err)
    Path(options.db).parent.mkdir(parents=True, exist_ok=True)
    store = SQLiteSessionStore(options.db)
    try:
        extensions: list[AgentExtension] = [
            store,
            SteeringExtension(),
            AskUserExtension(),
            FilesystemExtension(options.root),
        ]
        if options.plan_mode:
            extensions.append(PlanModeExtension(root=options.root))
        if scripted and not options.plan_mode:
            tools = (*tools, word_count)
        client = await create_agent(
            model, extensions=extensions, tools=tools, history=None, system_prompt=SYSTEM_PROMPT
        )
        session_id = options.session or f"session-{uuid.uuid4().hex[:12]}"
        terminal = Terminal(client, AgentRunConfig(session_id), read_line, write)
        _introduce(terminal, store, options.session)
        return await _drive(terminal, store, options.prompt, handle_sigint)
    finally:
        store.close()


def _introduce(terminal: Terminal, store: SQLiteSessionStore, resumed: str | None) -> None:
    session_id = terminal.config.session_id
    if resumed is None:
        terminal.say(f"session {session_id} (continue it with --session {session_id})")
        return
    stored = store.messages(session_id)
    if not stored:
        terminal.say(f"no stored session {session_id}; starting it")
        return
    terminal.say(f"resuming session {session_id} ({len(stored)} stored messages)")


async def _answer_left_over(terminal: Terminal, store: SQLiteSessionStore) -> None:
    """Ask the questions a stopped run left waiting; the store records the answers."""
    for pending in store.pending_approvals(terminal.config.session_id):
        if pending.response is not None:
            continue
        terminal.say(f"(the previous run stopped while waiting for {pending.event} {pending.tool_call_id})")
        await terminal.ask(ExtensionEvent(name=pending.event, payload=pending.payload))
        if terminal.interrupted:
            return


async def _drive(terminal: Terminal, store: SQLiteSessionStore, prompt: str, handle_sigint: bool) -> int:
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        if handle_sigint:
            await nursery.start(_cancel_on_sigint, terminal)
        nursery.start_soon(terminal.route_lines)
        try:
            await _answer_left_over(terminal, store)
            if terminal.interrupted:
                terminal.outcome = "cancelled"
                terminal.say("* cancelled")
                nursery.cancel_scope.cancel()
                return 130
            async with terminal.client.stream(prompt, config=terminal.config) as stream:
                terminal.stream = stream
                if terminal.interrupted:
                    await stream.aclose()
                async for event in stream:
                    await terminal.show(event)
        except Exception as error:
            failure = error
        nursery.cancel_scope.cancel()
    if terminal.outcome == "cancelled":
        return 130
    if failure is not None and terminal.outcome != "failed":
        terminal.say(f"* failed: {failure}")
    return 0 if terminal.outcome == "completed" else 1


def main(argv: list[str]) -> int:
    """Entry point of ``python -m orchestrator run``."""
    try:
        options = parse(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return trio.run(run, options)
