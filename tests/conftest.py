"""Shared test configuration: deterministic hypothesis runs (seeded, no deadline), and a
runtime directory of its own for every test (``XDG_RUNTIME_DIR``: where ``exec`` workers'
lease keepers listen), whose keepers are ended with their tasks when the test ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from .etcd_server import Etcd
from .support import end_keepers

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under scripts/test (CORRAL_NO_SKIPS=1) a skipped test fails: it installs what every
    test needs, so a skip means something is missing, never a test quietly not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CORRAL_NO_SKIPS") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped under scripts/test, which should provide what it needs: " \
                          f"{report.longrepr}"


@pytest.fixture()
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A real etcd on loopback for this test, stopped by pid afterwards."""
    server = Etcd(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's XDG_RUNTIME_DIR (short: socket paths are), for every process it starts:
    no two tests — nor other test runs on this machine — share a worker's lease keeper."""
    root = Path(tempfile.mkdtemp(prefix="corral-run-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root))
    try:
        yield root
    finally:
        end_keepers(root)
        shutil.rmtree(root, ignore_errors=True)
