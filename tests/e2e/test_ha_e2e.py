"""Supervisor high availability: real etcd, real supervisors, workers reporting to all of them.

The leader is killed, frozen past its etcd TTL, and etcd itself is stopped; every time a
leader must (again) send instructions soon enough that no worker's lease lapses, nothing
moves or restarts, and nothing a deposed leader sends is applied — including sets it sent
before it froze that reach the workers after its successor's (held in the network by a
proxy): each is dropped as stale.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaostools.proxy import HEALTHY, Fault, Proxy

from corral.common.wire.protocol import token_epoch

from ..etcd_server import Etcd
from ..support import wait_until
from .dealers import FakeWorker, Fleet
from .procs import Procs, Supervisor

pytestmark = pytest.mark.e2e

TTL, TICK, LEASE = 2.0, 0.25, 6.0


def pair(procs: Procs, etcd: Etcd, tasks: Path, lease: float = LEASE,
         **more: Any) -> list[Supervisor]:
    opts = {"ha": etcd.endpoint, "ha_ttl": TTL, "warmup": 1, "lease": lease, "tick": TICK,
            "expect_workers": 3, **more}
    sups = []
    for name in ("sup-a", "sup-b"):
        s = Supervisor(procs, f"file:{tasks}", name=name, **opts)
        s.opts["state_file"] = str(procs.tmp / f"{name}.epoch")
        sups.append(s)
    return sups


def leader_of(sups: list[Supervisor]) -> Supervisor | None:
    for s in sups:
        if s.proc.alive():
            st = s.ctl("status", check=False)
            if st.returncode == 0 and '"phase": "running"' in st.stdout:
                return s
    return None


@pytest.fixture()
def cluster(procs: Procs, etcd: Etcd) -> Iterator[tuple[list[Supervisor], Fleet]]:
    yield from three_workers(procs, etcd)


def three_workers(procs: Procs, etcd: Etcd, **opts: Any
                  ) -> Iterator[tuple[list[Supervisor], Fleet]]:
    """Two supervisors (``opts`` on top of pair's), three fake workers running 12 tasks."""
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"t{i:02d}\n" for i in range(12)))
    sups = pair(procs, etcd, tasks, **opts)
    fleet = Fleet([s.endpoint for s in sups], interval=0.25)
    try:
        for name in ("w1", "w2", "w3"):
            fleet.add(FakeWorker(name))
        wait_until(lambda: len(fleet.owners()) == 12, timeout=30, what="every task running")
        yield sups, fleet
    finally:
        fleet.close()


def first_instruction_after(fleet: Fleet, t0: float, endpoint: str) -> float:
    times = [t for w in fleet.workers for t, ep, _ in w.applied_from if ep == endpoint and t > t0]
    return min(times) if times else float("inf")


def test_kill_9_leader_standby_takes_over_without_moving_anything(
    cluster: tuple[list[Supervisor], Fleet],
) -> None:
    sups, fleet = cluster
    leader = wait_until(lambda: leader_of(sups), what="a leader")
    standby = next(s for s in sups if s is not leader)
    before = fleet.owners()
    killed = time.monotonic()
    leader.proc.signal(signal.SIGKILL)
    leader.proc.wait(5)
    wait_until(lambda: first_instruction_after(fleet, killed, standby.endpoint) < float("inf"),
               timeout=TTL + 10, what="instructions from the new leader")
    took = first_instruction_after(fleet, killed, standby.endpoint) - killed
    assert took <= TTL + TICK + 1.5, took  # TTL + one tick, plus a report interval of slack
    # The new leader has had its say once it answered, on every worker, a report that showed
    # its reset applied.
    epoch = standby.ctl("status")["epoch"]
    wait_until(lambda: fleet.every(lambda w: w.settled(epoch)),
               what="every worker's report after the new leader's reset answered")
    assert fleet.owners() == before  # nothing moved
    assert all(w.changes == 0 and w.lapses == 0 for w in fleet.workers)
    assert standby.ctl("status")["epoch"] > 0


