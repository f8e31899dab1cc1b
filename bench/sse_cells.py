"""The SSE workloads and their in-process twins, one per process: ``python -m bench.sse_cells CELL PARAMS``.

Prints one JSON object on its last line. ``stream`` and ``concurrent`` take
``"transport": "sse"`` (the service in its own process, read with httpx over
127.0.0.1) or ``"inprocess"`` (``client.start(...)`` and ``handle.events()`` in
this process): the same scripted runs, every event consumed either way.
``concurrent`` also takes ``"floor"`` or ``"floor-uvicorn"``: the service on that server answers the runs to
readers that record what they are sent, then the raw ASGI app ``bench.sse_floor_app`` on the same server
replays each run's recorded answers to the same readers (the server's cost alone, for the same traffic).
"""

from __future__ import annotations

import json
import resource
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from bench.sse_app import Shape, build
from bench.sse_floor import RecordedRun, Traffic
from bench.sse_server import ServerProcess, raise_fd_limit
from orchestrator import AgentRunConfig
from orchestrator.events import TextDeltaEvent

TERMINAL = ("run_completed", "run_failed", "run_cancelled")


@attrs.define
class Tally:
    """What one reader saw of one run."""

    events: int = 0
    deltas: int = 0
    last: str = ""
    problem: str | None = None
    seconds: float = 0.0
    writes: int = 0
    """Body chunks read over HTTP (the server's writes: one chunk each, unless a chunk arrived split)."""
    recording: RecordedRun | None = None
    """When set, what the server answered is kept in it (the server floor's traffic)."""

    def see(self, seq: int, name: str) -> None:
        if seq != self.events + 1 and self.problem is None:
            self.problem = f"event {self.events + 1} arrived as seq {seq}"
        self.events += 1
        self.last = name
        if name == TextDeltaEvent.kind:
            self.deltas += 1

    def finish(self) -> None:
        if self.problem is None and self.last not in TERMINAL:
            self.problem = f"the stream ended after {self.last or 'nothing'!r}, not a terminal event"


#: Never used (the service is plain HTTP on loopback); shared so no reader builds its own TLS context.
_TLS = ssl.create_default_context()


def _http(url: str) -> httpx.AsyncClient:
    """One reader's client, with a connection of its own.

    Every reader has its own client rather than all sharing one pool of 500
    connections: httpcore's pool looks at every connection for every request,
    which made the clients' process, not the server, the bottleneck (about
    260 µs of client CPU per event at 500 streams, most of it in that scan).
    """
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(120.0), verify=_TLS)


# reading --------------------------------------------------------------------------


async def read_sse(
    http: httpx.AsyncClient, session: str, connecting: trio.Semaphore | None = None, record: bool = False
) -> Tally:
    """Start one run over HTTP and read its whole event stream; every frame's data is decoded.

    ``connecting`` bounds how many readers open their connection (the POST) at once; with ``record``, the
    tally's ``recording`` keeps the answers' headers and bodies and every body chunk with its arrival time.
    """
    tally = Tally(recording=RecordedRun(session=session) if record else None)
    started = time.perf_counter()
    try:
        if connecting is None:
            posted = await http.post(f"/sessions/{session}/runs", json={"input": "go"})
        else:
            async with connecting:
                posted = await http.post(f"/sessions/{session}/runs", json={"input": "go"})
        if posted.status_code != 202:
            tally.problem = f"POST answered {posted.status_code}: {posted.text[:200]}"
            return tally
        if tally.recording is not None:
            tally.recording.accept(posted.headers.raw, posted.text)
        await _follow(http, posted.json()["request_id"], tally)
    except httpx.HTTPError as error:
        tally.problem = f"{type(error).__name__}: {error}"
        return tally
    tally.seconds = time.perf_counter() - started
    tally.finish()
    return tally


