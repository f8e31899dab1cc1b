"""Tool definitions and the ``@tool`` decorator: a tool from a function's signature, hints and docstring."""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, get_type_hints, overload

import attrs

from machines.values import FieldRepr, FieldValues
from orchestrator.checks import Check, flag, function, mapping, number, text
from orchestrator.errors import ToolArgumentsError, ValueMismatch
from orchestrator.messages import ToolStatus
from orchestrator.tool_content import ToolResultContent
from orchestrator.tools.loops import Loop, check_loop, declared_loop, is_coroutine_function, wants_app_loop
from orchestrator.tools.schema import convert, schema_for, validate_arguments
from orchestrator.tools.threads import run_in_tool_thread

Handler = Callable[..., Any]


@attrs.frozen(eq=False, repr=False)
class ServerToolDefinition(FieldValues):
    """A tool executed by the provider (for example web search)."""

    type: str = attrs.field(validator=text(blank=False))
    options: Mapping[str, Any] = attrs.field(factory=dict, validator=mapping())


_INJECTED = ("context", "call")


def _check_inject(where: str, value: object) -> None:
    """A tuple of (parameter name, ``"context"`` or ``"call"``) pairs."""
    if not isinstance(value, tuple):
        raise TypeError(f"{where} must be a tuple of (parameter, kind) pairs, got {type(value).__name__}")
    for index, pair in enumerate(value):
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(item, str) for item in pair)):
            raise TypeError(f"{where}[{index}] must be a (parameter, kind) pair of str, got {pair!r}")
        if pair[1] not in _INJECTED:
            raise ValueError(f"{where}[{index}] injects {pair[1]!r}; the kinds are {', '.join(_INJECTED)}")


def _known_status(instance: ToolResult, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"ToolResult.status must be a str, got {type(value).__name__}")
    if value not in _STATUSES:
        raise ValueError(f"ToolResult.status must be one of {', '.join(_STATUSES)}; got {value!r}")


_STATUSES = tuple(status.value for status in ToolStatus)


@attrs.define(eq=False, repr=False)
class ToolResult(FieldRepr):
    """What a tool call produced; hooks may change it before it is appended.

    ``content`` is text, or an ``ImagePart`` / ``TextPart`` or a list of them
    and strings (the message then has image parts; see ``tool_content``).
    ``status`` is one of ToolStatus's values, checked when the result is made
    and whenever a hook assigns it, so a wrong status fails where it is set.
    """

    content: ToolResultContent
    status: str = attrs.field(default="succeeded", validator=_known_status)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


@attrs.frozen(eq=False, repr=False)
class ToolDefinition(FieldRepr):
    """A local tool: name, description, JSON schema, and the handler that runs it.

    ``inject`` pairs handler parameters filled by the runtime, not by the model,
    with what fills them: ``"context"`` (the AgentRunContext) or ``"call"``
    (the ToolCall being run). ``serial`` tools never run beside other calls.
    A plain ``def`` handler runs inline in the request's task, unless
    ``thread`` is set: then it runs in a worker thread, so it may block without
    stalling other calls (a cancelled call waits for the thread to return, unless the call has a
    timeout: then the thread is abandoned and its late result dropped).
    ``idempotent`` tools may run twice for one call without harm: a run resumed
    after its worker stopped mid-call runs them again (others get a failed result).
    ``timeout`` (seconds; None: the agent's ``tool_timeout``) bounds the handler: an
    async one is cancelled, a thread one abandoned (its late result dropped), and
    the call gets a failed result saying it timed out. Threads of tools run under a
    limiter of their own (``TOOL_THREADS``), not trio's default one.
    ``types`` maps the parameters typed as a structured type (a dataclass, attrs class, TypedDict,
    enum or pydantic model, or a container of them) to their hints: their arguments are converted
    into the type before the handler runs, and a value that does not fit fails the call naming its field.
    ``loop`` says where an ``async def`` handler runs in a request that has an application's asyncio loop
    (one started through an ``AgentHost`` from asyncio code): ``"asyncio"`` on that loop, ``"trio"`` on the
    request's, ``"auto"`` (the default) on that loop when the handler is defined outside the ``orchestrator``
    package (see ``orchestrator.tools.loops``); ``on_app_loop`` is the outcome. Without such a loop it runs on trio.
    """

    name: str = attrs.field(validator=text(blank=False))
    description: str = attrs.field(validator=text())
    parameters: Mapping[str, Any] = attrs.field(validator=mapping())
    handler: Handler | None = attrs.field(default=None, validator=function(optional=True))
    serial: bool = attrs.field(default=False, validator=flag())
    inject: tuple[tuple[str, str], ...] = attrs.field(default=(), validator=Check(lambda w, v: _check_inject(w, v)))
    thread: bool = attrs.field(default=False, validator=flag())
    idempotent: bool = attrs.field(default=False, validator=flag())
    timeout: float | None = attrs.field(default=None, validator=number(above=0, optional=True))
    types: Mapping[str, Any] = attrs.field(factory=dict, validator=mapping())
    loop: str = attrs.field(default="auto", validator=Check(check_loop))
    on_app_loop: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        if self.loop == "asyncio" and (self.thread or not is_coroutine_function(self.handler)):
            raise TypeError(f"tool {self.name!r}: loop='asyncio' needs an async def handler (and no thread)")
        if not self.thread:
            if self.handler is not None:
                object.__setattr__(self, "on_app_loop", wants_app_loop(self.handler, self.loop))
            return
        if self.handler is None or inspect.iscoroutinefunction(self.handler):
            raise TypeError(f"tool {self.name!r}: thread=True needs a plain (def) handler")
        if any(kind == "context" for _, kind in self.inject):
            raise TypeError(f"tool {self.name!r}: a handler run in a thread cannot receive the request context")

    async def invoke(
        self,
        arguments: Mapping[str, Any],
        injected: Mapping[str, Any],
        *,
        abandon: bool = False,
        runner: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None,
    ) -> Any:
        """Validate ``arguments`` and run the handler (sync ones inline, or in a thread with ``thread``).

        A thread is waited for even when the call is cancelled, unless ``abandon`` (a call with a
        timeout): then the call stops waiting for it, and its late result is dropped. ``runner``
        awaits what an async handler returns (on the app loop); None: the caller's task awaits it.
        """
        if self.handler is None:
            raise ToolArgumentsError(f"tool {self.name!r} has no local handler")
        values = validate_arguments(self.parameters, arguments)
        for name, hint in self.types.items():
            if name in values:
                try:
                    values[name] = convert(hint, values[name], name)
                except ValueMismatch as mismatch:
                    raise ToolArgumentsError(str(mismatch), field=mismatch.path) from None
        for name, kind in self.inject:
            values[name] = injected[kind]
        if self.thread:
            return await run_in_tool_thread(functools.partial(self.handler, **values), self.name, abandon=abandon)
        produced = self.handler(**values)
        if type(produced) is types.CoroutineType or inspect.isawaitable(produced):
            return await (produced if runner is None else runner(produced))
        return produced


