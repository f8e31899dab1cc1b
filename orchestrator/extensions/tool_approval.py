"""ToolApprovalExtension: a tool policy of allow, ask or deny, with the user deciding on ask.

Each tool call is a ``machines.tool_approval.TOOL_APPROVAL`` machine, decided in
``before_tool``: ``allow`` runs the call, ``deny`` makes it a failed tool
result, ``ask`` pauses it in awaiting_approval (through a ResponseRouter) and
streams a ``tool_approval`` event (``tool_call_id``, ``name``, ``arguments``,
``response_event``). The application answers with ``tool_approval_response``:
``{"tool_call_id": ..., "approved": bool, "remember": "session" | None,
"reason": str | None, "arguments": {...} | None, "answered_by": str | None}``.
``remember="session"`` on an approval allows that tool for the rest of the
session; a decline is a failed tool result that carries the user's reason, which
the model reads. ``arguments`` on an approval replace the model's: they are
checked against the tool's schema like the model's (a bad edit is refused with
the reason and the call keeps waiting), and the call runs with them.
``answered_by`` names who answered (``"local"`` when not given). Every answer
streams a ``tool_approval_answered`` event and is recorded in the call's
ToolMessage (``approval``): who answered, when, and the arguments it ran with.
With ``expires_after`` (seconds), an approval nobody answers in time expires: the
call is declined and does not run, a ``wait_expired`` event says so, and a later
answer is refused.

Policy keys are tool names or ``fnmatch`` patterns (``write_*``): an exact name
wins over patterns, then the first matching pattern in the order given. A
verdict, a rule or the default may be a callable ``(call, arguments, context)``
returning a verdict (or awaitable of one), e.g. ask only above an amount; one that
fails or returns anything else denies the call, saying why.
"""

from __future__ import annotations

import fnmatch
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

import attrs
import trio

from machines.build import BoundMachine
from machines.tool_approval import TOOL_APPROVAL
from orchestrator.checks import number
from orchestrator.config import AgentRunConfig, ExternalEvent, NotJSON, json_data
from orchestrator.delivery import Verdict as Answer
from orchestrator.errors import ToolArgumentsError, ToolRejected
from orchestrator.events import AgentEvent, RunCancelledEvent, TransitionEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import ToolCall
from orchestrator.runtime.pending import ResponseExpired, ResponseRouter, SettledAnswer, Validator, WaitRule
from orchestrator.tools import validate_arguments

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

Verdict = Literal["allow", "ask", "deny"]
VERDICTS: tuple[Verdict, ...] = ("allow", "ask", "deny")

APPROVAL_EVENT = "tool_approval"
APPROVAL_RESPONSE = "tool_approval_response"
APPROVAL_ANSWERED = "tool_approval_answered"

#: Who answered, when an answer does not say (an approval given in this process).
LOCAL_APPROVER = "local"
#: The longest ``answered_by`` an answer may carry.
APPROVER_LIMIT = 256

PolicyRule: TypeAlias = Callable[[ToolCall, dict[str, Any], "AgentRunContext"], str | Awaitable[str]]
"""A policy decided per call: the call, a copy of its arguments and the request's context in, a verdict
(``"allow"``, ``"ask"`` or ``"deny"``, or an awaitable of one) out."""


def _verdict(value: object, where: str) -> Verdict:
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    raise ValueError(f"{where}: {value!r} is not one of {', '.join(VERDICTS)}")


def _rule(value: object, where: str) -> Verdict | PolicyRule:
    """A verdict, or a callable deciding per call."""
    if callable(value):
        return value
    return _verdict(value, where)


def _rules(rules: Mapping[str, Verdict | PolicyRule]) -> dict[str, Verdict | PolicyRule]:
    return dict(rules)


class PolicyFailed(ToolRejected):
    """A callable tool policy raised or returned something other than a verdict: the call is denied."""

    def __init__(self, tool_name: str, problem: str) -> None:
        super().__init__(f"the tool policy for {tool_name} failed: {problem}")
        self.tool_name = tool_name
        self.problem = problem