async def _follow(http: httpx.AsyncClient, request_id: str, tally: Tally) -> None:
    headers = {"Accept": "text/event-stream"}
    async with http.stream("GET", f"/runs/{request_id}/events", headers=headers) as response:
        if response.status_code != 200:
            tally.problem = f"GET events answered {response.status_code}: {(await response.aread())[:200]!r}"
            return
        buffer = ""
        recording = tally.recording
        if recording is not None:
            recording.stream(request_id, response.headers.raw)
        async for chunk in response.aiter_text():
            tally.writes += 1
            if recording is not None:
                recording.chunk(chunk)
            buffer += chunk
            *frames, buffer = buffer.split("\n\n")
            for frame in frames:
                fields = dict(line.split(": ", 1) for line in frame.split("\n"))
                data = json.loads(fields["data"])
                if "id" not in fields:  # an error or closing frame: the stream ends here, short of its run's end
                    tally.problem = f"the stream ended with event {fields.get('event')!r}: {str(data)[:160]}"
                    return
                tally.see(int(fields["id"]), fields["event"])
        if buffer:
            tally.problem = f"the response ended inside a frame: {buffer[:80]!r}"


#: Readers opening their connection at once: hypercorn listens with a backlog of 100 (its default,
#: which ``serve`` keeps), and connects beyond a full accept queue are reset by the kernel.
CONNECTING = 64


def connected_reader(url: str, record: bool = False) -> Any:
    """A reader that reads through a client of its own (one connection: see ``_http``)."""
    connecting = trio.Semaphore(CONNECTING)

    async def read(_: object, session: str) -> Tally:
        async with _http(url) as http:
            return await read_sse(http, session, connecting, record)

    return read


async def read_inprocess(client: Any, session: str) -> Tally:
    """Start one run with ``client.start`` and consume every event of ``handle.events()``."""
    tally = Tally()
    started = time.perf_counter()
    handle = await client.start("go", config=AgentRunConfig(session_id=session))
    async for event in handle.events():
        tally.see(event.seq, event.name)
    tally.seconds = time.perf_counter() - started
    tally.finish()
    return tally


# figures --------------------------------------------------------------------------


@attrs.define
class Clocks:
    """Wall time, this process's CPU time and (over SSE) the server process's CPU time."""

    server: ServerProcess | None
    wall: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float | None = None
    _started: tuple[float, float, float | None] = (0.0, 0.0, None)

    def __enter__(self) -> Clocks:
        self._started = (time.perf_counter(), time.process_time(), self._server_now())
        return self

    def _server_now(self) -> float | None:
        return self.server.cpu_seconds() if self.server is not None else None

    def __exit__(self, *exc: object) -> None:
        wall, cpu, server = self._started
        self.wall = time.perf_counter() - wall
        self.client_cpu = time.process_time() - cpu
        now = self._server_now()
        self.server_cpu = now - server if now is not None and server is not None else None


def _figures(clocks: Clocks, tallies: list[Tally]) -> dict[str, Any]:
    problems = [t.problem for t in tallies if t.problem]
    return {
        "wall_seconds": clocks.wall,
        "client_cpu_seconds": clocks.client_cpu,
        "server_cpu_seconds": clocks.server_cpu,
        "events": sum(t.events for t in tallies),
        "deltas": sum(t.deltas for t in tallies),
        "writes": sum(t.writes for t in tallies),
        "run_seconds": sorted(t.seconds for t in tallies if not t.problem),
        "failed_runs": len(problems),
        "problems": problems[:5],
    }


# cells ----------------------------------------------------------------------------


def stream(words: int, repeats: int, transport: str, timeout: float = 240.0) -> dict[str, Any]:
    """One run streaming ``words`` text deltas, read by one reader, ``repeats`` times after a warm-up."""
    shape = Shape(words=words)

    async def measure(read: Any, target: Any, server: ServerProcess | None) -> list[dict[str, Any]]:
        with trio.fail_after(timeout):
            await read(target, "warm-up")
            samples = []
            for repeat in range(repeats):
                with Clocks(server) as clocks:
                    tally = await read(target, f"s{repeat}")
                samples.append(_figures(clocks, [tally]))
            return samples

    async def main() -> list[dict[str, Any]]:
        if transport == "inprocess":
            return await measure(read_inprocess, await build(shape), None)
        with ServerProcess(shape, server=SERVER_OF[transport]) as server:
            async with _http(server.url) as http:
                return await measure(read_sse, http, server)

    _check(transport)
    return {"transport": transport, "words": words, "samples": trio.run(main)}


