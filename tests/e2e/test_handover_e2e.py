"""Exec tasks outlive their agent, end to end: a real supervisor, real exec workers with their
lease keepers, real task processes.

The process table and the journals are the judges: every task process appends its pid to
``pids/TASK.WORKER`` and execs ``sleep`` (a restart would append a second pid), the journals
record every start, stop and adoption with its token, and the supervisor's change feed every
move. A sampler thread reads the process table every few milliseconds while agents come and
go: a task with no live process at some instant is a coverage gap.
"""

from __future__ import annotations

import signal
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ..support import Proc, alive, wait_until
from .fleetprocs import journal, running_now
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e

SAMPLE_S = 0.01


def task_pids(pid_dir: Path) -> dict[str, dict[str, list[int]]]:
    """task -> worker -> the pids its processes there had, in start order."""
    out: dict[str, dict[str, list[int]]] = {}
    for f in pid_dir.iterdir():
        task, worker = f.name.rsplit(".", 1)
        out.setdefault(task, {})[worker] = [int(x) for x in f.read_text().split()]
    return out


def exec_agent(procs: Procs, sup: Supervisor, wid: str, pid_dir: Path, max_load: float,
               n: int = 0) -> Proc:
    """A `corral-worker run` with exec tasks; ``n`` tells incarnations' logs apart."""
    cmd = f"sh -c 'echo $$ >> \"$0/$CORRAL_TASK.$CORRAL_WORKER\"; exec sleep 600' {pid_dir}"
    return procs.start(f"{wid}.{n}", [
        str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint, "--id", wid,
        "--max-load", str(max_load), "--handler", "exec", "--exec", cmd, "--stop-grace", "0.5",
        "--journal", str(procs.tmp / f"{wid}.journal"), "--drain-timeout", "10"],
        env={"CORRAL_LOG_JSON": "1"})


class Sampler(threading.Thread):
    """Reads the process table until stopped: the instants some task had no live process,
    and the most live processes any task had at once."""

    def __init__(self, pids: dict[str, list[int]]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.gaps: list[tuple[float, str]] = []
        self.most = 0
        self.samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            t = time.monotonic()
            for task, ps in self.pids.items():
                n = sum(alive(p) for p in ps)
                self.most = max(self.most, n)
                if n == 0:
                    self.gaps.append((t, task))
            self.samples += 1
            self._done.wait(SAMPLE_S)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def feed_after(sup: Supervisor, cursor: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = sup.query("events", after=cursor, limit=5000)
        out += page["events"]
        if page["cursor"] == cursor:
            return out
        cursor = page["cursor"]


def test_a_fleet_upgrade_restarts_no_task_and_moves_none(procs: Procs) -> None:
    workers, per = 6, 60
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"t{i:03d}\n" for i in range(workers * per)))
    sup = Supervisor(procs, f"file:{tasks}", lease=10, lease_margin=2, tick=0.25,
                     expect_workers=workers, warmup=30, report_interval=0.5)
    pid_dir = procs.tmp / "pids"
    pid_dir.mkdir()
    ids = [f"w{i}" for i in range(workers)]
    agents = {w: exec_agent(procs, sup, w, pid_dir, per + 20) for w in ids}
    settle(sup, procs, ids, workers * per)
    before = task_pids(pid_dir)
    assert all(len(ws) == 1 and len(ps) == 1 for ws in before.values() for ps in ws.values())
    owner = {t: next(iter(ws)) for t, ws in before.items()}
    tokens = {e["task"]: e["token"] for w in ids for e in journal(procs, w)
              if e["event"] == "start"}
    lines = {w: len(journal(procs, w)) for w in ids}
    cursor = sup.query("events", limit=1)["cursor"]

    def adopted(w: str) -> int:
        return sum(1 for e in journal(procs, w)[lines[w]:] if e["event"] == "adopt")

    def reported(w: str) -> tuple[str, int] | None:
        rows = sup.query("workers", limit=5000)["workers"]
        return next(((r["state"], r["running"]) for r in rows if r["id"] == w), None)

    def upgraded(w: str, mine: int) -> bool:
        return adopted(w) == mine and reported(w) == ("ready", mine)

    sampler = Sampler({t: [ps[0] for ps in ws.values()] for t, ws in before.items()})
    sampler.start()
    try:
        for n, w in enumerate(ids, start=1):
            mine = sum(1 for t in owner if owner[t] == w)
            agents[w].signal(signal.SIGUSR2)
            assert agents[w].wait(30) == 0
            agents[w] = exec_agent(procs, sup, w, pid_dir, per + 20, n)
            wait_until(partial(upgraded, w, mine), timeout=30,
                       what=f"{w}'s successor adopting its {mine} tasks and reporting them")
        wait_until(lambda: sup.query("counters")["handovers"] == workers,
                   what="every successor took its id over at once")
    finally:
        sampler.stop()
    assert sampler.samples >= 2 * workers and sampler.gaps == [], sampler.gaps[:5]
    assert task_pids(pid_dir) == before  # every process kept its pid; nothing restarted
    for w in ids:
        new = journal(procs, w)[lines[w]:]
        assert [e for e in new if e["event"] != "adopt"] == [], f"{w}: a start or stop"
        assert {e["task"]: e["token"] for e in new} == \
            {t: tokens[t] for t in owner if owner[t] == w}  # every task kept its token
    events = feed_after(sup, cursor)
    assert [e for e in events if e["kind"] in ("move", "timeout", "handoff")] == []
    assert sum(e["kind"] == "restart" for e in events) == workers
    rows = sup.query("tasks", limit=5000)["tasks"]
    assert {r["task"]: r["owners"] for r in rows} == {t: [w] for t, w in owner.items()}
    assert {r["task"]: r["tokens"][owner[r["task"]]] for r in rows} == tokens


