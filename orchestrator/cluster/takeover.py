"""Taking over at once the runs that carriers of this machine held when their processes died (SQLite only).

A run store on SQLite is shared by the processes of one machine only, so a carrier that starts on it can tell
which holders of leases are gone: a carrier's default name (``host:pid:random``, see ``worker.default_name``)
names this host and a process id that no running process has (or a process killed and not yet reaped). Their
leases are ended at once (``SQLRunStore.expire_leases``) and their runs resumed without waiting for the leases
to run out. A holder named otherwise (``--name``), of another host, or whose process runs, keeps its leases.
"""

from __future__ import annotations

import os
import socket

from orchestrator.store.runs import RunStore
from orchestrator.store.runs_sql import SQLRunStore


def gone_from_this_machine(owner: str) -> bool:
    """Whether ``owner`` names a carrier of this machine whose process has ended: a worker's default name
    (``host:pid:random``) with this host's name and the id of no running process (or of a zombie)."""
    host, _, rest = owner.partition(":")
    pid, _, _ = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # a process of another user: alive
        return False
    return _zombie(int(pid))


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` has ended and only waits for its parent to reap it (Linux; False elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return False
    # "pid (command) state ...": the command may hold spaces and parentheses, the state follows the last ")".
    state = text.rpartition(")")[2].split()
    return bool(state) and state[0] in ("Z", "X")


def take_over_local(store: RunStore) -> list[str]:
    """On SQLite (one machine), end the leases of the carriers of this machine that are gone (a process killed while
    it carried runs): their runs are resumed at once, not once the leases run out. The request ids taken over;
    none on another store."""
    if not isinstance(store, SQLRunStore) or store.dialect.name != "sqlite":
        return []
    owners = {record.lease_owner for record in store.runs(active=True) if record.status == "running"}
    return store.expire_leases(sorted(owner for owner in owners if owner and gone_from_this_machine(owner)))
