"""Another site's page against a server on this machine: it can neither start nor answer runs, nor read.

A page elsewhere can POST to a loopback server without a preflight when the
body is text/plain (``fetch(..., {mode: "no-cors"})``), and a page that rebinds
its own DNS name to 127.0.0.1 reads whatever the server answers to that name.
The server refuses both: bodies must be application/json, state changes from
a foreign ``Origin`` are refused, ``Host`` must be a name the server answers
to, and ``serve`` generates a token when given none. An allowed origin gets
CORS answers (a browser client on it works); the console's own page works.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator import AgentClient, AssistantMessage, ScriptedModel, create_agent
from orchestrator.extensions.plan_mode import PlanModeExtension
from orchestrator.server import create_app
from orchestrator.server.origins import normalized_origin, same_origin
from tests.server.support import HOSTS, ServerThread, Serving, serving_on
from tests.server.test_serve_command import served
from tests.support import asks, call

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
ALLOWED_ORIGIN = "http://localhost:5173"
FOREIGN_ORIGIN = "https://attacker.example"
PLAN = json.dumps({"input": "plan it", "request_id": "cross-site-run"})


async def plan_mode_client(root: Path) -> AgentClient:
    model = ScriptedModel(
        [
            asks(call("c1", "enter_plan_mode", reason="the change is large")),
            AssistantMessage("Done."),
        ]
    )
    return await create_agent(model, extensions=[PlanModeExtension(root=root)])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def _refusal(response: httpx.Response) -> str:
    kind: str = response.json()["error"]["type"]
    assert response.json()["error"]["message"], response.text
    return kind


async def _sessions(http: httpx.AsyncClient, base: str) -> list[dict[str, Any]]:
    listed = await http.get(f"{base}/sessions")
    assert listed.status_code == 200, listed.text
    sessions: list[dict[str, Any]] = listed.json()["sessions"]
    return sessions


async def _wait_for_question(http: httpx.AsyncClient, base: str, request_id: str) -> None:
    async with http.stream("GET", f"{base}/runs/{request_id}/events") as stream:
        async for line in stream.aiter_lines():
            if line == "event: enter_plan_mode":
                return
    raise AssertionError("the run ended without asking")


@pytest.mark.parametrize("host", HOSTS)
async def test_a_text_plain_post_is_refused_and_starts_no_run(
    host: str, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    serving: Serving = serving_on(host)
    client = await plan_mode_client(tmp_path)
    with trio.fail_after(20):
        async with serving(client) as base:
            plain = {"content-type": "text/plain;charset=UTF-8"}
            for headers in (plain, {}, {**plain, "Origin": FOREIGN_ORIGIN}):
                refused = await http.post(f"{base}/sessions/s1/runs", content=PLAN, headers=headers)
                expected = (403, "OriginNotAllowed") if "Origin" in headers else (415, "UnsupportedMediaType")
                assert (refused.status_code, _refusal(refused)) == expected, (headers, refused.text)
            assert await _sessions(http, base) == []
            assert (await http.get(f"{base}/runs/cross-site-run")).status_code == 404
            charset = await http.post(
                f"{base}/sessions/s1/runs", content=PLAN, headers={"content-type": "Application/JSON; charset=utf-8"}
            )
            assert charset.status_code == 202, charset.text


@pytest.mark.parametrize("host", HOSTS)
async def test_a_cross_site_approval_is_refused_and_the_question_stays_open(
    host: str, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    serving: Serving = serving_on(host)
    client = await plan_mode_client(tmp_path)
    approval = json.dumps({"name": "enter_plan_mode_response", "payload": {"tool_call_id": "c1", "approved": True}})
    with trio.fail_after(20):
        async with serving(client) as base:
            started = await http.post(f"{base}/sessions/s2/runs", json={"input": "plan it"})
            assert started.status_code == 202, started.text
            await _wait_for_question(http, base, started.json()["request_id"])
            for headers in ({"content-type": "text/plain"}, {"content-type": "text/plain", "Origin": FOREIGN_ORIGIN}):
                refused = await http.post(f"{base}/sessions/s2/events", content=approval, headers=headers)
                assert refused.status_code in (403, 415), refused.text
            foreign_json = await http.post(
                f"{base}/sessions/s2/events",
                content=approval,
                headers={"content-type": "application/json", "Origin": FOREIGN_ORIGIN},
            )
            assert (foreign_json.status_code, _refusal(foreign_json)) == (403, "OriginNotAllowed")
            cancel = await http.post(f"{base}/runs/{started.json()['request_id']}/cancel", headers={"Origin": "null"})
            assert (cancel.status_code, _refusal(cancel)) == (403, "OriginNotAllowed")
            session = (await http.get(f"{base}/sessions/s2")).json()
            assert session["states"]["phase"] == "awaiting_approval"
            assert [p["tool_call_id"] for p in session["pending"]] == ["c1"]
            own_page = {"content-type": "application/json", "Origin": base}  # the console's own page
            own = await http.post(f"{base}/sessions/s2/events", content=approval, headers=own_page)
            assert own.status_code == 202, own.text


@pytest.mark.parametrize("host", HOSTS)
async def test_a_host_the_server_does_not_answer_to_is_refused_before_any_route(
    host: str, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    serving: Serving = serving_on(host)
    client = await plan_mode_client(tmp_path)
    with trio.fail_after(20):
        async with serving(client, allowed_hosts=LOOPBACK_HOSTS) as base:
            port = base.rsplit(":", 1)[1]
            assert (await http.post(f"{base}/sessions/s3/runs", json={"input": "hi"})).status_code == 202
            for host in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1.attacker.example:{port}", ""):
                for method, path in (("GET", "/sessions"), ("GET", "/sessions/s3"), ("GET", "/"), ("GET", "/health")):
                    refused = await http.request(method, f"{base}{path}", headers={"Host": host})
                    assert (refused.status_code, _refusal(refused)) == (403, "HostNotAllowed"), (host, path)
                    assert "s3" not in refused.text
            for host in (f"localhost:{port}", f"LOCALHOST:{port}", "127.0.0.1"):
                assert (await http.get(f"{base}/sessions", headers={"Host": host})).status_code == 200, host


@pytest.mark.parametrize("host", HOSTS)
async def test_an_allowed_origin_gets_cors_answers_and_its_json_post_works(
    host: str, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    serving: Serving = serving_on(host)
    client = await plan_mode_client(tmp_path)
    settings = {"token": "t0k", "allowed_hosts": LOOPBACK_HOSTS, "allowed_origins": [ALLOWED_ORIGIN]}
    with trio.fail_after(20):
        async with serving(client, **settings) as base:
            preflight = await http.options(
                f"{base}/sessions/s4/runs",
                headers={
                    "Origin": ALLOWED_ORIGIN,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
                },
            )
            assert preflight.status_code == 204, preflight.text
            assert preflight.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
            assert "Origin" in preflight.headers["vary"]
            assert set(preflight.headers["access-control-allow-methods"].split(", ")) >= {"GET", "POST"}
            allowed_headers = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
            assert allowed_headers >= {"authorization", "content-type", "idempotency-key", "last-event-id"}

            foreign = await http.options(
                f"{base}/sessions/s4/runs",
                headers={"Origin": FOREIGN_ORIGIN, "Access-Control-Request-Method": "POST"},
            )
            assert (foreign.status_code, _refusal(foreign)) == (403, "OriginNotAllowed")
            assert "access-control-allow-origin" not in foreign.headers

            unauthorized = await http.post(
                f"{base}/sessions/s4/runs", json={"input": "x"}, headers={"Origin": ALLOWED_ORIGIN}
            )
            assert unauthorized.status_code == 401
            assert unauthorized.headers["access-control-allow-origin"] == ALLOWED_ORIGIN  # the page can read why

            headers = {"Origin": ALLOWED_ORIGIN, "Authorization": "Bearer t0k", "Idempotency-Key": "k1"}
            posted = await http.post(f"{base}/sessions/s4/runs", json={"input": "plan it"}, headers=headers)
            assert posted.status_code == 202, posted.text
            assert posted.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
            assert "Idempotent-Replay" in posted.headers["access-control-expose-headers"]
            listed = await http.get(f"{base}/sessions", headers={"Authorization": "Bearer t0k"})
            assert [s["session_id"] for s in listed.json()["sessions"]] == ["s4"]
            read = await http.get(f"{base}/sessions", headers={"Origin": FOREIGN_ORIGIN, "Authorization": "Bearer t0k"})
            assert "access-control-allow-origin" not in read.headers  # a foreign page's browser withholds the answer


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://localhost:8000", "localhost:8000", True),
        ("http://LOCALHOST:8000", "localhost:8000", True),
        ("http://localhost", "localhost:80", True),
        ("https://app.example", "app.example", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://localhost:8001", "localhost:8000", False),
        ("http://attacker.example:8000", "localhost:8000", False),
        ("null", "localhost:8000", False),
        ("http://localhost:8000", None, False),
    ],
)
def test_the_servers_own_origin_is_the_one_its_host_header_names(origin: str, host: str | None, same: bool) -> None:
    assert same_origin(origin, host) is same


async def test_a_malformed_allowed_host_or_origin_is_refused_when_the_app_is_made(tmp_path: Path) -> None:
    client = await plan_mode_client(tmp_path)
    assert normalized_origin("HTTP://LocalHost:80/") == "http://localhost"
    assert normalized_origin("https://[::1]:8443") == "https://[::1]:8443"
    for origin in ("localhost:3000", "null", "https://app.example/path", "ftp://app.example", "http://u@app.example"):
        with pytest.raises(ValueError, match="origin"):
            create_app(client, allowed_origins=[origin])
    for host in ("a b", "", "name:", "name:99999", "[::1"):
        with pytest.raises(ValueError, match="host name"):
            create_app(client, allowed_hosts=[host])


def test_serve_generates_a_token_prints_it_in_the_console_address_and_requires_it() -> None:
    with served("--app", "tests.server.sample_app:agent") as server, httpx.Client(timeout=10) as http:
        assert server.token is not None, server.console
        assert server.console == f"{server.url}/?access_token={server.token}"
        refused = http.get(f"{server.url}/sessions")
        assert (refused.status_code, _refusal(refused)) == (401, "Unauthorized")
        wrong = http.get(f"{server.url}/sessions", headers={"Authorization": "Bearer not-it"})
        assert wrong.status_code == 401
        assert http.get(f"{server.url}/sessions", headers=server.headers).status_code == 200
        assert http.get(f"{server.url}/sessions?access_token={server.token}").status_code == 200
        assert http.get(server.console).status_code == 200
        text_plain = {**server.headers, "content-type": "text/plain"}
        plain = http.post(f"{server.url}/sessions/s/runs", content=PLAN, headers=text_plain)
        assert plain.status_code == 415
        port = server.url.rsplit(":", 1)[1]
        host = http.get(f"{server.url}/health", headers={"Host": f"attacker.example:{port}"})
        assert (host.status_code, _refusal(host)) == (403, "HostNotAllowed")
        for name in ("localhost", "127.0.0.1", "[::1]"):
            assert http.get(f"{server.url}/health", headers={"Host": f"{name}:{port}"}).status_code == 200, name
    with served("--no-token", "--app", "tests.server.sample_app:agent") as open_server, httpx.Client() as http:
        assert open_server.token is None and open_server.console == f"{open_server.url}/"
        assert http.get(f"{open_server.url}/sessions").status_code == 200


# ---- a real browser: another origin's page, an allowed origin's client, the console with serve's token ----


class _EmptyPage(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def another_site() -> Iterator[str]:
    """A page on another origin (another loopback port): the origin of the attacking or the allowed page."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmptyPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def browser_page():  # type: ignore[no-untyped-def]
    from tests.server.test_console_browser import CHROMIUM_FLAGS, _chromium

    executable = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser test skipped: playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


