"""The scripted model: a deterministic stand-in used when no --model is given.

It picks a scenario from the first word of the latest user input (steering
included), so every interaction of the terminal can be tried without a key:

- ``plan ...`` (or any input with --plan-mode): proposes Plan Mode, lists the
  workspace, submits a plan with ``exit_plan_mode``;
- ``ask ...``: asks "Which database should I use?" with the options sqlite and postgres;
- ``write TEXT``: writes TEXT to ``notes.txt`` (a permission prompt by default);
- ``slow ...``: runs ``slow_step``, which takes ``--scripted-delay`` seconds
  (time to type a steering line or press Ctrl-C);
- anything else: counts the words with ``word_count``.

Usage is estimated (characters / 4), so the token line has numbers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import trio

from orchestrator.messages import AssistantMessage, Message, ToolCall, ToolMessage, ToolStatus, UserMessage
from orchestrator.model import ModelEvent, ModelRequest, ResponseCompletedEvent, ScriptedModel, Usage
from orchestrator.tools import ToolDefinition, tool

PLAN_REQUEST = "Enter Plan Mode (call enter_plan_mode) and plan before changing anything: "


@tool
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count
    """
    return len(text.split())


def slow_step_tool(delay: float) -> ToolDefinition:
    """A tool that takes ``delay`` seconds, whatever the model asks."""

    @tool
    async def slow_step(label: str) -> str:
        """A step that takes a while.

        Args:
            label: what the step is about
        """
        await trio.sleep(delay)
        return f"{label}: done after {delay:g} s"

    return slow_step


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


def _task(prompt: str) -> str:
    task = prompt.removeprefix(PLAN_REQUEST)
    return task[5:] if task.lower().startswith("plan ") else task


def _plan(prompt: str, turn: list[Message], call_id: str) -> AssistantMessage:
    exited = _result(turn, "exit_plan_mode")
    if exited is not None:  # also a plan approved after a restart, in a later request
        if exited.status == ToolStatus.SUCCEEDED:
            return AssistantMessage("Plan approved; Plan Mode has ended.")
        return AssistantMessage("Plan not approved; stopping here.")
    entered = _result(turn, "enter_plan_mode")
    if entered is None:
        reason = f"plan before acting on: {_task(prompt)}"
        return AssistantMessage("I'd like to plan first.", [ToolCall(call_id, "enter_plan_mode", {"reason": reason})])
    if entered.status != ToolStatus.SUCCEEDED:
        return AssistantMessage("Understood, staying in normal mode.")
    listed = _result(turn, "list_files")
    if listed is None:
        return AssistantMessage("Looking around.", [ToolCall(call_id, "list_files", {"path": "."})])
    entries = len(listed.text.splitlines())
    task = _task(prompt)
    plan = f"1. Review the {entries} entries of the workspace.\n2. Make the change for: {task}\n3. Test it."
    return AssistantMessage("Here is my plan.", [ToolCall(call_id, "exit_plan_mode", {"plan": plan})])


def _ask(turn: list[Message], call_id: str) -> AssistantMessage:
    answered = _result(turn, "ask_user")
    if answered is None:
        question = {"question": "Which database should I use?", "options": ["sqlite", "postgres"]}
        return AssistantMessage("One question first.", [ToolCall(call_id, "ask_user", question)])
    if answered.status != ToolStatus.SUCCEEDED:
        return AssistantMessage("No answer; stopping here.")
    return AssistantMessage(f"You chose **{answered.text}**.")


def _write(prompt: str, turn: list[Message], call_id: str) -> AssistantMessage:
    written = _result(turn, "write_file")
    if written is None:
        content = prompt.partition(" ")[2] or "(empty)"
        arguments = {"path": "notes.txt", "content": content + "\n"}
        return AssistantMessage("Writing it down.", [ToolCall(call_id, "write_file", arguments)])
    if written.status == ToolStatus.SUCCEEDED:
        return AssistantMessage("Wrote `notes.txt`.")
    return AssistantMessage(f"I did not write `notes.txt` ({written.text}).")


def _slow(turn: list[Message], call_id: str) -> AssistantMessage:
    done = _result(turn, "slow_step")
    if done is None:
        return AssistantMessage("This takes a moment.", [ToolCall(call_id, "slow_step", {"label": "slow work"})])
    return AssistantMessage(f"Finished ({done.text}).")


def scripted_step(plan_mode: bool) -> Callable[[ModelRequest], AssistantMessage]:
    """The scenario policy (``plan_mode``: plan on every input)."""

    def step(request: ModelRequest) -> AssistantMessage:
        prompt, turn = _since_input(request.messages)
        call_id = f"call_{len(request.messages)}"
        first = prompt.split(maxsplit=1)[0].lower() if prompt.split() else ""
        if plan_mode or first == "plan" or prompt.startswith(PLAN_REQUEST):
            return _plan(prompt, turn, call_id)
        if first == "ask":
            return _ask(turn, call_id)
        if first == "write":
            return _write(prompt, turn, call_id)
        if first == "slow":
            return _slow(turn, call_id)
        counted = _result(turn, "word_count")
        if counted is None:
            return AssistantMessage("Let me count.", [ToolCall(call_id, "word_count", {"text": prompt})])
        return AssistantMessage(f"Your message has {counted.text} words.")

    return step


def _chars(messages: tuple[Message, ...]) -> int:
    return sum(len(m.text) if isinstance(m, (UserMessage, ToolMessage)) else len(m.content) for m in messages)


class ScenarioModel(ScriptedModel):
    """ScriptedModel playing the scenarios, with usage estimated from characters / 4."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in super().stream(request):
            if isinstance(event, ResponseCompletedEvent):
                message = event.message
                spent = len(message.content) + sum(len(str(c.arguments)) for c in message.tool_calls)
                event = ResponseCompletedEvent(message, Usage(_chars(request.messages) // 4 + 1, spent // 4 + 1))
            yield event


def scripted_model(plan_mode: bool) -> ScenarioModel:
    return ScenarioModel([scripted_step(plan_mode)], repeat_last=True)


def scripted_tools(delay: float) -> tuple[ToolDefinition, ...]:
    return (word_count, slow_step_tool(delay))
