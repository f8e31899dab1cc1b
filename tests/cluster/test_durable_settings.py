"""A durable run keeps its own model settings and output type: the worker that resumes it after a park
sends the same settings and holds the answer to the same type."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from orchestrator import ExternalEvent, ModelSettings, ScriptedModel, UserMessage
from orchestrator.cluster import Worker
from orchestrator.cluster.run_settings import UnresolvableOutputType, decode_run_settings, encode_run_settings
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.output import OutputType, StructuredAnswer
from orchestrator.server.backend import RunStart
from orchestrator.store.runs import RunStore
from orchestrator.store.runs_sql import sqlite_run_store
from tests.cluster import apps
from tests.cluster.waits import until_final, until_parked

SETTINGS = ModelSettings(temperature=0.2, max_tokens=77, stop=("END",))


async def park_then_resume(path: str, web: StoreBackend, request_id: str) -> ScriptedModel:
    """Worker a runs the run until it waits for the approval; worker b resumes it once approved: b's model."""
    worker_a = Worker(await apps.settings_agent(), sqlite_run_store(path), name="a", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_a.run)
            call_id = await until_parked(web.store, request_id)
            nursery.cancel_scope.cancel()
        worker_b = Worker(await apps.settings_agent(), sqlite_run_store(path), name="b", poll_seconds=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker_b.run)
            answer = ExternalEvent("tool_approval_response", {"tool_call_id": call_id, "approved": True})
            assert await web.deliver("s1", request_id, answer, None)
            await until_final(web.store, request_id)
            nursery.cancel_scope.cancel()
    model = worker_b.agent.model
    assert isinstance(model, ScriptedModel)
    return model


async def test_a_resumed_run_has_its_settings_and_its_answer_is_held_to_its_output_type(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(
        RunStart("s1", UserMessage("who won?"), model_settings=SETTINGS, output_type=apps.Verdict)
    )
    record = web.store.run(request_id)
    assert record is not None and record.settings is not None
    assert record.settings["output_type"]["reference"] == "tests.cluster.apps:Verdict"

    resumed = await park_then_resume(path, web, request_id)

    assert web.store.run(request_id).status == "completed"  # type: ignore[union-attr]
    assert len(resumed.requests) == 2  # the answer missing a field, then the one after the retry prompt
    for request in resumed.requests:
        assert (request.settings.temperature, request.settings.max_tokens, request.settings.stop) == (
            0.2,
            77,
            ("END",),
        )
    retry = resumed.requests[1].messages[-1]
    assert retry.role == "user" and "missing required field(s): score" in retry.text  # checked on worker b
    assert "runs are held to" in retry.text  # against Verdict's schema (its docstring is its description)
    result = await web.result(request_id)
    assert isinstance(result, StructuredAnswer)
    assert result.output == apps.Verdict(winner="ada", score=3)


async def test_a_json_schema_output_type_is_kept_as_it_is(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"winner": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["winner", "score"],
    }
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(RunStart("s1", UserMessage("who won?"), output_type=schema))
    record = web.store.run(request_id)
    assert record is not None and record.settings == {"output_type": {"schema": schema, "name": "output", "retries": 2}}

    resumed = await park_then_resume(path, web, request_id)

    assert resumed.requests[0].settings == ModelSettings()  # none given: the agent's
    retry = resumed.requests[1].messages[-1].text
    assert "missing required field(s): score" in retry and "runs are held to" not in retry  # the schema itself
    result = await web.result(request_id)
    assert isinstance(result, StructuredAnswer) and result.output == {"winner": "ada", "score": 3}


def test_a_type_another_process_cannot_import_is_refused_when_the_run_starts(tmp_path: Path) -> None:
    import dataclasses

    @dataclasses.dataclass
    class Local:
        name: str

    store = sqlite_run_store(str(tmp_path / "cluster.db"))
    web = StoreBackend(store)
    with pytest.raises(UnresolvableOutputType) as refused:
        trio.run(lambda: web.start(RunStart("s1", UserMessage("hi"), output_type=Local)))
    assert refused.value.reference.endswith("<locals>.Local")
    assert "made inside a function" in str(refused.value)
    assert store.runs() == []  # nothing was started
    with pytest.raises(UnresolvableOutputType, match=r"list\[int\] is not a class"):
        encode_run_settings(None, list[int])


async def test_a_stored_type_that_cannot_be_found_again_fails_the_run_saying_so(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    store: RunStore = sqlite_run_store(path)
    stored = encode_run_settings(None, apps.Verdict)
    assert stored is not None
    gone = {**stored, "output_type": {**stored["output_type"], "reference": "tests.cluster.apps:Gone"}}
    with pytest.raises(UnresolvableOutputType) as unresolved:
        decode_run_settings(gone)
    assert (unresolved.value.reference, unresolved.value.why) == (
        "tests.cluster.apps:Gone",
        "is not found: tests.cluster.apps has no Gone",
    )
    changed = {**stored, "output_type": {**stored["output_type"], "schema": {"type": "string"}}}
    with pytest.raises(UnresolvableOutputType, match="another JSON Schema"):
        decode_run_settings(changed)

    store.create_run("s1", "r1", {"role": "user", "content": "who won?"}, settings=gone)
    worker = Worker(await apps.settings_agent(), sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert await until_final(store, "r1") == "failed"
            nursery.cancel_scope.cancel()
    (failed,) = [e for e in store.events("r1") if e.type == "run_failed"]
    assert "tests.cluster.apps:Gone is not found" in str(failed.body)


def test_the_output_type_round_trips(tmp_path: Path) -> None:
    stored = encode_run_settings(SETTINGS, OutputType(apps.Verdict, retries=5))
    again = decode_run_settings(stored)
    assert again.model_settings == SETTINGS
    assert again.output_type is not None and again.output_type.type is apps.Verdict
    assert again.output_type.retries == 5


async def test_a_retried_start_is_the_same_run_only_with_the_same_settings(tmp_path: Path) -> None:
    from orchestrator.server.backend import IdempotencyKeyReused

    web = StoreBackend(sqlite_run_store(str(tmp_path / "cluster.db")))
    first = await web.start(RunStart("s1", UserMessage("who won?"), idempotency_key="key-1", model_settings=SETTINGS))
    again = await web.start(RunStart("s1", UserMessage("who won?"), idempotency_key="key-1", model_settings=SETTINGS))
    assert again == first
    with pytest.raises(IdempotencyKeyReused, match="another input or other settings"):
        changed = ModelSettings(temperature=1)
        await web.start(RunStart("s1", UserMessage("who won?"), idempotency_key="key-1", model_settings=changed))


async def test_settings_the_resuming_agents_model_refuses_fail_the_run_saying_so(tmp_path: Path) -> None:
    path = str(tmp_path / "cluster.db")
    web = StoreBackend(sqlite_run_store(path), poll_seconds=0.02)
    request_id = await web.start(RunStart("s1", UserMessage("who won?"), model_settings=ModelSettings(seed=7)))
    client = await apps.settings_agent()
    client.agent.model.unsupported_settings = {"seed": "this model takes no seed"}  # type: ignore[attr-defined]
    worker = Worker(client, sqlite_run_store(path), name="w", poll_seconds=0.05)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            assert await until_final(web.store, request_id) == "failed"
            nursery.cancel_scope.cancel()
    (failed,) = [e for e in web.store.events(request_id) if e.type == "run_failed"]
    assert "does not support the model setting 'seed'; this model takes no seed" in str(failed.body)
