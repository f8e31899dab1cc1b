"""The approval machine: one paused tool call waiting for its external response.

A response is taken once, and only while the call waits and the response is
well formed; everything else (stray, duplicate, late, malformed) is refused. A
wait with an expiry that nobody answers in time expires, taking its default.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

APPROVAL = MachineDefinition(
    name="approval",
    doc="A pending call keyed by session and tool_call_id, answered at most once.",
    regions=(
        Region(
            name="response",
            attribute="state",
            initial="waiting",
            states=(
                State("waiting", "the tool call is paused; the UI was asked"),
                State("answered", "a valid matching response arrived", final=True),
                State("withdrawn", "the request ended before a response", final=True),
                State("expired", "nobody answered before the wait's expiry: it took its default", final=True),
            ),
            transitions=(
                Transition("answer", "waiting", "answered", conditions="response_valid"),
                Transition("withdraw", "waiting", "withdrawn"),
                Transition("expire", "waiting", "expired", doc="expires_after passed; a later answer is refused"),
            ),
        ),
    ),
)