NO_CORS_POSTS = """async (api) => {
  const send = (path, body) => fetch(api + path, {method: "POST", mode: "no-cors", body: JSON.stringify(body)});
  await send("/sessions/evil/runs", {input: "rm -rf", request_id: "evil-run"});
  await send("/sessions/s5/events", {name: "enter_plan_mode_response", payload: {tool_call_id: "c1", approved: true}});
  return "sent"; // each fetch resolved: the server has answered (an opaque answer the page cannot read)
}"""

CLIENT_RUN = """async ([api, token]) => {
  const headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token, "Idempotency-Key": "b1"};
  const post = () => fetch(api + "/sessions/b6/runs", {method: "POST", headers, body: JSON.stringify({input: "hi"})});
  const started = await post();
  const body = await started.json();
  const again = await post();
  const events = await fetch(api + body.events, {headers: {"Authorization": "Bearer " + token, "Last-Event-ID": "0"}});
  const reader = events.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!/event: (enter_plan_mode|run_completed)/.test(text)) {
    const {value, done} = await reader.read();
    if (done) break;
    text += decoder.decode(value, {stream: true});
  }
  await reader.cancel();
  return [started.status, again.headers.get("Idempotent-Replay"), events.status, text];
}"""


def test_in_a_browser_another_sites_no_cors_posts_change_nothing_and_an_allowed_origins_client_works(
    browser_page, tmp_path: Path  # type: ignore[no-untyped-def]
) -> None:
    page = browser_page
    with another_site() as attacker, another_site() as allowed:

        async def make_client() -> AgentClient:
            return await plan_mode_client(tmp_path)

        # No token, as serve --no-token: only the Host, Origin and content type checks stand in the way.
        settings: dict[str, Any] = {"allowed_hosts": LOOPBACK_HOSTS, "allowed_origins": [allowed]}
        with ServerThread(make_client, **settings) as api, httpx.Client(timeout=10) as http:
            started = http.post(f"{api.url}/sessions/s5/runs", json={"input": "plan it"})
            assert started.status_code == 202, started.text
            for _ in range(200):  # within 10 s, the run asks
                if http.get(f"{api.url}/sessions/s5").json()["pending"]:
                    break
                time.sleep(0.05)
            page.goto(attacker + "/")
            assert page.evaluate(NO_CORS_POSTS, api.url) == "sent"
            sessions = {s["session_id"]: s for s in http.get(f"{api.url}/sessions").json()["sessions"]}
            assert set(sessions) == {"s5"}
            assert sessions["s5"]["state"] == "awaiting_approval"
            assert http.get(f"{api.url}/runs/evil-run").status_code == 404

            page.goto(allowed + "/")
            status, replay, events_status, stream = page.evaluate(CLIENT_RUN, [api.url, "any"])
            assert (status, replay, events_status) == (202, "b1", 200)
            assert stream.startswith("id: 1\n") and "event: run_completed" in stream, stream  # the script's answer
            assert "b6" in {s["session_id"] for s in http.get(f"{api.url}/sessions").json()["sessions"]}


def test_the_console_at_the_address_serve_printed_runs_with_the_generated_token_and_survives_a_reload(
    browser_page,  # type: ignore[no-untyped-def]
) -> None:
    page = browser_page
    with served("--app", "tests.server.sample_app:agent") as server:
        assert server.token is not None
        page.goto(server.console)
        page.wait_for_selector("#diagram g.node")
        assert page.url == f"{server.url}/"  # the token left the address bar
        page.fill("#session-input", "console-token")
        page.fill("#prompt-input", "hello")
        page.click("#start-button")
        page.locator(".notice.end", has_text="run completed").wait_for()
        assert "from the application's agent" in page.inner_text("#transcript")
        with page.expect_response(lambda response: response.url.endswith("/sessions")) as listed:
            page.reload()  # the address has no token now: the page loads, and its calls carry the kept one
        assert listed.value.status == 200
        assert listed.value.request.headers["authorization"] == f"Bearer {server.token}"
        page.locator(".notice.end", has_text="run completed").wait_for()
        assert page.is_hidden("#start-error")

        page.evaluate("sessionStorage.clear()")
        page.reload()  # a tab without the token: the console says where to find it
        page.locator("#start-error", has_text="needs its token").wait_for()
