"""Runs carried by a pool of workers over a shared run store (PostgreSQL, or SQLite on one machine).

``Worker`` claims runnable runs, resumes each from its checkpoint through the
request machine, and writes what the run does (messages, events, checkpoints)
fenced by its lease. ``StoreBackend`` is what a web node serves: it only talks
to the store. ``open_durable_agent`` puts both in one process: the application's
own runs, kept in a run store and carried by the process that opened it. See
docs/durability/index.md and docs/durability/scaling.md.
"""

from __future__ import annotations

from orchestrator.cluster.one_process import DurableAgent, open_durable_agent
from orchestrator.cluster.worker import Worker

__all__ = ["DurableAgent", "Worker", "open_durable_agent"]
