"""Hypothesis profiles (a quick default, and ``--hypothesis-profile=long`` for thousands of examples), and a
home of the test run's own for the user data and settings directories."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings

# The user's own data and settings stay out of the tests (and the tests out of them): the default session
# database and the user settings file live under a home of the test run's own, subprocesses included.
_HOME = tempfile.mkdtemp(prefix="orchestrator-tests-home-")
atexit.register(shutil.rmtree, _HOME, True)
os.environ["XDG_DATA_HOME"] = os.path.join(_HOME, "data")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_HOME, "config")

settings.register_profile(
    "default",
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=3000,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")

# A throwaway PostgreSQL server, for the tests that need one (see tests/pg.py).
from pg import postgres_dsn, postgres_server, stoppable_postgres  # noqa: E402, F401
