"""Python types as JSON Schema, and JSON values converted into those types.

One module for tool parameters and for structured output: ``schema_for`` gives the JSON Schema
of a type hint (str, int, float, bool, None, Literal, Optional and unions, list, tuple, dict,
enums, dataclasses, attrs classes, TypedDicts and pydantic models, nested and in lists), and
``convert`` turns a decoded JSON value into that type, raising ``ValueMismatch`` naming the
field at fault and why. pydantic is never imported here: a type is taken for a pydantic model
only when pydantic is already loaded (the user's own module imported it to define the model).
"""

from __future__ import annotations

import enum
import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs

from orchestrator.errors import ToolArgumentsError, ValueMismatch

_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}

_SEQUENCES: tuple[Any, ...] = (list, tuple, typing.Sequence, set, frozenset)
_MAPPINGS: tuple[Any, ...] = (dict, typing.Mapping)


def _pydantic_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic model class (False whenever pydantic is not loaded)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(annotation, type):
        return False
    return issubclass(annotation, pydantic.BaseModel)


def _is_dataclass(annotation: Any) -> bool:
    """Whether ``annotation`` is a dataclass (what ``dataclasses.is_dataclass`` tests, without importing it)."""
    return isinstance(annotation, type) and hasattr(annotation, "__dataclass_fields__")


def _is_typeddict(annotation: Any) -> bool:
    return isinstance(annotation, type) and typing.is_typeddict(annotation)


def _fields_of(annotation: type) -> list[tuple[str, Any, bool]]:
    """(field name, type hint, required) of a dataclass, attrs class or TypedDict, in order.

    For an attrs class the name is the ``__init__`` argument (its alias).
    """
    hints = get_type_hints(annotation)
    if _is_typeddict(annotation):
        required = annotation.__required_keys__  # type: ignore[attr-defined]
        return [(name, hint, name in required) for name, hint in hints.items()]
    if _is_dataclass(annotation):
        import dataclasses  # not at import: importing orchestrator loads no dataclasses

        return [
            (
                field.name,
                hints.get(field.name, Any),
                field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING,
            )
            for field in dataclasses.fields(annotation)
            if field.init
        ]
    return [
        (field.alias or field.name, hints.get(field.name, Any), field.default is attrs.NOTHING)
        for field in attrs.fields(annotation)
        if field.init
    ]


def _record(annotation: Any) -> bool:
    """Whether ``annotation`` is a class whose fields become the properties of a JSON object."""
    return isinstance(annotation, type) and (
        _is_dataclass(annotation) or attrs.has(annotation) or _is_typeddict(annotation)
    )


def schema_for(annotation: Any) -> dict[str, Any]:
    """JSON Schema for one Python type hint; TypeError for a hint that has none (naming it)."""
    return _schema(annotation, ())


def _schema(annotation: Any, seen: tuple[Any, ...]) -> dict[str, Any]:
    if annotation is Any or annotation is inspect.Parameter.empty or annotation is object:
        return {}
    if annotation is None or annotation is type(None):
        return {"type": "null"}
    origin = get_origin(annotation)
    if origin is Literal:
        return {"enum": list(get_args(annotation))}
    if origin in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        inner = _schema(members[0], seen) if len(members) == 1 else {"anyOf": [_schema(m, seen) for m in members]}
        if len(members) < len(get_args(annotation)):
            return {"anyOf": [inner, {"type": "null"}]}
        return inner
    if origin in _SEQUENCES or annotation in (list, tuple, set, frozenset):
        args = get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            # A fixed-length tuple: each position its own type.
            schema["prefixItems"] = [_schema(arg, seen) for arg in args]
            schema["minItems"] = schema["maxItems"] = len(args)
            return schema
        if args and args[0] is not Ellipsis:
            schema["items"] = _schema(args[0], seen)
        return schema
    if origin in _MAPPINGS or annotation is dict:
        args = get_args(annotation)
        if len(args) == 2 and args[1] is not Any:
            return {"type": "object", "additionalProperties": _schema(args[1], seen)}
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if isinstance(annotation, type) and annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if _pydantic_model(annotation):
        return _inline_refs(annotation.model_json_schema())
    if _record(annotation):
        if annotation in seen:
            raise TypeError(f"no JSON schema for the recursive type {annotation.__qualname__}")
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name, hint, needed in _fields_of(annotation):
            properties[name] = _schema(hint, (*seen, annotation))
            if needed:
                required.append(name)
        record: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
        record["additionalProperties"] = False
        if annotation.__doc__ and not _generated_doc(annotation):
            record["description"] = inspect.cleandoc(annotation.__doc__)
        return record
    raise TypeError(f"no JSON schema for type hint {annotation!r}")