def test_frozen_leader_is_fenced_off_after_it_wakes(
    cluster: tuple[list[Supervisor], Fleet],
) -> None:
    sups, fleet = cluster
    leader = wait_until(lambda: leader_of(sups), what="a leader")
    standby = next(s for s in sups if s is not leader)
    old_epoch = max(w.applied[0] for w in fleet.workers)
    leader.proc.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_until(lambda: first_instruction_after(fleet, stopped, standby.endpoint)
                   < float("inf"), timeout=TTL + 10, what="the standby leads")
        new_epoch = max(w.applied[0] for w in fleet.workers)
        assert new_epoch > old_epoch
    finally:
        leader.proc.signal(signal.SIGCONT)
    resumed = time.monotonic()
    # Once it has stepped down it sends nothing: whatever it still had queued has arrived when
    # the workers have received as many frames from it as it counts sent.
    wait_until(lambda: "no longer the leader" in leader.proc.output(),
               what="the old leader stepping down")
    wait_until(lambda: fleet.received_from(leader.endpoint)
               >= leader.query("counters")["messages_out"],
               what="everything the old leader sent")
    applied_old = [(t, ep) for w in fleet.workers for t, ep, _ in w.applied_from
                   if ep == leader.endpoint and t > resumed]
    assert applied_old == []
    assert all(w.lapses == 0 for w in fleet.workers)
    assert "no longer the leader" in leader.proc.output()


def test_etcd_down_leader_serves_until_its_lease_then_steps_down_and_comes_back(
    cluster: tuple[list[Supervisor], Fleet], etcd: Etcd,
) -> None:
    sups, fleet = cluster
    leader = wait_until(lambda: leader_of(sups), what="a leader")
    etcd.stop()
    down = time.monotonic()
    wait_until(lambda: "no longer the leader" in leader.proc.output(), timeout=TTL + 5,
               what="the leader steps down")
    stepped = time.monotonic() - down
    assert stepped <= TTL + 1.0, stepped
    applied_after = [t for w in fleet.workers for t, ep, _ in w.applied_from
                     if t > down + TTL + 0.5]
    assert applied_after == []  # nobody leads without etcd
    etcd.start()
    back = time.monotonic()
    wait_until(lambda: any(t > back for w in fleet.workers for t, _, _ in w.applied_from),
               timeout=LEASE, what="a leader again")
    # Workers whose lease lapsed while nobody could lead stopped their tasks (the safe side);
    # the new leader gives every task out again.
    wait_until(lambda: len(fleet.owners()) == 12, timeout=LEASE + 10, what="all tasks again")


def test_status_shows_the_leader_its_epoch_and_the_standbys(
    cluster: tuple[list[Supervisor], Fleet],
) -> None:
    sups, _ = cluster
    leader = wait_until(lambda: leader_of(sups), what="a leader")
    standby = next(s for s in sups if s is not leader)
    wait_until(lambda: standby.ctl("status").get("leader") is not None, what="standby view")
    # The leader refreshes its view of the members with every keep-alive (TTL / 3).
    wait_until(lambda: leader.ctl("status").get("standbys"), what="leader sees the standby")
    mine, theirs = leader.ctl("status"), standby.ctl("status")
    assert mine["role"] == "leader" and theirs["role"] == "standby"
    assert mine["leader"] == theirs["leader"] == leader.opts["name"]
    assert mine["standbys"] == [standby.opts["name"]]
    assert mine["epoch"] > 2**40 and theirs["phase"] == "warmup"


