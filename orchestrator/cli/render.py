"""What the terminal shows: answers, tool lines, questions, the status line.

On a terminal (stdout a TTY) answers stream as Markdown (finished blocks are
printed, the block being written is redrawn below them), and a live area at
the bottom shows a spinner with the request machine's current state, the time
spent in it, a retry in progress, the end of the reasoning the model streams
before it answers, and the line being typed. Elsewhere (a pipe,
a file) output is plain text without colours or redraws. NO_COLOR turns
colours off on a terminal too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

from orchestrator.messages import ToolCall, ToolMessage, ToolStatus, describe_parts

Write = Callable[[str], None]

THINKING_CHARS = 60
"""How much of the model's latest reasoning the status line shows."""


class WriteFile:
    """A file-like object around a write function (for tests and custom sinks)."""

    def __init__(self, write: Write, *, tty: bool = False) -> None:
        self._write = write
        self._tty = tty

    def write(self, text: str) -> int:
        self._write(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self._tty


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def call_line(call: ToolCall, limit: int = 100) -> str:
    """``name(key=value, ...)`` with long values elided; the plan of exit_plan_mode is shown separately."""
    if call.name == "exit_plan_mode":
        return "exit_plan_mode(plan: shown below)"
    parts = []
    for key, value in call.arguments.items():
        shown = json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"{key}={shorten(shown, 40)}")
    return shorten(f"{call.name}({', '.join(parts)})", limit)


def result_line(result: ToolMessage, limit: int = 100) -> str:
    """``name status: first line (N lines)``."""
    lines = describe_parts(result.content).splitlines() or [""]
    more = f" ({len(lines)} lines)" if len(lines) > 1 else ""
    return f"{result.name} {result.status}: {shorten(lines[0], limit)}{more}"


def complete_blocks(buffer: str) -> tuple[str, str]:
    """Split streamed Markdown into finished blocks (ended by a blank line outside a code fence) and the rest."""
    cut = 0
    fenced = False
    position = 0
    for line in buffer.splitlines(keepends=True):
        position += len(line)
        if not line.endswith("\n"):
            break
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not line.strip() and not fenced:
            cut = position
    return buffer[:cut], buffer[cut:]


class OutputClosed(BrokenPipeError):
    """The reader of the output went away (``| head``)."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        raise OutputClosed("output closed")


class StatusLine:
    """Spinner, the request's phase and how long it has been in it, a note (a retry) and what the model thinks."""

    def __init__(self) -> None:
        self.state = "starting"
        self.since = time.monotonic()
        self.started = self.since
        self.note = ""
        self.thinking = ""  # the end of the reasoning the model streams before its answer
        self.spinner = Spinner("dots")

    def enter(self, state: str) -> None:
        self.state = state
        self.since = time.monotonic()
        if state != "awaiting_model":
            self.note = ""
            self.thinking = ""

    def think(self, delta: str) -> None:
        """Keep the last THINKING_CHARS characters of the model's reasoning, on one line."""
        self.thinking = " ".join(f"{self.thinking}{delta}".split())[-THINKING_CHARS:]

    def __rich__(self) -> RenderableType:
        now = time.monotonic()
        text = Text(f"{self.state} {now - self.since:.1f}s", style="bold")
        text.append(f"  (turn {now - self.started:.1f}s)", style="dim")
        if self.note:
            text.append(f"  {self.note}", style="yellow")
        if self.thinking:
            text.append(f"  thinking: {self.thinking}", style="dim italic")
        self.spinner.text = text
        return self.spinner


