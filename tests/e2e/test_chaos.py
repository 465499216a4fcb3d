"""A CI-sized chaos run (scripts/chaos, fixed seed): every fault kind against a real fleet of
exec workers (task processes, lease keepers) on loopback, then the journal checker's verdict.
Longer runs are for people: ``scripts/chaos --duration 180 --workers 6 --replicas 2``."""

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
    # The workers ran exec tasks: every SIGSTOPped agent's lease keeper ended its tasks (the
    # checker's "keeper" and "exclusive" rules judged them: no two live processes for a task).
    assert r["run"]["handler"] == "exec" and r["zombie_overlaps"]["count"] == 0
    frozen = {f["target"] for f in r["faults"]["list"] if f["kind"] == "stop_worker"}
    keeper_lines = {p.name.split(".")[0] for p in (tmp_path / "journals").glob("*.jsonl")
                    if '"by":"keeper"' in p.read_text()}
    assert frozen <= keeper_lines, (frozen, keeper_lines)
    counters = r["supervisor"]["counters"]
    assert counters["decode_errors"] == 0 and counters["bad_frames"] == 0