def _generated_doc(annotation: type) -> bool:
    """Whether a class's docstring is the signature dataclasses writes for an undocumented class."""
    return _is_dataclass(annotation) and (annotation.__doc__ or "").startswith(annotation.__name__ + "(")


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic schema with its ``$defs`` written in place of each ``$ref`` (providers resolve no refs)."""
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any, depth: int) -> Any:
        if depth > 32:
            raise TypeError("no JSON schema for a recursive pydantic model")
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                target = definitions[reference.removeprefix("#/$defs/")]
                rest = {key: value for key, value in node.items() if key != "$ref"}
                return {**resolve(target, depth + 1), **resolve(rest, depth)}
            return {key: resolve(value, depth) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item, depth) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema, 0)
    return resolved


# conversion ---------------------------------------------------------------------------------


def _kind(value: object) -> str:
    return type(value).__name__


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def convert(annotation: Any, value: Any, path: str = "") -> Any:
    """``value`` (decoded JSON) checked against ``annotation`` and converted into it.

    Objects become the dataclass, attrs class, TypedDict (a dict) or pydantic model the hint
    names, enum values their members, arrays lists (tuples for a tuple hint). Raises
    ValueMismatch with the path of the field at fault and why it does not fit.
    """
    if annotation is Any or annotation is inspect.Parameter.empty or annotation is object:
        return value
    if annotation is None or annotation is type(None):
        if value is not None:
            raise ValueMismatch(path, f"expected null, got {_kind(value)}")
        return None
    origin = get_origin(annotation)
    if origin is Literal:
        allowed = get_args(annotation)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed if a == value):
            raise ValueMismatch(path, f"{value!r} is not one of {list(allowed)!r}")
        return value
    if origin in (Union, types.UnionType):
        members = get_args(annotation)
        if value is None and type(None) in members:
            return None
        reasons: list[str] = []
        for member in members:
            if member is type(None):
                continue
            try:
                return convert(member, value, path)
            except ValueMismatch as mismatch:
                reasons.append(str(mismatch))
        if len(reasons) == 1:
            raise ValueMismatch(path, reasons[0].removeprefix(f"{path}: ") if path else reasons[0])
        raise ValueMismatch(path, f"{_kind(value)} {value!r} matches none of the allowed types ({'; '.join(reasons)})")
    if origin in _SEQUENCES or annotation in (list, tuple, set, frozenset):
        if not isinstance(value, list):
            raise ValueMismatch(path, f"expected an array, got {_kind(value)}")
        args = get_args(annotation)
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(value) != len(args):
                raise ValueMismatch(path, f"expected an array of {len(args)} items, got {len(value)}")
            pairs = enumerate(zip(args, value, strict=True))
            return tuple(convert(arg, item, f"{path}[{i}]") for i, (arg, item) in pairs)
        item_type = args[0] if args and args[0] is not Ellipsis else Any
        items = [convert(item_type, item, f"{path}[{i}]") for i, item in enumerate(value)]
        container = origin if origin in (tuple, set, frozenset) else annotation
        if container in (tuple, set, frozenset):
            return container(items)
        return items
    if origin in _MAPPINGS or annotation is dict:
        if not isinstance(value, dict):
            raise ValueMismatch(path, f"expected an object, got {_kind(value)}")
        args = get_args(annotation)
        value_type = args[1] if len(args) == 2 else Any
        return {key: convert(value_type, item, _join(path, str(key))) for key, item in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        for member in annotation:
            if member.value == value and type(member.value) is type(value):
                return member
        raise ValueMismatch(path, f"{value!r} is not one of {[member.value for member in annotation]!r}")
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueMismatch(path, f"expected a boolean, got {_kind(value)}")
        return value
    if annotation is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueMismatch(path, f"expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueMismatch(path, f"expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValueMismatch(path, f"expected a string, got {_kind(value)}")
        return value
    if _pydantic_model(annotation):
        return _pydantic_value(annotation, value, path)
    if _record(annotation):
        return _record_value(annotation, value, path)
    raise TypeError(f"no conversion for type hint {annotation!r}")


def _record_value(annotation: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise ValueMismatch(path, f"expected an object, got {_kind(value)}")
    fields = _fields_of(annotation)
    names = {name for name, _, _ in fields}
    missing = [name for name, _, needed in fields if needed and name not in value]
    if missing:
        raise ValueMismatch(path, f"missing required field(s): {', '.join(missing)}")
    unknown = sorted(str(key) for key in value if key not in names)
    if unknown:
        raise ValueMismatch(path, f"unknown field(s): {', '.join(unknown)}")
    arguments = {name: convert(hint, value[name], _join(path, name)) for name, hint, _ in fields if name in value}
    if _is_typeddict(annotation):
        return arguments
    try:
        return annotation(**arguments)
    except (TypeError, ValueError) as refused:
        # The class's own checks (attrs validators, __post_init__) refused the values.
        raise ValueMismatch(path, f"{annotation.__name__} refused the values: {refused}") from None


def _pydantic_value(annotation: Any, value: Any, path: str) -> Any:
    pydantic = sys.modules["pydantic"]
    try:
        return annotation.model_validate(value)
    except pydantic.ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) if not isinstance(part, int) else f"[{part}]" for part in first["loc"])
        where = where.replace(".[", "[")
        raise ValueMismatch(_join(path, where) if where else path, str(first["msg"]).lower()) from None


# JSON Schema checks ---------------------------------------------------------------------------


def check_schema(schema: Mapping[str, Any], value: Any, path: str = "") -> Any:
    """``value`` checked against the subset of JSON Schema this library writes; ValueMismatch if it does not fit.

    The subset: ``type``, ``enum``, ``const``, ``anyOf``, ``items``, ``properties``, ``required`` and
    ``additionalProperties``. An integral float for an integer becomes an int; nothing else changes.
    """
    if not schema:
        return value
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return check_schema(option, value, path)
            except ValueMismatch:
                continue
        raise ValueMismatch(path, f"{value!r} matches none of the allowed types")
    if "enum" in schema:
        if value not in schema["enum"]:
            raise ValueMismatch(path, f"{value!r} is not one of {schema['enum']!r}")
        return value
    if "const" in schema and value != schema["const"]:
        raise ValueMismatch(path, f"expected {schema['const']!r}, got {value!r}")
    kind = schema.get("type")
    if isinstance(kind, list):
        return check_schema({"anyOf": [{**schema, "type": one} for one in kind]}, value, path)
    if kind == "null":
        if value is not None:
            raise ValueMismatch(path, "expected null")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ValueMismatch(path, f"expected a boolean, got {_kind(value)}")
        return value
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ValueMismatch(path, f"expected an integer, got {value!r}")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueMismatch(path, f"expected a number, got {value!r}")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise ValueMismatch(path, f"expected a string, got {_kind(value)}")
        return value
    if kind == "array":
        if not isinstance(value, list):
            raise ValueMismatch(path, f"expected an array, got {_kind(value)}")
        items = schema.get("items", {})
        return [check_schema(items, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if kind == "object":
        if not isinstance(value, dict):
            raise ValueMismatch(path, f"expected an object, got {_kind(value)}")
        if "properties" not in schema and "required" not in schema and "additionalProperties" not in schema:
            return value
        return _checked_object(schema, value, path)
    return value


def _checked_object(schema: Mapping[str, Any], value: dict[Any, Any], path: str) -> dict[Any, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        raise ValueMismatch(path, f"missing required field(s): {', '.join(missing)}")
    extra = schema.get("additionalProperties", True)
    if extra is False:
        unknown = sorted(str(key) for key in value if key not in properties)
        if unknown:
            raise ValueMismatch(path, f"unknown field(s): {', '.join(unknown)}")
    checked: dict[Any, Any] = {}
    for key, item in value.items():
        inner = properties.get(key, extra if isinstance(extra, Mapping) else {})
        checked[key] = check_schema(inner, item, _join(path, str(key)))
    return checked


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Check model-supplied arguments against a tool schema; return the values (ToolArgumentsError if not)."""
    if type(arguments) is not dict and not isinstance(arguments, Mapping):
        raise ToolArgumentsError(f"arguments must be an object, got {type(arguments).__name__}")
    if not arguments and not schema.get("required"):
        return {}
    properties: Mapping[str, Any] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in arguments]
    if missing:
        raise ToolArgumentsError(f"missing required argument(s): {', '.join(missing)}", field=missing[0])
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolArgumentsError(f"unknown argument(s): {', '.join(unknown)}", field=unknown[0])
    try:
        return {key: check_schema(properties.get(key, {}), value, key) for key, value in arguments.items()}
    except ValueMismatch as mismatch:
        raise ToolArgumentsError(str(mismatch), field=mismatch.path) from None
