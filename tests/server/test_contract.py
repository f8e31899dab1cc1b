"""The OpenAPI document against the running service: schemathesis generates requests for every
operation (bounded in examples and time); no input may cause a 5xx, and every status must be one
the document lists."""

from __future__ import annotations

import time

import pytest

from orchestrator import AssistantMessage, ScriptedModel, create_agent
from orchestrator.server.openapi import openapi_document
from tests.server.support import HOSTS, server_on

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install -e '.[test]')")
hypothesis = pytest.importorskip("hypothesis")

EXAMPLES_PER_OPERATION = 30
SECONDS_PER_OPERATION = 20.0


async def _answering_client():  # type: ignore[no-untyped-def]
    return await create_agent(ScriptedModel([AssistantMessage("ok")], repeat_last=True))


def _exercise(operation, url: str, problems: list[str], calls: list[int]) -> None:  # type: ignore[no-untyped-def]
    from hypothesis import HealthCheck, Phase, settings

    documented = {int(code) for code in operation.definition.raw["responses"]}
    deadline = time.monotonic() + SECONDS_PER_OPERATION

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy())
    def check(case) -> None:  # type: ignore[no-untyped-def]
        if time.monotonic() > deadline:
            return
        response = case.call(base_url=url, timeout=5)
        calls.append(response.status_code)
        where = f"{case.method} {case.formatted_path} -> {response.status_code}"
        if response.status_code >= 500:
            problems.append(f"{where}: {response.text[:200]}")
        elif response.status_code not in documented:
            problems.append(f"{where}: status not in the document {sorted(documented)}")

    check()


@pytest.mark.parametrize("host", HOSTS)
def test_no_generated_request_gets_a_server_error_or_an_undocumented_status(host: str) -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    problems: list[str] = []
    calls: list[int] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    with server_on(host, _answering_client) as server:
        for operation in operations:
            _exercise(operation, server.url, problems, calls)
    assert not problems, "\n".join(problems[:20])
    assert len(calls) >= 5 * len(operations), f"only {len(calls)} requests were generated"
    assert any(400 <= status < 500 for status in calls) and any(status < 300 for status in calls)
