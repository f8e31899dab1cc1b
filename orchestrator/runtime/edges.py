"""What the request machine's edges do: the predicates of its guards and the callbacks it names.

``machines.request.REQUEST`` names, for each edge, the guards that decide
whether it is taken and the callbacks that run once it is, in order. Each guard
here reads the request a bound machine's host is (``event.model.host``);
each callback is an async function of the request (a ``RunPort``: what the
edges use of ``orchestrator.runtime.run.RequestRun``) that ``RequestRun.step``
awaits in its own task. A callback that only runs an
extension hook, or only visits compactors or inboxes, has no work when nothing
implements it (``has_work``): such callbacks are left out of an agent's plans.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from machines.request import REQUEST
from orchestrator import events as ev
from orchestrator.errors import ValueMismatch
from orchestrator.messages import SystemMessage, UserMessage
from orchestrator.runtime.budget import WRAP_UP_NOTE

if TYPE_CHECKING:
    from orchestrator.runtime.ports import AgentPort, RunPort

log = logging.getLogger("orchestrator.runtime")

# guards -------------------------------------------------------------------------


def _run_of(event: Any) -> RunPort:
    run: RunPort = event.model.host
    return run


def _within_budget(event: Any) -> bool:
    run = _run_of(event)
    limit: int = run.agent.max_iterations
    return run.iterations < limit


def _output_retries_left(event: Any) -> bool:
    run = _run_of(event)
    return run.output_spec is not None and run.output_attempts <= run.output_spec.retries


def _tool_in_capabilities(event: Any) -> bool:
    caps = _run_of(event).capabilities
    return caps is not None and event.kwargs["call"].name in caps


GUARDS: dict[str, Callable[[Any], bool]] = {
    "within_budget": _within_budget,
    "may_wrap_up": lambda e: bool((b := _run_of(e).budget) and b.may_wrap_up),
    "tool_results_complete": lambda e: not _run_of(e).open_calls,
    "has_tool_calls": lambda e: bool((r := _run_of(e).response) and r.tool_calls),
    "has_internal_input": lambda e: _run_of(e).internal is not None,
    "approvals_outstanding": lambda e: _run_of(e).approvals > 0,
    "calls_unsettled": lambda e: bool((r := _run_of(e).restored) and r.open_calls),
    "answer_in_hand": lambda e: bool((r := _run_of(e).restored) and r.response and not r.response.tool_calls),
    "steering_pending": lambda e: _run_of(e).steering is not None,
    "tool_registered": lambda e: e.kwargs["call"].name in _run_of(e).context.tools,
    "tool_in_capabilities": _tool_in_capabilities,
    "output_expected": lambda e: _run_of(e).output_spec is not None,
    "output_valid": lambda e: _run_of(e).output_error is None,
    "output_retries_left": _output_retries_left,
    "input_guarded": lambda e: bool(_run_of(e).hooks["check_input"]) and _run_of(e).context.input_message is not None,
    "output_guarded": lambda e: bool(_run_of(e).hooks["check_output"]),
}


# callbacks ----------------------------------------------------------------------


async def open_inboxes(run: RunPort) -> None:
    run._open_inboxes()


async def refuse_internal(run: RunPort) -> None:
    run.internal_refused = True


async def close_inboxes(run: RunPort) -> None:
    run._close_inboxes()


async def on_tool(run: RunPort) -> None:
    for definition in run.agent.tools:
        run.context.register_tool(definition)
    await run._run_hook("on_tool")


async def on_state(run: RunPort) -> None:
    if run.agent.system_prompt:
        run.context.add_message(SystemMessage(run.agent.system_prompt))
    if run.agent.history is not None:
        for message in run.agent.history.load(run.context.session_id):
            run.context.add_message(message)
    await run._run_hook("on_state")


async def on_message(run: RunPort) -> None:
    await run._run_hook("on_message")


async def append_input(run: RunPort) -> None:
    message = run.context.input_message
    if not isinstance(message, UserMessage):
        raise TypeError(f"input_message must be a UserMessage, got {type(message).__name__}")
    await run.append(message)


async def emit_started(run: RunPort) -> None:
    assert run.context.input_message is not None
    await run._emit_new(ev.RunStartedEvent, input=run.context.input_message, metadata=run.context.metadata)


async def before_run(run: RunPort) -> None:
    await run._run_hook("before_run")


async def before_turn(run: RunPort) -> None:
    await run._run_hook("before_turn")


async def assemble_request(run: RunPort) -> None:
    run.request = run.assemble()


async def assemble_wrap_up(run: RunPort) -> None:
    """The wrap-up call's request: the conversation and a note that the budget is spent, no tools offered.

    Its ``tool_choice`` is ``none`` whatever the settings say; a request whose answer has an output
    type leaves it unset instead, so a provider that forces its output through a tool may still do so.
    """
    assert run.budget is not None
    run.budget.wrapped_up = True
    request = run.assemble()
    choice = None if request.output is not None else "none"
    run.request = attrs.evolve(
        request,
        messages=(*request.messages, SystemMessage(WRAP_UP_NOTE)),
        tools=(),
        server_tools=(),
        settings=attrs.evolve(request.settings, tool_choice=choice, parallel_tool_calls=None),
    )
    await run._emit_new(ev.UsageLimitReachedEvent, limit=run.budget.exhausted or "", on_exhausted="wrap_up")


async def compact_context(run: RunPort) -> None:
    compacted = False
    for compactor in run.agent.compactors:
        compacted = await compactor.compact_turn(run.context) or compacted
    if compacted:
        await run._store_history()
        run.request = run.assemble()


async def before_model(run: RunPort) -> None:
    for extension in run.hooks["before_model"]:
        assert run.request is not None
        await extension.before_model(run.context, run.request)
        run.request = run.assemble()


async def append_response(run: RunPort) -> None:
    assert run.response is not None
    await run.append(run.response, cleaned=True)
    await run._emit(ev.ModelCompletedEvent, run.response, run.usage, run.stop_reason, run.raw_stop_reason)


async def after_model(run: RunPort) -> None:
    assert run.response is not None
    await run._run_hook("after_model", run.response)


async def validate_output(run: RunPort) -> None:
    """Parse the answer into the request's output type: ``output`` when it fits, else ``output_error``."""
    assert run.response is not None and run.output_spec is not None
    run.output_attempts += 1
    try:
        run.output = run.output_spec.parse(run.response.content)
        run.output_error = None
    except ValueMismatch as mismatch:
        run.output_error = mismatch


