"""An operator's drain survives a supervisor restart and an HA failover: the leader tells the
worker it is drained (every set says so), the worker says it back in its reports, and a new
supervisor — or a standby — keeps it; the leader's own word rules while it lives."""

from __future__ import annotations

from corral.supervisor import verbs, views
from corral.supervisor.role import Role

from .modelfleet import Harness, ModelWorker, config

TASKS = {f"t{i:02d}": 1.0 for i in range(12)}


def drained(h: Harness) -> dict[str, bool]:
    return {w["id"]: w["drained"] for w in views.workers(h.core.queries, h.now)["workers"]}


def test_a_drain_survives_a_supervisor_restart() -> None:
    h = Harness(config(), dict(TASKS))
    workers = [h.add(ModelWorker(x, max_load=12)) for x in "abc"]
    h.until(h.running)
    _, error, actions = verbs.call(h.core, "drain", {"worker": "b"}, h.now)
    assert error is None
    h.run(actions)
    h.until(lambda: not workers[1].running)
    assert workers[1].last is not None and workers[1].last.drained
    # A new supervisor process (a restart: the next epoch), the same workers.
    h2 = Harness(config(), dict(TASKS), epoch=2, now=h.now)
    for w in workers:
        h2.add(w)
    h2.until(h2.running)
    h2.step(2.0)
    assert drained(h2)["b"] is True
    assert not workers[1].running and sum(len(w.running) for w in workers) == 12
    # Undrained by the operator: the worker hears it, and takes tasks again.
    h2.run(verbs.call(h2.core, "undrain", {"worker": "b"}, h2.now)[2])
    h2.until(lambda: bool(workers[1].running), limit=30)
    h2.step(1.0)
    assert workers[1].last is not None and not workers[1].last.drained
    assert drained(h2)["b"] is False


def test_a_standby_follows_the_drain_the_leader_set_and_keeps_it_when_it_leads() -> None:
    leader = Harness(config(ha="etcd://127.0.0.1:1"), dict(TASKS))
    standby = Harness(config(ha="etcd://127.0.0.1:1"), dict(TASKS))  # listening as long
    leader.run(leader.core.handle(_role(True, 1 << 40), leader.now))
    workers = [leader.add(ModelWorker(x, max_load=12)) for x in "abc"]
    for w in workers:
        standby.add(w)
    leader.until(leader.running)
    leader.run(verbs.call(leader.core, "drain", {"worker": "c"}, leader.now)[2])
    leader.until(lambda: not workers[2].running)
    for _ in range(4):  # the standby hears the same reports
        standby.now = leader.now
        for w in workers:
            standby.report(w)
        leader.step(0.5)
    assert drained(standby)["c"] is True
    # The leader is gone; the standby leads, with the drain.
    standby.now = leader.now + 5
    standby.run(standby.core.handle(_role(True, (1 << 40) + 1), standby.now))
    standby.until(standby.running)
    standby.step(2.0)
    assert drained(standby)["c"] is True and not workers[2].running


def _role(leader: bool, epoch: int) -> object:
    from corral.supervisor.events import RoleChanged

    return RoleChanged(Role(leader, epoch, leader_until=float("inf")))
