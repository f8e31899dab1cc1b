"""Tool definitions, the ``@tool`` decorator, schemas from type hints, and validation."""

from __future__ import annotations

import enum
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, overload

import attrs

from machines.values import FieldRepr, FieldValues
from orchestrator.checks import Check, flag, function, mapping, number, text
from orchestrator.errors import ToolArgumentsError
from orchestrator.messages import ToolStatus
from orchestrator.tool_content import ToolResultContent
from orchestrator.tool_threads import run_in_tool_thread

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

    def __attrs_post_init__(self) -> None:
        if not self.thread:
            return
        if self.handler is None or inspect.iscoroutinefunction(self.handler):
            raise TypeError(f"tool {self.name!r}: thread=True needs a plain (def) handler")
        if any(kind == "context" for _, kind in self.inject):
            raise TypeError(f"tool {self.name!r}: a handler run in a thread cannot receive the request context")

    async def invoke(self, arguments: Mapping[str, Any], injected: Mapping[str, Any], *, abandon: bool = False) -> Any:
        """Validate ``arguments`` and run the handler (sync ones inline, or in a thread with ``thread``).

        A thread is waited for even when the call is cancelled, unless ``abandon`` (a call with a
        timeout): then the call stops waiting for it, and its late result is dropped.
        """
        if self.handler is None:
            raise ToolArgumentsError(f"tool {self.name!r} has no local handler")
        values = validate_arguments(self.parameters, arguments)
        for name, kind in self.inject:
            values[name] = injected[kind]
        if self.thread:
            return await run_in_tool_thread(functools.partial(self.handler, **values), self.name, abandon=abandon)
        produced = self.handler(**values)
        if type(produced) is types.CoroutineType or inspect.isawaitable(produced):
            return await produced
        return produced


_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def schema_for(annotation: Any) -> dict[str, Any]:
    """JSON schema for one Python type hint."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return {}
    origin = get_origin(annotation)
    if origin is Literal:
        values = list(get_args(annotation))
        return {"enum": values}
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        inner = schema_for(members[0]) if len(members) == 1 else {"anyOf": [schema_for(m) for m in members]}
        if len(members) < len(get_args(annotation)):
            return {"anyOf": [inner, {"type": "null"}]}
        return inner
    if origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        args = get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = schema_for(args[0])
        return schema
    if origin in (dict, typing.Mapping) or annotation is dict:
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if isinstance(annotation, type) and annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(f"no JSON schema for type hint {annotation!r}")


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
) -> ToolDefinition:
    """Build a ToolDefinition from a function's signature, hints and docstring."""
    signature = inspect.signature(fn)
    hints = _resolved_hints(fn)
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    inject: list[tuple[str, str]] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__!r}: *args/**kwargs are not supported")
        hint = hints.get(param.name, param.annotation)
        kind = _injected_kind(hint)
        if kind is not None:
            inject.append((param.name, kind))
            continue
        prop = schema_for(hint)
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
    )


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
) -> ToolDefinition | Callable[[Handler], ToolDefinition]:
    """Turn a function (sync or async) into a ToolDefinition.

    Use as ``@tool`` or ``@tool(name=..., serial=True, thread=True, idempotent=True, timeout=30)``.
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
        )

    return decorate


def _check(schema: Mapping[str, Any], value: Any, path: str) -> Any:
    if not schema:
        return value
    if "anyOf" in schema:
        errors: list[str] = []
        for option in schema["anyOf"]:
            try:
                return _check(option, value, path)
            except ToolArgumentsError as err:
                errors.append(str(err))
        raise ToolArgumentsError(f"{path}: {value!r} matches none of the allowed types")
    if "enum" in schema:
        if value not in schema["enum"]:
            raise ToolArgumentsError(f"{path}: {value!r} is not one of {schema['enum']!r}")
        return value
    kind = schema.get("type")
    if kind == "null":
        if value is not None:
            raise ToolArgumentsError(f"{path}: expected null")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ToolArgumentsError(f"{path}: expected a boolean, got {type(value).__name__}")
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ToolArgumentsError(f"{path}: expected an integer, got {value!r}")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolArgumentsError(f"{path}: expected a number, got {value!r}")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise ToolArgumentsError(f"{path}: expected a string, got {type(value).__name__}")
        return value
    if kind == "array":
        if not isinstance(value, list):
            raise ToolArgumentsError(f"{path}: expected an array, got {type(value).__name__}")
        items = schema.get("items", {})
        return [_check(items, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if kind == "object":
        if not isinstance(value, dict):
            raise ToolArgumentsError(f"{path}: expected an object, got {type(value).__name__}")
        return value
    return value


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Check model-supplied arguments against a tool schema; return the values."""
    if type(arguments) is not dict and not isinstance(arguments, Mapping):
        raise ToolArgumentsError(f"arguments must be an object, got {type(arguments).__name__}")
    if not arguments and not schema.get("required"):
        return {}
    properties: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in arguments]
    if missing:
        raise ToolArgumentsError(f"missing required argument(s): {', '.join(missing)}")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolArgumentsError(f"unknown argument(s): {', '.join(unknown)}")
    return {key: _check(properties.get(key, {}), value, key) for key, value in arguments.items()}
