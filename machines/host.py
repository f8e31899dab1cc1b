"""The agent host machine: the lifecycle of an AgentHost's trio thread.

Calls from other threads are taken only while the host serves; closing
cancels what runs (requests settle their open calls) before the loop ends.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

AGENT_HOST = MachineDefinition(
    name="agent_host",
    doc="An agent's trio loop in a thread of its own, serving asyncio and blocking callers.",
    regions=(
        Region(
            name="lifecycle",
            attribute="state",
            initial="starting",
            states=(
                State("starting", "the thread runs trio and builds the client"),
                State("serving", "calls cross into the thread and run there as tasks"),
                State("failed", "the client could not be built; the constructor raised why", final=True),
                State("closing", "no call is taken; running calls and requests are being cancelled"),
                State("closed", "the loop has ended; every call is refused", final=True),
            ),
            transitions=(
                Transition("ready", "starting", "serving", doc="the client exists"),
                Transition("fail", "starting", "failed", doc="the factory raised"),
                Transition("close", "serving", "closing", doc="close() or the context exited"),
                Transition("finish", "closing", "closed", doc="the loop returned"),
            ),
        ),
    ),
)