def small_fleet(procs: Procs, lease: float = 3.0) -> tuple[Supervisor, dict[str, Proc], Path]:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"room-{i}\n" for i in range(6)))
    sup = Supervisor(procs, f"file:{tasks}", lease=lease, lease_margin=1.0, tick=0.25,
                     expect_workers=2, warmup=10)
    pid_dir = procs.tmp / "pids"
    pid_dir.mkdir()
    agents = {w: exec_agent(procs, sup, w, pid_dir, 10) for w in ("a", "b")}
    settle(sup, procs, ["a", "b"], 6)
    return sup, agents, pid_dir


def settle(sup: Supervisor, procs: Procs, ids: list[str], n: int) -> None:
    """Every task running on one worker, and nothing moving (no hand-off, balanced)."""
    def settled() -> bool:
        owners = running_now(procs, ids)
        if len(owners) != n or any(len(ws) != 1 for ws in owners.values()):
            return False  # (the supervisor answers only once it has placed them)
        st = sup.query("status")
        return st["tasks_pending"] == 0 and st["balanced"] and not st["handoffs"]
    wait_until(settled, timeout=120, what="a settled fleet")


def test_an_agent_killed_and_restarted_within_its_lease_restarts_nothing(
        procs: Procs) -> None:
    sup, agents, pid_dir = small_fleet(procs, lease=10.0)
    before = task_pids(pid_dir)
    mine = sorted(t for t, ws in before.items() if "a" in ws)
    assert mine
    cursor = sup.query("events", limit=1)["cursor"]
    agents["a"].kill()
    exec_agent(procs, sup, "a", pid_dir, 10, 1)
    wait_until(lambda: sorted(e["task"] for e in journal(procs, "a")
                              if e["event"] == "adopt") == mine, what="a's tasks adopted")
    wait_until(lambda: any(r["id"] == "a" and r["running"] == len(mine)
                           for r in sup.query("workers")["workers"]), what="a reporting them")
    assert task_pids(pid_dir) == before
    assert all(alive(ps[0]) for ws in before.values() for ps in ws.values())
    assert [e for w in ("a", "b") for e in journal(procs, w) if e["event"] == "stop"] == []
    assert [e for e in feed_after(sup, cursor) if e["kind"] in ("move", "timeout")] == []


@pytest.mark.parametrize("how", ["kill", "usr2"])
def test_an_agent_that_does_not_come_back_loses_its_tasks_only_at_its_lease_s_end(
        procs: Procs, how: str) -> None:
    lease = 3.0
    _, agents, pid_dir = small_fleet(procs, lease=lease)
    before = task_pids(pid_dir)
    mine = sorted(t for t, ws in before.items() if "a" in ws)
    theirs = {t: before[t]["a"][0] for t in mine}
    gone = time.monotonic()
    if how == "kill":
        agents["a"].kill()
    else:
        agents["a"].signal(signal.SIGUSR2)
        assert agents["a"].wait() == 0
    overlaps: list[str] = []
    while not all(any(e["task"] == t and e["event"] == "start"
                      for e in journal(procs, "b")) for t in mine):
        assert time.monotonic() < gone + 30, "b never got a's tasks"
        taken = {e["task"] for e in journal(procs, "b") if e["event"] == "start"}  # first
        live = {t for t, p in theirs.items() if alive(p)}
        overlaps += sorted(taken & live)  # b started it while a's process still lived
        time.sleep(SAMPLE_S)
    assert overlaps == [], f"two live processes for {sorted(set(overlaps))}"
    stops = {e["task"]: e for e in journal(procs, "a") if e["event"] == "stop"}
    assert sorted(stops) == mine and all(e["by"] == "keeper" for e in stops.values())
    starts = {e["task"]: e["t"] for e in journal(procs, "b") if e["event"] == "start"}
    for t in mine:
        stop = stops[t]
        assert stop["cause"] == "lease" and stop["deadline"] > gone  # ran on past the agent
        assert stop["deadline"] <= stop["t"] <= stop["deadline"] + 1.0  # to the lease's end
        assert starts[t] > stop["t"]  # and only then elsewhere
