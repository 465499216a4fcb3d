"""Failure domains and label constraints end to end, with real processes.

A whole zone dies at once (kill -9 of every worker in it): because the two replicas of every
task sit in distinct zones, no task ever loses its last running replica, and after lease +
margin every task is back to two replicas in the two zones left, the survivors' loads within
one of each other; when the zone comes back, the tasks spread over three zones again and
every worker ends within one of the others — at the supervisor's defaults. A task that
requires a label runs only on workers that have it, and with none alive it is pending with its
reason.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from ..support import wait_until
from .fleetprocs import Span, intervals, running_now, start_worker, uncovered
from .procs import BIN, Procs, Supervisor, write_json

pytestmark = pytest.mark.e2e

LEASE, MARGIN, TICK = 3.0, 1.0, 0.25
ZONES = {"a": "eu-1/r1", "b": "eu-1/r1", "c": "eu-2/r1", "d": "eu-2/r2", "e": "eu-3/r1",
         "f": "eu-3/r1"}
TASKS = 60


def cut(spans: list[Span], dead: set[str], at: float) -> list[Span]:
    """A kill -9 leaves no stop line: a dead worker's open spans end when it died."""
    return [Span(s.task, s.worker, s.start, at) if s.worker in dead and s.stop is None else s
            for s in spans]


def top(zone: str) -> str:
    return zone.split("/")[0]


@pytest.mark.timeout(180)
def test_a_whole_zone_dies_and_no_task_loses_its_last_replica(procs: Procs) -> None:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"room-{i:02d}\n" for i in range(TASKS)))
    sup = Supervisor(procs, f"file:{tasks}", lease=LEASE, lease_margin=MARGIN, tick=TICK,
                     replicas=2, expect_workers=len(ZONES), warmup=10)
    workers = {w: start_worker(procs, sup, w, 40, "--zone", z) for w, z in ZONES.items()}
    names = sorted(workers)

    def spread_in(zones: set[str]) -> bool:
        # Only the zones' live workers: a killed one's journal never says its tasks stopped.
        now = running_now(procs, [w for w in names if top(ZONES[w]) in zones])
        return len(now) == TASKS and all(
            len(ws) == 2 and len({top(ZONES[w]) for w in ws}) == 2
            and {top(ZONES[w]) for w in ws} <= zones for ws in now.values())

    wait_until(lambda: spread_in({"eu-1", "eu-2", "eu-3"}), timeout=30,
               what="60 tasks x 2 replicas in distinct zones")
    spread_at = time.monotonic()
    rows = {w["id"]: w for w in sup.ctl("workers")["workers"]}
    assert {w: rows[w]["zone"] for w in names} == ZONES  # reported, shown by corralctl
    assert sup.ctl("status")["zone_degraded"] == 0

    killed_at = time.monotonic()
    for w in ("a", "b"):
        workers[w].signal(signal.SIGKILL)
    for w in ("a", "b"):
        workers[w].wait(10)
    wait_until(lambda: spread_in({"eu-2", "eu-3"}), timeout=LEASE + MARGIN + 20,
               what="every task back to 2 replicas in eu-2 and eu-3")
    end = time.monotonic()
    spans = cut(intervals(procs, names), {"a", "b"}, killed_at)
    gaps = {t: g for t in (f"room-{i:02d}" for i in range(TASKS))
            if (g := uncovered(spans, t, spread_at, end))}
    assert gaps == {}, f"tasks that lost their last running replica: {sorted(gaps)}"
    # The supervisor agrees: nothing pending, nothing zone-degraded.
    wait_until(lambda: sup.ctl("status")["tasks_pending"] == 0, what="no pending replica")
    assert sup.ctl("status")["zone_degraded"] == 0
    # At the default tolerance the survivors (equal max loads) end within one of each other.
    wait_until(lambda: settled(sup) and within_one(loads(sup)), timeout=30,
               what="the survivors balanced within one")

    # The zone comes back, empty: rebalance passes spread every task over three zones again
    # and every worker ends within one of the others (40 each), at the defaults.
    for w in ("a", "b"):
        workers[w] = start_worker(procs, sup, w, 40, "--zone", ZONES[w])

    def spread_again() -> bool:  # by the supervisor: the killed ones' journals never closed
        owners = sup.ctl("assignments")["assignments"]
        return len(owners) == TASKS and all(
            len(ws) == 2 and len({top(ZONES[w]) for w in ws}) == 2 for ws in owners.values())

    wait_until(lambda: spread_again() and settled(sup) and within_one(loads(sup)), timeout=60,
               what="60 tasks x 2 over three zones again, loads within one")
    assert loads(sup) == dict.fromkeys(names, 20.0)
    assert sup.ctl("status")["zone_degraded"] == 0


