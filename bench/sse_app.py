"""The agent the SSE workloads serve: a ScriptedModel with optional latency and tool turns.

``python -m orchestrator serve --app bench.sse_app:agent`` serves it; the shape
of its runs comes from the ``BENCH_SSE`` environment variable (JSON of
``Shape``'s fields), so the server process and the in-process comparison build
the same agent from the same figures.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs
import trio

from orchestrator import (
    AgentClient,
    AssistantMessage,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    create_agent,
    tool,
)

ENVIRONMENT = "BENCH_SSE"

#: Every streamed word (ScriptedModel streams an answer word by word: one text delta each).
WORD = "token"


@attrs.frozen
class Shape:
    """One run: ``tool_turns`` model calls that each ask for one no-op tool, then an answer of ``words`` words.

    Every model call first sleeps ``latency`` seconds.
    """

    words: int
    latency: float = 0.0
    tool_turns: int = 0

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Shape:
        fields: dict[str, Any] = json.loads(text)
        return cls(**fields)

    @property
    def model_calls(self) -> int:
        return self.tool_turns + 1

    @property
    def ideal_seconds(self) -> float:
        """The model latencies on one run's critical path: nothing else is waited for."""
        return self.model_calls * self.latency


@tool
async def noop() -> str:
    """Do nothing and succeed."""
    return "ok"


def scripted_model(shape: Shape) -> ScriptedModel:
    """One step for every call: sleep, then a tool call while the run has fewer than ``tool_turns`` results."""
    answer = AssistantMessage(" ".join([WORD] * shape.words))

    async def step(request: ModelRequest) -> AssistantMessage:
        if shape.latency:
            await trio.sleep(shape.latency)
        done = sum(isinstance(message, ToolMessage) for message in request.messages)
        if done < shape.tool_turns:
            return AssistantMessage("", (ToolCall(f"call-{done}", "noop", {}),))
        return answer

    return ScriptedModel([step], repeat_last=True)


async def build(shape: Shape) -> AgentClient:
    """The shaped agent's client, with the library's defaults (event log and finished runs kept)."""
    return await create_agent(scripted_model(shape), tools=[noop], max_iterations=shape.tool_turns + 1)


async def agent() -> AgentClient:
    """The served agent, shaped by ``$BENCH_SSE``."""
    return await build(Shape.from_json(os.environ[ENVIRONMENT]))
