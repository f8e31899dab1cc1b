"""``open_durable_agent``: one process that keeps its runs in a run store and carries them itself.

The application opens a run store (an SQLite file, or PostgreSQL) with its agent and gets a
``DurableAgent``: it starts runs, posts answers, steering and cancels, follows events and reads
history through the store, as a web node does (``StoreBackend``), while a ``Worker`` in the
caller's nursery carries the runs, as ``python -m orchestrator worker`` does. Every step a run
takes is committed to the store first, so the process may stop at any moment: opening the store
again (in a new process) resumes its interrupted runs by themselves, and an answer posted while
no process held its run is applied as soon as one does. More processes of the same application
on the same store share the work; see docs/durability/index.md.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from orchestrator import wire
from orchestrator.agent import AgentClient
from orchestrator.cluster.durable import DurableExtension
from orchestrator.cluster.takeover import take_over_local
from orchestrator.cluster.webnode import StoreBackend
from orchestrator.cluster.worker import CAPACITY, GRACE_SECONDS, LEASE_SECONDS, RETENTION_SECONDS, Worker
from orchestrator.config import ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.events import AgentEvent
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.extensions.steering import STEERING_EVENT
from orchestrator.limits import UsageLimits
from orchestrator.messages import AssistantMessage, ContentPart, Message, UserMessage, user_message
from orchestrator.model import ModelSettings
from orchestrator.runtime.handle import UnknownRun
from orchestrator.runtime.pending import WaitRule
from orchestrator.server.backend import RunStart
from orchestrator.store.runs import RunRecord
from orchestrator.store.runs_sql import SQLRunStore, is_run_store_url, open_run_store, sqlite_run_store

__all__ = ["DurableAgent", "open_durable_agent", "run_store_for", "take_over_local"]

HAND_BACK_SECONDS = 5.0
"""How long a block left by an exception or a cancellation waits for its runs to unwind once handed back (a thread
tool cut off may take longer; nothing of its run is written any more, so the process may go)."""


def run_store_for(where: str | os.PathLike[str]) -> SQLRunStore:
    """The run store ``where`` names: a URL (``sqlite:///PATH``, ``postgresql://...``) or the path of an SQLite file."""
    if isinstance(where, str) and is_run_store_url(where):
        return open_run_store(where)
    if isinstance(where, str) and "://" in where:
        raise ValueError(f"not a run store URL: {where!r} (use postgresql://..., sqlite:///PATH or a file's path)")
    return sqlite_run_store(os.fspath(where))


class DurableAgent:
    """The client of a store whose runs this process carries (``open_durable_agent``).

    Every method goes through the store, so it works the same whether the run is carried here, by another
    process, or by nobody at the moment (the answer then waits in the run's durable inbox).
    """

    def __init__(self, backend: StoreBackend, worker: Worker) -> None:
        self.backend = backend
        self.worker = worker

    @property
    def store(self) -> SQLRunStore:
        """The run store this client reads and writes."""
        store = self.backend.store
        assert isinstance(store, SQLRunStore)
        return store

    async def start(
        self,
        session_id: str,
        user_input: str | UserMessage | Sequence[ContentPart],
        *,
        request_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        usage_limits: UsageLimits | None = None,
        deadline: float | None = None,
        model_settings: ModelSettings | None = None,
        output_type: object = None,
    ) -> str:
        """Queue a run of ``session_id`` and return its request id; SessionBusy when the session has a run that
        has not ended. With ``idempotency_key`` (and no ``request_id``) a retry returns the run the key started
        (``IdempotencyKeyReused`` for another input)."""
        return await self.backend.start(
            RunStart(
                session_id,
                user_message(user_input),
                request_id=request_id,
                idempotency_key=idempotency_key,
                metadata=metadata,
                usage_limits=usage_limits,
            deadline=deadline,
                model_settings=model_settings,
                output_type=output_type,
            )
        )

    async def deliver(
        self,
        session_id: str,
        event: ExternalEvent,
        *,
        request_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Post an answer (or steering) to the session's active run, checked against the question its checkpoint
        says is waiting; the ``Delivery`` is true once the item is in the run's durable inbox, else its ``reason``
        says why it was refused."""
        return await self.backend.deliver(session_id, request_id, event, idempotency_key)

    async def answer(
        self,
        session_id: str,
        name: str,
        payload: Mapping[str, Any],
        *,
        request_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """``deliver`` of the answer event ``name`` (``tool_approval_response``, ``ask_user_response`` ...)."""
        event = ExternalEvent(name, payload)
        return await self.deliver(session_id, event, request_id=request_id, idempotency_key=idempotency_key)

    async def steer(self, session_id: str, content: str, *, request_id: str | None = None) -> Delivery:
        """Post a steering message to the session's active run (taken at its next step)."""
        steering = ExternalEvent(STEERING_EVENT, {"content": content})
        return await self.deliver(session_id, steering, request_id=request_id)

    async def cancel(self, request_id: str) -> bool:
        """Cancel a run (ended here or by whichever process holds it); False when it had ended already.
        UnknownRun (or RunPruned) when the store has no such run."""
        _, changed = await self.backend.cancel(request_id)
        return changed

    async def events(self, request_id: str, *, after: int = 0) -> AsyncIterator[AgentEvent]:
        """The run's events after sequence number ``after``, followed until its terminal event (run_completed,
        run_failed or run_cancelled); UnknownRun when the store has no such run."""
        batches = await self.backend.events(request_id, after)
        async for batch in batches:
            for body in batch:
                yield wire.decode_event(body)

    async def result(self, request_id: str) -> AssistantMessage | None:
        """The final answer of a completed run; None while it has none (it runs, or it failed or was cancelled)."""
        return await self.backend.result(request_id)

    async def run(self, request_id: str) -> RunRecord:
        """The run as the store has it (its ``status``: queued, running, parked, completed, failed, cancelled)."""
        record: RunRecord | None = await trio.to_thread.run_sync(self.store.run, request_id)
        if record is None:
            await self.backend.run(request_id)  # UnknownRun, or RunPruned
            raise UnknownRun(request_id)
        return record

    async def history(self, session_id: str) -> list[Message]:
        """The session's messages as committed (empty for a session the store does not know)."""
        messages: list[Message] = await trio.to_thread.run_sync(self.store.history, session_id)
        return messages

    async def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The calls of active runs that wait for an answer (all sessions' when ``session_id`` is None)."""
        return await self.backend.pending(session_id)


@asynccontextmanager
async def open_durable_agent(
    agent: AgentClient,
    store: str | os.PathLike[str],
    *,
    name: str | None = None,
    capacity: int = CAPACITY,
    lease_seconds: float = LEASE_SECONDS,
    grace_seconds: float = GRACE_SECONDS,
    retention_seconds: float = RETENTION_SECONDS,
    wait_rules: Iterable[WaitRule] = (),
) -> AsyncIterator[DurableAgent]:
    """Open ``store`` (a run store URL or an SQLite file's path) and carry its runs with ``agent`` in this task's
    nursery until the block ends; yield the client that starts and answers them.

    Runs left unfinished by an earlier process are resumed by themselves: at once when it handed them back, or when
    it was killed and it ran on this machine with an SQLite file (``take_over_local``); otherwise once its lease
    (``lease_seconds``) on them expires. Leaving the block normally drains the worker (each
    run may finish its step within ``grace_seconds``, then is handed back at its last commit, to resume at the next
    open); leaving it by an exception or a cancellation hands every run back at once. The agent belongs to the store
    from then on (its history is the store's): one with a ``SessionStoreExtension`` (the run store keeps the
    sessions) or one another ``Worker`` carries with is refused (ValueError). ``wait_rules`` check answers to the
    questions of the agent's own extensions.
    """
    if any(isinstance(extension, SessionStoreExtension) for extension in agent.agent.extensions):
        raise ValueError(
            "the agent has a SessionStoreExtension: the run store keeps the sessions' history, approvals and plan"
            " mode itself; build the agent without it"
        )
    if any(isinstance(extension, DurableExtension) for extension in agent.agent.extensions):
        raise ValueError(
            "the agent carries runs of a store already (a Worker or open_durable_agent took it): build one agent"
            " for each open_durable_agent"
        )
    carried = await trio.to_thread.run_sync(run_store_for, store)
    try:
        served = await trio.to_thread.run_sync(run_store_for, store)
    except BaseException:
        carried.close()
        raise
    try:
        worker = Worker(
            agent,
            carried,
            name=name,
            capacity=capacity,
            lease_seconds=lease_seconds,
            retention_seconds=retention_seconds,
        )
        client = DurableAgent(StoreBackend(served, wait_rules=wait_rules), worker)
        # The caller's cancellation does not reach the runs (it would end their steps as if a person cancelled
        # them): they are handed back instead, then the worker is let go.
        carrying = trio.CancelScope(shield=True)

        async def carry(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with carrying:
                await worker.run(task_status=task_status)

        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(carry)
            try:
                yield client
            except BaseException as error:
                failure = error  # raised as itself once the nursery is closed, not inside an ExceptionGroup
                with trio.CancelScope(shield=True), trio.move_on_after(HAND_BACK_SECONDS):
                    await worker.drain(0)  # every run handed back at its last commit, at once
            else:
                with trio.CancelScope(shield=True):
                    await worker.drain(grace_seconds)
            carrying.cancel()
        if failure is not None:
            raise failure
    finally:
        served.close()
        carried.close()
