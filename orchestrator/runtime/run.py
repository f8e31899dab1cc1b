"""RequestRun: drives one request through the request machine under trio.

Every step goes through ``machines.request.REQUEST``: the synchronous
``transitions`` machine validates and records the edge, then this class awaits
the callbacks the edge names, one after another, in the request's own task
(the guards' predicates and the callbacks are ``orchestrator.runtime.edges``).
The tool calls of each assistant message are run by its ``ToolRunner``
(``orchestrator.runtime.tool_runner``); how events are numbered, streamed and
delivered is ``orchestrator.runtime.emission``, where steering and internal input are
looked for is ``orchestrator.runtime.steering_points`` (the bases of RequestRun), and
the checks a model's response passes are ``orchestrator.runtime.response_checks``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import trio

from machines.build import BoundMachine, GuardRefused, Step
from machines.frozen import constructor
from machines.request import REQUEST
from orchestrator import events as ev
from orchestrator.config import AgentRunConfig
from orchestrator.errors import GuardrailTripped, MaxIterationsExceeded, ModelError, ValueMismatch
from orchestrator.limits import RequestDeadlineExceeded, UsageLimitExceeded
from orchestrator.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
    clean_message,
)
from orchestrator.model import (
    ModelEvent,
    ModelRequest,
    ReasoningDeltaEvent,
    ResponseCompletedEvent,
    StopReason,
    TextDeltaEvent,
    Usage,
)
from orchestrator.output import OutputType, OutputValidationError, StructuredAnswer
from orchestrator.runtime.app_loop import APP_LOOP, hooks_on_app_loop
from orchestrator.runtime.budget import Budget, Deadline
from orchestrator.runtime.context import AgentRunContext
from orchestrator.runtime.edges import CALLBACKS, GUARDS, has_work
from orchestrator.runtime.emission import _DROP, _heard_names, _new_text_delta
from orchestrator.runtime.fingerprint import AgentFingerprint, check_resumed
from orchestrator.runtime.model_calls import capped_stream
from orchestrator.runtime.redaction import RedactingSink, Redactor, redacted
from orchestrator.runtime.response_checks import checked_response, checked_stop, checked_usage
from orchestrator.runtime.restored import Restored
from orchestrator.runtime.sinks import EventSink, StreamQueue
from orchestrator.runtime.steering_points import SteeringPoints
from orchestrator.runtime.tool_runner import ToolRunner
from orchestrator.text import SurrogateJoiner
from orchestrator.tool_content import ToolResultContent, tool_content

if TYPE_CHECKING:
    from orchestrator.runtime.ports import AgentPort

log = logging.getLogger("orchestrator.runtime")

_T = TypeVar("_T")

CLEANUP_SECONDS = 10.0

#: Every model call is a cancellation point; every this many model calls (of a request) is also a
#: schedule point, so a request whose model and tools never wait still lets other tasks run. A
#: full checkpoint per call would cost a pass of the scheduler per turn.
YIELD_EVERY_CALLS = 16

_FINAL_PHASES = REQUEST.main.final_states

_TOOL_EVENTS: dict[
    ToolStatus, type[ev.ToolCompletedEvent | ev.ToolFailedEvent | ev.ToolSkippedEvent | ev.ToolCancelledEvent]
] = {
    ToolStatus.SUCCEEDED: ev.ToolCompletedEvent,
    ToolStatus.FAILED: ev.ToolFailedEvent,
    ToolStatus.SKIPPED: ev.ToolSkippedEvent,
    ToolStatus.CANCELLED: ev.ToolCancelledEvent,
}




class RequestRun(SteeringPoints):
    """One request of one session: its machine, context and loop.

    Slotted: thousands of requests may wait at once (for an approval, say), and
    each keeps only its own fields; what every request of an agent shares (who
    listens to which events, which callbacks have work) is computed once per
    agent (``_AgentProfile``).
    """

    __slots__ = (
        "__weakref__",
        "_ended",
        "_plans",
        "abandoned",
        "agent",
        "app_loop",
        "approvals",
        "budget",
        "capabilities",
        "context",
        "deadline",
        "ending",
        "error",
        "held_results",
        "held_text",
        "hooks",
        "iterations",
        "left",
        "machine",
        "open_calls",
        "output",
        "output_attempts",
        "output_error",
        "output_spec",
        "parking",
        "raw_stop_reason",
        "request",
        "response",
        "restored",
        "skipped_ids",
        "stop_reason",
        "usage",
    )

    def __init__(
        self,
        agent: AgentPort,
        config: AgentRunConfig,
        request_id: str,
        input_message: UserMessage | None,
        sink: EventSink | None,
        restored: Restored | None = None,
    ) -> None:
        self.agent = agent
        # The application's asyncio loop its app-side coroutine tools and hooks run on (None: all run on trio).
        self.app_loop = APP_LOOP.get()
        self.hooks = agent.hooks if self.app_loop is None else hooks_on_app_loop(agent.hooks, self.app_loop)
        if isinstance(input_message, UserMessage):
            input_message = clean_message(input_message)  # type: ignore[assignment]
        self.context = AgentRunContext(self, config, request_id, input_message)
        self.context._model_settings = agent.model_settings.merged(config.model_settings)
        # What the final answer must be (None: any text), and where its checks stand.
        self.output_spec: OutputType | None = config.output_type or agent.output_type
        self.output: Any = None
        self.output_error: ValueMismatch | None = None
        self.output_attempts = 0
        # The agent's redaction: what the sink and every on_event get (the request keeps the original).
        self._redact: Redactor | None = getattr(agent, "redact", None)
        if self._redact is not None and sink is not None:
            sink = RedactingSink(sink, self._redact)
        self._sink: EventSink = sink if sink is not None else _DROP
        profile = _profile_of(agent)
        # Without a consumer, only the events some on_event wants are built (None: every event).
        self._heard_names = profile.listened if sink is None else None
        self._session_id = config.session_id
        self._request_id = request_id
        if type(sink) is StreamQueue:
            sink.stamp(config.session_id, request_id)  # the ids its text deltas taken as parts are built with
        # The event names at least one on_event wants (None: every name); others skip _deliver.
        self._listened = profile.listened
        self._plans = profile.plans
        self.machine = BoundMachine(REQUEST, GUARDS, host=self)
        self.iterations = 0
        self.request: ModelRequest | None = None
        self.response: AssistantMessage | None = None
        self.usage: Usage | None = None
        # Why the last response ended (normalised, and the provider's own word).
        self.stop_reason: StopReason = "end_turn"
        self.raw_stop_reason: str | None = None
        self.open_calls: dict[str, ToolCall] = {}
        # Results of concurrent calls that completed before a call ahead of them: recorded in call order.
        self.held_results: dict[str, ToolMessage] | None = None  # made for the first result held for call order
        # The last response's text, held from the stream while output guardrails are attached (None: nothing held).
        self.held_text: str | None = None
        self.approvals: int = 0
        # seq of the last event streamed; the next one gets seq + 1.
        self.seq = 0
        # Events waiting for room in the sink, in seq order behind the fair lock.
        self._waiting = 0
        self._send_lock: trio.Lock | None = None
        self.steering: UserMessage | None = None
        # Calls of the current turn that steering skipped, reported by steering_applied.
        self.skipped_ids: tuple[str, ...] = ()
        # Internal messages queued for the request (a list made on the first one).
        self.internal_queue: list[UserMessage | SystemMessage] | None = None
        self.internal: UserMessage | SystemMessage | None = None
        self.internal_refused = False
        self.inboxes_closed = False
        self._probe = None
        self.capabilities: frozenset[str] | None = None
        self.error: BaseException | None = None
        # Set once the request is failing, cancelled or final: nothing can fail it any more.
        self.ending = False
        # Set (by the Agent, through mark_left) once the request has left its session.
        self.left = False
        self._ended: trio.Event | None = None
        # Set by a stream dropped while its request still ran: a new request waits for its end.
        self.abandoned = False
        # A run resumed from a run store's checkpoint, and whether its worker is letting it go.
        self.restored: Restored | None = restored
        self.parking = False
        if restored is not None:
            self.seq = restored.last_seq
        # What the request may spend (None: nothing counted), and its deadline's clock (None: no deadline).
        limits = config.usage_limits if config.usage_limits is not None else profile.usage_limits
        self.budget: Budget | None = Budget(limits) if limits is not None else None
        if self.budget is not None and restored is not None and restored.spent is not None:
            self.budget.resume(restored.spent)
        left = restored.deadline_left if restored is not None else None
        self.deadline: Deadline | None = Deadline(config.deadline, left) if config.deadline is not None else None

    def mark_left(self) -> None:
        """The request has left its session: wake whoever waits in ``wait_left``."""
        self.left = True
        if self._ended is not None:
            self._ended.set()

    async def wait_left(self) -> None:
        """Wait until the request has left its session (the event is made for the first waiter only)."""
        if self.left:
            return
        if self._ended is None:
            self._ended = trio.Event()
        await self._ended.wait()

    # stepping ---------------------------------------------------------------

    async def step(self, trigger: str, **kwargs: Any) -> None:
        """Take ``trigger`` (or raise), publish it, then await its callbacks in order.

        An edge into a final state is finished under a shield (bounded by
        CLEANUP_SECONDS): a request that has ended always announces how it
        ended, even when its caller is cancelled at that moment.
        """
        taken = self.machine.try_fire(trigger, **kwargs)
        if taken is None:
            raise self.machine.refused(trigger)
        step, edge = taken
        if step.dest not in _FINAL_PHASES:
            # _follow, unrolled: one coroutine less per step.
            await self._announce(step)
            for callback in self._needed(edge.callbacks):
                await callback(self)
            return
        self.ending = True
        with trio.move_on_after(CLEANUP_SECONDS, shield=True):
            await self._follow(step, edge.callbacks)

    async def _follow(self, step: Step, callbacks: tuple[str, ...]) -> None:
        await self._announce(step)
        for callback in self._needed(callbacks):
            await callback(self)

    def _needed(self, callbacks: tuple[str, ...]) -> tuple[Callable[[RequestRun], Awaitable[None]], ...]:
        """The callbacks of an edge that have work to do for this agent, in order.

        A callback that only runs a hook (or only visits compactors or inboxes)
        does nothing when no extension implements it; the agent's hooks are
        fixed, so which ones to skip is worked out once per agent and edge.
        """
        plan = self._plans.get(callbacks)
        if plan is None:
            plan = self._plans[callbacks] = tuple(CALLBACKS[name] for name in callbacks if has_work(self.agent, name))
        return plan

    async def _run_hook(self, name: str, *args: Any) -> None:
        for extension in self.hooks[name]:
            await getattr(extension, name)(self.context, *args)

    # messages ---------------------------------------------------------------

    async def append(self, message: Message, *, cleaned: bool = False) -> Message:
        """Append to the request and the session history, then publish it; the message appended.

        Every text in it is first made encodable as UTF-8 (``clean_message``), so
        no message that enters history can break a store or a later model call;
        ``cleaned``: the caller already did (the model's checked response).

        Recording is synchronous and keeps ``open_calls`` in step with what was
        recorded: the calls of an assistant message are open from the moment it
        is recorded, and a call is closed the moment its result is. A failure or
        cancellation while the message is being published therefore still finds
        every recorded call, and settles those without a result.
        """
        if not cleaned:
            message = clean_message(message)
        self.context._messages.append(message)  # add_message without cleaning it a second time
        if self.agent.history is not None:
            kept = message if self._redact is None else redacted(self._redact, message)
            self.agent.history.append(self.context.session_id, kept)
        if isinstance(message, AssistantMessage):
            self.open_calls = {call.id: call for call in message.tool_calls}
        elif isinstance(message, ToolMessage):
            self.open_calls.pop(message.tool_call_id, None)
        if not self._delivers(ev.MessageAppendedEvent.kind):
            return message
        await self.publish(
            ev.MessageAppendedEvent(
                session_id=self.context.session_id,
                request_id=self.context.request_id,
                message=message,
                index=len(self.context._messages) - 1,
            )
        )
        return message

    async def settle(self, call: ToolCall, status: ToolStatus, content: ToolResultContent) -> ToolMessage:
        """Append the one result of ``call`` (text, or parts as ``tool_content`` makes them) and stream its outcome."""
        approval = self.context.take_approval(call.id)
        appended = await self.append(_tool_message(call.id, call.name, tool_content(content), status, approval))
        assert isinstance(appended, ToolMessage)
        await self._emit(_TOOL_EVENTS[status], call, appended)
        return appended

    async def settle_in_order(
        self, call: ToolCall, status: ToolStatus, content: ToolResultContent, order: tuple[str, ...]
    ) -> None:
        """``settle`` for one of the concurrent calls ``order``: its outcome streams now, its result is recorded
        once every call before it has its own, so history (and the next model request) keep the calls' order."""
        approval = self.context.take_approval(call.id)
        message = clean_message(_tool_message(call.id, call.name, tool_content(content), status, approval))
        assert isinstance(message, ToolMessage)
        if self.held_results is None:
            self.held_results = {}
        self.held_results[call.id] = message
        await self._emit(_TOOL_EVENTS[status], call, message)
        await self._record_held(order)

    async def _record_held(self, order: tuple[str, ...]) -> None:
        """Record the held results that are next in ``order``, up to the first call still running."""
        for call_id in order:
            if call_id not in self.open_calls:
                continue  # recorded already
            held = self.held_results.pop(call_id, None) if self.held_results else None
            if held is None:
                return
            await self.append(held, cleaned=True)

    # the loop ---------------------------------------------------------------

    def run(self) -> Coroutine[Any, Any, AssistantMessage]:
        """Run the request to its end (await the coroutine): the final answer, or the error re-raised."""
        return self._loop()

    async def compact(self) -> None:
        """Run a compaction pass: restore, on_compact, store; no input, no model call."""
        await self._guarded(RequestRun._compaction)

    async def _compaction(self) -> None:
        await self.step("compact")
        await self.step("finish_compaction")

    async def _guarded(self, body: Callable[[RequestRun], Awaitable[_T]]) -> _T:
        """Run ``body`` as the request: it ends the request however it ends (``_ended_by``), then tears it down."""
        self._enter_extensions()
        try:
            return await body(self)
        except BaseException as error:
            await self._ended_by(error)
            raise  # not reached: _ended_by raises
        finally:
            self._tear_down()

    def _enter_extensions(self) -> None:
        for extension in self.agent.extensions:
            extension._enter_request()

    async def _ended_by(self, error: BaseException) -> NoReturn:
        """End the request after ``error`` left its body, then raise it.

        A cancellation parks the run (when it is being handed over) or cancels it
        and is raised as it is; any other error fails the request and is raised
        unwrapped from its exception groups.
        """
        try:
            if _only_cancellation(error):
                with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                    await self._end("park" if self.parking and self.machine.may("park") else "cancel")
                raise error
            self.error = _unwrap(error)
            with trio.move_on_after(CLEANUP_SECONDS, shield=True):
                await self._end(_fail_trigger(self.error))
            raise self.error from None
        finally:
            # The traceback holds this frame: its reference to the error would make a cycle only the
            # garbage collector frees (with the whole run it reaches).
            del error

    def _tear_down(self) -> None:
        self._close_inboxes()
        for extension in self.agent.extensions:
            extension._leave_request()
        self.machine.unbind()

    async def _loop(self) -> AssistantMessage:
        """The request from start (or restore) to its answer, guarded as ``_guarded`` does.

        The guard is written out here rather than wrapping the loop, so a waiting
        request (thousands may wait at once) keeps one coroutine frame fewer.
        """
        self._enter_extensions()
        deadline = self.deadline
        slots, holding = self.agent.run_slots, False
        try:
            if slots is not None:
                # Past the agent's cap on runs at once the request waits here, still idle (not started).
                await slots.acquire_on_behalf_of(self)
                holding = True
            with _NO_DEADLINE if deadline is None else deadline.start():
                if self.restored is None:
                    await self.step("start")
                    if self.hooks["check_input"] and self.context.input_message is not None:
                        await self.step("check_input")
                else:
                    await self.step("restore")
                    await check_resumed(
                        self.context,
                        AgentFingerprint.parse(self.restored.fingerprint),
                        self.agent.fingerprint,
                        self.agent.on_agent_changed,
                    )
                    if self.machine.state() != "turn_settled":
                        assert self.response is not None
                        final = await self._finish_turn(self.response, resumed=True)
                        if final is not None:
                            return self._answer(final)
                        await self.step("settle_turn")
                await self._request_model()
                while True:
                    response = await self._call_model()
                    self.request = None  # the next turn assembles its own; a waiting request keeps none
                    await self.step("respond" if response.tool_calls else "answer")
                    answered = not response.tool_calls
                    if answered and self.output_spec is not None and not await self._settle_output(response):
                        await self._request_model()  # the answer does not fit: asked again
                        continue
                    if response.tool_calls:
                        # _finish_turn, unrolled: a request waiting in a tool call keeps one coroutine frame fewer.
                        await ToolRunner(self).run(response.tool_calls)
                        if self.steering is not None:
                            await self.step("steer")
                    else:
                        if self.hooks["check_output"]:  # the answer (or accept_output) led to checking_output
                            await self.step("pass_output")
                        final = await self._conclude(response)
                        if final is not None:
                            return self._answer(final)
                    await self.step("settle_turn")
                    await self._request_model()
            assert deadline is not None  # only a deadline's scope ends the body without a return or an error
            raise RequestDeadlineExceeded(deadline.seconds)
        except BaseException as error:
            await self._ended_by(error)
            raise  # not reached: _ended_by raises
        finally:
            if holding and slots is not None:
                slots.release_on_behalf_of(self)
            self._tear_down()

    async def _finish_turn(self, response: AssistantMessage, *, resumed: bool = False) -> AssistantMessage | None:
        """Run the response's calls (a resumed run: those still open), or conclude; the final answer or None."""
        if not response.tool_calls:
            return await self._conclude(response)
        calls = response.tool_calls
        if resumed:
            open_calls = self.open_calls
            calls = tuple([call for call in calls if call.id in open_calls])
        await ToolRunner(self).run(calls)
        if self.steering is not None:
            await self.step("steer")
        return None

    async def _settle_output(self, response: AssistantMessage) -> bool:
        """Leave ``validating_output``: True when the answer fits, False when the model is asked again.

        OutputValidationError (carrying the last mismatch) once no retry is left.
        """
        if self.output_error is None:
            await self.step("accept_output")
            return True
        if not self.machine.may("retry_output"):
            raise OutputValidationError(self.output_error, response.content, self.output_attempts)
        await self.step("retry_output")
        return False

    def _answer(self, final: AssistantMessage) -> AssistantMessage:
        """The request's result: the final answer, with its typed value when the request has an output type."""
        spec = self.output_spec
        if spec is None:
            return final
        if self.output_error is None and self.output_attempts:
            return StructuredAnswer.of(final, self.output)
        # A run resumed after its final answer: the answer was accepted before its checkpoint.
        try:
            return StructuredAnswer.of(final, spec.parse(final.content))
        except ValueMismatch as mismatch:
            raise OutputValidationError(mismatch, final.content, self.output_attempts + 1) from None

    async def _conclude(self, response: AssistantMessage) -> AssistantMessage | None:
        """After an answer: take steering or internal input if any (None), else complete (the answer)."""
        if self.steering is None:
            if not self._quiet():
                await self._announce_steering()
            self._select_next()
        if self.steering is not None:
            await self.step("steer")
        elif self.internal is None:
            await self.step("conclude")
            await self.step("complete")
            return response
        return None

    async def _request_model(self) -> None:
        budget = self.budget
        if budget is not None and budget.before_request() is not None:
            if budget.may_wrap_up:
                await self.step("wrap_up")
                return
            await self._emit_new(ev.UsageLimitReachedEvent, limit=budget.exhausted, on_exhausted="fail")
            raise budget.exceeded()
        try:
            await self.step("request_model")
        except GuardRefused as refused:
            if self.iterations >= self.agent.max_iterations:
                raise MaxIterationsExceeded(self.agent.max_iterations) from refused
            raise

    async def _end(self, trigger: str) -> None:
        if self.machine.is_final:
            return
        self.ending = True
        reason = "request cancelled" if trigger == "cancel" else _END_REASONS.get(trigger, "request failed")
        # A parked run keeps its open calls: the run that resumes it settles them. A result already
        # streamed but held for call order is recorded, in its place (parking: with the others held).
        for call in list(self.open_calls.values()):
            held = self.held_results.pop(call.id, None) if self.held_results else None
            if held is None and trigger == "park":
                continue
            try:
                if held is not None:
                    await self.append(held, cleaned=True)
                else:
                    await self.settle(call, ToolStatus.CANCELLED, f"not completed: {reason}")
            except Exception:
                log.exception("could not settle call %s of request %s", call.id, self.context.request_id)
                self.open_calls.pop(call.id, None)
        if trigger in _END_REASONS and not self.machine.may(trigger):
            trigger = "fail"  # an error of its own edge, raised where that edge does not lead (a hook's, say)
        try:
            await self.step(trigger)
        except Exception:
            log.exception("error while ending request %s", self.context.request_id)

    # model ------------------------------------------------------------------

    def _model_stream(self, request: ModelRequest, index: int = 0) -> AsyncIterator[ModelEvent]:
        """The model's stream seen through on_model_request wrappers ``index`` onwards."""
        wrappers = self.hooks["on_model_request"]
        if index == len(wrappers):
            cap, model = self.agent.model_calls, self.agent.model
            return model.stream(request) if cap is None else capped_stream(cap, model.stream, request)
        return wrappers[index].on_model_request(
            self.context, request, functools.partial(self._model_stream, index=index + 1)
        )

    async def _call_model(self) -> AssistantMessage:
        assert self.request is not None
        self.iterations += 1
        await self._emit(ev.ModelStartedEvent, self.iterations)
        completed: ResponseCompletedEvent | None = None
        # Made for the first piece that needs one: ASCII text needs no cleaning and ends in no surrogate.
        text: SurrogateJoiner | None = None
        reasoning: SurrogateJoiner | None = None
        stream = self._model_stream(self.request)
        sink, heard_names, listened = self._sink, self._heard_names, self._listened
        # _heard and _delivers, unrolled: once per model call.
        heard = heard_names is None or _TEXT_DELTA in heard_names
        delivered = listened is None or _TEXT_DELTA in listened
        # A client.stream queue takes a delta nobody else hears as its parts (built as it is read).
        queue = sink if type(sink) is StreamQueue and not delivered else None
        # With output guardrails attached, the text is held until the response is known not to be a tripped answer.
        held: list[str] | None = [] if heard and self.hooks["check_output"] else None
        self.held_text = None
        session_id, request_id, now = self._session_id, self._request_id, time.time
        # No bound method is kept across the stream: a thousand requests waiting for their
        # models would each hold them as objects for the garbage collector to visit.
        try:
            async for event in stream:
                if type(event) is TextDeltaEvent or isinstance(event, TextDeltaEvent):
                    piece = event.text
                    if type(piece) is not str and not isinstance(piece, str):
                        raise ModelError(f"the model streamed text of type {type(piece).__name__}")
                    if text is not None or not piece.isascii():
                        if text is None:
                            text = SurrogateJoiner()
                        piece = text.feed(piece)
                    if not piece or not heard:
                        continue
                    if held is not None:
                        held.append(piece)
                        continue
                    # _emit_new, unrolled: this runs once per streamed delta.
                    self.seq += 1
                    if queue is not None and not self._waiting and queue.offer_text(piece, self.seq, now()):
                        continue
                    delta = _new_text_delta(session_id, request_id, self.seq, now(), piece)
                    if self._waiting or not sink.offer(delta):
                        await self._send_in_turn(delta)
                    if delivered:
                        await self._deliver(delta)
                elif isinstance(event, ReasoningDeltaEvent):
                    if not isinstance(event.text, str):
                        raise ModelError(f"the model streamed reasoning of type {type(event.text).__name__}")
                    if reasoning is None:
                        reasoning = SurrogateJoiner()
                    thought = reasoning.feed(event.text)
                    if thought:
                        await self._emit_new(ev.ReasoningDeltaEvent, text=thought)
                elif isinstance(event, ResponseCompletedEvent):
                    completed = event
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()
        if reasoning is not None and reasoning.pending:
            await self._emit_new(ev.ReasoningDeltaEvent, text=reasoning.flush())
        if text is not None and text.pending:
            if held is not None:
                held.append(text.flush())
            else:
                await self._emit_new(ev.TextDeltaEvent, text=text.flush())
        if completed is None:
            raise ModelError("model stream ended without a completed response")
        message = checked_response(completed.message)
        if held:
            if message.tool_calls:  # not a final answer: its text streams now
                await self._emit_new(ev.TextDeltaEvent, text="".join(held))
            else:  # streamed by pass_output once the answer's guardrails passed
                self.held_text = "".join(held)
        stop_reason, raw_stop_reason = checked_stop(completed, message)
        usage = checked_usage(completed.usage)
        if self.iterations % YIELD_EVERY_CALLS:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            await trio.lowlevel.checkpoint()
        self.response = message
        self.usage = usage
        self.stop_reason, self.raw_stop_reason = stop_reason, raw_stop_reason
        if self.budget is not None:
            self.budget.record_model_call(usage)
        return message

    @property
    def cut_off(self) -> bool:
        """Whether the last response hit the output token limit: none of its tool calls may run."""
        return self.stop_reason == "max_tokens"

    def assemble(self) -> ModelRequest:
        tools = tuple(self.context.tools.values())
        if self.capabilities is not None and self.plan_mode_active:
            tools = tuple(t for t in tools if t.name in self.capabilities)
        server_tools = self.context._server_tools
        return _model_request(
            self.context.messages,
            tools,
            tuple(server_tools) if server_tools else (),
            self.context.model_settings,
            self.output_spec,
        )

    # approvals and plan mode ------------------------------------------------

    def asked_before(self, tool_call_id: str) -> bool:
        """Whether the log of this resumed request already holds the question ``tool_call_id`` waits on."""
        return self.restored is not None and tool_call_id in self.restored.asked

    def expiry_before(self, tool_call_id: str) -> float | None:
        """The deadline (seconds since the epoch) the wait of ``tool_call_id`` had before this request was resumed."""
        return self.restored.expiries.get(tool_call_id) if self.restored is not None else None

    async def pause(self) -> None:
        self.approvals += 1
        if self.deadline is not None and self.approvals == 1:
            self.deadline.pause()
        if type(self._sink) is StreamQueue:
            # A person may take hours: the consumer lets the stream's buffer go once it read it.
            self._sink.release_when_read(True)
        await self.step("await_approval")

    async def resume(self) -> None:
        self.approvals -= 1
        if self.deadline is not None and not self.approvals:
            self.deadline.resume()
        if not self.approvals and type(self._sink) is StreamQueue:
            self._sink.release_when_read(False)
        step, _ = self.machine.fire("resume")
        with trio.CancelScope(shield=True):
            await self._announce(step)

    @property
    def plan_mode_active(self) -> bool:
        """Whether the mode region has left its initial (unrestricted) state."""
        return self.machine.state("mode") != REQUEST.region("mode").initial

    async def enter_plan_mode(self, capabilities: frozenset[str]) -> None:
        self.capabilities = capabilities
        if self.machine.may("enter_plan"):
            await self.step("enter_plan")

    async def exit_plan_mode(self) -> None:
        if self.machine.may("exit_plan"):
            await self.step("exit_plan")
        self.capabilities = None

    async def _store_history(self) -> None:
        """Make the session's history the request's messages, system instructions left out."""
        kept = tuple(m for m in self.context.messages if not isinstance(m, SystemMessage))
        if self.agent.history is not None:
            redact = self._redact
            stored = kept if redact is None else tuple(redacted(redact, message) for message in kept)
            self.agent.history.replace(self.context.session_id, stored)
        await self.publish(
            ev.HistoryReplacedEvent(
                session_id=self.context.session_id, request_id=self.context.request_id, messages=kept
            )
        )


_Plan = tuple[Callable[[RequestRun], Awaitable[None]], ...]


class _AgentProfile:
    """What every request of one agent shares: who listens to which events, and which callbacks have work.

    An agent's extensions (and so its hooks) are fixed for its lifetime.
    ``listened``: the event names some on_event wants (None: every name).
    ``plans``: per edge (by its callback names), the callbacks with work to do.
    """

    __slots__ = ("listened", "plans", "usage_limits")

    def __init__(self, agent: AgentPort) -> None:
        listeners = agent.hooks["on_event"]
        self.listened = _heard_names(listeners) if listeners else frozenset()
        self.plans: dict[tuple[str, ...], _Plan] = {}
        self.usage_limits = agent.usage_limits


_PROFILES: weakref.WeakKeyDictionary[AgentPort, _AgentProfile] = weakref.WeakKeyDictionary()


def _profile_of(agent: AgentPort) -> _AgentProfile:
    profile = _PROFILES.get(agent)
    if profile is None:
        profile = _PROFILES[agent] = _AgentProfile(agent)
    return profile


def _unwrap(error: BaseException) -> BaseException:
    """The single meaningful error inside nested exception groups."""
    while isinstance(error, BaseExceptionGroup):
        inner = [e for e in error.exceptions if not isinstance(e, trio.Cancelled)]
        if len(inner) != 1:
            return error
        error = inner[0]
    return error


def _only_cancellation(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_only_cancellation(inner) for inner in error.exceptions)
    return isinstance(error, trio.Cancelled)


_TEXT_DELTA = ev.TextDeltaEvent.kind

#: Errors that end a request through an edge of their own (when its current phase has that edge).
_FAIL_TRIGGERS: dict[type[BaseException], str] = {
    UsageLimitExceeded: "limit_reached",
    RequestDeadlineExceeded: "deadline_passed",
}
_END_REASONS = {
    "limit_reached": "usage limit reached",
    "deadline_passed": "request deadline passed",
    "guardrail_tripped": "guardrail tripped",
}


def _fail_trigger(error: BaseException) -> str:
    """The edge that ends a request failed by ``error``: its own (see _FAIL_TRIGGERS), else ``fail``."""
    if isinstance(error, GuardrailTripped):
        return "guardrail_tripped"
    return _FAIL_TRIGGERS.get(type(error), "fail")
_NO_DEADLINE = contextlib.nullcontext()

#: A tool call's result message: its content is what tool_content made and its status a ToolStatus,
#: the forms ToolMessage's converters would give them.
_tool_message = constructor(ToolMessage, positional=True, checked=False)
#: The request a model call receives: its fields are already the tuples ModelRequest's converters make.
_model_request = constructor(ModelRequest, positional=True, checked=False)
