"""The front matter of a Markdown file: ``key: value`` lines between two ``---`` lines.

Only the subset skills use is read: one ``key: value`` per line, values plain or
in single or double quotes, indented lines continuing the value above (YAML's
folded ``>`` and literal ``|`` markers are accepted and the lines joined with
spaces or newlines). Anything else is a FrontMatterError saying which line.
"""

from __future__ import annotations

import re

import attrs

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$")


class FrontMatterError(ValueError):
    """The file's front matter is missing or is not ``key: value`` lines."""


@attrs.frozen
class Document:
    """A Markdown file split into its front matter fields and its body."""

    fields: dict[str, str]
    body: str


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value


def parse(text: str) -> Document:
    """Split ``text`` into front matter fields and body; FrontMatterError when there is no valid front matter."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise FrontMatterError("the file does not start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise FrontMatterError("the front matter has no closing '---' line") from None
    fields: dict[str, str] = {}
    styles: dict[str, str] = {}
    key: str | None = None
    for number, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            if key is None:
                raise FrontMatterError(f"line {number} is indented but continues no field")
            joiner = "\n" if styles[key] == "|" else " "
            fields[key] = f"{fields[key]}{joiner}{line.strip()}" if fields[key] else line.strip()
            continue
        match = _KEY.match(line)
        if match is None:
            raise FrontMatterError(f"line {number} is not 'key: value': {line[:80]!r}")
        key, value = match.group(1), match.group(2).strip()
        if key in fields:
            raise FrontMatterError(f"line {number} repeats the field {key!r}")
        styles[key] = value[:1] if value in (">", "|", ">-", "|-") else ""
        fields[key] = "" if styles[key] else _unquote(value)
    return Document(fields, "\n".join(lines[end + 1 :]).strip("\n"))
