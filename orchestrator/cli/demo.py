"""The demo: a scripted agent that calls a tool, then answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from orchestrator.agent import create_agent
from orchestrator.config import AgentRunConfig
from orchestrator.events import AgentEvent, TransitionEvent
from orchestrator.messages import AssistantMessage, ToolCall
from orchestrator.model import ScriptedModel
from orchestrator.tools import tool


@tool
def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: the text to count
    """
    return len(text.split())


def demo_model() -> ScriptedModel:
    return ScriptedModel(
        [
            AssistantMessage(
                "Let me count.",
                [ToolCall("call_1", "word_count", {"text": "state machines make agents explicit"})],
            ),
            AssistantMessage("The sentence has 5 words."),
        ]
    )


def describe(event: AgentEvent) -> str:
    if isinstance(event, TransitionEvent):
        return f"  [{event.region}] {event.source} --{event.trigger}--> {event.dest}"
    if event.name == "text_delta":
        return f"text_delta {event.payload['text']!r}"
    details = {k: v for k, v in event.payload.items() if k in ("call", "result", "iteration")}
    return f"{event.name} {details}" if details else event.name


async def run_demo(print_line: Callable[[str], None] = print) -> None:
    client = await create_agent(demo_model(), tools=[word_count], system_prompt="You are a demo agent.")
    config = AgentRunConfig(session_id="demo")
    async for event in client.stream("How many words are in my sentence?", config=config):
        print_line(describe(event))
    taken = [f"{s.source}->{s.dest}" for s in client.transitions("demo") if s.region == "phase"]
    print_line("path: " + " | ".join(taken))


def main(argv: Sequence[str] = ()) -> int:
    """``demo``: takes no arguments (a usage error names any it is given)."""
    from orchestrator.cli.parsing import OneLineParser

    parser = OneLineParser(
        prog="python -m orchestrator demo", description="Run a scripted request and print its events and path."
    )
    parser.parse_args(list(argv))
    trio.run(run_demo)
    return 0