@attrs.frozen
class ToolPolicy:
    """What happens to each tool: ``rules`` maps names or patterns to a verdict; others get ``default``.

    A verdict may be a callable ``(call, arguments, context)`` (``PolicyRule``) that decides each call.
    """

    rules: Mapping[str, Verdict | PolicyRule] = attrs.field(factory=dict, converter=_rules)
    default: Verdict | PolicyRule = "allow"

    def __attrs_post_init__(self) -> None:
        for pattern, verdict in self.rules.items():
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"a policy key must be a non-empty tool name or pattern, got {pattern!r}")
            _rule(verdict, f"policy for {pattern!r}")
        _rule(self.default, "default")

    def verdict(self, tool_name: str) -> Verdict | PolicyRule:
        """The rule for ``tool_name``: its exact rule, else the first matching pattern, else the default."""
        if tool_name in self.rules:
            return self.rules[tool_name]
        for pattern, verdict in self.rules.items():
            if fnmatch.fnmatchcase(tool_name, pattern):
                return verdict
        return self.default

    async def decide(self, call: ToolCall, context: AgentRunContext) -> Verdict:
        """The verdict for ``call``: its rule, or what a callable rule returns for it (PolicyFailed if it cannot)."""
        rule = self.verdict(call.name)
        if not callable(rule):
            return rule
        try:
            decided = rule(call, dict(call.arguments), context)
            if inspect.isawaitable(decided):
                decided = await decided
        except Exception as error:
            raise PolicyFailed(call.name, f"{type(error).__name__}: {error}") from error
        for verdict in VERDICTS:
            if decided == verdict:
                return verdict
        raise PolicyFailed(call.name, f"it returned {decided!r}, not one of {', '.join(VERDICTS)}")


@attrs.frozen(kw_only=True, repr=False)
class ToolApprovalEvent(AgentEvent):
    """A tool call waits for the user's approval; answer with ``response_event``.

    The tool's name is the attribute ``tool_name`` (``name`` is the event's own
    name) and the payload key ``name``.
    """

    kind: ClassVar[str] = APPROVAL_EVENT
    tool_call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    response_event: str = APPROVAL_RESPONSE

    @property
    def payload(self) -> Mapping[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.tool_name,
            "arguments": dict(self.arguments),
            "response_event": self.response_event,
        }


def _settle_after_restart(asked: Mapping[str, Any], answer: Mapping[str, Any]) -> SettledAnswer:
    name = str(asked.get("name", "the tool"))
    if answer["approved"]:
        return SettledAnswer(f"not run: {name} was approved after its process stopped; call it again", "failed")
    reason = answer.get("reason")
    why = f": {reason.strip()}" if isinstance(reason, str) and reason.strip() else ""
    return SettledAnswer(f"rejected: the user declined {name}{why}", "failed")


def _check_answer(payload: Mapping[str, Any]) -> str | None:
    """The checks every answer passes, live or after a restart."""
    if not isinstance(payload.get("approved"), bool):
        return "'approved' must be a bool"
    if payload.get("remember") not in (None, "session"):
        return "'remember' must be 'session' or null"
    if not isinstance(payload.get("reason"), str | None):
        return "'reason' must be a string or null"
    approver = payload.get("answered_by")
    if approver is not None:
        if not isinstance(approver, str) or not approver.strip():
            return "'answered_by' must be a non-blank string or null"
        if len(approver) > APPROVER_LIMIT:
            return f"'answered_by' has {len(approver)} characters, more than {APPROVER_LIMIT}"
    edited = payload.get("arguments")
    if edited is not None:
        if not isinstance(edited, Mapping):
            return f"'arguments' must be an object or null, got {type(edited).__name__}"
        if payload["approved"] is not True:
            return "'arguments' can only come with an approval"
        try:
            json_data(edited, "arguments")
        except NotJSON as bad:
            return f"'arguments' must be JSON data: {bad}"
    return None


def _answer_check(tool_name: str, parameters: Mapping[str, Any] | None) -> Validator:
    """The check of a live answer: ``_check_answer``, and edited arguments valid for the tool's schema."""

    def check(payload: Mapping[str, Any]) -> str | None:
        problem = _check_answer(payload)
        if problem is not None or payload.get("arguments") is None:
            return problem
        if parameters is None:
            return f"'arguments' cannot be edited: {tool_name} has no schema in this request"
        try:
            validate_arguments(parameters, payload["arguments"])
        except ToolArgumentsError as bad:
            return f"the edited arguments do not fit {tool_name}: {bad}"
        return None

    return check


