"""machines.frozen.constructor builds the same frozen values as the classes themselves."""

from __future__ import annotations

import attrs
import pytest

from machines.build import Step
from machines.frozen import constructor
from orchestrator import events as ev
from orchestrator.messages import AssistantMessage, ToolCall, ToolMessage, ToolStatus
from orchestrator.tools import ToolResult

EVENT_CLASSES = [
    cls for cls in vars(ev).values() if isinstance(cls, type) and issubclass(cls, ev.AgentEvent) and attrs.has(cls)
]


def _sample_fields(cls: type) -> dict[str, object]:
    """A value for every init field without a default (the field's type matters little to the constructor)."""
    values: dict[str, object] = {}
    for field in attrs.fields(cls):
        if field.default is attrs.NOTHING:
            values[field.alias] = AssistantMessage("hi") if field.name == "message" else f"value of {field.name}"
    return values


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_is_built_equal_to_its_class(cls: type[ev.AgentEvent]) -> None:
    build = constructor(cls)
    values = {"session_id": "s", "request_id": "r", "seq": 3, "ts": 2.5, **_sample_fields(cls)}
    made, expected = build(**values), cls(**values)
    assert type(made) is cls
    assert made == expected
    if cls is not ev.ExtensionEvent:  # its payload is a dict: not hashable, built either way
        assert hash(made) == hash(expected)
    assert repr(made) == repr(expected)


def test_defaults_and_factories_are_those_of_the_class() -> None:
    build = constructor(ev.ModelCompletedEvent)
    cut = AssistantMessage("", (ToolCall("c1", "noop"),))
    made = build(message=cut)
    # stop_reason is a factory taking the instance: it sees the message set before it.
    assert made == ev.ModelCompletedEvent(message=cut)
    assert made.stop_reason == "tool_use"
    assert made.usage is None and made.seq == 0 and made.session_id == ""
    first, second = constructor(ev.ExtensionEvent)(name="a"), constructor(ev.ExtensionEvent)(name="b")
    assert first.payload == {} and first.payload is not second.payload


def test_values_it_builds_stay_frozen() -> None:
    delta = constructor(ev.TextDeltaEvent)(text="hi")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delta.text = "changed"  # type: ignore[misc]


def test_missing_or_unknown_keywords_fail_as_the_class_does() -> None:
    build = constructor(ev.TextDeltaEvent)
    with pytest.raises(TypeError):
        build(seq=1)
    with pytest.raises(TypeError):
        build(text="x", nonsense=1)


def test_a_machine_step_is_built_equal() -> None:
    fields = {"machine": "m", "region": "main", "source": "a", "trigger": "go", "dest": "b"}
    assert constructor(Step)(**fields) == Step(**fields)


def test_classes_whose_init_does_more_get_the_class_itself() -> None:
    # Converters and validators (ToolMessage, ToolCall) must run: no shortcut for them.
    assert constructor(ToolMessage) is ToolMessage
    assert constructor(ToolCall) is ToolCall

    @attrs.frozen
    class Checked:
        value: int

        def __attrs_post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    assert constructor(Checked) is Checked

    @attrs.frozen(slots=False)
    class Unslotted:
        value: int

    assert constructor(Unslotted) is Unslotted


def test_a_positional_constructor_takes_every_field_in_order() -> None:
    build = constructor(ev.TransitionEvent, positional=True)
    made = build("s", "r", 4, 1.5, "request", "phase", "idle", "start", "running")
    assert made == ev.TransitionEvent(
        session_id="s",
        request_id="r",
        seq=4,
        ts=1.5,
        machine="request",
        region="phase",
        source="idle",
        trigger="start",
        dest="running",
    )
    with pytest.raises(TypeError):
        build("s", "r", 4)  # no field is optional
    with pytest.raises(TypeError, match="no positional constructor"):
        constructor(ToolMessage, positional=True)


def test_an_unchecked_constructor_stores_checked_values_as_the_class_would() -> None:
    copy = constructor(ToolCall, positional=True, checked=False)
    made = copy("c1", "echo", {"text": "hi"}, None)
    assert type(made) is ToolCall and made == ToolCall("c1", "echo", {"text": "hi"})
    # A field that is not an init parameter (ToolMessage.role) gets its default.
    message = constructor(ToolMessage, positional=True, checked=False)("c1", "echo", "hi", ToolStatus.FAILED, None)
    assert message == ToolMessage("c1", "echo", "hi", "failed") and message.role == "tool"
    assert repr(message) == repr(ToolMessage("c1", "echo", "hi", "failed"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.status = ToolStatus.SUCCEEDED  # type: ignore[misc]
    # A mutable class keeps checking what is assigned later.
    result = constructor(ToolResult, positional=True, checked=False)("ok", "succeeded")
    assert (result.content, result.status) == ("ok", "succeeded")
    with pytest.raises(ValueError, match="must be one of"):
        result.status = "fine"


def test_an_unchecked_constructor_skips_checks_so_it_is_only_for_checked_values() -> None:
    # What ToolCall("c1", "echo", ["a"]) refuses is stored as given: callers copy checked fields.
    made = constructor(ToolCall, positional=True, checked=False)("c1", "echo", ["a"], None)
    assert made.arguments == ["a"]
    with pytest.raises(TypeError, match="must be a dict"):
        ToolCall("c1", "echo", ["a"])  # type: ignore[arg-type]


def test_hooks_and_fields_made_by_the_class_have_no_unchecked_constructor() -> None:
    @attrs.frozen
    class Hooked:
        value: int

        def __attrs_post_init__(self) -> None:
            pass

    @attrs.frozen
    class Made:
        value: int
        items: list[int] = attrs.field(init=False, factory=list)

    with pytest.raises(TypeError, match="__attrs_post_init__: it has no unchecked constructor"):
        constructor(Hooked, checked=False)
    with pytest.raises(TypeError, match="makes its field items itself"):
        constructor(Made, positional=True, checked=False)
