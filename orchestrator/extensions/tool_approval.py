"""ToolApprovalExtension: a tool policy of allow, ask or deny, with the user deciding on ask.

Each tool call is a ``machines.tool_approval.TOOL_APPROVAL`` machine, decided in
``before_tool``: ``allow`` runs the call, ``deny`` makes it a failed tool
result, ``ask`` pauses it in awaiting_approval (through a ResponseRouter) and
streams a ``tool_approval`` event (``tool_call_id``, ``name``, ``arguments``,
``response_event``). The application answers with ``tool_approval_response``:
``{"tool_call_id": ..., "approved": bool, "remember": "session" | None,
"reason": str | None}``. ``remember="session"`` on an approval allows that tool
for the rest of the session; a decline is a failed tool result that carries the
user's reason, which the model reads. With ``expires_after`` (seconds), an
approval nobody answers in time expires: the call is declined and does not run,
a ``wait_expired`` event says so, and a later answer is refused.

Policy keys are tool names or ``fnmatch`` patterns (``write_*``): an exact name
wins over patterns, then the first matching pattern in the order given.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs
import trio

from machines.build import BoundMachine
from machines.tool_approval import TOOL_APPROVAL
from orchestrator.checks import number
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Verdict as Answer
from orchestrator.errors import ToolRejected
from orchestrator.events import AgentEvent, RunCancelledEvent, TransitionEvent
from orchestrator.extensions.base import AgentExtension
from orchestrator.messages import ToolCall
from orchestrator.runtime.pending import ResponseExpired, ResponseRouter, SettledAnswer, WaitRule

if TYPE_CHECKING:
    from orchestrator.runtime.context import AgentRunContext

Verdict = Literal["allow", "ask", "deny"]
VERDICTS: tuple[Verdict, ...] = ("allow", "ask", "deny")

APPROVAL_EVENT = "tool_approval"
APPROVAL_RESPONSE = "tool_approval_response"


def _verdict(value: object, where: str) -> Verdict:
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    raise ValueError(f"{where}: {value!r} is not one of {', '.join(VERDICTS)}")


def _rules(rules: Mapping[str, Verdict]) -> dict[str, Verdict]:
    return dict(rules)


@attrs.frozen
class ToolPolicy:
    """What happens to each tool: ``rules`` maps names or patterns to a verdict; others get ``default``."""

    rules: Mapping[str, Verdict] = attrs.field(factory=dict, converter=_rules)
    default: Verdict = "allow"

    def __attrs_post_init__(self) -> None:
        for pattern, verdict in self.rules.items():
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"a policy key must be a non-empty tool name or pattern, got {pattern!r}")
            _verdict(verdict, f"policy for {pattern!r}")
        _verdict(self.default, "default")

    def verdict(self, tool_name: str) -> Verdict:
        """The verdict for ``tool_name``: its exact rule, else the first matching pattern, else the default."""
        if tool_name in self.rules:
            return self.rules[tool_name]
        for pattern, verdict in self.rules.items():
            if fnmatch.fnmatchcase(tool_name, pattern):
                return verdict
        return self.default


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
    if not isinstance(payload.get("approved"), bool):
        return "'approved' must be a bool"
    if payload.get("remember") not in (None, "session"):
        return "'remember' must be 'session' or null"
    if not isinstance(payload.get("reason"), str | None):
        return "'reason' must be a string or null"
    return None


TOOL_APPROVAL_WAIT = WaitRule(APPROVAL_RESPONSE, lambda asked: _check_answer, _settle_after_restart)
"""An answer to an approval whose process stopped: checked like a live one; the call did not run, so
its result is failed either way (an approval tells the model to call the tool again)."""


class _Decision:
    """What the guards of one call's machine read."""

    def __init__(self, verdict: Verdict, remembered: bool) -> None:
        self.verdict = verdict
        self.remembered = remembered


_GUARDS = {
    "allowed_by_policy": lambda event: event.model.host.remembered or event.model.host.verdict == "allow",
    "denied_by_policy": lambda event: event.model.host.verdict == "deny",
}


class ToolApprovalExtension(AgentExtension):
    """Allow, deny or ask the user before each tool call, by tool name or pattern."""

    priority = 50  # after other before_tool checks (Plan Mode refuses first, so nobody is asked in vain)

    def __init__(
        self,
        policy: ToolPolicy | Mapping[str, str] | None = None,
        *,
        default: str = "allow",
        expires_after: float | None = None,
    ) -> None:
        if not (policy is None or isinstance(policy, (ToolPolicy, Mapping))):
            raise TypeError(
                f"ToolApprovalExtension.policy must be a ToolPolicy, a mapping or None, got {type(policy).__name__}"
            )
        if not isinstance(default, str):
            raise TypeError(f"ToolApprovalExtension.default must be a str, got {type(default).__name__}")
        if isinstance(policy, ToolPolicy):
            self.policy = policy
        else:
            rules = {key: _verdict(value, f"policy for {key!r}") for key, value in (policy or {}).items()}
            self.policy = ToolPolicy(rules, _verdict(default, "ToolApprovalExtension.default"))
        number(above=0, optional=True).check("ToolApprovalExtension.expires_after", expires_after)
        self.expires_after = expires_after
        self.router = ResponseRouter()
        self._lock = threading.Lock()
        self._remembered: dict[str, set[str]] = {}

    def remembered(self, session_id: str) -> frozenset[str]:
        """Tools the user allowed for the rest of ``session_id``."""
        with self._lock:
            return frozenset(self._remembered.get(session_id, ()))

    def forget(self, session_id: str) -> None:
        """Drop what the user allowed for ``session_id``."""
        with self._lock:
            self._remembered.pop(session_id, None)

    async def before_tool(self, context: AgentRunContext, call: ToolCall) -> None:
        """Decide the call; ask the user and wait when the policy says ``ask``."""
        decision = _Decision(self.policy.verdict(call.name), call.name in self.remembered(context.session_id))
        machine = BoundMachine(TOOL_APPROVAL, _GUARDS, host=decision)
        try:
            await self._step(context, machine, "decide")
            state = machine.state()
            if state == "denied":
                raise ToolRejected(f"{call.name} is denied by the tool policy")
            if state == "allowed":
                return
            try:
                answer = await self.router.wait(
                    context,
                    call.id,
                    response_event=APPROVAL_RESPONSE,
                    validate=_check_answer,
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
            if answer["approved"]:
                if answer.get("remember") == "session":
                    with self._lock:
                        self._remembered.setdefault(context.session_id, set()).add(call.name)
                await self._step(context, machine, "approve")
                return
            await self._step(context, machine, "decline")
            reason = answer.get("reason")
            why = f": {reason.strip()}" if isinstance(reason, str) and reason.strip() else ""
            raise ToolRejected(f"the user declined {call.name}{why}")
        finally:
            machine.unbind()

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