TOOL_APPROVAL_WAIT = WaitRule(APPROVAL_RESPONSE, lambda asked: _check_answer, _settle_after_restart)
"""An answer to an approval whose process stopped: checked like a live one; the call did not run, so
its result is failed either way (an approval tells the model to call the tool again)."""


@attrs.frozen(kw_only=True, repr=False)
class ToolApprovalAnsweredEvent(AgentEvent):
    """A waiting call was answered: by whom (``answered_by``), when (``answered_at``, seconds since the epoch),
    and, when approved, the ``arguments`` it runs with (``edited`` when they are not the model's)."""

    kind: ClassVar[str] = APPROVAL_ANSWERED
    tool_call_id: str
    tool_name: str
    approved: bool
    answered_by: str
    answered_at: float
    arguments: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    edited: bool = False
    reason: str | None = None

    @property
    def payload(self) -> Mapping[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.tool_name,
            "approved": self.approved,
            "answered_by": self.answered_by,
            "answered_at": self.answered_at,
            "arguments": dict(self.arguments),
            "edited": self.edited,
            "reason": self.reason,
        }


class _Decision:
    """What the guards of one call's machine read."""

    def __init__(self, verdict: Verdict, remembered: bool) -> None:
        self.verdict = verdict
        self.remembered = remembered
        self.edited = False


_GUARDS = {
    "allowed_by_policy": lambda event: event.model.host.remembered or event.model.host.verdict == "allow",
    "denied_by_policy": lambda event: event.model.host.verdict == "deny",
    "arguments_edited": lambda event: event.model.host.edited,
}


def _reason(answer: Mapping[str, Any]) -> str | None:
    reason = answer.get("reason")
    return reason.strip() if isinstance(reason, str) and reason.strip() else None


