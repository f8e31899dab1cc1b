"""A session's messages as a Markdown document or a self-contained HTML page (no scripts, no outside files)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from orchestrator.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    describe_parts,
)


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}\n{text}\n{ticks}"


def to_markdown(messages: Sequence[Message], title: str) -> str:
    """The conversation as Markdown: a heading per message, tool calls and results in code blocks."""
    parts = [f"# {title}", ""]
    for message in messages:
        if isinstance(message, SystemMessage):
            parts += ["## System", "", message.content, ""]
        elif isinstance(message, UserMessage):
            parts += ["## User", "", describe_parts(message.content), ""]
        elif isinstance(message, AssistantMessage):
            parts += ["## Assistant", ""]
            if message.content:
                parts += [message.content, ""]
            for call in message.tool_calls:
                parts += [f"Tool call `{call.name}`:", "", _fence(json.dumps(call.arguments, indent=2)), ""]
        elif isinstance(message, ToolMessage):
            result = _fence(describe_parts(message.content))
            parts += [f"## Tool result `{message.name}` ({message.status})", "", result, ""]
    return "\n".join(parts).rstrip() + "\n"


_STYLE = """body{font:15px/1.5 system-ui,sans-serif;max-width:50rem;margin:2rem auto;padding:0 1rem;color:#222}
section{border-left:4px solid #ccc;padding:.2rem 1rem;margin:1rem 0}
section.user{border-color:#2a6}section.assistant{border-color:#26a}section.tool{border-color:#a62}
h2{font-size:.8rem;text-transform:uppercase;color:#666;margin:.3rem 0}
pre{background:#f4f4f4;padding:.5rem;overflow-x:auto;white-space:pre-wrap}"""


def to_html(messages: Sequence[Message], title: str) -> str:
    """The conversation as one HTML page with its style inline; every text is escaped."""
    escape = html.escape
    sections: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            sections.append(f'<section class="system"><h2>System</h2><pre>{escape(message.content)}</pre></section>')
        elif isinstance(message, UserMessage):
            text = escape(describe_parts(message.content))
            sections.append(f'<section class="user"><h2>User</h2><pre>{text}</pre></section>')
        elif isinstance(message, AssistantMessage):
            body = f"<pre>{escape(message.content)}</pre>" if message.content else ""
            for call in message.tool_calls:
                arguments = escape(json.dumps(call.arguments, indent=2))
                body += f"<p>Tool call <code>{escape(call.name)}</code></p><pre>{arguments}</pre>"
            sections.append(f'<section class="assistant"><h2>Assistant</h2>{body}</section>')
        elif isinstance(message, ToolMessage):
            head = f"Tool result <code>{escape(message.name)}</code> ({escape(str(message.status))})"
            text = escape(describe_parts(message.content))
            sections.append(f'<section class="tool"><h2>{head}</h2><pre>{text}</pre></section>')
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head>\n<body><h1>{escape(title)}</h1>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
