"""The AG-UI run machine: one ``POST /ag-ui`` stream over a request of the session.

A run either starts a request, resumes one by answering its interrupts, or
steers the session's active request; bad input ends it as refused before
anything changes. A streaming run ends when its request ends, when every call
still running waits for an answer (an interrupt), or when its client goes
away (aborted: the request is cancelled, since AG-UI has no other cancel).
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

AGUI_RUN = MachineDefinition(
    name="agui_run",
    doc="One AG-UI run (an SSE answer to POST /ag-ui) over a request of the thread's session.",
    regions=(
        Region(
            name="run",
            attribute="state",
            initial="received",
            states=(
                State("received", "RunAgentInput read; RUN_STARTED sent"),
                State("streaming", "the request's events are mapped to AG-UI events as they come"),
                State(
                    "interrupted", "every call still running waits for an answer: RUN_FINISHED interrupt", final=True
                ),
                State("finished", "the request completed, or the steering was delivered: RUN_FINISHED", final=True),
                State("failed", "the request failed or was cancelled: RUN_ERROR with its type as code", final=True),
                State(
                    "refused",
                    "bad input (an unknown interrupt, a wrong answer, a busy session): RUN_ERROR, nothing changed",
                    final=True,
                ),
                State("aborted", "the client went away: the request is cancelled", final=True),
            ),
            transitions=(
                Transition("start", "received", "streaming", doc="a new request of the session started"),
                Transition("resume", "received", "streaming", doc="every resume[] answer was taken"),
                Transition("steer", "received", "finished", doc="parentRunId names the active request: steered"),
                Transition("refuse", "received", "refused"),
                Transition("interrupt", "streaming", "interrupted"),
                Transition("finish", "streaming", "finished"),
                Transition("fail", "streaming", "failed"),
                Transition("abort", "streaming", "aborted"),
                Transition("abort", "received", "aborted"),
            ),
        ),
    ),
)
