"""What the routes serve from: a ``Backend``.

``LocalBackend`` serves an agent running in this process (its runs live in the
serving trio loop); ``orchestrator.cluster.webnode.StoreBackend`` serves runs
kept in a run store and carried by workers elsewhere. Both answer in the wire
format, so the routes and the console cannot tell them apart.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import anyio.to_thread
import attrs

from machines.build import Step
from orchestrator import wire
from orchestrator.agent import AgentClient
from orchestrator.config import AgentRunConfig, ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.errors import AgentError, SessionBusy
from orchestrator.extensions.session_store import SessionStoreExtension
from orchestrator.history import ListsSessions
from orchestrator.limits import UsageLimits
from orchestrator.messages import UserMessage
from orchestrator.model import ModelSettings
from orchestrator.observe.trace import NestedTrace
from orchestrator.runtime.handle import RunHandle, UnknownRun
from orchestrator.server import sessions
from orchestrator.store.errors import SessionOwned
from orchestrator.store.fork import ForkRefused, first_turns, fork_session
from orchestrator.store.owners import read_owners, write_owners
from orchestrator.store.retention import PruneReport, Retention
from orchestrator.store.runs import LOCAL_PRINCIPAL
from orchestrator.store.titles import first_input_title, forget_titles, forked_title, set_title, set_titles
from orchestrator.wire.sse import encode_pending


class NotSupported(AgentError):
    """This backend cannot do the operation; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RunExists(AgentError):
    """A run with this request id exists already."""


class IdempotencyKeyReused(AgentError):
    """An Idempotency-Key already started a run with another input (or in another session)."""


@attrs.frozen
class RunStart:
    """What a backend starts a run with: its session and input, and what the run is started under.

    ``request_id`` names the run (None: the backend names it). With ``idempotency_key``, a backend may answer
    a retry with the run the key already started instead of refusing it. ``metadata`` is the run's
    ``AgentRunConfig.metadata`` (MetadataError when the config refuses it), kept with the run; ``usage_limits``,
    ``deadline`` (seconds), ``model_settings`` and ``output_type`` bound and shape the run as ``AgentRunConfig``
    takes them. ``owner`` is the principal the session is kept for: a new session becomes its, one of another
    principal is SessionOwned (None records and checks nothing)."""

    session_id: str
    message: UserMessage
    request_id: str | None = attrs.field(default=None, kw_only=True)
    idempotency_key: str | None = attrs.field(default=None, kw_only=True)
    metadata: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True)
    owner: str | None = attrs.field(default=None, kw_only=True)
    usage_limits: UsageLimits | None = attrs.field(default=None, kw_only=True)
    deadline: float | None = attrs.field(default=None, kw_only=True)
    model_settings: ModelSettings | None = attrs.field(default=None, kw_only=True)
    output_type: object = attrs.field(default=None, kw_only=True)


@attrs.frozen
class RunView:
    request_id: str
    session_id: str
    state: str | None
    states: dict[str, str] | None
    done: bool

    def json(self) -> dict[str, Any]:
        return attrs.asdict(self)


pending_json = encode_pending


class Backend(Protocol):
    async def start(self, start: RunStart) -> str:
        """Start a run as ``start`` says; its request id. SessionBusy, RunExists, IdempotencyKeyReused."""

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        """The owner of each of ``session_ids`` that exists (stored or running); unknown ones are left out."""

    async def run(self, request_id: str) -> RunView:
        """UnknownRun when there is no such run."""

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        """Batches of the run's events (wire JSON) after ``after``, then live, ending after the terminal one.

        Raises UnknownRun or EventsExpired before the first batch."""

    async def follow(self, request_id: str, after: int) -> tuple[bool, AsyncIterator[list[dict[str, Any]]]]:
        """Whether the run had ended, and ``events(request_id, after)``: what a stream's route asks first, in
        one call. Raises UnknownRun, then EventsExpired, before the first batch."""

    async def deliver(
        self, session_id: str, request_id: str | None, event: ExternalEvent, idempotency_key: str | None
    ) -> Delivery: ...

    async def pending(self, session_id: str | None) -> list[dict[str, Any]]: ...

    async def cancel(self, request_id: str) -> tuple[RunView, bool]:
        """The run and whether this asked it to stop (False: it had ended)."""

    async def sessions(self) -> list[dict[str, Any]]: ...

    async def session(self, session_id: str) -> dict[str, Any] | None: ...

    async def fork(
        self, session_id: str, target: str | None, turns: int | None, *, owner: str | None = None
    ) -> tuple[str, int]:
        """A new session with ``session_id``'s messages (its first ``turns`` turns), kept for ``owner``: its id
        and message count.

        Raises ForkRefused (no such session, target taken, no such turn), SessionBusy while the session runs,
        or NotSupported."""

    async def set_title(self, session_id: str, title: str) -> bool:
        """Give the session a title; False when there is no such session."""

    async def transitions(self, request_id: str) -> list[Step]: ...

    async def delete_session(self, session_id: str, cancel: bool) -> bool:
        """Remove the session from every store; whether it was there. SessionBusy while a run of it runs,
        unless ``cancel``."""
        ...

    async def requests(self, session_id: str) -> list[str]:
        """The ids of the session's requests still kept here, oldest first."""
        ...

    async def child_traces(self, request_id: str) -> list[NestedTrace]:
        """The paths of the run's subagent requests, nested (none where they did not run in this process)."""

    def running(self) -> int | None:
        """Runs this process carries (None where it carries none itself)."""