class ToolApprovalExtension(AgentExtension):
    """Allow, deny or ask the user before each tool call, by tool name or pattern."""

    priority = 50  # after other before_tool checks (Plan Mode refuses first, so nobody is asked in vain)

    def __init__(
        self,
        policy: ToolPolicy | Mapping[str, str | PolicyRule] | PolicyRule | None = None,
        *,
        default: str | PolicyRule = "allow",
        expires_after: float | None = None,
    ) -> None:
        if not (policy is None or callable(policy) or isinstance(policy, (ToolPolicy, Mapping))):
            raise TypeError(
                "ToolApprovalExtension.policy must be a ToolPolicy, a mapping, a callable or None, "
                f"got {type(policy).__name__}"
            )
        if not (isinstance(default, str) or callable(default)):
            raise TypeError(f"ToolApprovalExtension.default must be a str or a callable, got {type(default).__name__}")
        if isinstance(policy, ToolPolicy):
            self.policy = policy
        elif isinstance(policy, Mapping):
            rules = {key: _rule(value, f"policy for {key!r}") for key, value in policy.items()}
            self.policy = ToolPolicy(rules, _rule(default, "ToolApprovalExtension.default"))
        elif policy is not None:
            self.policy = ToolPolicy({}, policy)  # one callable decides every call
        else:
            self.policy = ToolPolicy({}, _rule(default, "ToolApprovalExtension.default"))
        number(above=0, optional=True).check("ToolApprovalExtension.expires_after", expires_after)
        self.expires_after = expires_after
        self.router = ResponseRouter()
        self._lock = threading.Lock()
        self._remembered: dict[str, set[str]] = {}

    def fingerprint_settings(self) -> dict[str, Any]:
        """The policy (rules and default; a callable by its qualified name) and ``expires_after``."""
        return {
            "rules": dict(self.policy.rules),
            "default": self.policy.default,
            "expires_after": self.expires_after,
        }

    def remembered(self, session_id: str) -> frozenset[str]:
        """Tools the user allowed for the rest of ``session_id``."""
        with self._lock:
            return frozenset(self._remembered.get(session_id, ()))

    def forget(self, session_id: str) -> None:
        """Drop what the user allowed for ``session_id``."""
        with self._lock:
            self._remembered.pop(session_id, None)

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        """Decide the call; ask the user and wait when the policy says ``ask``, recording the answer."""
        remembered = call.name in self.remembered(context.session_id)
        decision = _Decision("allow" if remembered else await self.policy.decide(call, context), remembered)
        machine = BoundMachine(TOOL_APPROVAL, _GUARDS, host=decision)
        try:
            await self._step(context, machine, "decide")
            state = machine.state()
            if state == "denied":
                raise ToolRejected(f"{call.name} is denied by the tool policy")
            if state == "allowed":
                return
            definition = context.tools.get(call.name)
            try:
                answer = await self.router.wait(
                    context,
                    call.id,
                    response_event=APPROVAL_RESPONSE,
                    validate=_answer_check(call.name, definition.parameters if definition is not None else None),
                    announce=ToolApprovalEvent(tool_call_id=call.id, tool_name=call.name, arguments=call.arguments),
                    expires_after=self.expires_after,
                    expired_outcome="declined",
                )
            except ResponseExpired as expired:
                await self._step(context, machine, "expire")
                raise ToolRejected(
                    f"the approval of {call.name} expired: nobody answered within {expired.seconds:g} s, "
                    "so the call was declined and did not run"
                ) from None
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._step(context, machine, "withdraw")
                raise
            await self._answered(context, machine, decision, call, definition.parameters if definition else {}, answer)
        finally:
            machine.unbind()

    async def _answered(
        self,
        context: AgentRunContext,
        machine: BoundMachine,
        decision: _Decision,
        call: ToolCall,
        parameters: Mapping[str, Any],
        answer: Mapping[str, Any],
    ) -> None:
        """Record a validated answer (event and the call's ToolMessage); a decline raises ToolRejected."""
        approved: bool = answer["approved"]
        reason = _reason(answer)
        record: dict[str, Any] = {
            "approved": approved,
            "answered_by": answer.get("answered_by") or LOCAL_APPROVER,
            "answered_at": time.time(),
            "reason": reason,
        }
        arguments: dict[str, Any] = {}
        if approved:
            edited = answer.get("arguments")
            decision.edited = edited is not None and dict(edited) != call.arguments
            arguments = validate_arguments(parameters, edited) if decision.edited else dict(call.arguments)
            record.update(arguments=json_data(arguments, "arguments"), edited=decision.edited)
            if answer.get("remember") == "session":
                with self._lock:
                    self._remembered.setdefault(context.session_id, set()).add(call.name)
        context.approvals[call.id] = record
        await self._step(context, machine, "approve" if approved else "decline")
        await context.emit(
            ToolApprovalAnsweredEvent(
                tool_call_id=call.id,
                tool_name=call.name,
                approved=approved,
                answered_by=record["answered_by"],
                answered_at=record["answered_at"],
                arguments=arguments,
                edited=decision.edited,
                reason=reason,
            )
        )
        if not approved:
            why = f": {reason}" if reason else ""
            raise ToolRejected(f"the user declined {call.name}{why}")

    async def _step(self, context: AgentRunContext, machine: BoundMachine, trigger: str) -> None:
        step, _ = machine.fire(trigger)
        await context.emit(
            TransitionEvent(
                machine=step.machine, region=step.region, source=step.source, trigger=step.trigger, dest=step.dest
            )
        )

    async def on_error(self, context: AgentRunContext, error: BaseException) -> None:
        """Drop the failed request's waiting calls."""
        self.router.withdraw_request(context.session_id, context.request_id)

    async def on_event(self, context: AgentRunContext, event: AgentEvent) -> None:
        """Drop a cancelled request's waiting calls."""
        if isinstance(event, RunCancelledEvent):
            self.router.withdraw_request(context.session_id, context.request_id)

    def consider(self, config: AgentRunConfig, event: ExternalEvent) -> Answer:
        """Take a ``tool_approval_response`` that answers a waiting call of this session, or say why not."""
        return event.name == APPROVAL_RESPONSE and self.router.consider(config, event)
