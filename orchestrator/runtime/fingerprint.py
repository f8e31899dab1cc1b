"""The agent's fingerprint, and what a run resumed by a changed agent does.

A fingerprint is a stable digest of what makes an agent behave as it does (its model's name,
each tool's name and schema, each extension's class and the settings it exposes), with a small
readable summary of those parts. It is computed once per agent and stored with each run the
agent starts; a run resumed by an agent with another fingerprint follows the agent's
``on_agent_changed`` policy (``"warn"``, ``"refuse"`` or a migration hook, see ``check_resumed``).
Nothing in it depends on the process: no ids, addresses or reprs of objects.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from orchestrator.errors import AgentError
from orchestrator.events import AgentEvent
from orchestrator.model import Model
from orchestrator.tools import ToolDefinition

__all__ = [
    "POLICIES",
    "AgentChange",
    "AgentChanged",
    "AgentChangedHook",
    "AgentFingerprint",
    "OnAgentChanged",
    "changes",
    "check_policy",
    "check_resumed",
    "fingerprint_of",
]

AgentChangedHook: TypeAlias = Callable[["AgentFingerprint", "AgentFingerprint", Any], object]
"""A migration hook: ``(stored, current, context)`` (the resumed request's AgentRunContext); returns (or awaits
to) None or True to continue; returns False, or raises, to refuse (see ``check_resumed``)."""
OnAgentChanged: TypeAlias = Literal["warn", "refuse"] | AgentChangedHook
POLICIES = ("warn", "refuse")
_DIGEST_CHARS = 16  # of a part's digest in the summary: enough to tell two versions apart


class Fingerprinted(Protocol):
    """What a fingerprint is made of: an agent's model, tools and extensions."""

    @property
    def model(self) -> Model: ...

    @property
    def tools(self) -> Sequence[ToolDefinition]: ...

    @property
    def extensions(self) -> Sequence[object]: ...


class Emitter(Protocol):
    """Where the ``agent_changed`` event goes: the resumed request's context."""

    async def emit(self, event: AgentEvent) -> None: ...


def _canonical(value: Any) -> str:
    import json  # on first use: importing the package loads no json

    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_stable)


def _digest(value: Any) -> str:
    import hashlib

    return hashlib.sha256(_canonical(value).encode("utf-8", "surrogatepass")).hexdigest()


def _stable(value: Any) -> Any:
    """A JSON stand-in for a value that is not JSON data and whose repr may hold an address: its kind's name."""
    if callable(value):
        return _qualified(value)
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical(item) for item in value)
    if isinstance(value, tuple):
        return list(value)
    return _qualified(type(value))


def _qualified(thing: Any) -> str:
    module = getattr(thing, "__module__", None) or "?"
    name = getattr(thing, "__qualname__", None) or type(thing).__qualname__
    return f"{module}.{name}"


def _json(value: Any) -> Any:
    """``value`` as plain JSON data, callables and other objects by their qualified names."""
    import json

    return json.loads(_canonical(value))


