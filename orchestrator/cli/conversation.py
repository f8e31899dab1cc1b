"""One session in the terminal: runs its turns, shows their events, puts their questions to the user."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import IO, Any

import trio

from orchestrator.agent import AgentClient
from orchestrator.cli.jsonlines import dumps
from orchestrator.cli.lines import LineRouter
from orchestrator.cli.questions import QUESTION_EVENTS, answer_of, declined, question_of
from orchestrator.cli.render import Screen, call_line
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.events import AgentEvent, ExtensionEvent, TransitionEvent
from orchestrator.extensions.sqlite_store import SQLiteSessionStore
from orchestrator.messages import ToolCall, ToolMessage
from orchestrator.model import Usage
from orchestrator.runtime.stream import RunStream

ANSWER_LABEL = "answer> "
STEER_LABEL = "steer> "
_TOOL_ENDS = ("tool_completed", "tool_failed", "tool_skipped", "tool_cancelled")
_OUTCOMES = {"run_completed": "completed", "run_failed": "failed", "run_cancelled": "cancelled"}


class Conversation:
    """Turns of one session; typed lines answer its questions or steer its running turn."""

    def __init__(
        self,
        client: AgentClient,
        config: AgentRunConfig,
        screen: Screen,
        router: LineRouter,
        *,
        json_out: IO[str] | None = None,
        on_turn: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.screen = screen
        self.router = router
        self.json_out = json_out
        self.on_turn = on_turn
        screen.reported_labels.add(STEER_LABEL)
        self.running = False
        self.cancelling = False
        self.stream: RunStream | None = None
        self.question_scope: trio.CancelScope | None = None
        self.approve_plan_entry = False  # /plan: the user already asked for Plan Mode
        self.outcome = "unknown"
        self.usage: list[Usage | None] = []
        self.turn_usage: list[tuple[str, list[Usage | None]]] = []  # (input, each model call's usage) per turn

    # one turn -------------------------------------------------------------------

    async def turn(self, prompt: str) -> str:
        """Run ``prompt`` as one request; its outcome (completed, failed or cancelled)."""
        self.running, self.cancelling, self.outcome, self.usage = True, False, "unknown", []
        started = time.monotonic()
        if self.on_turn is not None:
            self.on_turn(self.config.session_id)
        self.screen.begin_turn()
        if self.router.interactive:
            self.router.steer = self._steer
            self.router.set_idle_label(STEER_LABEL)
        failure: Exception | None = None
        try:
            async with self.client.stream(prompt, config=self.config) as stream:
                self.stream = stream
                if self.cancelling:
                    await stream.aclose()
                async for event in stream:
                    await self.show(event)
        except BrokenPipeError:
            raise  # nobody reads the output any more
        except Exception as error:
            failure = error
        finally:
            self.router.steer = None
            self.router.set_idle_label("")
            self.stream = None
            self.running = False
            self.approve_plan_entry = False
            self.screen.end_turn()
        if failure is not None and self.outcome != "failed":
            self.outcome = "failed"
            self.screen.say(f"* failed: {failure}", style="red")
        self._finish(time.monotonic() - started)
        self.turn_usage.append((prompt, self.usage))
        return self.outcome

    def _finish(self, elapsed: float) -> None:
        reported = [u for u in self.usage if u is not None]
        if self.usage:
            calls = f"{len(self.usage)} model call" + ("s" if len(self.usage) != 1 else "")
            if reported:
                spent = f"{sum(u.input_tokens for u in reported)} in, {sum(u.output_tokens for u in reported)} out"
                self.screen.say(f"  tokens: {spent} ({calls})", style="dim")
            else:
                self.screen.say(f"  tokens: not reported ({calls})", style="dim")
        style = {"completed": "green", "failed": "red"}.get(self.outcome, "yellow")
        took = f" in {elapsed:.1f}s" if self.screen.tty else ""
        self.screen.say(f"* {self.outcome}{took}", style=style)

    async def cancel(self, why: str) -> None:
        """Cancel the running turn (Ctrl-C); its remaining events still show."""
        if not self.running or self.cancelling:
            return
        self.cancelling = True
        self.screen.say(why, style="yellow")
        if self.question_scope is not None:
            self.question_scope.cancel()
        if self.stream is not None:
            await self.stream.aclose()

    def _steer(self, text: str) -> None:
        steering = ExternalEvent("steering_message", {"content": text})
        delivery = self.client.deliver(steering, config=self.config)
        if delivery:
            self.screen.say(f"> steering: {text}", style="bold magenta")
            self.screen.say("  (sent to the running turn: the agent reads it after its current step)", style="dim")
        else:
            why = "; ".join(delivery.refused.values()) or "the turn no longer takes steering"
            self.screen.say(f"(steering not sent: {why}: {text})", style="yellow")

    # events -------------------------------------------------------------------

    async def show(self, event: AgentEvent) -> None:
        if self.json_out is not None:
            self.json_out.write(dumps(event) + "\n")
            self.json_out.flush()
        payload = event.payload
        if event.name in QUESTION_EVENTS:
            await self.ask(event)
            return
        if event.name in _OUTCOMES:
            self.outcome = _OUTCOMES[event.name]
            if event.name == "run_failed":
                self._human(f"* error: {payload['error']}", style="red")
            return
        if event.name == "model_completed":
            usage = payload.get("usage")
            self.usage.append(usage if isinstance(usage, Usage) else None)
        if self.json_out is not None:
            return
        self._render(event)

    def _render(self, event: AgentEvent) -> None:
        screen, payload = self.screen, event.payload
        if event.name == "text_delta":
            screen.text(str(payload["text"]))
        elif event.name == "reasoning_delta":
            screen.reasoning(str(payload["text"]))
        elif isinstance(event, TransitionEvent):
            if event.machine == "request" and event.region == "phase":
                screen.phase(event.dest)
            if event.trigger != "admit_tool":
                screen.transition(event.machine, event.region, event.source, event.dest, event.trigger)
        elif event.name == "tool_started":
            screen.tool_started(payload["call"])
        elif event.name in _TOOL_ENDS:
            result: ToolMessage = payload["result"]
            screen.tool_finished(result)
        elif event.name == "approval_resumed":
            screen.say(f"* resumed {payload['tool_call_id']} with the answer given before")
        elif event.name in ("plan_mode_entered", "plan_mode_exited"):
            screen.say(f"* {event.name.replace('_', ' ')}", style="bold blue")
        elif event.name == "plan_mode_restored":
            screen.say("* plan mode restored (the session was in Plan Mode when it stopped)", style="bold blue")
        elif event.name == "steering_applied":
            screen.say("* steering applied", style="magenta")
        elif event.name == "sandbox_unavailable":
            screen.say(f"* bash is not sandboxed ({payload['level']} asked): {payload['reason']}", style="yellow")

    def _human(self, text: str, style: str | None = None) -> None:
        self.screen.say(text, style=style)

    # questions ----------------------------------------------------------------

    async def ask(self, event: AgentEvent) -> None:
        """Put the question of ``event`` to the user until an accepted answer is sent."""
        name, payload = event.name, event.payload
        call_text = ""
        if name == "tool_approval":
            arguments = dict(payload["arguments"])
            call_text = call_line(ToolCall(str(payload["tool_call_id"]), str(payload["name"]), arguments))
        question = question_of(name, payload, call_text)
        self.screen.end_text()
        self.screen.phase("awaiting_approval")  # the status line stays, the answer is typed below it
        try:
            if question.plan is not None:
                self.screen.plan(question.plan)
            self.screen.say(question.prompt, style="bold yellow")
            if name == "enter_plan_mode" and self.approve_plan_entry:
                self.screen.say("(approved: you asked for Plan Mode with /plan)", style="dim")
                self._send(name, payload, {"tool_call_id": payload["tool_call_id"], "approved": True})
                return
            with trio.CancelScope() as self.question_scope:
                await self._answer(name, payload, question.hint)
        finally:
            self.question_scope = None

    async def _answer(self, name: str, payload: Mapping[str, Any], hint: str) -> None:
        while not self.cancelling:
            text = await self.router.line(ANSWER_LABEL)
            if self.cancelling:
                return
            if text is None:
                fallback = declined(name, payload)
                if fallback is None:
                    await self.cancel("(input ended before the question was answered)")
                    return
                self.screen.say("(input ended: declining)", style="yellow")
                self._send(name, payload, fallback)
                return
            reply = answer_of(name, payload, text)
            if reply is None:
                self.screen.say(hint, style="yellow")
                continue
            refused = self._send(name, payload, reply)
            if refused is None:
                return
            self.screen.say(f"answer not accepted ({refused}), try again", style="yellow")

    def _send(self, name: str, payload: Mapping[str, Any], reply: dict[str, Any]) -> str | None:
        """Deliver an answer; None when it was taken, else why not."""
        response_event = str(payload["response_event"])
        delivery = self.client.deliver(ExternalEvent(response_event, reply), config=self.config)
        if delivery:
            return None
        return "; ".join(delivery.refused.values()) or "nothing waits for it"

    async def answer_left_over(self, store: SQLiteSessionStore) -> None:
        """Ask the questions a stopped process left waiting; their answers settle the calls before the next input."""
        for pending in store.pending_approvals(self.config.session_id):
            if pending.response is not None:
                continue
            self.screen.say(f"(the previous run stopped while waiting for {pending.event} {pending.tool_call_id})")
            self.running = True
            try:
                await self.ask(ExtensionEvent(name=pending.event, payload=pending.payload))
            finally:
                self.running = False
            if self.cancelling:
                return
