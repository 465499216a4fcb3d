"""HA follows the fleet, the core's half (fake clock, the real worker state machine): how many
workers a supervisor hears, handed to the election as `Heard` actions, and a promoted standby
renewing every worker it hears at once."""

from __future__ import annotations

from corral.common.wire.protocol import HA_EPOCH_BASE, make_token
from corral.supervisor.events import RoleChanged
from corral.supervisor.lifecycle import DEADLINE_PASSED
from corral.supervisor.role import Role

from .modelfleet import Harness, ModelWorker, config

HA = "etcd://127.0.0.1:1"  # never dialled: the core only needs to know HA is on
TASKS = {f"t{i:02d}": 1.0 for i in range(6)}


def test_the_heard_count_follows_fresh_reports_and_is_stricter_than_liveness() -> None:
    # lease 4, report interval 1, tick 0.5: fresh = max(1, 4 / 2) + 0.5 = 2.5 s.
    h = Harness(config(ha=HA), dict(TASKS))
    *_, c = (h.add(ModelWorker(x)) for x in "abc")
    h.until(lambda: h.heard[-1:] == [3])
    assert h.core.hearing.window == 2.5
    quiet_since = h.now
    h.until(lambda: h.heard[-1] < 3, silent=(c,))
    # Not heard: no report for more than the window (and at most a tick more)...
    assert 2.5 < h.now - quiet_since <= 2.5 + 1.0
    assert h.heard[-1] == 2
    # ... though still active: its lease + margin (5 s) has not passed.
    rec = h.core.registry.get("c")
    assert rec is not None and rec.active
    h.step(0.5)
    h.until(lambda: h.heard[-1] == 3)
    assert h.heard.count(3) == 2, "handed over when it changed, not every tick"


def test_without_ha_nothing_is_counted() -> None:
    h = Harness(config(), dict(TASKS))
    for x in "ab":
        h.add(ModelWorker(x))
    h.until(h.running)
    h.step(3.0)
    assert h.heard == []


def test_a_promoted_standby_renews_every_worker_it_hears_at_once() -> None:
    """A leader cut off from the workers leaves their leases short: the new leader's first
    sets — renewals in its epoch — go out in the step that promotes it, not at each worker's
    next report (up to half a lease later)."""
    old = make_token(HA_EPOCH_BASE + 5, 1)
    h = Harness(config(ha=HA, warmup=2.0), dict(TASKS))
    ws = [h.add(ModelWorker(f"w{i}", running={f"t{i:02d}": old}, lease_until=8.0))
          for i in range(3)]
    h.until(lambda: h.now >= 3.0)  # a standby: it hears them, sends nothing
    assert h.sent == []
    h.until(lambda: h.now >= 6.0, silent=(ws[2],))  # w2 unheard for 3 s: not renewed
    before = [w.lease_until for w in ws]
    h.run(h.core.handle(RoleChanged(Role(True, HA_EPOCH_BASE + 9, 1e9)), h.now))
    renewed = {w for w, m in h.sent if not m.add and not m.reset}
    assert renewed == {"w0", "w1"}
    assert all(m.epoch == HA_EPOCH_BASE + 9 for _, m in h.sent)
    assert [w.lease_until > b for w, b in zip(ws, before, strict=True)] == [True, True, False]
    assert h.log_fields["leading"]["renewed"] == 2


def test_a_leader_back_in_its_own_epoch_numbers_its_sets_on() -> None:
    """Its deadline passed (a keep-alive was slow), then the keep-alive held the key after all:
    the election hands back the same epoch. Its sets go on from the numbers the workers have
    applied — numbered afresh they would be dropped as stale, and every lease would lapse."""
    epoch = HA_EPOCH_BASE + 4
    h = Harness(config(ha=HA, warmup=1.0), dict(TASKS))
    ws = [h.add(ModelWorker(f"w{i}")) for i in range(3)]
    h.run(h.core.handle(RoleChanged(Role(True, epoch, 1e9)), h.now))
    h.until(h.running)
    h.until(lambda: h.now >= 20.0)  # many renewals: the workers applied sets far past 1
    before = {w.id: w.machine.applied for w in ws}
    assert all(a[0] == epoch and a[1] > 5 for a in before.values())
    owners = h.owners()
    h.run(h.core.handle(RoleChanged(Role(False, error=DEADLINE_PASSED)), h.now))
    h.step(0.5)
    h.run(h.core.handle(RoleChanged(Role(True, epoch, 1e9)), h.now))
    h.until(h.running)
    h.until(lambda: h.now >= 40.0)  # well past every lease (4 s)
    assert all(w.machine.counters["sets_stale"] == 0 for w in ws)
    assert all(w.machine.applied > before[w.id] for w in ws)
    assert all(w.lease_until > h.now for w in ws) and h.owners() == owners


def test_a_leading_role_past_its_deadline_demotes_and_never_promotes() -> None:
    """The election thread, retrying a failed keep-alive, says again that it leads, with the
    deadline of the last keep-alive that worked. Read after that deadline (the loop already
    stood the leader down for it), such a role must not make it lead again: it would renew
    every worker it hears after its deadline, when etcd may give the key to another."""
    epoch = HA_EPOCH_BASE + 4
    h = Harness(config(ha=HA, warmup=1.0), dict(TASKS))
    for i in range(3):
        h.add(ModelWorker(f"w{i}"))
    until = h.now + 30.0
    h.run(h.core.handle(RoleChanged(Role(True, epoch, until)), h.now))
    h.until(h.running)
    h.until(lambda: h.now >= until)  # its deadline passes: the tick stands it down
    assert not h.core.life.leader
    h.sent.clear()
    h.run(h.core.handle(RoleChanged(Role(True, epoch, until)), h.now))  # the stale one
    assert not h.core.life.leader and h.sent == []
    assert h.core.life.role is not None and h.core.life.role.error == DEADLINE_PASSED
    # Led again, stale, before the tick saw the deadline: the role itself demotes.
    fresh = h.now + 30.0
    h.run(h.core.handle(RoleChanged(Role(True, epoch, fresh)), h.now))
    assert h.core.life.leader
    h.now = fresh + 0.1
    h.sent.clear()
    h.run(h.core.handle(RoleChanged(Role(True, epoch, fresh)), h.now))
    assert not h.core.life.leader and h.sent == []
    assert h.log_fields["no longer the leader; standing by"]["reason"] == DEADLINE_PASSED