async def check_input(run: RunPort) -> None:
    """Run the input guardrails on the user's input; a tripwire raises InputGuardrailTripped."""
    assert run.context.input_message is not None
    await run._run_hook("check_input", run.context.input_message)


async def check_output(run: RunPort) -> None:
    """Run the output guardrails on the final answer; a tripwire raises OutputGuardrailTripped."""
    assert run.response is not None
    await run._run_hook("check_output", run.response)


async def release_answer(run: RunPort) -> None:
    """Stream the answer's text, held while its guardrails ran, as one delta."""
    text, run.held_text = run.held_text, None
    if text:
        await run._emit_new(ev.TextDeltaEvent, text=text)


async def ask_again(run: RunPort) -> None:
    """Tell the model why its answer does not fit, so that it answers again."""
    assert run.output_error is not None and run.output_spec is not None
    await run.append(UserMessage(run.output_spec.retry_prompt(run.output_error)))


async def poll_steering(run: RunPort) -> None:
    await run._poll()


async def append_steering(run: RunPort) -> None:
    assert run.steering is not None
    await run._announce_steering()
    message, run.steering = run.steering, None
    skipped, run.skipped_ids = run.skipped_ids, ()
    await run.append(message)
    await run._emit_new(ev.SteeringAppliedEvent, message=message, skipped_call_ids=skipped, iteration=run.iterations)


async def append_internal(run: RunPort) -> None:
    assert run.internal is not None
    message, run.internal = run.internal, None
    await run.append(message)


async def reset_budget(run: RunPort) -> None:
    run.iterations = 0


async def after_turn(run: RunPort) -> None:
    assert run.response is not None
    await run._run_hook("after_turn", run.response)


async def after_run(run: RunPort) -> None:
    assert run.response is not None
    await run._run_hook("after_run", run.response)


async def on_success(run: RunPort) -> None:
    assert run.response is not None
    await run._run_hook("on_success", run.response)


async def emit_completed(run: RunPort) -> None:
    assert run.response is not None
    await run._emit_new(ev.RunCompletedEvent, result=run.response)


async def on_error(run: RunPort) -> None:
    assert run.error is not None
    for extension in run.hooks["on_error"]:
        try:
            await extension.on_error(run.context, run.error)
        except Exception:
            log.exception("on_error of %s failed", extension.name)


async def emit_failed(run: RunPort) -> None:
    assert run.error is not None
    await run._emit_new(ev.RunFailedEvent, error=run.error)


async def on_cancelled(run: RunPort) -> None:
    await run._emit_new(ev.RunCancelledEvent)


async def emit_parked(run: RunPort) -> None:
    await run._emit_new(ev.RunParkedEvent, waiting=tuple(run.open_calls))


async def emit_resumed(run: RunPort) -> None:
    assert run.restored is not None
    await run._emit_new(ev.RunResumedEvent, worker=run.restored.worker, phase=run.machine.state())


async def restore_context(run: RunPort) -> None:
    """Pick the loop up where the checkpoint left it: budget, last response, calls still open."""
    assert run.restored is not None
    run.iterations = run.restored.iterations
    run.response = run.restored.response
    run.stop_reason = run.restored.stop_reason
    if run.restored.response is not None:
        run.open_calls = {c.id: c for c in run.restored.response.tool_calls if c.id in run.restored.open_calls}


async def on_compact(run: RunPort) -> None:
    await run._run_hook("on_compact")


async def store_compaction(run: RunPort) -> None:
    await run._store_history()


Callback = Callable[["RunPort"], Awaitable[None]]

#: Each callback the request machine names is the function of that name above.
CALLBACKS: dict[str, Callback] = {name: globals()[name] for name in REQUEST.callback_names}

#: Callbacks that only run one hook: nothing to do when no extension implements it.
HOOK_ONLY = frozenset(
    {"before_run", "before_turn", "before_model", "after_model", "after_turn", "after_run", "on_success", "on_message"}
)


def has_work(agent: AgentPort, callback: str) -> bool:
    if callback in HOOK_ONLY:
        return bool(agent.hooks[callback])
    if callback == "compact_context":
        return bool(agent.compactors)
    if callback in ("open_inboxes", "poll_steering"):
        return bool(agent.inboxes)
    return True
