"""The request runtime: one request through the request machine, under trio.

``run`` (``RequestRun``: the loop, stepping, messages and the model call) is built from
``emission`` (numbering, streaming, delivering events), ``steering_points`` (asking the
inboxes) and ``edges`` (the machine's guards and named callbacks); ``tool_runner`` runs a
message's tool calls and ``response_checks`` checks a model's response. ``context`` is what
hooks see of a request, ``pending`` the calls that wait for an answer, ``handle`` and
``stream`` how a request is started and read, ``sinks`` where its events go. ``ports``
states what the runtime needs of an agent and of its extensions; nothing here imports the
``Agent`` class or an extension.

``RequestRun``, ``Restored``, ``YIELD_EVERY_CALLS`` and ``CLEANUP_SECONDS`` are re-exported here.
"""

from orchestrator.runtime.restored import Restored
from orchestrator.runtime.run import CLEANUP_SECONDS, YIELD_EVERY_CALLS, RequestRun

__all__ = ["CLEANUP_SECONDS", "YIELD_EVERY_CALLS", "RequestRun", "Restored"]
