"""Identities: who sends a request (``authenticate``) and what they may do to a session (``authorize``).

``create_app(..., authenticate=fn)`` asks ``fn`` for the principal of every request but the open
paths (``/health``, the A2A agent card, the console's files): None is a 401. Every route and
protocol adapter reaches sessions and runs through one ``OwnedBackend``, which answers a session
the principal may not act on exactly as an unknown one. See docs/identity.md.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from machines.build import Step
from orchestrator.config import ExternalEvent
from orchestrator.delivery import Delivery
from orchestrator.errors import AgentError
from orchestrator.extensions.steering import STEERING_EVENT
from orchestrator.observe.trace import NestedTrace
from orchestrator.runtime.handle import UnknownRun
from orchestrator.server.backend import Backend, RunStart, RunView
from orchestrator.server.errors import HTTPRefusal, send_refusal
from orchestrator.server.guard import route_path
from orchestrator.store.errors import SessionOwned
from orchestrator.store.fork import ForkRefused
from orchestrator.store.runs import LOCAL_PRINCIPAL

__all__ = [
    "ACTIONS",
    "LOCAL_PRINCIPAL",
    "Authenticate",
    "Authorize",
    "OwnedBackend",
    "SessionNotFound",
    "SessionRef",
    "Unauthenticated",
    "current_principal",
    "owner_only",
]

log = logging.getLogger(__name__)

ACTIONS: Mapping[str, str] = {
    "read": "see the session: in GET /sessions, its history and export, its runs, their state, trace and waiting "
    "calls; A2A GetTask and ListTasks",
    "stream": "follow a run's events: GET /runs/{id}/events, A2A SubscribeToTask and the streams of the protocols",
    "start": "start a run in the session once it exists (POST /sessions/{id}/runs, AG-UI, A2A, AI SDK)",
    "answer": "answer a call that waits (POST /sessions/{id}/events; AG-UI resume, A2A and AI SDK answers)",
    "steer": "steer the running request (a steering_message event; AG-UI parentRunId, A2A on a working task)",
    "cancel": "cancel a run: POST /runs/{id}/cancel, A2A CancelTask, a protocol client that goes away",
    "fork": "fork the session into a new one of the principal's own (POST /sessions/{id}/fork)",
    "title": "set the session's title (PUT /sessions/{id}/title)",
    "delete": "delete the session (DELETE /sessions/{id})",
}
"""The actions ``authorize`` is asked about, each with what it covers."""

Authenticate: TypeAlias = Callable[[Headers], "str | Awaitable[str | None] | None"]
"""The principal who sends a request, from its headers (case-insensitive names), or None (a 401)."""


@attrs.frozen
class SessionRef:
    """The session an action is asked about, and the principal that owns it (the one that created it)."""

    session_id: str
    owner: str


Authorize: TypeAlias = Callable[[str, str, SessionRef], "bool | Awaitable[bool]"]
"""Whether ``principal`` may take ``action`` (one of ACTIONS) on ``session``."""


def owner_only(principal: str, action: str, session: SessionRef) -> bool:
    """The default ``authorize``: a session's owner may do everything to it, nobody else anything."""
    return principal == session.owner


current_principal: contextvars.ContextVar[str] = contextvars.ContextVar(
    "orchestrator_principal", default=LOCAL_PRINCIPAL
)
"""The principal of the request being served (LOCAL_PRINCIPAL where no ``authenticate`` is given)."""


class Unauthenticated(Exception):
    """Raised by an ``authenticate`` function to refuse a request (401) with ``reason`` in the body."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SessionNotFound(AgentError):
    """No session ``session_id`` the principal may act on: unknown, or another principal's (a 404 either way)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id


