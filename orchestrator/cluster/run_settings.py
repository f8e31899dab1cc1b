"""A durable run's own model settings and output type, as the JSON its ``settings`` column keeps.

``{"model_settings": {...}, "output_type": {"schema": ..., "name": ..., "retries": ..., "reference": ...}}``:
the settings that are set (``ModelSettings.given``); the output type's JSON Schema, and for a class or other
named type its ``module:qualname`` reference, which the worker that resumes the run imports again. A JSON
Schema output type has no reference: its schema is the type. A type that cannot be named so that another
process finds it (a class made inside a function; a hint such as ``list[int]``, which is no class: give its
JSON Schema instead) is refused when the run is started.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from orchestrator.cluster.checkpoint import UnreadableCheckpoint
from orchestrator.model import ModelSettings
from orchestrator.output import OutputType, output_type

__all__ = ["RunSettings", "UnresolvableOutputType", "decode_run_settings", "encode_run_settings", "reference_of"]


class UnresolvableOutputType(UnreadableCheckpoint):
    """The output type named ``reference`` cannot be kept with a durable run or found again; ``why`` says why."""

    def __init__(self, reference: str, why: str) -> None:
        super().__init__(f"its output type {reference} {why}")
        self.args = (f"the output type {reference} {why}",)
        self.reference = reference
        self.why = why


@attrs.frozen
class RunSettings:
    """What a durable run overrides of its agent: model settings and output type (None: the agent's)."""

    model_settings: ModelSettings | None = None
    output_type: OutputType | None = None


def reference_of(kind: object) -> str:
    """``module:qualname`` of a class, checked to import back to ``kind``; UnresolvableOutputType if not."""
    if not isinstance(kind, type):
        why = "is not a class: a durable run keeps a class importable by module:qualname, or a JSON Schema dict"
        raise UnresolvableOutputType(repr(kind), why)
    module = getattr(kind, "__module__", None)
    qualname = getattr(kind, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise UnresolvableOutputType(repr(kind), "has no module and qualified name another process can import")
    reference = f"{module}:{qualname}"
    if "<locals>" in qualname:
        raise UnresolvableOutputType(reference, "is made inside a function: another process cannot import it")
    if resolve(reference) is not kind:
        raise UnresolvableOutputType(reference, "does not import back to the same type")
    return reference


def resolve(reference: str) -> object:
    """The object ``module:qualname`` names; UnresolvableOutputType when it cannot be imported."""
    module_name, _, qualname = reference.partition(":")
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as missing:
        raise UnresolvableOutputType(reference, f"cannot be imported ({missing})") from None
    for part in qualname.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UnresolvableOutputType(reference, f"is not found: {module_name} has no {qualname}") from None
    return found


def encode_run_settings(model_settings: ModelSettings | None, kind: object = None) -> dict[str, Any] | None:
    """The JSON kept with a run started with these settings and output type (None when neither is given).

    UnresolvableOutputType for an output type another process could not find again.
    """
    encoded: dict[str, Any] = {}
    if model_settings is not None and not isinstance(model_settings, ModelSettings):
        raise TypeError(f"model_settings must be a ModelSettings or None, got {type(model_settings).__name__}")
    if model_settings is not None and model_settings.given():
        encoded["model_settings"] = json.loads(json.dumps(model_settings.given()))
    spec = output_type(kind)
    if spec is not None:
        described: dict[str, Any] = {"schema": dict(spec.schema), "name": spec.name, "retries": spec.retries}
        if not isinstance(spec.type, Mapping):
            described["reference"] = reference_of(spec.type)
        encoded["output_type"] = described
    return encoded or None


def decode_run_settings(data: Mapping[str, Any] | None) -> RunSettings:
    """The settings a run was started with, for the worker resuming it.

    UnresolvableOutputType when its output type's class cannot be imported or its JSON Schema changed since;
    UnreadableCheckpoint when the JSON is not what ``encode_run_settings`` writes.
    """
    if not data:
        return RunSettings()
    try:
        given = data.get("model_settings")
        settings = ModelSettings(**dict(given)) if given else None
        described = data.get("output_type")
        spec = _output_type(dict(described)) if described else None
    except UnresolvableOutputType:
        raise
    except (TypeError, ValueError, KeyError) as bad:
        raise UnreadableCheckpoint(f"its settings are unusable ({type(bad).__name__}: {bad})") from None
    return RunSettings(settings, spec)


def _output_type(described: dict[str, Any]) -> OutputType:
    schema = described["schema"]
    if not isinstance(schema, Mapping):
        raise TypeError("the output type's schema is not a JSON object")
    retries = int(described.get("retries", 2))
    reference = described.get("reference")
    if reference is None:
        return OutputType(dict(schema), retries=retries)
    kind = resolve(str(reference))
    try:
        spec = OutputType(kind, retries=retries)
    except TypeError as refused:
        raise UnresolvableOutputType(str(reference), f"has no JSON Schema now ({refused})") from None
    if _canonical(spec.schema) != _canonical(schema):
        raise UnresolvableOutputType(str(reference), "has another JSON Schema than when the run started")
    return spec


def _canonical(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, default=str)