def concurrent(
    runs: int, latency: float, tool_turns: int, words: int, transport: str, timeout: float = 600.0
) -> dict[str, Any]:
    """``runs`` runs started at once, each read by its own reader (its own SSE stream over HTTP)."""
    shape = Shape(words=words, latency=latency, tool_turns=tool_turns)
    note = raise_fd_limit(2 * runs + 256) if transport in SERVER_OF or transport in FLOOR_OF else None

    async def measure(
        read: Any, target: Any, server: ServerProcess | None, tallies: list[Tally] | None = None
    ) -> dict[str, Any]:
        tallies = [] if tallies is None else tallies

        async def one(session: str) -> None:
            tallies.append(await read(target, session))

        with trio.fail_after(timeout):
            await read(target, "warm-up")
            with Clocks(server) as clocks:
                async with trio.open_nursery() as nursery:
                    for index in range(runs):
                        nursery.start_soon(one, f"c{index}")
        figures = _figures(clocks, tallies)
        if server is not None and server.failure():
            figures["problems"].append(server.failure())
        return figures

    async def main() -> dict[str, Any]:
        if transport == "inprocess":
            return await measure(read_inprocess, await build(shape), None)
        if transport in FLOOR_OF:
            return await measure_floor()
        with ServerProcess(shape, server=SERVER_OF[transport]) as server:
            return await measure(connected_reader(server.url), None, server)

    async def measure_floor() -> dict[str, Any]:
        # The service's own pass, every reader recording what it was sent; then the floor replays each run.
        recorded: list[Tally] = []
        with ServerProcess(shape, server=FLOOR_OF[transport]) as served:
            service = await measure(connected_reader(served.url, record=True), None, served, recorded)
        if service["failed_runs"]:
            return {**service, "problems": [f"recording the service: {p}" for p in service["problems"]]}
        traffic = Traffic.of([tally.recording for tally in recorded if tally.recording is not None])
        with tempfile.TemporaryDirectory(prefix="bench-sse-floor-") as directory:
            path = Path(directory) / "traffic.json"
            traffic.save(path)
            with ServerProcess(shape, server=FLOOR_OF[transport], floor=path) as server:
                figures = await measure(connected_reader(server.url), None, server)
        figures["recorded_writes"] = service["writes"]
        figures["recorded_server_cpu_seconds"] = service["server_cpu_seconds"]
        return figures

    _check(transport)
    figures = trio.run(main)
    return {
        "transport": transport,
        "runs": runs,
        "latency": latency,
        "tool_turns": tool_turns,
        "words": words,
        "ideal_seconds": shape.ideal_seconds,
        "fd_note": note,
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        **figures,
    }


SERVER_OF = {"sse": "hypercorn", "sse-uvicorn": "uvicorn"}
"""The server of each SSE transport."""

FLOOR_OF = {"floor": "hypercorn", "floor-uvicorn": "uvicorn"}
"""The server of each server-floor transport: ``bench.sse_floor_app`` replaying one run's traffic as the service
on that server answered it (recorded first, in the same cell)."""


def _check(transport: str) -> None:
    if transport not in (*SERVER_OF, *FLOOR_OF, "inprocess"):
        raise ValueError(f"transport must be one of {(*SERVER_OF, *FLOOR_OF, 'inprocess')}, not {transport!r}")


CELLS: dict[str, Callable[..., dict[str, Any]]] = {"stream": stream, "concurrent": concurrent}


def main(argv: list[str]) -> int:
    name, params = argv[0], json.loads(argv[1])
    print(json.dumps(CELLS[name](**params)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
