"""A frozen ``exec`` worker, end to end: a real supervisor, two real exec workers (each with its
lease keeper), real task processes; one agent SIGSTOPped for lease + margin + 3 s.

The process table is the judge: every task process writes its pid into ``pids/TASK.WORKER``
and execs ``sleep``, so the test knows which processes run which task where, and samples them
(reading the other worker's journal first, then the process table: a start line seen before a
process is seen alive means both lived at that instant).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from ..support import Proc, alive, wait_until
from .fleetprocs import intervals, journal, running_now, start_worker
from .procs import Procs, Supervisor

pytestmark = pytest.mark.e2e

LEASE, MARGIN, TICK = 3.0, 1.0, 0.25
TASKS = 6
FREEZE = LEASE + MARGIN + 3.0
SAMPLE_S = 0.02


def task_pids(pid_dir: Path, worker: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in pid_dir.glob(f"*.{worker}"):
        out[f.name.rsplit(".", 1)[0]] = [int(x) for x in f.read_text().split()]
    return out


def exec_worker(procs: Procs, sup: Supervisor, name: str, pid_dir: Path) -> Proc:
    cmd = f"sh -c 'echo $$ >> \"$0/$CORRAL_TASK.$CORRAL_WORKER\"; exec sleep 600' {pid_dir}"
    return start_worker(procs, sup, name, 10, "--handler", "exec", "--exec", cmd,
                        "--stop-grace", "0.5")


def test_a_frozen_exec_worker_s_tasks_end_before_anyone_else_gets_them(procs: Procs) -> None:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"room-{i}\n" for i in range(TASKS)))
    sup = Supervisor(procs, f"file:{tasks}", lease=LEASE, lease_margin=MARGIN, tick=TICK,
                     expect_workers=2, warmup=10)
    pid_dir = procs.tmp / "pids"
    pid_dir.mkdir()
    a = exec_worker(procs, sup, "a", pid_dir)
    exec_worker(procs, sup, "b", pid_dir)
    wait_until(lambda: len(running_now(procs, ["a", "b"])) == TASKS, what="every task running")
    mine = sorted(t for t, ws in running_now(procs, ["a", "b"]).items() if ws == ["a"])
    assert mine
    frozen_pids = wait_until(lambda: (p := task_pids(pid_dir, "a")).keys() >= set(mine) and p)
    assert all(alive(p) for t in mine for p in frozen_pids[t])

    a.signal(signal.SIGSTOP)
    frozen = time.monotonic()
    overlaps: list[str] = []
    all_gone: float | None = None
    try:
        while time.monotonic() < frozen + FREEZE:
            taken = {e["task"] for e in journal(procs, "b")
                     if e["event"] == "start" and e["t"] >= frozen}
            live = {t for t in mine if any(alive(p) for p in frozen_pids[t])}
            overlaps += sorted(taken & live)
            if not live and all_gone is None:
                all_gone = time.monotonic()
            time.sleep(SAMPLE_S)
        moved = {e["task"]: e["t"] for e in journal(procs, "b")
                 if e["event"] == "start" and e["t"] >= frozen}
    finally:
        a.signal(signal.SIGCONT)
    assert overlaps == [], f"two live processes for {sorted(set(overlaps))}"
    assert all_gone is not None and all_gone - frozen < LEASE + 1.0
    assert set(mine) <= set(moved), "the supervisor gave the frozen worker's tasks away"
    # The keeper's stop lines: each task ended after the lease's end, before its new start.
    stops = {e["task"]: e["t"] for e in journal(procs, "a")
             if e["event"] == "stop" and e.get("by") == "keeper"}
    assert set(stops) == set(mine)
    for t in mine:
        assert stops[t] < moved[t], (t, stops[t], moved[t])

    # Awake again: a recovers (or exits cleanly); it restarts nothing it no longer owns, and
    # the fleet settles with every task run exactly once.
    woke = time.monotonic()
    # SIGCONT is not a promise that the agent has run yet: wait for its own account first,
    # or the checks below could pass on a fleet that a has not touched since it froze.
    wait_until(lambda: "lease lost" in a.output(), timeout=10, what="a logs its lost lease")
    wait_until(lambda: sorted(len(ws) for ws in running_now(procs, ["a", "b"]).values())
               == [1] * TASKS, timeout=20, what="every task on one worker")
    for span in intervals(procs, ["a"]):
        if span.start >= woke:  # whatever a starts now was given to it again
            assert span.task in running_now(procs, ["a"]) or span.stop is not None
    live_now: dict[str, int] = {}
    for w in ("a", "b"):
        for t, ps in task_pids(pid_dir, w).items():
            live_now[t] = live_now.get(t, 0) + sum(alive(p) for p in ps)
    assert sorted(live_now.values()) == [1] * TASKS, live_now
    assert a.alive() or a.wait(1) == 0
