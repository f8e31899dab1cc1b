"""The MCP connection machine: one configured MCP server, from first use to shutdown.

A server starts when the first request needs its tools, and is ready once it
has answered the protocol's handshake and listed its tools. A server that
cannot be started, crashes, drops its connection or does not answer a call in
time is failed: its calls get failed results, and the next request that needs
it restarts it. Closing the extension closes the connection from any state.
"""

from __future__ import annotations

from machines.definition import MachineDefinition, Region, State, Transition

MCP_CONNECTION = MachineDefinition(
    name="mcp_connection",
    doc="One MCP server's connection: started on first use, restarted after a failure, closed with its extension.",
    regions=(
        Region(
            name="connection",
            attribute="state",
            initial="idle",
            states=(
                State("idle", "configured; no request has needed it yet"),
                State("connecting", "the command runs (or the URL is opened); handshake and tool listing under way"),
                State("ready", "initialized; its tools are offered and its calls are sent"),
                State("failed", "could not start, crashed or timed out; its calls get failed results"),
                State("closed", "its extension closed; the process is stopped", final=True),
            ),
            transitions=(
                Transition("start", "idle", "connecting", doc="the first request that needs its tools"),
                Transition("establish", "connecting", "ready", doc="handshake done, tools listed"),
                Transition("fail", "connecting", "failed", doc="could not start, initialize or list tools in time"),
                Transition("fail", "ready", "failed", doc="crashed, dropped the connection or did not answer in time"),
                Transition("restart", "failed", "connecting", doc="the next request that needs it"),
                Transition("close", ("idle", "connecting", "ready", "failed"), "closed", doc="its extension closed"),
            ),
        ),
    ),
)
