"""The metrics of ``OpenTelemetryExtension``: the GenAI client metrics, and the runs', waits' and tools' own.

Imported only with ``orchestrator.observe.otel`` (the ``otel`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import metrics

from orchestrator.model import Usage

INSTRUMENTATION = "orchestrator"
"""The instrumentation scope of every span and instrument of the OpenTelemetry extension."""

_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)


class RunInstruments:
    """The instruments, made from ``meter_provider`` (None: the global one), and what each request records."""

    def __init__(self, meter_provider: metrics.MeterProvider | None) -> None:
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used by one model call, by gen_ai.token.type (input or output)",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of one model call",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.tool_duration = meter.create_histogram(
            "gen_ai.execute_tool.duration",
            unit="s",
            description="Duration of one tool call, by gen_ai.tool.name",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.runs_started = meter.create_counter(
            "orchestrator.runs.started", unit="{run}", description="Requests started (a resumed run counts again)"
        )
        self.runs_ended = meter.create_counter(
            "orchestrator.runs.ended",
            unit="{run}",
            description="Requests ended, by orchestrator.run.outcome (completed, failed, cancelled or parked)",
        )
        self.runs_running = meter.create_up_down_counter(
            "orchestrator.runs.running", unit="{run}", description="Requests running in this process now"
        )
        self.run_duration = meter.create_histogram(
            "orchestrator.run.duration",
            unit="s",
            description="Duration of one request (one segment of a parked run), by outcome",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self.wait_duration = meter.create_histogram(
            "orchestrator.wait.duration",
            unit="s",
            description="Time a call waited for its answer, by orchestrator.wait.kind (approval or question)",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )

    @staticmethod
    def _run_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
        return {key: attributes[key] for key in ("gen_ai.agent.name",) if key in attributes}

    def started(self, attributes: Mapping[str, str]) -> None:
        shown = self._run_attributes(attributes)
        self.runs_started.add(1, shown)
        self.runs_running.add(1, shown)

    def ended(self, attributes: Mapping[str, str], outcome: str, duration: float) -> None:
        shown = self._run_attributes(attributes)
        self.runs_running.add(-1, shown)
        self.runs_ended.add(1, {**shown, "orchestrator.run.outcome": outcome})
        self.run_duration.record(duration, {**shown, "orchestrator.run.outcome": outcome})

    def waited(self, kind: str, duration: float, attributes: Mapping[str, str]) -> None:
        self.wait_duration.record(duration, {**self._run_attributes(attributes), "orchestrator.wait.kind": kind})

    def model_call(
        self, attributes: Mapping[str, str], duration: float, usage: Usage | None, error: BaseException | None
    ) -> None:
        shown = {
            key: attributes[key]
            for key in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model")
            if key in attributes
        }
        if error is not None:
            self.operation_duration.record(duration, {**shown, "error.type": type(error).__qualname__})
            return
        self.operation_duration.record(duration, shown)
        if usage is not None:
            self.token_usage.record(usage.input_tokens, {**shown, "gen_ai.token.type": "input"})
            self.token_usage.record(usage.output_tokens, {**shown, "gen_ai.token.type": "output"})

    def tool_call(self, tool_name: str, status: str, duration: float) -> None:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool_name}
        if status != "succeeded":
            attributes["error.type"] = f"tool_{status}"
        self.tool_duration.record(duration, attributes)


_STORE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class StoreInstruments:
    """The run and session stores' instruments: each transaction's duration by operation, and claim lag."""

    def __init__(self, meter_provider: metrics.MeterProvider | None) -> None:
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self.transaction_duration = meter.create_histogram(
            "orchestrator.store.transaction.duration",
            unit="s",
            description="Duration of one store transaction, by orchestrator.store.operation, orchestrator.store.kind"
            " (runs or sessions) and db.system.name",
            explicit_bucket_boundaries_advisory=list(_STORE_BUCKETS),
        )
        self.claim_lag = meter.create_histogram(
            "orchestrator.store.claim.lag",
            unit="s",
            description="Time from a run becoming claimable to a worker's claim of it, by orchestrator.claim.kind"
            " (queued, or take_over of an expired lease)",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )

    def transaction(
        self, system: str, kind: str, operation: str, duration: float, error: BaseException | None
    ) -> None:
        attributes = {
            "db.system.name": system,
            "orchestrator.store.kind": kind,
            "orchestrator.store.operation": operation,
        }
        if error is not None:
            attributes["error.type"] = type(error).__qualname__
        self.transaction_duration.record(duration, attributes)

    def claimed(self, kind: str, lag: float) -> None:
        self.claim_lag.record(max(0.0, lag), {"orchestrator.claim.kind": kind})
