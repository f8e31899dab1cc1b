"""Typed lines, and who gets each one.

``TerminalLines`` edits a line on a terminal itself (cbreak mode: no kernel
echo, Ctrl-C still a signal), so the line being typed can be drawn below a
streaming answer. ``StreamLines`` reads lines from a pipe or a test.

``LineRouter`` decides where a line goes, so input is never ambiguous:

- a waiting question or the prompt claims the next line (oldest claim first);
- on a terminal, a line typed while a run works and nothing is asked steers the run;
- when input is not a terminal, lines are read only when something asks for
  one, in order, and never steer.
"""

from __future__ import annotations

import codecs
import collections
import os
import sys
import termios
import tty
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

ReadLine = Callable[[], Awaitable[str]]  # "" at the end of input, like readline
Echo = Callable[[str, str], None]  # (label, text so far)


class LineSource(Protocol):
    label: str

    async def read(self) -> str | None:
        """The next line without its newline; None at the end of input."""
        ...


class StreamLines:
    """Lines from ``read_line`` (a pipe, a file, a test); ``echo`` shows each entered line."""

    def __init__(self, read_line: ReadLine, commit: Echo | None = None) -> None:
        self.read_line = read_line
        self.commit = commit
        self.label = ""

    async def read(self) -> str | None:
        line = await self.read_line()
        if not line:
            return None
        text = line.rstrip("\r\n")
        if self.commit is not None:
            self.commit(self.label, text)
        return text


async def read_stdin_line() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


class TerminalLines:
    """A small line editor on a terminal in cbreak mode.

    Keys: printable text, Backspace, Ctrl-U (clear), Ctrl-W (delete a word),
    Enter, Ctrl-D on an empty line (end of input). Escape sequences (arrows)
    are ignored. The line survives a cancelled ``read``.
    """

    def __init__(self, fd: int, echo: Echo, commit: Echo) -> None:
        self.fd = fd
        self.echo = echo
        self.commit = commit
        self.label = ""
        self.buffer = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._escape = ""
        self._saved: list[Any] | None = None
        self._pending = ""

    def __enter__(self) -> TerminalLines:
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd, termios.TCSANOW)  # VMIN=1: a read after wait_readable returns at once
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def set_label(self, label: str) -> None:
        self.label = label
        self.echo(label, self.buffer)

    def clear(self) -> bool:
        """Drop the line being typed; whether there was one."""
        had = bool(self.buffer)
        self.buffer = ""
        self.echo(self.label, self.buffer)
        return had

    async def read(self) -> str | None:
        self.echo(self.label, self.buffer)
        while True:
            while self._pending:
                key, self._pending = self._pending[0], self._pending[1:]
                done = self._key(key)
                if done is not None:
                    return None if done is _EOF else done
            await trio.lowlevel.wait_readable(self.fd)
            try:
                data = os.read(self.fd, 1024)
            except BlockingIOError:
                continue
            if not data:
                return None
            self._pending += self._decoder.decode(data)

    def _key(self, key: str) -> str | None:
        if self._escape:
            self._escape += key
            if (len(self._escape) > 1 and (key.isalpha() or key == "~")) or len(self._escape) > 8:
                self._escape = ""
            return None
        if key == "\x1b":
            self._escape = key
            return None
        if key in ("\r", "\n"):
            line, self.buffer = self.buffer, ""
            self.commit(self.label, line)
            return line
        if key == "\x04":
            if not self.buffer:
                return _EOF
            return None
        if key in ("\x7f", "\x08"):
            self.buffer = self.buffer[:-1]
        elif key == "\x15":
            self.buffer = ""
        elif key == "\x17":
            kept = self.buffer.rstrip()
            self.buffer = kept[: kept.rfind(" ") + 1]
        elif key == "\t":
            self.buffer += " "
        elif key.isprintable():
            self.buffer += key
        else:
            return None
        self.echo(self.label, self.buffer)
        return None


_EOF = "\x00<end of input>"


class _Claim:
    def __init__(self, label: str) -> None:
        self.label = label
        self.line: str | None = None
        self.done = trio.Event()


class LineRouter:
    """Hands each line to a waiting question or prompt, else (on a terminal, while a run works) to steering."""

    def __init__(self, source: LineSource, *, interactive: bool) -> None:
        self.source = source
        self.interactive = interactive
        self.claims: collections.deque[_Claim] = collections.deque()
        self.steer: Callable[[str], None] | None = None
        self.idle_label = ""
        self.ended = False

    async def pump(self) -> None:
        """Read lines for as long as the session lasts (interactive input only)."""
        while not self.ended:
            line = await self.source.read()
            if line is None:
                self.ended = True
                for claim in self.claims:
                    claim.done.set()
                self.claims.clear()
                return
            if self.claims:
                claim = self.claims.popleft()
                claim.line = line
                claim.done.set()
                self._relabel()
            elif self.steer is not None and line.strip():
                self.steer(line)

    def set_idle_label(self, label: str) -> None:
        """What the line being typed is for when nothing asks (steering while a run works)."""
        self.idle_label = label
        self._relabel()

    def _relabel(self) -> None:
        label = self.claims[0].label if self.claims else self.idle_label
        setter = getattr(self.source, "set_label", None)
        if setter is not None:
            setter(label)
        else:
            self.source.label = label

    async def line(self, label: str) -> str | None:
        """The next line for a question or the prompt; None at the end of input or when withdrawn."""
        if self.ended:
            return None
        if not self.interactive:
            self.source.label = label
            line = await self.source.read()
            if line is None:
                self.ended = True
            return line
        claim = _Claim(label)
        self.claims.append(claim)
        self._relabel()
        try:
            await claim.done.wait()
        finally:
            if claim in self.claims:
                self.claims.remove(claim)
                self._relabel()
        return claim.line

    def withdraw(self) -> None:
        """Answer every waiting claim with None (the turn is being cancelled)."""
        for claim in self.claims:
            claim.done.set()
        self.claims.clear()
        self._relabel()
