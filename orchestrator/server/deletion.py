"""``DELETE /sessions/{id}``: remove a session from every store the backend keeps it in.

``?cancel=true`` cancels a run of the session that is running first; without it such a run makes
the request a 409 ``SessionBusy``. A session nobody keeps is a 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.errors import SessionBusy
from orchestrator.server.backend import Backend
from orchestrator.server.errors import HTTPRefusal, bad_request, not_found
from orchestrator.server.ids import checked_id


def session_deletion(backend: Backend) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``DELETE /sessions/{session_id}`` over ``backend``."""

    async def delete_session(request: Request) -> Response:
        session_id = checked_id(request.path_params["session_id"], "session_id")
        cancel = request.query_params.get("cancel", "false")
        if cancel not in ("true", "false"):
            raise bad_request(f"cancel must be true or false, not {cancel!r}")
        try:
            found = await backend.delete_session(session_id, cancel == "true")
        except SessionBusy:
            message = f"a run of session {session_id!r} is running; DELETE with ?cancel=true cancels it first"
            raise HTTPRefusal(409, "SessionBusy", message) from None
        if not found:
            raise not_found(f"no session {session_id!r}")
        return JSONResponse({"deleted": session_id})

    return delete_session
