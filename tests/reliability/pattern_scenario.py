"""Run in a child process by test_pattern_bounds: catastrophic patterns beside another session.

Usage: python pattern_scenario.py ROOT. One agent calls grep and glob with
patterns that make a backtracking engine run for ages; another agent, in the
same process, runs turn after turn meanwhile. Prints one JSON object: each
tool call's status and content, and how many turns the other session finished.
"""

from __future__ import annotations

import json
import sys

import trio

from orchestrator import AssistantMessage, ScriptedModel, ToolCall, ToolMessage, create_agent
from orchestrator.extensions.files.filesystem import FilesystemExtension

TURNS = 20
CALLS = [
    ToolCall("nested_quantifier", "grep", {"pattern": "(a+)+$"}),
    ToolCall("alternation", "grep", {"pattern": "^(a|aa)+$", "include": "*.txt"}),
    ToolCall("backreference", "grep", {"pattern": r"^(a*)*\1$"}),
    ToolCall("lookahead", "grep", {"pattern": r"(?=a)+a"}),
    ToolCall("many_stars", "glob", {"pattern": "**/" + "*a" * 25 + "*b"}),
    ToolCall("many_double_stars", "glob", {"pattern": "**/" * 30 + "x"}),
    ToolCall("too_long", "glob", {"pattern": "*" * 1001}),
]


async def main(root: str) -> dict[str, object]:
    searcher = await create_agent(
        ScriptedModel([AssistantMessage("", tuple(CALLS)), AssistantMessage("searched")]),
        extensions=[FilesystemExtension(root)],
    )
    other = await create_agent(ScriptedModel([AssistantMessage(f"turn {n}") for n in range(TURNS)]))
    finished = 0

    async def keep_running() -> None:
        nonlocal finished
        for n in range(TURNS):
            await other.run(f"question {n}")
            finished += 1
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_running)
        await searcher.run("search")
    results = {
        message.tool_call_id: [message.status.value, message.content]
        for message in searcher.agent.history.load("default")
        if isinstance(message, ToolMessage)
    }
    return {"results": results, "other_turns": finished}


if __name__ == "__main__":
    print(json.dumps(trio.run(main, sys.argv[1])))
