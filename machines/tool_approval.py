"""The tool approval machine: may one tool call run?

The policy decides first (allowed, denied, or ask the user); a call that asks
waits for the user's answer, or is withdrawn when its request ends first.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

TOOL_APPROVAL = MachineDefinition(
    name="tool_approval",
    doc="One tool call checked against the tool policy, the user asked when the policy says so.",
    regions=(
        Region(
            name="decision",
            attribute="state",
            initial="deciding",
            states=(
                State("deciding", "the call is about to run; the policy is consulted"),
                State("asking", "the call is paused; the user was asked"),
                State("allowed", "the policy (or an earlier 'remember') allows the tool", final=True),
                State("denied", "the policy denies the tool: a failed tool result", final=True),
                State("approved", "the user approved the call", final=True),
                State("declined", "the user declined the call: a failed tool result", final=True),
                State("withdrawn", "the request ended before the user answered", final=True),
                State("expired", "nobody answered before the approval expired: declined, the call not run", final=True),
            ),
            transitions=(
                Transition("decide", "deciding", "allowed", conditions="allowed_by_policy", doc="allow, or remembered"),
                Transition("decide", "deciding", "denied", conditions="denied_by_policy", doc="deny"),
                Transition("decide", "deciding", "asking", doc="ask: the user decides"),
                Transition("approve", "asking", "approved", doc="the user approved"),
                Transition("decline", "asking", "declined", doc="the user declined"),
                Transition("withdraw", "asking", "withdrawn", doc="the request ended while waiting"),
                Transition("expire", "asking", "expired", doc="expires_after passed without an answer"),
            ),
        ),
    ),
)
