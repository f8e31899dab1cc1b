"""The subagent machine: one tool call that runs another agent's request.

The depth bound is checked first; a call within it starts a child request in
the calling tool's own task and ends as the child ends: completed (its answer
is the call's result), failed (its error is the call's failed result) or
cancelled (the parent request was cancelled, so the child was too).
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

SUBAGENT = MachineDefinition(
    name="subagent",
    doc="One call of an agent used as a tool: a child request run for the parent's tool call.",
    regions=(
        Region(
            name="call",
            attribute="state",
            initial="checking",
            states=(
                State("checking", "the call is about to start a child request; the depth bound is checked"),
                State("running", "the child request runs in the calling tool's task"),
                State("refused", "the depth bound was reached: a failed tool result, no child request", final=True),
                State("completed", "the child answered: its answer is the call's result", final=True),
                State("failed", "the child request failed: the call's failed result says why", final=True),
                State("cancelled", "the parent request was cancelled, and the child with it", final=True),
            ),
            transitions=(
                Transition("start", "checking", "running", conditions="within_depth", doc="depth allows a child"),
                Transition("start", "checking", "refused", doc="one level too deep"),
                Transition("complete", "running", "completed", doc="the child answered"),
                Transition("fail", "running", "failed", doc="the child failed"),
                Transition("cancel", "running", "cancelled", doc="the parent was cancelled"),
            ),
        ),
    ),
)
