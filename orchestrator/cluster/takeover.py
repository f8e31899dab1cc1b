"""Taking over at once the runs that carriers of this machine held when their processes died (SQLite only).

A run store on SQLite is shared by the processes of one machine only, so a carrier that starts on it can tell
which holders of leases are gone: a carrier's default name (``host:pid:random``, see ``worker.default_name``)
names this host and a process id that no running process has (or a process killed and not yet reaped), or that
a process started at another time has now (the random part begins with the carrier's start time, ``t<ticks>-``,
where the system tells it: a container restarted under the same host name gives its new process the old one's
id). Their leases are ended at once (``SQLRunStore.expire_leases``) and their runs resumed without waiting for
the leases to run out. A holder named otherwise (``--name``), of another host, or whose process runs, keeps its
leases.
"""

from __future__ import annotations

import os
import socket

from orchestrator.store.runs import RunStore
from orchestrator.store.runs_sql import SQLRunStore


def gone_from_this_machine(owner: str) -> bool:
    """Whether ``owner`` names a carrier of this machine whose process has ended: a worker's default name
    (``host:pid:random``) with this host's name and the id of no running process (or of a zombie), or of a
    process started at another time than the one its random part records."""
    host, _, rest = owner.partition(":")
    pid, _, random_part = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # a process of another user: alive, unless it started at another time (below)
        pass
    recorded = _recorded_start(random_part)
    if recorded is not None:
        started = process_started(int(pid))
        if started is not None and started != recorded:
            return True  # the id belongs to another process now
    return _state(int(pid)) in ("Z", "X")


def process_started(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after the system's boot (Linux; None elsewhere or when it
    cannot be read)."""
    fields = _stat_fields(pid)
    if len(fields) <= _STARTTIME or not fields[_STARTTIME].isdigit():
        return None
    return int(fields[_STARTTIME])


_STARTTIME = 19
"""Where the start time is among the fields of ``/proc/PID/stat`` that follow the command (the state is first)."""


def _recorded_start(random_part: str) -> int | None:
    """The start time a default name's random part begins with (``t<ticks>-``), or None."""
    if not random_part.startswith("t"):
        return None
    ticks, dash, _ = random_part[1:].partition("-")
    return int(ticks) if dash and ticks.isdigit() else None


def _state(pid: int) -> str | None:
    """Process ``pid``'s state letter (``Z``: ended, waiting to be reaped); None when it cannot be read."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command (Linux; none elsewhere or when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return []
    # "pid (command) state ...": the command may hold spaces and parentheses, the state follows the last ")".
    return text.rpartition(")")[2].split()


def take_over_local(store: RunStore) -> list[str]:
    """On SQLite (one machine), end the leases of the carriers of this machine that are gone (a process killed while
    it carried runs): their runs are resumed at once, not once the leases run out. The request ids taken over;
    none on another store."""
    if not isinstance(store, SQLRunStore) or store.dialect.name != "sqlite":
        return []
    owners = {record.lease_owner for record in store.runs(active=True) if record.status == "running"}
    return store.expire_leases(sorted(owner for owner in owners if owner and gone_from_this_machine(owner)))
