"""Supervisor HA under a one-sided partition: etcd, two supervisors and the workers on two
networks (network namespaces: tests/e2e/netcluster.py). The leader's link to the workers goes
down while it still reaches etcd: it hears nobody, the standby hears everyone, so the leader
resigns and the standby leads — before any worker's lease runs out, nothing moving. After the
link comes back, the old leader stays a standby. Needs root for the namespaces (skipped, with
the reason, without it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chaostools.netns import unavailable

from ..support import wait_until
from .netcluster import NetCluster
from .procs import Procs

pytestmark = pytest.mark.e2e

TTL, TICK, LEASE = 2.0, 0.25, 8.0
WORKERS = ("w1", "w2", "w3")


@pytest.fixture()
def net(procs: Procs, tmp_path: Path) -> Iterator[NetCluster]:
    why = unavailable()
    if why:
        pytest.skip(why)
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"t{i:02d}\n" for i in range(12)))
    c = NetCluster(procs, tasks, ha_ttl=TTL, tick=TICK, lease=LEASE, warmup=1,
                   expect_workers=len(WORKERS))
    try:
        # The fake workers report every half lease, as real ones do by default.
        fleet = c.add_fleet(list(WORKERS), interval=LEASE / 2)
        wait_until(lambda: len(fleet.owners()) == 12, timeout=30, what="every task running")
        yield c
    finally:
        c.close()


def test_leader_cut_from_the_workers_hands_over_before_any_lease_lapses(net: NetCluster) -> None:
    fleet = net.fleet
    assert fleet is not None
    leader = wait_until(net.leader, what="a leader")
    standby = next(s for s in net.sups if s != leader)
    everyone = {s: len(WORKERS) for s in net.sups}
    wait_until(lambda: net.status(standby).get("heard") == everyone,
               what="both supervisors hearing every worker, as published")
    old_epoch = net.status(leader)["epoch"]
    before = fleet.owners()
    net.nets.cut(net.sups[leader], "workers")
    # The standby leads: every worker applies a set of its epoch, well within its lease.
    wait_until(lambda: fleet.every(lambda w: w.applied[0] > old_epoch), timeout=LEASE,
               what="every worker under the new leader")
    assert all(w.lapses == 0 for w in fleet.workers), "a lease lapsed"
    assert fleet.owners() == before and all(w.changes == 0 for w in fleet.workers)
    assert '"event": "resigning the lead' in net.output(leader)
    assert f'"renewed": {len(WORKERS)}' in net.output(standby)  # at once, to each it heard
    new = net.status(standby)
    assert new["role"] == "leader" and new["epoch"] > old_epoch
    # The link comes back: the old leader hears the fleet again and stays a standby.
    net.nets.heal(net.sups[leader], "workers")
    wait_until(lambda: net.status(standby).get("heard") == everyone, timeout=3 * LEASE,
               what="the old leader hearing every worker again")
    old = net.status(leader)
    assert old["role"] == "standby" and old["leader"] == standby and old["ha_error"] is None
    assert net.status(standby)["epoch"] == new["epoch"]
    assert all(w.applied[0] == new["epoch"] for w in fleet.workers)
    assert all(w.lapses == 0 for w in fleet.workers) and fleet.owners() == before
