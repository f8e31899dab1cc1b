"""Hypothesis profiles: a quick default, and ``--hypothesis-profile=long`` for thousands of examples."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

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
