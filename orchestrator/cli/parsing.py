"""The command line parser of every subcommand: a usage error is one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``PROG: error: REASON (PROG --help shows the usage)``.

    Its subparsers are of the same kind, so a subcommand's errors are one line too.
    """

    def error(self, message: str) -> NoReturn:
        flat = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {flat} ({self.prog} --help shows the usage)\n")


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks one); argparse reports anything else as a usage error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: a whole number from 0 to 65535") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {port}: a whole number from 0 to 65535")
    return port


def tool_pattern(text: str) -> str:
    """A tool name or pattern for ``--allow`` / ``--deny``; a blank one is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a tool name or pattern must not be blank")
    return text
