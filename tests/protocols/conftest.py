"""``serving``: the app served by each host in turn (hypercorn's trio worker, uvicorn on asyncio)."""

from __future__ import annotations

import pytest

from tests.server.support import HOSTS, Serving, serving_on


@pytest.fixture(params=HOSTS)
def serving(request: pytest.FixtureRequest) -> Serving:
    return serving_on(request.param)
