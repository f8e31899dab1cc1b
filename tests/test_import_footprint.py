"""What ``import orchestrator`` loads and leaves behind, checked in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _fresh(code: str) -> object:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_package_loads_no_wire_codecs_json_or_uuid() -> None:
    loaded = _fresh(
        "import sys, json as _j; before = set(sys.modules) - {'json', 'json.decoder', 'json.encoder', 'json.scanner',"
        " '_json'}\n"
        "for name in ('json', 'json.decoder', 'json.encoder', 'json.scanner', '_json'): sys.modules.pop(name, None)\n"
        "import orchestrator\n"
        "print(_j.dumps(sorted(set(sys.modules) - before)))"
    )
    assert isinstance(loaded, list)
    for module in (
        "orchestrator.wire.format",
        "orchestrator.wire.schema",
        "orchestrator.host",
        "orchestrator.observe.trace",
        "orchestrator.extensions.subagent",
        "orchestrator.events.features",
        "json",
        "uuid",
        "asyncio",
        "pydantic",
    ):
        assert module not in loaded, f"import orchestrator loaded {module}"
    assert "orchestrator.runtime.run" in loaded


def test_wire_names_load_on_first_use_and_are_the_wire_modules_own() -> None:
    import orchestrator
    from orchestrator import wire

    for name in ("dumps", "encode_event", "decode_event", "encode_message", "decode_message", "encode_error"):
        assert getattr(orchestrator, name) is getattr(wire, name)
    assert orchestrator.WireFormatError is wire.WireFormatError
    assert orchestrator.RemoteError is wire.RemoteError
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        orchestrator.no_such_name  # noqa: B018


def test_subagent_names_load_on_first_use_and_are_the_extension_modules_own() -> None:
    loaded = _fresh(
        "import sys, json, orchestrator\n"
        "before = 'orchestrator.extensions.subagent' in sys.modules\n"
        "from orchestrator import SubAgentExtension, agent_tool\n"
        "from orchestrator.extensions import subagent\n"
        "same = [SubAgentExtension is subagent.SubAgentExtension, agent_tool is subagent.agent_tool]\n"
        "print(json.dumps([before, *same]))"
    )
    assert loaded == [False, True, True]


def test_optional_features_events_are_built_on_first_use_under_their_usual_names() -> None:
    loaded = _fresh(
        "import sys, json, orchestrator\n"
        "from orchestrator import events\n"
        "before = 'orchestrator.events.features' in sys.modules\n"
        "from orchestrator.events import RunParkedEvent\n"
        "from orchestrator.events import features as feature_events\n"
        "names = sorted(events.FEATURE_EVENTS)\n"
        "same = [getattr(events, n) is getattr(feature_events, n) for n in names]\n"
        "listed = [n in events.__all__ and n in dir(events) for n in names]\n"
        "print(json.dumps([before, RunParkedEvent is feature_events.RunParkedEvent, all(same), all(listed),"
        " orchestrator.SubagentStartedEvent is feature_events.SubagentStartedEvent]))"
    )
    assert loaded == [False, True, True, True, True]
    from orchestrator import events

    with pytest.raises(AttributeError, match="no attribute 'NoSuchEvent'"):
        events.NoSuchEvent  # noqa: B018


def test_the_wire_knows_the_optional_features_events_before_they_are_asked_for() -> None:
    kinds = _fresh(
        "import json\n"
        "from orchestrator.wire.format import event_classes\n"
        "print(json.dumps(sorted(event_classes(library_only=True))))"
    )
    assert isinstance(kinds, list)
    for kind in ("run_parked", "run_resumed", "steering_accepted", "compaction_completed", "subagent_started"):
        assert kind in kinds


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_left_as_the_package_found_it(enabled: bool) -> None:
    switch = "gc.enable()" if enabled else "gc.disable()"
    after = _fresh(f"import gc, json; {switch}\nimport orchestrator\nprint(json.dumps(gc.isenabled()))")
    assert after is enabled


def test_what_loading_built_is_frozen_out_of_later_collections() -> None:
    frozen = _fresh(
        "import gc, json; before = gc.get_freeze_count()\n"
        "import orchestrator\n"
        "print(json.dumps([before, gc.get_freeze_count(), orchestrator.AgentRunConfig in gc.get_objects()]))"
    )
    assert isinstance(frozen, list)
    before, after, still_traversed = frozen
    assert before == 0
    assert after > 1000
    assert not still_traversed


def test_a_new_request_id_is_a_version_4_uuid_in_hex() -> None:
    import uuid

    from orchestrator.agent import _new_request_id

    seen = {_new_request_id() for _ in range(200)}
    assert len(seen) == 200
    for hex_id in seen:
        parsed = uuid.UUID(hex=hex_id)
        assert parsed.hex == hex_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_running_a_request_loads_no_opentelemetry() -> None:
    loaded = _fresh(
        "import sys, json, trio\n"
        "from orchestrator import AssistantMessage, ScriptedModel, create_agent\n"
        "async def main():\n"
        "    agent = await create_agent(ScriptedModel([AssistantMessage('hi')]))\n"
        "    await agent.run('hello')\n"
        "trio.run(main)\n"
        "names = ('opentelemetry', 'orchestrator.observe.otel')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(names))))"
    )
    assert loaded == []
