"""Fencing tokens end to end: real workers journal the token of every task they start; across a
kill -9 failover, a drain hand-off, a supervisor restart and an HA leader change, each task's
token only grows whenever it goes to another owner."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from corral.client import ControlClient
from corral.client.errors import ControlFailed, Unreachable
from corral.common.wire.protocol import token_epoch

from ..etcd_server import Etcd
from ..support import wait_until
from .fleetprocs import journal, running_now, start_worker
from .procs import Procs, Supervisor

pytestmark = pytest.mark.e2e

TASKS = 8


def tasks_file(tmp: Path) -> Path:
    f = tmp / "tasks.txt"
    f.write_text("".join(f"room-{i}\n" for i in range(TASKS)))
    return f


def starts(procs: Procs, workers: list[str]) -> dict[str, list[tuple[float, str, int]]]:
    """Per task: (time, worker, token) of every start, in time order."""
    out: dict[str, list[tuple[float, str, int]]] = {}
    for w in workers:
        for e in journal(procs, w):
            if e["event"] == "start":
                out.setdefault(e["task"], []).append((e["t"], w, e["token"]))
    return {t: sorted(v) for t, v in out.items()}


def check_tokens_grow(history: dict[str, list[tuple[float, str, int]]]) -> int:
    """Every start by another owner carries a token above every earlier one of that task;
    returns how many such hand-overs there were."""
    handovers = 0
    for task, events in history.items():
        best, last_worker = 0, None
        for _, worker, token in events:
            assert token > 0, f"{task}: started without a fencing token"
            if worker != last_worker and last_worker is not None:
                assert token > best, f"{task}: {worker} got token {token} <= {best}: {events}"
                handovers += 1
            else:
                assert token >= best, f"{task}: token went back: {events}"
            best, last_worker = max(best, token), worker
    return handovers


def every_task_running(procs: Procs, workers: list[str]) -> bool:
    now = running_now(procs, workers)
    return len(now) == TASKS and all(len(v) == 1 for v in now.values())


@pytest.mark.timeout(150)
def test_tokens_grow_across_failover_drain_and_supervisor_restart(procs: Procs) -> None:
    sup = Supervisor(procs, f"file:{tasks_file(procs.tmp)}", expect_workers=3, warmup=3,
                     lease=3, lease_margin=1, tick=0.25)
    workers = {w: start_worker(procs, sup, w, 10) for w in ("a", "b", "c")}
    names = list(workers)
    wait_until(lambda: every_task_running(procs, names), what="every task running")
    epoch1 = sup.ctl("status")["epoch"]
    workers["a"].signal(signal.SIGKILL)  # a failover: a's tasks go to b and c
    workers["a"].wait(5)
    wait_until(lambda: every_task_running(procs, ["b", "c"]), timeout=20, what="failover")
    sup.ctl("drain", "b")  # a hand-off: b's tasks go to c (make-before-break)
    wait_until(lambda: not running_now(procs, ["b"]), timeout=20, what="b drained")
    sup.proc.signal(signal.SIGKILL)  # a supervisor restart: a new epoch
    sup.proc.wait(5)
    sup.start("supervisor-2")
    wait_until(lambda: sup.ctl("status", check=False).returncode == 0
               and sup.ctl("status")["phase"] == "running", timeout=20, what="running again")
    assert sup.ctl("status")["epoch"] == epoch1 + 1
    start_worker(procs, sup, "d", 10)  # work moves to the newcomer under the new epoch
    wait_until(lambda: len(running_now(procs, ["d"])) >= 2, timeout=30, what="d takes a share")
    history = starts(procs, [*names, "d"])
    assert check_tokens_grow(history) >= TASKS
    moved_late = [tok for events in history.values() for t, w, tok in events if w == "d"]
    assert all(token_epoch(tok) == epoch1 + 1 for tok in moved_late)


@pytest.mark.timeout(150)
def test_tokens_grow_across_an_ha_leader_change(procs: Procs, etcd: Etcd) -> None:
    tasks = tasks_file(procs.tmp)
    sups = [Supervisor(procs, f"file:{tasks}", name=n, ha=etcd.endpoint, ha_ttl=2.0, warmup=1,
                       lease=6.0, tick=0.25, expect_workers=2) for n in ("sup-a", "sup-b")]
    endpoints = ",".join(s.endpoint for s in sups)
    names = ["a", "b"]
    for w in names:
        start_worker(procs, sups[0], w, 10, endpoint=endpoints)
    ctl = ControlClient([s.control for s in sups], timeout=2)
    try:
        wait_until(lambda: every_task_running(procs, names), timeout=40, what="every task")

        def leader_status() -> dict | None:  # type: ignore[type-arg]
            try:
                st = ctl.call("status")
            except (Unreachable, ControlFailed):
                return None
            return st if st.get("role") == "leader" else None

        first = wait_until(leader_status, what="a leader")
        leader = next(s for s in sups if s.opts["name"] == first["leader"])
        leader.proc.signal(signal.SIGKILL)
        leader.proc.wait(5)
        second = wait_until(lambda: (st := leader_status()) and st["epoch"] != first["epoch"]
                            and st, timeout=20, what="the new leader")
        assert second["epoch"] > first["epoch"]
        ctl.call("drain", {"worker": "a"})  # a hand-off under the new leader
        wait_until(lambda: not running_now(procs, ["a"]), timeout=30, what="a drained")
        history = starts(procs, names)
        assert check_tokens_grow(history) >= 1
        late = [tok for events in history.values() for _, w, tok in events if w == "b"
                and token_epoch(tok) == second["epoch"]]
        assert late, "the new leader's hand-offs carry its epoch"
    finally:
        ctl.close()
