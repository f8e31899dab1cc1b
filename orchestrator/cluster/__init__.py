"""Runs carried by a pool of workers over a shared run store (PostgreSQL, or SQLite on one machine).

``Worker`` claims runnable runs, resumes each from its checkpoint through the
request machine, and writes what the run does (messages, events, checkpoints)
fenced by its lease. ``StoreBackend`` is what a web node serves: it only talks
to the store. See docs/durability/scaling.md.
"""

from __future__ import annotations

from orchestrator.cluster.worker import Worker

__all__ = ["Worker"]