@attrs.frozen
class AgentFingerprint:
    """A stable ``digest`` of an agent and the readable ``summary`` it digests.

    ``summary``: ``{"model": name, "tools": {name: schema digest}, "extensions": {name: {"class": qualified
    class name, "settings": what the extension exposes, or None}}}``.
    """

    digest: str
    summary: Mapping[str, Any]

    def text(self) -> str:
        """The JSON text a store keeps."""
        return _canonical({"digest": self.digest, "summary": dict(self.summary)})

    @classmethod
    def parse(cls, text: str | None) -> AgentFingerprint | None:
        """The fingerprint ``text`` holds; None for None or for text that is not one (stored by something else)."""
        if not text:
            return None
        import json

        try:
            data = json.loads(text)
            digest, summary = data["digest"], data["summary"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(digest, str) or not isinstance(summary, dict):
            return None
        return cls(digest, summary)

    @property
    def model(self) -> str | None:
        value = self.summary.get("model")
        return value if isinstance(value, str) else None

    @property
    def tools(self) -> Mapping[str, str]:
        value = self.summary.get("tools")
        return value if isinstance(value, dict) else {}

    @property
    def extensions(self) -> Mapping[str, Any]:
        value = self.summary.get("extensions")
        return value if isinstance(value, dict) else {}


def model_name(model: object) -> str:
    """The model's class, with the provider's model name when it has one (``OpenAIModel:gpt-4o``)."""
    named = getattr(model, "model", None)
    kind = type(model).__qualname__
    return f"{kind}:{named}" if isinstance(named, str) and named else kind


def fingerprint_of(agent: Fingerprinted) -> AgentFingerprint:
    """The fingerprint of ``agent`` as it is now (its tools and extensions; those marked ``fingerprinted =
    False``, machinery of where the agent runs, are left out)."""
    tools = {
        tool.name: _digest({"description": tool.description, "parameters": _json(dict(tool.parameters))})[
            :_DIGEST_CHARS
        ]
        for tool in agent.tools
    }
    extensions: dict[str, Any] = {}
    for extension in agent.extensions:
        if not getattr(extension, "fingerprinted", True):
            continue
        expose = getattr(extension, "fingerprint_settings", None)
        settings = expose() if callable(expose) else None
        name = getattr(extension, "name", type(extension).__name__)
        extensions[str(name)] = {"class": _qualified(type(extension)), "settings": _json(settings)}
    summary = {"model": model_name(agent.model), "tools": tools, "extensions": extensions}
    return AgentFingerprint(_digest(summary), summary)


@attrs.frozen
class AgentChange:
    """What differs between a run's stored fingerprint and the resuming agent's: names, sorted."""

    tools_added: tuple[str, ...] = ()
    tools_removed: tuple[str, ...] = ()
    tools_changed: tuple[str, ...] = ()  # their schema (or description) changed
    extensions_added: tuple[str, ...] = ()
    extensions_removed: tuple[str, ...] = ()
    extensions_changed: tuple[str, ...] = ()  # their class or the settings they expose changed
    model_before: str | None = None  # both set when the model changed
    model_after: str | None = None

    def describe(self) -> str:
        """One line naming every change (``"nothing named"`` when only the digest differs)."""
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("tools added:", self.tools_added),
                ("tools removed:", self.tools_removed),
                ("tools changed:", self.tools_changed),
                ("extensions added:", self.extensions_added),
                ("extensions removed:", self.extensions_removed),
                ("extensions changed:", self.extensions_changed),
            )
            if names
        ]
        if self.model_before != self.model_after:
            parts.append(f"model: {self.model_before} -> {self.model_after}")
        return "; ".join(parts) or "nothing named"


