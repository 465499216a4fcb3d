"""A rolling restart of every worker, end to end at the supervisor's defaults (issue 31).

Six equal workers (max load 20) run 60 tasks; each in turn gets SIGTERM (it drains:
make-before-break hand-offs to the others, then exits 0) and starts again under the same id,
empty; the supervisor rebalances toward it. At the end every task runs exactly once and the
loads are within one of each other — the documented criterion at the default tolerance
(τ = 0; at the old 0.05 a restart ended at 9/10/10/10/10/11) — and no task was ever left
without a running replica. (A worker back under its id at once, its old connection found
gone, used to ask for no rebalance pass: it stayed empty, the others at 12.)
"""

from __future__ import annotations

import signal
import time

import pytest

from ..support import wait_until
from .fleetprocs import intervals, running_now, start_worker, uncovered
from .procs import Procs, Supervisor

pytestmark = pytest.mark.e2e

WORKERS = [f"w{i}" for i in range(6)]
TASKS = 60


def settled(sup: Supervisor) -> bool:
    status = sup.ctl("status")
    return bool(status["balanced"]) and status["handoffs"] == 0 and status["tasks_pending"] == 0


def loads(sup: Supervisor) -> dict[str, float]:
    return {w["id"]: w["running"] for w in sup.ctl("workers")["workers"] if w["active"]}


@pytest.mark.timeout(300)
def test_a_rolling_restart_ends_with_loads_within_one_and_every_task_covered(
        procs: Procs) -> None:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"room-{i:02d}\n" for i in range(TASKS)))
    sup = Supervisor(procs, f"file:{tasks}", expect_workers=len(WORKERS), warmup=10)
    workers = {w: start_worker(procs, sup, w, 20) for w in WORKERS}

    def every_task_once() -> bool:
        now = running_now(procs, WORKERS)
        return len(now) == TASKS and all(len(ws) == 1 for ws in now.values())

    wait_until(lambda: every_task_once() and settled(sup), timeout=60,
               what="60 tasks running once, balanced")
    began = time.monotonic()
    for w in WORKERS:
        workers[w].signal(signal.SIGTERM)
        assert workers[w].wait(30) == 0, f"{w} did not drain and exit cleanly"
        workers[w] = start_worker(procs, sup, w, 20)
        wait_until(lambda w=w: loads(sup).get(w, 0) > 0 and every_task_once() and settled(sup),
                   timeout=60, what=f"{w} back with tasks, balanced")
    got = loads(sup)
    assert max(got.values()) - min(got.values()) <= 1, got
    assert sorted(got.values()) == [10.0] * 6, got
    spans = intervals(procs, WORKERS)
    gaps = {t: g for t in (f"room-{i:02d}" for i in range(TASKS))
            if (g := uncovered(spans, t, began, time.monotonic()))}
    assert gaps == {}, f"tasks left without a running replica: {sorted(gaps)}"
