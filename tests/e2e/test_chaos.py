"""A CI-sized chaos run (scripts/chaos, fixed seed): every fault kind against a real fleet on
loopback, then the journal checker's verdict. Longer runs are for people:
``scripts/chaos --duration 180 --workers 6 --replicas 2``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SEED = 11
KINDS = {"kill_worker", "stop_worker", "drain_worker", "join", "kill_supervisor", "partition",
         "delay", "ctl_drain", "tasks"}


@pytest.mark.timeout(180)
def test_a_ci_sized_chaos_run_keeps_every_task_covered_and_never_doubled(
        tmp_path: Path) -> None:
    out = subprocess.run(
        [str(ROOT / "scripts" / "chaos"), "--duration", "55", "--seed", str(SEED),
         "--workers", "4", "--replicas", "2", "-o", "json", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=170, check=False)
    assert out.stdout, out.stderr
    r = json.loads(out.stdout)
    assert r["violations"] == [], json.dumps(r["violations"], indent=1)
    assert r["lost_tasks"] == []
    assert out.returncode == 0 and r["ok"]
    assert set(r["faults"]["by_kind"]) == KINDS, r["faults"]["by_kind"]
    assert r["handoff_overlaps"]["count"] > 0  # drains and rebalances happened
    counters = r["supervisor"]["counters"]
    assert counters["decode_errors"] == 0 and counters["bad_frames"] == 0