def _compare(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    added = tuple(sorted(set(after) - set(before)))
    removed = tuple(sorted(set(before) - set(after)))
    changed = tuple(sorted(name for name in set(before) & set(after) if before[name] != after[name]))
    return added, removed, changed


def changes(stored: AgentFingerprint, current: AgentFingerprint) -> AgentChange:
    """What changed from ``stored`` to ``current``."""
    tools_added, tools_removed, tools_changed = _compare(stored.tools, current.tools)
    extensions_added, extensions_removed, extensions_changed = _compare(stored.extensions, current.extensions)
    moved = stored.model != current.model
    return AgentChange(
        tools_added,
        tools_removed,
        tools_changed,
        extensions_added,
        extensions_removed,
        extensions_changed,
        stored.model if moved else None,
        current.model if moved else None,
    )


class AgentChanged(AgentError):
    """A run was resumed by an agent whose fingerprint is not the one that started it, and the agent's
    ``on_agent_changed`` policy refused it: ``stored`` and ``current`` are both fingerprints, ``change`` what
    differs, ``reason`` why it was refused."""

    def __init__(self, stored: AgentFingerprint, current: AgentFingerprint, change: AgentChange, reason: str) -> None:
        super().__init__(
            f"the agent changed since this run started ({change.describe()}); {reason}"
            f" [stored {stored.digest[:12]}, current {current.digest[:12]}]"
        )
        self.stored = stored
        self.current = current
        self.change = change
        self.reason = reason


def check_policy(value: object, where: str = "on_agent_changed") -> OnAgentChanged:
    """``value`` when it is a policy (``"warn"``, ``"refuse"`` or a callable); ValueError or TypeError saying why."""
    if isinstance(value, str):
        if value not in POLICIES:
            raise ValueError(f"{where} must be 'warn', 'refuse' or a callable, got {value!r}")
        return "warn" if value == "warn" else "refuse"
    if callable(value):
        return value
    raise TypeError(f"{where} must be 'warn', 'refuse' or a callable, got {type(value).__name__}")


async def check_resumed(
    context: Emitter,
    stored: AgentFingerprint | None,
    current: AgentFingerprint,
    policy: OnAgentChanged,
) -> None:
    """Apply ``policy`` to a run resumed by the agent ``current`` when it was started by ``stored``.

    Nothing happens when both digests match, or when no fingerprint was stored (a run from before them).
    Otherwise an ``agent_changed`` event names the change, then: ``"warn"`` continues; ``"refuse"``
    raises AgentChanged; a hook is called with ``(stored, current, context)`` (awaited when it returns an
    awaitable): None or True continues, False refuses, and an exception it raises refuses with that error as
    the reason (an AgentChanged it raises is raised as it is). The event is emitted once the policy decided,
    with its outcome.
    """
    if stored is None or stored.digest == current.digest:
        return
    from orchestrator.events import AgentChangedEvent  # an optional feature's event, built on first use

    change = changes(stored, current)
    kind = policy if isinstance(policy, str) else "hook"
    refusal: AgentChanged | None = None
    if policy == "refuse":
        refusal = AgentChanged(stored, current, change, "on_agent_changed='refuse'")
    elif callable(policy):
        refusal = await _ask_hook(policy, stored, current, change, context)
    event = AgentChangedEvent(
        stored_digest=stored.digest,
        current_digest=current.digest,
        tools_added=change.tools_added,
        tools_removed=change.tools_removed,
        tools_changed=change.tools_changed,
        extensions_added=change.extensions_added,
        extensions_removed=change.extensions_removed,
        extensions_changed=change.extensions_changed,
        model_before=change.model_before,
        model_after=change.model_after,
        policy=kind,
        outcome="continued" if refusal is None else "refused",
        reason=None if refusal is None else refusal.reason,
    )
    await context.emit(event)
    if refusal is not None:
        raise refusal


async def _ask_hook(
    hook: AgentChangedHook,
    stored: AgentFingerprint,
    current: AgentFingerprint,
    change: AgentChange,
    context: Emitter,
) -> AgentChanged | None:
    """The hook's verdict: None to continue, else the AgentChanged that refuses."""
    try:
        verdict = hook(stored, current, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except AgentChanged as refused:
        return refused
    except Exception as error:
        refusal = AgentChanged(stored, current, change, f"the migration hook refused: {type(error).__name__}: {error}")
        refusal.__cause__ = error
        return refusal
    if verdict is None or verdict is True:
        return None
    if verdict is False:
        return AgentChanged(stored, current, change, "the migration hook returned False")
    return AgentChanged(
        stored, current, change, f"the migration hook returned {type(verdict).__name__}, not None, True or False"
    )


def removed_tools(stored: AgentFingerprint | None, available: Sequence[str]) -> frozenset[str]:
    """Tools the stored agent had that are not among ``available`` (none when nothing was stored)."""
    if stored is None:
        return frozenset()
    return frozenset(stored.tools) - frozenset(available)
