"""The wire format (``format``: events, messages and errors as JSON) and the JSON Schema it is written in (``schema``).

Every name of ``orchestrator.wire.format.__all__`` is re-exported here: ``orchestrator.wire.dumps``
and ``from orchestrator.wire import encode_event`` keep working.
"""

from orchestrator.wire.format import *  # noqa: F403 (the public face of the format module)
from orchestrator.wire.format import __all__ as __all__
