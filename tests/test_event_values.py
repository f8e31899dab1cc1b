"""Events are frozen values: equal when of one class with every field equal, hashable alike, immutable."""

from __future__ import annotations

import copy
import pickle

import attrs
import pytest

from orchestrator import events as ev
from orchestrator.extensions.steering import SteeringMessageEvent
from orchestrator.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage


def _completed(**changes: object) -> ev.ToolCompletedEvent:
    call = ToolCall("c1", "add", {"a": 1})
    fields: dict[str, object] = {
        "session_id": "s",
        "request_id": "r",
        "seq": 3,
        "ts": 1.5,
        "call": call,
        "result": ToolMessage("c1", "add", "2"),
    }
    fields.update(changes)
    return ev.ToolCompletedEvent(**fields)  # type: ignore[arg-type]


def test_events_of_one_class_with_equal_fields_are_equal_and_hash_alike() -> None:
    first, second = _completed(), _completed()
    assert first is not second
    assert first == second
    assert not first != second  # noqa: SIM202
    step = {"machine": "request", "region": "phase", "source": "idle", "trigger": "start", "dest": "calling_model"}
    one, other = ev.TransitionEvent(seq=1, **step), ev.TransitionEvent(seq=1, **step)
    assert hash(one) == hash(other)
    assert len({one, other}) == 1
    assert hash(one) != hash(ev.TransitionEvent(seq=2, **step))


@pytest.mark.parametrize(
    "changes",
    [
        {"session_id": "other"},
        {"request_id": "other"},
        {"seq": 4},
        {"ts": 2.0},
        {"call": ToolCall("c2", "add", {"a": 1})},
        {"result": ToolMessage("c1", "add", "3")},
    ],
)
def test_events_differing_in_any_field_envelope_or_own_are_unequal(changes: dict[str, object]) -> None:
    assert _completed() != _completed(**changes)
    assert not _completed() == _completed(**changes)  # noqa: SIM201


def test_events_of_different_classes_with_the_same_fields_are_unequal() -> None:
    delta = ev.TextDeltaEvent(text="a", seq=1)
    reasoning = ev.ReasoningDeltaEvent(text="a", seq=1)
    assert delta != reasoning
    assert delta.__eq__(reasoning) is NotImplemented
    assert delta != "a"
    assert ev.RunCancelledEvent() == ev.RunCancelledEvent()
    assert ev.RunCancelledEvent() != ev.AgentEvent()


def test_an_event_holding_an_unhashable_value_cannot_be_hashed() -> None:
    event = ev.ExtensionEvent(name="custom", payload={"a": 1})
    assert event == ev.ExtensionEvent(name="custom", payload={"a": 1})
    with pytest.raises(TypeError):
        hash(event)
    with pytest.raises(TypeError):
        hash(_completed())  # a ToolCall's arguments are a dict


def test_events_are_frozen_and_survive_evolve_copy_and_pickle() -> None:
    event = ev.ModelCompletedEvent(message=AssistantMessage("hi"), seq=2)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.seq = 3  # type: ignore[misc]
    later = attrs.evolve(event, seq=5)
    assert later.seq == 5 and later.message == event.message and later != event
    assert later.stop_reason == "end_turn"
    assert copy.copy(event) == event
    assert copy.deepcopy(event) == event
    assert pickle.loads(pickle.dumps(event)) == event
    assert [field.name for field in attrs.fields(ev.ModelCompletedEvent)] == [
        "session_id",
        "request_id",
        "seq",
        "ts",
        "message",
        "usage",
        "stop_reason",
        "raw_stop_reason",
    ]


def test_every_library_event_class_shares_one_eq_and_hash() -> None:
    kinds = [getattr(ev, name) for name in ev.__all__]
    assert len(kinds) > 20 and all(issubclass(kind, ev.AgentEvent) for kind in kinds)
    for kind in [*kinds, SteeringMessageEvent]:
        assert kind.__eq__ is ev.AgentEvent.__eq__, kind
        assert kind.__hash__ is ev.AgentEvent.__hash__, kind
        assert kind.__repr__ is ev.AgentEvent.__repr__, kind


def test_a_steering_message_event_keeps_its_positional_field_and_repr() -> None:
    event = SteeringMessageEvent(UserMessage("stop"), seq=4)
    assert event == SteeringMessageEvent(UserMessage("stop"), seq=4)
    assert event != SteeringMessageEvent(UserMessage("go"), seq=4)
    assert repr(event) == (
        "SteeringMessageEvent(session_id='', request_id='', seq=4, ts=0.0,"
        " message=UserMessage(content='stop', role='user'))"
    )
    match event:
        case SteeringMessageEvent(message):
            assert message == UserMessage("stop")