class Screen:
    """Everything the terminal shows, written to ``out``."""

    def __init__(self, out: IO[str], *, tty: bool, color: bool, trace: bool = False) -> None:
        self.tty = tty
        self.trace = trace
        self.console = _Console(
            file=out,
            force_terminal=tty,
            no_color=not color,
            color_system="auto" if color else None,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=not tty,
        )
        self.out = out
        self.live: Live | None = None
        self.status: StatusLine | None = None
        self.markdown = ""  # the answer text not printed yet (on a terminal)
        self.mid_line = False  # plain text was written without its newline
        self.input_label = ""
        self.input_text = ""
        self.reported_labels: set[str] = set()  # lines entered under these labels are reported by the caller

    # plain lines --------------------------------------------------------------

    def say(self, text: str, style: str | None = None) -> None:
        """One line (Markdown still being streamed is finished first)."""
        self.end_text()
        self.console.print(Text(text, style=style or ""), soft_wrap=True)

    def print(self, renderable: RenderableType) -> None:
        self.end_text()
        self.console.print(renderable)

    # answers ------------------------------------------------------------------

    def text(self, delta: str) -> None:
        if self.status is not None:
            self.status.thinking = ""  # the answer has begun
        if not self.tty:
            self.out.write(delta)
            self.out.flush()
            self.mid_line = not delta.endswith("\n") if delta else self.mid_line
            return
        self.markdown += delta
        done, self.markdown = complete_blocks(self.markdown)
        if done.strip():
            self.console.print(Markdown(done))
        self._refresh()

    def reasoning(self, delta: str) -> None:
        """The model's reasoning: the end of it on a terminal's status line, nothing in plain output."""
        if self.status is not None:
            self.status.think(delta)
            self._refresh()

    def end_text(self) -> None:
        """Finish the answer being streamed (before anything else is printed)."""
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False
        if self.markdown.strip():
            text, self.markdown = self.markdown, ""
            self.console.print(Markdown(text))
        self.markdown = ""

    # events -----------------------------------------------------------------

    def tool_started(self, call: ToolCall) -> None:
        line = Text("-> ", style="dim")
        line.append(call_line(call), style="bold cyan")
        self.print(line)

    def tool_finished(self, result: ToolMessage) -> None:
        style = {ToolStatus.SUCCEEDED: "green", ToolStatus.FAILED: "red"}.get(result.status, "yellow")
        line = Text("<- ", style="dim")
        line.append(result_line(result), style=style)
        self.print(line)

    def transition(self, machine: str, region: str, source: str, dest: str, trigger: str) -> None:
        if self.trace:
            self.say(f"  . {machine}/{region}: {source} -> {dest} ({trigger})", style="dim")

    def phase(self, state: str) -> None:
        if self.status is not None:
            self.status.enter(state)
            self._refresh()

    def note(self, text: str) -> None:
        """A passing remark on the status line (a retry); printed as a line when there is none."""
        if self.status is not None:
            self.status.note = text
            self._refresh()
        else:
            self.say(f"({text})", style="yellow")

    def plan(self, plan: str) -> None:
        if self.tty:
            self.print(Markdown(plan))
        else:
            for line in plan.splitlines():
                self.say(f"    {line}")

    # the live area --------------------------------------------------------------

    def begin_turn(self) -> None:
        if self.tty:
            self.status = StatusLine()
            self._start_live()

    def end_turn(self) -> None:
        self.end_text()
        self._stop_live()
        self.status = None

    def _start_live(self) -> None:
        if self.live is None:
            self.live = Live(
                self._live_view(), console=self.console, transient=True, refresh_per_second=8, redirect_stdout=False
            )
            self.live.start()

    def _stop_live(self) -> None:
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()

    def _live_view(self) -> RenderableType:
        return _LiveView(self)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.refresh()

    # the line being typed ---------------------------------------------------------

    def show_input(self, label: str, text: str) -> None:
        """Redraw the line being typed (in the live area while it runs, else on the last line)."""
        self.input_label, self.input_text = label, text
        if not self.tty:
            return
        if self.live is not None:
            self._refresh()
            return
        width = max(self.console.width - len(label) - 1, 10)
        self.out.write("\r\x1b[2K" + label + text[-width:])
        self.out.flush()

    def commit_input(self, label: str, text: str) -> None:
        """The line was entered: it stays on the screen."""
        self.input_label, self.input_text = label, ""
        if self.tty and self.live is None:
            self.out.write("\r\x1b[2K")
            self.out.flush()
        if self.tty and self.live is not None and label in self.reported_labels:
            return  # the caller says what became of the line (steering)
        self.say(f"{label}{text}", style="bold")


class _LiveView:
    """The live area: the unfinished Markdown block, the status line and the line being typed."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen

    def __rich__(self) -> RenderableType:
        screen = self.screen
        parts: list[RenderableType] = []
        if screen.markdown.strip():
            parts.append(Markdown(screen.markdown))
        if screen.status is not None:
            parts.append(screen.status)
        if screen.input_label:
            parts.append(Text(screen.input_label + screen.input_text + "▏", style="bold"))
        return Group(*parts)