def settled(sup: Supervisor) -> bool:
    status = sup.ctl("status")
    return bool(status["balanced"]) and status["handoffs"] == 0 and status["tasks_pending"] == 0


def loads(sup: Supervisor) -> dict[str, float]:
    return {w["id"]: w["running"] for w in sup.ctl("workers")["workers"] if w["active"]}


def within_one(got: dict[str, float]) -> bool:
    return max(got.values()) - min(got.values()) <= 1


@pytest.mark.timeout(120)
def test_a_required_label_is_a_hard_constraint(procs: Procs) -> None:
    tasks = procs.tmp / "tasks.json"
    gpu = [f"train-{i}" for i in range(4)]
    plain = [f"room-{i}" for i in range(8)]
    write_json(tasks, [{"id": t, "require": {"gpu": "true"}} for t in gpu]
               + [{"id": t} for t in plain])
    sup = Supervisor(procs, f"file:{tasks}", lease=LEASE, lease_margin=MARGIN, tick=TICK,
                     expect_workers=3, warmup=10)
    g = start_worker(procs, sup, "g", 10, "--label", "gpu=true", "--label", "disk=ssd")
    start_worker(procs, sup, "p", 10, "--label", "gpu=false")
    start_worker(procs, sup, "q", 10)
    wait_until(lambda: len(running_now(procs, ["g", "p", "q"])) == len(gpu) + len(plain),
               timeout=30, what="every task running")
    now = running_now(procs, ["g", "p", "q"])
    assert all(now[t] == ["g"] for t in gpu), now
    ever = {s.task for s in intervals(procs, ["p", "q"])}
    assert not ever & set(gpu), "a gpu task ran on a worker without gpu=true"

    g.signal(signal.SIGKILL)
    g.wait(10)

    def pending_rows() -> dict[str, str]:
        rows = sup.ctl("tasks", "--pending")["tasks"]
        return {r["task"]: r["pending_reason"] for r in rows}

    rows = wait_until(lambda: (r := pending_rows()).keys() == set(gpu) and r,
                      timeout=LEASE + MARGIN + 15, what="the gpu tasks pending")
    assert all("gpu=true" in why for why in rows.values()), rows
    # Never placed wrongly: the plain workers still run none of them.
    assert not {s.task for s in intervals(procs, ["p", "q"])} & set(gpu)
    text = subprocess.run([str(BIN / "corralctl"), "--control", sup.control, "tasks",
                           "--pending"], capture_output=True, text=True, timeout=30)
    assert text.returncode == 0, text.stderr
    assert "WHY PENDING" in text.stdout and "gpu=true" in text.stdout
    # A labelled worker comes back: the pending tasks land on it, and only on it.
    start_worker(procs, sup, "h", 10, "--label", "gpu=true")
    wait_until(lambda: all(running_now(procs, ["h", "p", "q"]).get(t) == ["h"] for t in gpu),
               timeout=20, what="the gpu tasks on h")
    assert sup.ctl("status")["tasks_pending"] == 0
