"""The run lease machine: a run kept in a run store, carried by whichever worker holds its lease.

The store's ``status`` column is this machine's state: every status change a
store makes (a claim, a checkpoint, parking, an answer waking a parked run, the
end) is an edge taken here first, so a change the definition does not allow
is refused before anything is written.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

RUN_LEASE = MachineDefinition(
    name="run_lease",
    doc="One run in a run store: queued, leased by a worker, parked while it waits, ended.",
    regions=(
        Region(
            name="status",
            attribute="status",
            initial="queued",
            states=(
                State("queued", "runnable; no worker holds it"),
                State("running", "a worker holds its lease and carries it"),
                State("parked", "waits for an answer; holds no worker"),
                State("completed", "the request succeeded", final=True),
                State("failed", "an error ended the request", final=True),
                State("cancelled", "the request was cancelled", final=True),
            ),
            transitions=(
                Transition("claim", "queued", "running", doc="a worker leases it (FOR UPDATE SKIP LOCKED)"),
                Transition(
                    "take_over",
                    "running",
                    "running",
                    conditions="lease_expired",
                    doc="its worker stopped renewing: another worker leases it with a new token",
                ),
                Transition("checkpoint", "running", "running", conditions="lease_held", doc="a fenced write"),
                Transition("park", "running", "parked", conditions="lease_held"),
                Transition("wake", "parked", "queued", doc="an answer arrived in its inbox"),
                Transition(
                    "expire",
                    "parked",
                    "running",
                    conditions="wake_due",
                    doc="its wake_at (a wait's expiry) passed: a worker leases it, and the wait takes its default",
                ),
                Transition("release", "running", "queued", conditions="lease_held", doc="its worker gives it back"),
                Transition("complete", "running", "completed", conditions="lease_held"),
                Transition("fail", "running", "failed", conditions="lease_held"),
                Transition("cancel", ("queued", "parked"), "cancelled", doc="cancelled while no worker holds it"),
                Transition("cancel", "running", "cancelled", conditions="lease_held", doc="its worker ended it"),
            ),
        ),
    ),
)
