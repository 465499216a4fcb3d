"""Shared test configuration: deterministic hypothesis runs (seeded, no deadline)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from .etcd_server import Etcd

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


@pytest.fixture()
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A real etcd on loopback for this test, stopped by pid afterwards."""
    server = Etcd(tmp_path)
    try:
        yield server
    finally:
        server.stop()