def test_a_frozen_leaders_sets_reach_the_workers_late_and_are_all_dropped(
    procs: Procs, etcd: Etcd,
) -> None:
    """Fencing, exercised: the leader's sets to the workers are held in the network (a proxy)
    while it gives out new tasks, then it is frozen past its TTL; the standby leads and gives
    the new tasks out; then the held sets arrive and the old leader wakes. Every frame it sent
    reaches the workers after the new leader's, and each is dropped as stale; no task starts
    under an older token; the old leader stands by."""
    lease = 8.0  # room for the freeze on a slow machine: a lapse would hide nothing here
    tasks = procs.tmp / "tasks.txt"
    write_tasks(tasks, 12)
    sups = pair(procs, etcd, tasks, lease=lease)
    leader = wait_until(lambda: leader_of(sups), what="a leader")
    standby = next(s for s in sups if s is not leader)
    proxy = Proxy(leader.port)
    via = f"tcp://127.0.0.1:{proxy.add_route('leader')}"
    fleet = Fleet([via, standby.endpoint], interval=0.5)
    try:
        for name in ("w1", "w2", "w3"):
            fleet.add(FakeWorker(name))
        wait_until(lambda: len(fleet.owners()) == 12, timeout=30, what="every task running")
        wait_until(lambda: standby.ctl("status")["workers_active"] == 3, what="standby warm")
        old_epoch = leader.ctl("status")["epoch"]
        proxy.set_fault("leader", Fault(down=True))  # its sets wait in the network from now
        held = time.monotonic()
        sent = leader.query("counters")["messages_out"]
        write_tasks(tasks, 16)
        wait_until(lambda: '"task list changed"' in leader.proc.output()
                   and leader.query("counters")["messages_out"] > sent,
                   what="the leader giving the new tasks out (held)")
        leader.proc.signal(signal.SIGSTOP)
        try:
            wait_until(lambda: len(fleet.owners()) == 16, timeout=lease,
                       what="the new leader giving the new tasks out")
            new_epoch = standby.ctl("status")["epoch"]
            assert new_epoch > old_epoch
            wait_until(lambda: fleet.every(lambda w: w.settled(new_epoch)),
                       what="every worker settled under the new leader")
            released = time.monotonic()
            proxy.set_fault("leader", HEALTHY)  # the old leader's sets arrive, late
        finally:
            leader.proc.signal(signal.SIGCONT)
        wait_until(lambda: "no longer the leader" in leader.proc.output(),
                   what="the old leader stepping down")
        wait_until(lambda: fleet.received_from(via)
                   >= leader.query("counters")["messages_out"],
                   what="everything the old leader sent")
        late = fleet.outcomes(via, released)
        assert late, "nothing of the old leader's arrived late: fencing was not exercised"
        assert set(late) == {"sets_stale"}, late
        starts = [(task, tok) for w in fleet.workers for t, task, tok in w.starts if t >= held]
        assert sorted(t for t, _ in starts) == [f"t{i:02d}" for i in range(12, 16)]
        assert all(token_epoch(tok) == new_epoch for _, tok in starts), starts
        assert all(w.lapses == 0 for w in fleet.workers)
        wait_until(lambda: (lambda st: st["role"] == "standby"
                            and st["leader"] == standby.opts["name"])(leader.ctl("status")),
                   what="the old leader a standby of the new one")
    finally:
        fleet.close()
        proxy.close()


def write_tasks(path: Path, n: int) -> None:
    """A task file of ``n`` tasks, replaced at once (a watching source never reads half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"t{i:02d}\n" for i in range(n)))
    tmp.replace(path)


# The revival's settle window: longer than the default 1 s because the test learns that the
# first worker is back through corralctl (a process start per look, slow on a loaded machine)
# before it lets the others report; the window only has to hold them all.
REVIVAL_SETTLE = LEASE / 2


@pytest.fixture()
def revival(procs: Procs, etcd: Etcd) -> Iterator[tuple[list[Supervisor], Fleet]]:
    yield from three_workers(procs, etcd, settle=REVIVAL_SETTLE)


def test_revival_after_a_fleet_wide_lapse_spreads_the_tasks(
    revival: tuple[list[Supervisor], Fleet], etcd: Etcd,
) -> None:
    """etcd down, and the workers' reports with it, until every lease lapsed and both
    supervisors took every worker for gone; etcd comes back, then the workers, one and, once
    the leader has read it, the other two. The first placement waits the settle window
    (--settle) and spreads the tasks over the workers that came back in it: the moves that
    follow are at most the fair share + 1 (with --settle 0 the first to report takes its max
    load, 10 of 12, and 6 or more move again)."""
    sups, fleet = revival
    wait_until(lambda: leader_of(sups), what="a leader")
    etcd.stop()
    for w in fleet.workers:
        w.silent = True
    wait_until(lambda: fleet.every(lambda w: w.lapses >= 1 and not w.running)
               and all(s.ctl("status")["workers_active"] == 0 for s in sups),
               timeout=3 * LEASE, what="every lease lapsed, every worker taken for gone")
    etcd.start()
    leader = wait_until(lambda: leader_of(sups), timeout=LEASE + 10, what="a leader again")
    back = time.monotonic()
    first, *rest = fleet.workers
    first.silent = False
    wait_until(lambda: leader.ctl("status")["workers_active"] == 1, what="the first back")
    for w in rest:
        w.silent = False
    wait_until(lambda: len(fleet.owners()) == 12, timeout=LEASE + 10, what="all tasks again")

    def settled() -> bool:
        st = leader.ctl("status")
        return st["workers_active"] == 3 and bool(st["balanced"]) and st["handoffs"] == 0

    wait_until(settled, timeout=30, what="the placement balanced")
    starts = sorted((t, w.id, task) for w in fleet.workers for t, task, _ in w.starts
                    if t >= back)
    moves = len(starts) - len({task for _, _, task in starts})
    fair = -(-12 // len(fleet.workers))
    assert moves <= fair + 1, f"{moves} moves after the revival; the starts: {starts}"
