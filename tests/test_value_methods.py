"""FieldValues gives a class the eq, hash and repr attrs would have generated for it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from machines import REQUEST, State, Transition
from machines.values import FieldRepr, FieldValues
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Delivery, Refusal
from orchestrator.messages import (
    AssistantMessage,
    ImagePart,
    ReasoningBlock,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from orchestrator.model import ModelRequest, ResponseCompletedEvent, TextDeltaEvent, ToolCallStreamEvent, Usage
from orchestrator.runtime.pending import PendingCall, SettledAnswer
from orchestrator.runtime.run import Restored
from orchestrator.tools import ServerToolDefinition, ToolResult


@attrs.frozen(eq=False, repr=False)
class Shared(FieldValues):
    name: str
    size: int = 0
    note: str = attrs.field(default="", eq=False)  # neither compared nor hashed
    secret: str = attrs.field(default="", repr=False)
    shown: int = attrs.field(default=0, repr=lambda value: f"<{value}>")
    unhashed: str = attrs.field(default="", hash=False)


@attrs.frozen
class Generated:
    """The same fields, with the methods attrs generates."""

    name: str
    size: int = 0
    note: str = attrs.field(default="", eq=False)
    secret: str = attrs.field(default="", repr=False)
    shown: int = attrs.field(default=0, repr=lambda value: f"<{value}>")
    unhashed: str = attrs.field(default="", hash=False)


SAMPLES: list[dict[str, Any]] = [
    {"name": "a"},
    {"name": "a", "size": 1},
    {"name": "a", "note": "other"},
    {"name": "a", "secret": "s"},
    {"name": "a", "shown": 3},
    {"name": "a", "unhashed": "u"},
    {"name": "b", "size": 1, "note": "n", "secret": "s", "shown": 2, "unhashed": "v"},
]


@pytest.mark.parametrize("left", SAMPLES)
@pytest.mark.parametrize("right", SAMPLES)
def test_shared_methods_agree_with_the_ones_attrs_generates(left: dict[str, Any], right: dict[str, Any]) -> None:
    shared_left, shared_right = Shared(**left), Shared(**right)
    generated_left, generated_right = Generated(**left), Generated(**right)
    assert (shared_left == shared_right) is (generated_left == generated_right)
    assert (shared_left != shared_right) is (generated_left != generated_right)
    assert repr(shared_left) == repr(generated_left).replace("Generated(", "Shared(", 1)
    if shared_left == shared_right:
        assert hash(shared_left) == hash(shared_right)


def test_another_class_is_never_equal_and_an_unhashable_field_makes_the_value_unhashable() -> None:
    value = Shared("a")
    assert value.__eq__(Generated("a")) is NotImplemented
    assert value != Generated("a") and value != "a"
    assert ToolCall("1", "add") != ToolCallStreamEvent("1", "add")
    with pytest.raises(TypeError, match="unhashable"):
        hash(ToolCall("1", "add", {"a": 1}))


LIBRARY_VALUES = [
    TextPart("hi"),
    ImagePart(url="https://example.com/a.png"),
    UserMessage([TextPart("look"), ImagePart(data=b"\x89PNG", media_type="image/png")]),
    ReasoningBlock("thinking", signature="sig"),
    AssistantMessage("done", [ToolCall("c1", "add", {"a": 1})], reasoning=[ReasoningBlock("r")]),
    ToolMessage("c1", "add", "2", "failed"),
    ModelRequest([UserMessage("hi")]),
    Usage(10, 5, cache_read_tokens=2),
    TextDeltaEvent("piece"),
    ResponseCompletedEvent(AssistantMessage("x"), Usage(1, 1), "max_tokens", "length"),
    AgentRunConfig("s", "r"),
    ExternalEvent("steering_message", {"content": "stop"}),
    Refusal("no inbox"),
    Delivery("steering_message", ("SteeringExtension",), {"Other": Refusal("busy")}),
    ServerToolDefinition("web_search", {"type": "web_search"}),
    PendingCall("s", "r", "c1", "ask_user", {"question": "Which?"}, "ask_user_response"),
    SettledAnswer("yes", plan_mode="on"),
    Restored("worker-1", 7, 2, AssistantMessage("x"), ("c1",), "max_tokens"),
]


@pytest.mark.parametrize("value", LIBRARY_VALUES, ids=lambda value: type(value).__name__)
def test_library_values_compare_print_and_copy_as_attrs_values(value: FieldValues) -> None:
    kind = type(value)
    assert kind.__eq__ is FieldValues.__eq__ and kind.__repr__ is FieldRepr.__repr__
    twin = attrs.evolve(value)
    assert twin is not value and twin == value and not twin != value  # noqa: SIM202
    shown = ", ".join(f"{field.name}={getattr(value, field.name)!r}" for field in attrs.fields(kind))
    assert repr(value) == f"{kind.__name__}({shown})"


def test_a_tool_result_compares_by_identity_and_prints_its_fields() -> None:
    result = ToolResult("2")
    assert result != ToolResult("2") and result == result
    assert repr(result).startswith("ToolResult(content='2'")


def test_machine_definitions_print_as_attrs_values_and_keep_their_cached_hash() -> None:
    state = State("idle", doc="waiting")
    assert type(state).__repr__ is FieldRepr.__repr__
    assert repr(state) == "State(name='idle', doc='waiting', final=False)"
    edge = Transition("go", "idle", "busy", conditions="ready")
    assert repr(edge) == (
        "Transition(trigger='go', source=('idle',), dest='busy', conditions=('ready',),"
        " unless=(), callbacks=(), doc='')"
    )
    assert edge == Transition("go", ("idle",), "busy", conditions=("ready",))
    assert hash(edge) == hash(Transition("go", ("idle",), "busy", conditions=("ready",)))
    assert repr(REQUEST).startswith("MachineDefinition(name='request', doc=")
