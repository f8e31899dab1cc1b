"""schema/events.json and the documentation's event list are generated from the event classes and kept current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_wire import SAMPLES

from orchestrator import schema as cli
from orchestrator.__main__ import main as orchestrator_main
from orchestrator.wire import format as wire

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "schema" / "events.json"


@pytest.fixture(scope="module")
def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (test extra) is not installed")
    schema = json.loads(COMMITTED.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_current() -> None:
    assert COMMITTED.is_file(), f"schema/events.json is missing; generate it with `{cli.REGENERATE}`"
    assert COMMITTED.read_text(encoding="utf-8") == cli.schema_text(), (
        f"schema/events.json differs from the event classes; regenerate with `{cli.REGENERATE}`"
    )


def test_the_documented_event_list_is_current() -> None:
    page = ROOT / cli.EVENTS_PAGE
    assert page.is_file(), f"{cli.EVENTS_PAGE} is missing"
    assert cli.stale(COMMITTED, page) == [], f"regenerate with `{cli.REGENERATE}`"


def test_the_schema_names_every_library_event_and_its_fields() -> None:
    schema = cli.event_schema()
    for name, kind in wire.event_classes(library_only=True).items():
        definition = schema["$defs"][name]
        assert definition["title"] == kind.__name__
        fields = [f.name for f in wire.event_fields(kind)]
        assert list(definition["properties"]) == [*wire.ENVELOPE, *fields]
    assert {"steering_accepted", "compaction_completed", "ask_user", "enter_plan_mode"} <= set(schema["$defs"])


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: f"{type(e).__name__}-{e.name}")
def test_every_encoded_event_fits_the_schema(event: Any, validator: Any) -> None:
    errors = [e.message for e in validator.iter_errors(wire.encode_event(event))]
    assert errors == []


@pytest.mark.parametrize(
    "data",
    [
        {"type": "text_delta", "session_id": "s", "request_id": "r", "seq": 1, "ts": 0.0},
        {"type": "text_delta", "session_id": "s", "request_id": "r", "seq": 1, "ts": 0.0, "text": 3},
        {"type": "run_failed", "session_id": "s", "request_id": "r", "seq": 1, "ts": 0.0, "error": "KeyError('x')"},
        {"type": "run_cancelled", "session_id": "s", "request_id": "r", "seq": 1, "ts": 0.0, "payload": {}},
    ],
)
def test_the_schema_refuses_what_the_decoder_refuses(data: dict[str, Any], validator: Any) -> None:
    assert not validator.is_valid(data)
    with pytest.raises(wire.WireFormatError):
        wire.decode_event(data)


def test_the_schema_command_writes_and_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    readme = tmp_path / cli.EVENTS_PAGE
    readme.parent.mkdir(parents=True)
    readme.write_text(f"# x\n\n{cli.LIST_BEGIN}old table\n{cli.LIST_END}\nafter\n", encoding="utf-8")
    assert orchestrator_main(["schema", "--check"]) == 1
    assert "schema/events.json (missing)" in capsys.readouterr().err
    assert orchestrator_main(["schema"]) == 0
    assert (tmp_path / "schema" / "events.json").read_text(encoding="utf-8") == cli.schema_text()
    text = readme.read_text(encoding="utf-8")
    assert "old table" not in text and "| `text_delta` | `text`: string |" in text and text.endswith("after\n")
    assert orchestrator_main(["schema", "--check"]) == 0
    readme.write_text(text.replace("`text`: string", "`text`: bytes"), encoding="utf-8")
    assert orchestrator_main(["schema", "--check"]) == 1
    assert f"{cli.EVENTS_PAGE} (event list differs)" in capsys.readouterr().err
