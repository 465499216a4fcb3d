"""Shared test configuration: deterministic hypothesis runs (seeded, no deadline)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Derandomized so a CI run is reproducible; CORRAL_HYPOTHESIS=dev explores new examples.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
settings.register_profile("dev", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("CORRAL_HYPOTHESIS", "ci"))
