"""The request machine: one user input looping through model and tool calls.

Two orthogonal regions: ``phase`` (where the loop is) and ``mode`` (whether
Plan Mode restricts which tools may execute). Callbacks name what the runtime
awaits, in order, after an edge is taken: extension hooks and runtime steps.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

_LIVE = (
    "idle",
    "setup",
    "checking_input",
    "awaiting_model",
    "validating_output",
    "checking_output",
    "awaiting_tool",
    "awaiting_approval",
    "steering_interrupt",
    "turn_settled",
    "answered",
    "concluding",
    "compacting",
)

_RESTORE = ("open_inboxes", "emit_resumed", "on_tool", "on_state", "on_message", "restore_context")
_TURN = ("before_turn", "assemble_request", "compact_context", "before_model")
_RECEIVE = ("append_response", "after_model", "poll_steering")
_FAIL = ("on_error", "close_inboxes", "emit_failed")
# Where a request's deadline can end it: the states where it runs and awaits a hook, the model or a tool
# (waiting for people, in awaiting_approval, does not count; elsewhere the deadline ends it by ``fail``).
_RUNNING = (
    "setup",
    "checking_input",
    "awaiting_model",
    "checking_output",
    "awaiting_tool",
    "turn_settled",
    "answered",
    "concluding",
)

PHASE = Region(
    name="phase",
    attribute="state",
    initial="idle",
    states=(
        State("idle", "created, not started"),
        State("setup", "tools registered, state restored, input appended"),
        State("checking_input", "the input guardrails check the user's input, before any model call"),
        State("awaiting_model", "a model call is streaming"),
        State("validating_output", "a final answer is checked against the request's output type"),
        State("checking_output", "the output guardrails check the final answer; its text is held until they pass"),
        State("awaiting_tool", "the tool calls of one assistant message are running"),
        State("awaiting_approval", "a tool call is paused until an external response"),
        State("steering_interrupt", "steering input replaced the rest of the turn"),
        State("turn_settled", "the turn's results (and any new input) are in; after_turn ran"),
        State("answered", "a final answer is in hand; the next input is chosen"),
        State("concluding", "after_turn, after_run and on_success run"),
        State("compacting", "a compaction pass: restore and summarize, no model call"),
        State("completed", "the request succeeded", final=True),
        State("failed", "an error ended the request", final=True),
        State("cancelled", "the request was cancelled", final=True),
        State("parked", "waits for an answer in a run store; a worker resumes it from its checkpoint", final=True),
    ),
    transitions=(
        Transition(
            "start",
            "idle",
            "setup",
            callbacks=(
                "open_inboxes",
                "emit_started",
                "on_tool",
                "on_state",
                "on_message",
                "append_input",
                "before_run",
            ),
        ),
        Transition(
            "restore",
            "idle",
            "awaiting_tool",
            conditions="calls_unsettled",
            callbacks=_RESTORE,
            doc="a run resumed from its checkpoint with tool calls left to settle",
        ),
        Transition(
            "restore",
            "idle",
            "answered",
            conditions="answer_in_hand",
            unless="calls_unsettled",
            callbacks=_RESTORE,
            doc="a run resumed from its checkpoint after its final answer",
        ),
        Transition(
            "restore",
            "idle",
            "turn_settled",
            unless=("calls_unsettled", "answer_in_hand"),
            callbacks=_RESTORE,
            doc="a run resumed from its checkpoint between turns",
        ),
        Transition(
            "check_input",
            "setup",
            "checking_input",
            conditions="input_guarded",
            callbacks=("check_input",),
            doc="input guardrails are attached: they run on the input, in parallel",
        ),
        Transition(
            "request_model",
            ("setup", "checking_input", "turn_settled"),
            "awaiting_model",
            conditions="within_budget",
            callbacks=_TURN,
        ),
        Transition(
            "wrap_up",
            ("setup", "checking_input", "turn_settled"),
            "awaiting_model",
            conditions="may_wrap_up",
            callbacks=("assemble_wrap_up",),
            doc="a usage limit is reached (on_exhausted='wrap_up'): one last model call, offering no tools",
        ),
        Transition(
            "limit_reached",
            ("setup", "checking_input", "turn_settled"),
            "failed",
            conditions="tool_results_complete",
            callbacks=_FAIL,
            doc="a usage limit is reached and no wrap-up call is left: UsageLimitExceeded",
        ),
        Transition(
            "call_over_limit",
            "awaiting_tool",
            "awaiting_tool",
            doc="a usage limit refuses a tool call: it does not run and gets a failed result",
        ),
        Transition("call_over_limit", "awaiting_approval", "awaiting_approval", doc="as above, beside a paused call"),
        Transition(
            "call_timed_out",
            "awaiting_tool",
            "awaiting_tool",
            doc="a tool call ran past its timeout: cancelled (or its thread abandoned), a failed result",
        ),
        Transition("call_timed_out", "awaiting_approval", "awaiting_approval", doc="as above, beside a paused call"),
        Transition(
            "settle_turn",
            ("awaiting_tool", "steering_interrupt"),
            "turn_settled",
            conditions="tool_results_complete",
            callbacks=("after_turn",),
        ),
        Transition(
            "settle_turn",
            "answered",
            "turn_settled",
            conditions="has_internal_input",
            callbacks=("append_internal", "reset_budget", "after_turn"),
            doc="an internal message continues the request",
        ),
        Transition("respond", "awaiting_model", "awaiting_tool", conditions="has_tool_calls", callbacks=_RECEIVE),
        Transition(
            "answer",
            "awaiting_model",
            "validating_output",
            conditions="output_expected",
            unless="has_tool_calls",
            callbacks=(*_RECEIVE, "validate_output"),
            doc="the request has an output type: the answer is parsed and converted into it",
        ),
        Transition(
            "answer",
            "awaiting_model",
            "checking_output",
            conditions="output_guarded",
            unless=("has_tool_calls", "output_expected"),
            callbacks=(*_RECEIVE, "check_output"),
            doc="output guardrails are attached: they run on the answer, in parallel",
        ),
        Transition(
            "answer",
            "awaiting_model",
            "answered",
            unless=("has_tool_calls", "output_expected", "output_guarded"),
            callbacks=_RECEIVE,
        ),
        Transition(
            "accept_output",
            "validating_output",
            "checking_output",
            conditions=("output_valid", "output_guarded"),
            callbacks=("check_output",),
            doc="the answer fits its output type; output guardrails are attached and run on it",
        ),
        Transition(
            "accept_output", "validating_output", "answered", conditions="output_valid", unless="output_guarded"
        ),
        Transition(
            "pass_output",
            "checking_output",
            "answered",
            callbacks=("release_answer",),
            doc="every output guardrail passed: the answer's held text is streamed",
        ),
        Transition(
            "guardrail_tripped",
            ("checking_input", "checking_output"),
            "failed",
            callbacks=_FAIL,
            doc="a guardrail's tripwire: InputGuardrailTripped or OutputGuardrailTripped",
        ),
        Transition(
            "retry_output",
            "validating_output",
            "turn_settled",
            conditions="output_retries_left",
            unless="output_valid",
            callbacks=("ask_again", "after_turn"),
            doc="the answer does not fit: the model is told why and answers again",
        ),
        Transition("await_approval", ("awaiting_tool", "awaiting_approval"), "awaiting_approval"),
        Transition("resume", "awaiting_approval", "awaiting_approval", conditions="approvals_outstanding"),
        Transition("resume", "awaiting_approval", "awaiting_tool", unless="approvals_outstanding"),
        Transition(
            "steer",
            "awaiting_tool",
            "steering_interrupt",
            conditions=("steering_pending", "tool_results_complete"),
            callbacks=("append_steering", "reset_budget"),
        ),
        Transition(
            "steer",
            "answered",
            "steering_interrupt",
            conditions="steering_pending",
            callbacks=("append_steering", "reset_budget"),
        ),
        Transition(
            "conclude",
            "answered",
            "concluding",
            unless=("steering_pending", "has_internal_input"),
            callbacks=("refuse_internal", "after_turn", "after_run", "on_success"),
        ),
        Transition("complete", "concluding", "completed", callbacks=("close_inboxes", "emit_completed")),
        Transition(
            "compact",
            "idle",
            "compacting",
            callbacks=("on_tool", "on_state", "on_compact", "store_compaction"),
        ),
        Transition("finish_compaction", "compacting", "completed"),
        Transition(
            "fail",
            _LIVE,
            "failed",
            conditions="tool_results_complete",
            callbacks=("on_error", "close_inboxes", "emit_failed"),
        ),
        Transition(
            "deadline_passed",
            _RUNNING,
            "failed",
            conditions="tool_results_complete",
            callbacks=_FAIL,
            doc="the request ran past its deadline: RequestDeadlineExceeded",
        ),
        Transition(
            "park",
            ("awaiting_tool", "awaiting_approval"),
            "parked",
            callbacks=("close_inboxes", "emit_parked"),
            doc="its worker lets the run go while it waits; open calls stay open for the resumed run",
        ),
        Transition(
            "cancel",
            _LIVE,
            "cancelled",
            conditions="tool_results_complete",
            callbacks=("on_cancelled", "close_inboxes"),
        ),
    ),
)

MODE = Region(
    name="mode",
    attribute="mode",
    initial="normal",
    states=(
        State("normal", "every registered tool may execute"),
        State("plan_active", "only the Plan Mode capability set may execute"),
    ),
    transitions=(
        Transition("enter_plan", "normal", "plan_active"),
        Transition("exit_plan", "plan_active", "normal"),
        Transition("admit_tool", "normal", "normal", conditions="tool_registered"),
        Transition(
            "admit_tool",
            "plan_active",
            "plan_active",
            conditions=("tool_registered", "tool_in_capabilities"),
        ),
    ),
)

REQUEST = MachineDefinition(
    name="request",
    doc="One request: the agent loop and the tool-permission mode beside it.",
    regions=(PHASE, MODE),
)
