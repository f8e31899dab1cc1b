"""The agent the SSE workloads serve: a ScriptedModel with optional latency and tool turns.

``python -m orchestrator serve --app bench.sse_app:agent`` serves it; the shape
of its runs comes from the ``BENCH_SSE`` environment variable (JSON of
``Shape``'s fields), so the server process and the in-process comparison build
the same agent from the same figures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from orchestrator import (
    AgentClient,
    AgentRunConfig,
    AssistantMessage,
    ModelRequest,
    RunHandle,
    ScriptedModel,
    ToolCall,
    ToolMessage,
    UserMessage,
    create_agent,
    tool,
)
from orchestrator.handle import RETAINED_EVENTS, RETAINED_RUNS
from orchestrator.messages import ContentPart

ENVIRONMENT = "BENCH_SSE"

#: Every streamed word (ScriptedModel streams an answer word by word: one text delta each).
WORD = "token"


@attrs.frozen
class Shape:
    """One run: ``tool_turns`` model calls that each ask for one no-op tool, then an answer of ``words`` words.

    Every model call first sleeps ``latency`` seconds. ``retain`` is how many
    events each run's log keeps for replay, ``finished_runs`` how many finished
    runs stay reachable by request id (each at least the library's default).
    """

    words: int
    latency: float = 0.0
    tool_turns: int = 0
    retain: int = RETAINED_EVENTS
    finished_runs: int = RETAINED_RUNS

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


class RetainingClient(AgentClient):
    """Starts every run with a log of at least ``retain`` events.

    The scripted model streams its deltas without ever waiting, so a run can
    record all of them before any reader is scheduled; the default log (the
    last 10,000 events) would then have dropped the first ones and a reader
    from seq 0 gets EventsExpired (410 over HTTP). Keeping every event makes
    the reader's work the same in-process and over SSE.
    """

    def __init__(self, client: AgentClient, retain: int) -> None:
        super().__init__(client.agent)
        self.retain = retain

    async def start(
        self,
        user_input: str | UserMessage | Sequence[ContentPart],
        *,
        config: AgentRunConfig | None = None,
        retain_events: int = RETAINED_EVENTS,
    ) -> RunHandle:
        return await super().start(user_input, config=config, retain_events=max(retain_events, self.retain))


async def build(shape: Shape) -> RetainingClient:
    """The shaped agent's client.

    With many runs at once, a reader may connect after its run finished and
    after more than the default 64 other runs finished too: the registry
    would have forgotten it (404). ``finished_runs`` keeps enough of them.
    """
    client = await create_agent(scripted_model(shape), tools=[noop], max_iterations=shape.tool_turns + 1)
    client.agent.runs.keep = max(client.agent.runs.keep, shape.finished_runs)
    return RetainingClient(client, shape.retain)


async def agent() -> RetainingClient:
    """The served agent, shaped by ``$BENCH_SSE``."""
    return await build(Shape.from_json(os.environ[ENVIRONMENT]))