async def _settled(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


CHALLENGE = b'Bearer realm="orchestrator"'


class AuthGuard:
    """Refuses (401, ``WWW-Authenticate``) a request to a guarded path whose ``authenticate`` gives no principal;
    serves the others with the principal in ``current_principal`` and ``request.state.principal``."""

    def __init__(
        self,
        app: ASGIApp,
        authenticate: Authenticate,
        *,
        open_paths: Iterable[str] = (),
        open_prefixes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.open_paths = frozenset(open_paths)
        self.open_prefixes = tuple(open_prefixes)

    def _open(self, path: str) -> bool:
        return path in self.open_paths or path.startswith(self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._open(route_path(scope)):
            await self.app(scope, receive, send)
            return
        try:
            found = await _settled(self.authenticate(Headers(scope=scope)))
        except Unauthenticated as refused:
            await send_refusal(send, 401, "Unauthorized", refused.reason, [(b"www-authenticate", CHALLENGE)])
            return
        except Exception as error:
            log.exception("authenticate failed")
            message = f"authenticating the request failed ({type(error).__name__})"
            await send_refusal(send, 500, "AuthenticationFailed", message)
            return
        if found is None:
            message = "the request carries no credentials this server accepts"
            await send_refusal(send, 401, "Unauthorized", message, [(b"www-authenticate", CHALLENGE)])
            return
        if not isinstance(found, str) or not found:
            message = f"authenticate must give a principal id (a non-empty str) or None, not {found!r}"
            await send_refusal(send, 500, "AuthenticationFailed", message)
            return
        scope.setdefault("state", {})["principal"] = found
        token = current_principal.set(found)
        try:
            await self.app(scope, receive, send)
        finally:
            current_principal.reset(token)


class OwnedBackend:
    """The ``Backend`` every route and protocol adapter goes through: ``inner`` as the request's principal may see it.

    A session the principal may not take an action on (``authorize`` says no) is answered as an unknown one:
    left out of lists, None, False, UnknownRun for its runs, SessionNotFound for what would change it. Without
    ``authorize`` (no identities) everything passes, as the principal LOCAL_PRINCIPAL.
    """

    def __init__(self, inner: Backend, authorize: Authorize | None) -> None:
        self.inner = inner
        self.authorize = authorize

    @property
    def local(self) -> object:
        """The backend of the agent in this process, for what only it can do (declaring client tools)."""
        return getattr(self.inner, "local", self.inner)

    async def _decide(self, principal: str, action: str, session: SessionRef) -> bool:
        """``authorize``'s answer; one that raises is a 500 ``AuthorizationFailed`` naming the error's type."""
        assert self.authorize is not None
        try:
            return bool(await _settled(self.authorize(principal, action, session)))
        except Exception as error:
            log.exception("authorize failed")
            message = f"authorizing {action!r} on a session failed ({type(error).__name__})"
            raise HTTPRefusal(500, "AuthorizationFailed", message) from None

    async def _may(self, session_id: str, action: str) -> bool:
        if self.authorize is None:
            return True
        owner = (await self.inner.owners([session_id])).get(session_id)
        if owner is None:
            return False
        return await self._decide(current_principal.get(), action, SessionRef(session_id, owner))

    async def _visible(self, session_ids: list[str], action: str) -> set[str]:
        if self.authorize is None:
            return set(session_ids)
        owners = await self.inner.owners(list(dict.fromkeys(session_ids)))
        principal = current_principal.get()
        return {
            session_id
            for session_id, owner in owners.items()
            if await self._decide(principal, action, SessionRef(session_id, owner))
        }

    async def _run(self, request_id: str, action: str) -> RunView:
        view = await self.inner.run(request_id)
        if not await self._may(view.session_id, action):
            raise UnknownRun(request_id)
        return view

    # runs -------------------------------------------------------------------

    async def start(self, start: RunStart) -> str:
        principal = current_principal.get()
        kept_for = await self.starts_for(start.session_id)
        given = {**(start.metadata or {}), "principal": principal}
        try:
            return await self.inner.start(attrs.evolve(start, metadata=given, owner=kept_for))
        except SessionOwned:
            raise SessionNotFound(start.session_id) from None  # another principal took it meanwhile

    async def starts_for(self, session_id: str) -> str | None:
        """The owner a run the principal starts in ``session_id`` is kept for (the principal's own for a new
        session; None without identities); SessionNotFound when the principal may not start one there."""
        if self.authorize is None:
            return None
        principal = current_principal.get()
        owner = (await self.inner.owners([session_id])).get(session_id)
        if owner is None:
            return principal
        if not await self._decide(principal, "start", SessionRef(session_id, owner)):
            raise SessionNotFound(session_id)
        return owner

    async def run(self, request_id: str) -> RunView:
        return await self._run(request_id, "read")

    async def events(self, request_id: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
        if self.authorize is not None:  # without identities every run may be followed: the inner backend's own
            await self._run(request_id, "stream")  # UnknownRun answers an unknown one
        return await self.inner.events(request_id, after)

    async def follow(self, request_id: str, after: int) -> tuple[bool, AsyncIterator[list[dict[str, Any]]]]:
        if self.authorize is not None:  # as ``run`` then ``events`` check
            await self._run(request_id, "read")
            await self._run(request_id, "stream")
        follow = getattr(self.inner, "follow", None)
        if follow is None:  # a backend of the application's own, written before ``follow``: its two calls
            ended = (await self.inner.run(request_id)).done
            return ended, await self.inner.events(request_id, after)
        opened: tuple[bool, AsyncIterator[list[dict[str, Any]]]] = await follow(request_id, after)
        return opened

    async def cancel(self, request_id: str) -> tuple[RunView, bool]:
        await self._run(request_id, "cancel")
        return await self.inner.cancel(request_id)

    async def transitions(self, request_id: str) -> list[Step]:
        await self._run(request_id, "read")
        return await self.inner.transitions(request_id)

    async def child_traces(self, request_id: str) -> list[NestedTrace]:
        await self._run(request_id, "read")
        return await self.inner.child_traces(request_id)

    # answers ----------------------------------------------------------------

    async def deliver(
        self, session_id: str, request_id: str | None, event: ExternalEvent, idempotency_key: str | None
    ) -> Delivery:
        if not await self._may(session_id, "steer" if event.name == STEERING_EVENT else "answer"):
            raise SessionNotFound(session_id)
        return await self.inner.deliver(session_id, request_id, event, idempotency_key)

    async def pending(self, session_id: str | None) -> list[dict[str, Any]]:
        if session_id is not None and not await self._may(session_id, "read"):
            return []
        calls = await self.inner.pending(session_id)
        if session_id is not None or self.authorize is None:
            return calls
        shown = await self._visible([str(call["session_id"]) for call in calls], "read")
        return [call for call in calls if call["session_id"] in shown]

    # sessions ---------------------------------------------------------------

    async def requests(self, session_id: str) -> list[str]:
        return await self.inner.requests(session_id) if await self._may(session_id, "read") else []

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        return await self.inner.owners(session_ids)

    async def sessions(self) -> list[dict[str, Any]]:
        listed = await self.inner.sessions()
        if self.authorize is None:
            return listed
        shown = await self._visible([str(session["session_id"]) for session in listed], "read")
        return [session for session in listed if session["session_id"] in shown]

    async def session(self, session_id: str) -> dict[str, Any] | None:
        return await self.inner.session(session_id) if await self._may(session_id, "read") else None

    async def fork(
        self, session_id: str, target: str | None, turns: int | None, *, owner: str | None = None
    ) -> tuple[str, int]:
        if not await self._may(session_id, "fork"):
            raise ForkRefused(f"no stored session {session_id!r} to fork")
        kept_for = None if self.authorize is None else current_principal.get()
        return await self.inner.fork(session_id, target, turns, owner=kept_for)

    async def set_title(self, session_id: str, title: str) -> bool:
        return await self._may(session_id, "title") and await self.inner.set_title(session_id, title)

    async def delete_session(self, session_id: str, cancel: bool) -> bool:
        return await self._may(session_id, "delete") and await self.inner.delete_session(session_id, cancel)

    def running(self) -> int | None:
        return self.inner.running()
