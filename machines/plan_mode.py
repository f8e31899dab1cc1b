"""The Plan Mode lifecycle of one session.

The model proposes entry and exit through tools; the application approves or
rejects each proposal. Only an approved proposal changes the mode, and a
proposal withdrawn because its request ended returns where it came from.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

PLAN_MODE = MachineDefinition(
    name="plan_mode",
    doc="One session's Plan Mode: proposals wait for the user before the mode changes.",
    regions=(
        Region(
            name="lifecycle",
            attribute="state",
            initial="normal",
            states=(
                State("normal", "every tool may run; the model may propose Plan Mode"),
                State("entry_awaiting_approval", "enter_plan_mode waits for the user's answer"),
                State("plan_active", "only exit_plan_mode, filesystem tools and bash may run"),
                State("exit_awaiting_approval", "exit_plan_mode waits for the user's answer"),
            ),
            transitions=(
                Transition("propose_entry", "normal", "entry_awaiting_approval", doc="enter_plan_mode was called"),
                Transition("approve", "entry_awaiting_approval", "plan_active", doc="entry approved"),
                Transition("reject", "entry_awaiting_approval", "normal", doc="entry rejected"),
                Transition("withdraw", "entry_awaiting_approval", "normal", doc="the request ended while waiting"),
                Transition("expire", "entry_awaiting_approval", "normal", doc="nobody answered in time: declined"),
                Transition("propose_exit", "plan_active", "exit_awaiting_approval", doc="exit_plan_mode was called"),
                Transition("approve", "exit_awaiting_approval", "normal", doc="plan approved, planning ends"),
                Transition("reject", "exit_awaiting_approval", "plan_active", doc="plan rejected, planning goes on"),
                Transition("withdraw", "exit_awaiting_approval", "plan_active", doc="the request ended while waiting"),
                Transition("expire", "exit_awaiting_approval", "plan_active", doc="nobody answered in time: declined"),
            ),
        ),
    ),
)