#: An argument line of a docstring's Args section (compiled by ``re`` on first use, not at import).
_ARG_LINE = r"^(\w+)\s*(?:\([^)]*\))?:\s*(.*)$"


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text and per-argument descriptions from a Google-style docstring."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    arguments: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section, current = "args", None
            continue
        if stripped.endswith(":") and stripped[:-1] in ("Returns", "Raises", "Examples", "Yields"):
            section = "other"
            continue
        if section == "summary":
            summary.append(line)
        elif section == "args":
            indent = len(line) - len(line.lstrip())
            match = re.match(_ARG_LINE, stripped)
            if match and indent <= 4:
                current = match.group(1)
                arguments[current] = match.group(2).strip()
            elif current and stripped:
                arguments[current] = (arguments[current] + " " + stripped).strip()
    return "\n".join(summary).strip(), arguments


_INJECTED_HINTS = {"AgentRunContext": "context", "ToolCall": "call"}


def _injected_kind(annotation: Any) -> str | None:
    name = getattr(annotation, "__name__", annotation)
    return _INJECTED_HINTS.get(name) if isinstance(name, str) else None


def _resolved_hints(fn: Handler) -> dict[str, Any]:
    """Type hints of ``fn``; a hint that cannot be resolved stays a string."""
    try:
        return get_type_hints(fn)
    except NameError:
        pass
    namespace = dict(getattr(fn, "__globals__", {}))
    resolved: dict[str, Any] = {}
    for key, value in getattr(fn, "__annotations__", {}).items():
        try:
            resolved[key] = eval(value, namespace) if isinstance(value, str) else value
        except NameError:
            resolved[key] = value
    return resolved


def build_tool(
    fn: Handler,
    *,
    name: str | None = None,
    description: str | None = None,
    serial: bool = False,
    thread: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    loop: Loop = "auto",
) -> ToolDefinition:
    """Build a ToolDefinition from a function's signature, hints and docstring (``loop``: see ToolDefinition)."""
    signature = inspect.signature(fn)
    hints = _resolved_hints(fn)
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    inject: list[tuple[str, str]] = []
    typed: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__!r}: *args/**kwargs are not supported")
        hint = hints.get(param.name, param.annotation)
        kind = _injected_kind(hint)
        if kind is not None:
            inject.append((param.name, kind))
            continue
        try:
            prop = schema_for(hint)
        except TypeError as unsupported:
            raise TypeError(f"tool {fn.__name__!r}, parameter {param.name!r}: {unsupported}") from None
        if _structured(hint):
            typed[param.name] = hint
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is not param.empty:
            if param.default is None or isinstance(param.default, (str, int, float, bool)):
                prop["default"] = param.default
        else:
            required.append(param.name)
        properties[param.name] = prop
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return ToolDefinition(
        name=name or fn.__name__,
        description=description if description is not None else summary,
        parameters=parameters,
        handler=fn,
        serial=serial,
        inject=tuple(inject),
        thread=thread,
        idempotent=idempotent,
        timeout=timeout,
        types=typed,
        loop=declared_loop(fn, loop),
    )


def _structured(hint: Any) -> bool:
    """Whether an argument for ``hint`` must be converted: its checked JSON value is not yet a value of the hint
    (a float given as an integer, an enum's value, an object for a class, an array for a tuple)."""
    if hint in (str, int, bool, list, dict, Any, None, type(None), object, inspect.Parameter.empty):
        return False
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return False
    if origin in (typing.Union, types.UnionType, list, dict):
        return any(_structured(arg) for arg in typing.get_args(hint))
    return True


@overload
def tool(fn: Handler, /) -> ToolDefinition: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    serial: bool = False,
    thread: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    loop: Loop = "auto",
) -> Callable[[Handler], ToolDefinition]: ...


def tool(
    fn: Handler | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    serial: bool = False,
    thread: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    loop: Loop = "auto",
) -> ToolDefinition | Callable[[Handler], ToolDefinition]:
    """Turn a function (sync or async) into a ToolDefinition.

    Use as ``@tool`` or ``@tool(name=..., serial=True, thread=True, idempotent=True, timeout=30, loop="trio")``.
    """
    if fn is not None:
        return build_tool(fn)

    def decorate(inner: Handler) -> ToolDefinition:
        return build_tool(
            inner,
            name=name,
            description=description,
            serial=serial,
            thread=thread,
            idempotent=idempotent,
            timeout=timeout,
            loop=loop,
        )

    return decorate
