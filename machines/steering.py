"""The steering inbox machine: one request's urgent user input.

An inbox opens when its request starts, holds accepted messages until the
runtime takes them, and closes exactly once: when the request completes with
nothing left to answer, or on any other exit. A closed inbox accepts nothing.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

STEERING_INBOX = MachineDefinition(
    name="steering_inbox",
    doc="Per-request steering inbox: accepted messages are answered, or refused once closed.",
    regions=(
        Region(
            name="inbox",
            attribute="state",
            initial="new",
            states=(
                State("new", "created with its request"),
                State("open", "routing is live and nothing waits"),
                State("holding", "accepted steering waits to be taken"),
                State("closed", "routing removed; nothing more is accepted", final=True),
            ),
            transitions=(
                Transition("open", "new", "open"),
                Transition("hold", ("open", "holding"), "holding"),
                Transition("take", "holding", "holding", conditions="has_more"),
                Transition("take", "holding", "open", unless="has_more"),
                Transition("close", ("new", "open"), "closed"),
                Transition("close", "holding", "closed", doc="the request ended before taking them"),
            ),
        ),
    ),
)