DEFAULT_RETAINED_RUNS = 1000
"""Finished runs the service keeps reachable (their events, state and trace) by default."""


class LocalBackend:
    """An agent in this process, through its client.

    ``retained_runs`` is how many finished runs the agent keeps reachable by
    request id, so a late reader of a finished run still gets its events
    (the agent's own default keeps fewer).
    """

    def __init__(self, client: AgentClient, *, retained_runs: int = DEFAULT_RETAINED_RUNS) -> None:
        if retained_runs < 1:
            raise ValueError("retained_runs must be at least 1")
        self.client = client
        self.agent = client.agent
        self.agent.runs.keep = retained_runs
        self._titles: dict[str, str] = {}  # set titles, where no SQLite store keeps them
        self._owner_book: dict[str, str] | None = None  # sessions of principals other than LOCAL_PRINCIPAL

    def _store(self) -> SessionStoreExtension | None:
        return next((e for e in self.agent.extensions if isinstance(e, SessionStoreExtension)), None)

    def _titles_db(self) -> str | None:
        path = getattr(self._store(), "path", None)
        return path if isinstance(path, str) else None

    async def _title_book(self) -> dict[str, str]:
        db = self._titles_db()
        return self._titles if db is None else await anyio.to_thread.run_sync(set_titles, db)

    async def _owners(self) -> dict[str, str]:
        """The recorded owners (read once from beside a SQLite store; this backend is their only writer)."""
        if self._owner_book is None:
            db = self._titles_db()
            self._owner_book = {} if db is None else await anyio.to_thread.run_sync(read_owners, db)
        return self._owner_book

    async def _keep_owners(self) -> None:
        db = self._titles_db()
        if db is not None:
            book = await self._owners()  # copied under the writers' lock: the last write holds every claim
            await anyio.to_thread.run_sync(write_owners, db, book)

    async def _known(self, session_id: str) -> bool:
        return session_id in self.agent.running() or await sessions.history(self.agent, session_id) is not None

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        book = await self._owners()
        unlisted = [session_id for session_id in session_ids if session_id not in book]
        if len(unlisted) > 1:  # a list of sessions: one read of the stored ids, not one history each
            known = {*await sessions.stored_session_ids(self.agent), *self.agent.running()}
        else:
            known = {session_id for session_id in unlisted if await self._known(session_id)}
        found = {session_id: book[session_id] for session_id in session_ids if session_id in book}
        found.update((session_id, LOCAL_PRINCIPAL) for session_id in unlisted if session_id in known)
        return found

    async def _claim(self, session_id: str, owner: str | None) -> None:
        """Make a new session ``owner``'s; SessionOwned when it exists and is another principal's (None: no check)."""
        if owner is None:
            return
        book = await self._owners()
        known = session_id in book or await self._known(session_id)
        kept = book.get(session_id, LOCAL_PRINCIPAL if known else None)  # read after the awaits, then set at once
        if kept is None and owner != LOCAL_PRINCIPAL:
            book[session_id] = owner
            await self._keep_owners()
        elif kept is not None and kept != owner:
            raise SessionOwned(session_id, kept)

    def _handle(self, request_id: str) -> RunHandle:
        return self.client.attach(request_id)

    def _view(self, handle: RunHandle) -> RunView:
        return RunView(handle.request_id, handle.session_id, handle.state, handle.states, handle.done)

    def _live_request(self, session_id: str) -> str | None:
        run = self.agent._live.get(session_id)
        return run.context.request_id if run is not None else None

    async def start(self, start: RunStart) -> str:
        # One process: the routes' cache of answers already replays a retried key.
        if start.request_id is not None:
            try:
                self._handle(start.request_id)
            except UnknownRun:
                pass
            else:
                raise RunExists(f"a run {start.request_id!r} already exists")
        config = AgentRunConfig(
            session_id=start.session_id,
            request_id=start.request_id,
            metadata=start.metadata or {},
            usage_limits=start.usage_limits,
            deadline=start.deadline,
            model_settings=start.model_settings,
            output_type=start.output_type,
        )
        await self._claim(start.session_id, start.owner)
        handle = await self.client.start(start.message, config=config)
        return handle.request_id

    async def run(self, request_id: str) -> RunView:
        return self.view(request_id)

    def view(self, request_id: str) -> RunView:
        """``run`` without waiting (UnknownRun when there is no such run)."""
        return self._view(self._handle(request_id))

    async def follow(self, request_id: str, after: int) -> tuple[bool, AsyncIterator[list[dict[str, Any]]]]:
        ended = self.view(request_id).done
        return ended, await self.events(request_id, after)

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        follower = self._handle(request_id).events(after=after)

        async def batches() -> AsyncIterator[list[dict[str, Any]]]:
            while batch := await follower.batch():
                yield [wire.encode_event(event) for event in batch]

        return batches()

    async def deliver(
        self, session_id: str, request_id: str | None, event: ExternalEvent, idempotency_key: str | None
    ) -> Delivery:
        config = AgentRunConfig(session_id=session_id, request_id=request_id)
        return await anyio.to_thread.run_sync(lambda: self.client.deliver(event, config=config))

    async def pending(self, session_id: str | None) -> list[dict[str, Any]]:
        return [pending_json(call) for call in self.client.pending(session_id)]

    async def cancel(self, request_id: str) -> tuple[RunView, bool]:
        handle = self._handle(request_id)
        was_done = handle.done
        handle.cancel()
        return self._view(handle), not was_done

    async def _first_input_title(self, session_id: str) -> str:
        return first_input_title(await sessions.history(self.agent, session_id) or [])

    async def sessions(self) -> list[dict[str, Any]]:
        stored = await sessions.stored_session_ids(self.agent)
        ids = list(dict.fromkeys([*stored, *self.agent.running()]))
        titles = await self._title_book()
        return [
            {
                "session_id": session_id,
                "title": titles.get(session_id) or await self._first_input_title(session_id),
                "request_id": self._live_request(session_id),
                "state": self.agent.state(session_id),
                "states": self.agent.states(session_id),
                "pending": await self.pending(session_id),
            }
            for session_id in ids
        ]

    async def session(self, session_id: str) -> dict[str, Any] | None:
        messages = await sessions.history(self.agent, session_id)
        if messages is None:
            return None
        return {
            "session_id": session_id,
            "title": (await self._title_book()).get(session_id) or first_input_title(messages),
            "request_id": self._live_request(session_id),
            "messages": [wire.encode_message(m) for m in messages],
            "states": self.agent.states(session_id),
            "plan_mode": sessions.plan_mode(self.agent, session_id),
            "pending": await self.pending(session_id),
        }

    async def fork(
        self, session_id: str, target: str | None, turns: int | None, *, owner: str | None = None
    ) -> tuple[str, int]:
        if session_id in self.agent.running():
            raise SessionBusy(session_id)
        new = target or f"{session_id}-fork-{os.urandom(3).hex()}"
        store = self._store()
        if store is not None:
            kept = store.store
            copied = await anyio.to_thread.run_sync(lambda: fork_session(kept, session_id, new, turns=turns))
        else:
            history = self.agent.history
            if history is None or not isinstance(history, ListsSessions):
                raise NotSupported("this agent keeps its sessions where they cannot be listed, so none can be forked")
            known = history.sessions()
            if session_id not in known:
                raise ForkRefused(f"no stored session {session_id!r} to fork")
            if new in known:
                raise ForkRefused(f"the session {new!r} exists already", "exists")
            messages = first_turns(session_id, history.load(session_id), turns)
            history.replace(new, messages)
            copied = len(messages)
        if owner is not None and owner != LOCAL_PRINCIPAL:
            (await self._owners())[new] = owner
            await self._keep_owners()
        source_title = (await self._title_book()).get(session_id)
        if source_title is not None:
            await self.set_title(new, forked_title(source_title))
        return new, copied

    async def set_title(self, session_id: str, title: str) -> bool:
        if await sessions.history(self.agent, session_id) is None:
            return False
        db = self._titles_db()
        if db is None:
            self._titles[session_id] = title
        else:
            await anyio.to_thread.run_sync(set_title, db, session_id, title)
        return True

    async def transitions(self, request_id: str) -> list[Step]:
        return self._handle(request_id).transitions

    async def delete_session(self, session_id: str, cancel: bool) -> bool:
        deleted = await self.client.delete_session(session_id, cancel=cancel)
        if (await self._owners()).pop(session_id, None) is not None:
            await self._keep_owners()  # a deleted session's id is free again
        await self._forget_titles([session_id])
        return deleted

    async def prune(self, retention: Retention, now: float | None = None) -> PruneReport:
        """One prune pass over the agent's finished runs and its session store (see ``Agent.prune``)."""
        report = await self.agent.prune(retention, now=now)
        await self._forget_titles(report.sessions)
        return report

    async def _forget_titles(self, session_ids: Sequence[str]) -> None:
        """The titles of sessions that are gone go too (from the file beside the SQLite store, or memory)."""
        for session_id in session_ids:
            self._titles.pop(session_id, None)
        db = self._titles_db()
        if db is not None and session_ids:
            await anyio.to_thread.run_sync(forget_titles, db, session_ids)

    async def requests(self, session_id: str) -> list[str]:
        return [handle.request_id for handle in self.agent.runs.of_session(session_id)]

    async def child_traces(self, request_id: str) -> list[NestedTrace]:
        return self.agent.child_traces(self._handle(request_id).session_id, request_id)

    def running(self) -> int:
        return len(self.agent.running())
