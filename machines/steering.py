"""The steering inbox machine: one request's urgent user input.

An inbox opens when its request starts, holds accepted messages until the
runtime takes them (one at a time), and closes exactly once: when the request
is about to complete with nothing left to answer, or on any other exit. Only an
open or holding inbox accepts a message; a new or closed one refuses it.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

STEERING_INBOX = MachineDefinition(
    name="steering_inbox",
    doc="Per-request steering inbox: every accepted message is answered, or refused once closed.",
    regions=(
        Region(
            name="inbox",
            attribute="state",
            initial="new",
            states=(
                State("new", "created with its request; routing is not live yet"),
                State("open", "routing is live and nothing waits"),
                State("holding", "accepted steering waits to be taken"),
                State("closed", "routing removed; nothing more is accepted", final=True),
            ),
            transitions=(
                Transition("open", "new", "open", doc="open(context): the request started"),
                Transition("hold", ("open", "holding"), "holding", doc="accept() or on_event() queued a message"),
                Transition("take", "holding", "holding", conditions="has_messages", doc="one taken, more wait"),
                Transition("take", "holding", "open", unless="has_messages", doc="the last waiting one was taken"),
                Transition(
                    "complete",
                    "open",
                    "closed",
                    doc="select_next(): nothing waits and the runtime reserved no other input",
                ),
                Transition(
                    "close",
                    ("new", "open", "holding"),
                    "closed",
                    doc="close(context): the request ended; waiting messages are dropped",
                ),
            ),
        ),
    ),
)
