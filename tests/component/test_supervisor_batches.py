"""Two defences of a big fleet, on the fake clock: reports handled as one batch place pending
replicas once for all the workers arriving in it, and a step that kept the supervisor from
reading (a stall) restarts every worker's silence clock, so no worker is declared dead for the
supervisor's own pause."""

from __future__ import annotations

import random

import pytest

from corral.supervisor import verbs
from corral.supervisor.events import BatchEnd, BatchStart, Report, Stalled
from corral.supervisor.records import WorkerRecord

from .modelfleet import Harness, ModelWorker, config


def start(h: Harness, *workers: ModelWorker) -> None:
    for w in workers:
        h.add(w)
    h.until(h.running)
    h.step(1.0)


def test_a_stall_restarts_the_silence_clock() -> None:
    cfg = config(lease=4.0, lease_margin=1.0, tick=0.5)
    h = Harness(cfg, {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    last = h.now  # a reported now, then falls silent
    h.step(2.0, silent=(a,))
    h.run(h.core.handle(Stalled(2.0), h.now))  # the supervisor could not read until now
    stall_end = h.now
    assert h.core.counters.stalls == 1
    while h.now + 0.5 < stall_end + 5.0:
        h.step(0.5, silent=(a,))
        assert h.core.registry.get("a").active, (  # type: ignore[union-attr]
            f"declared silent at {h.now}: within lease + margin of the stall's end")
    assert h.now > last + 5.0  # without the stall it would have gone already
    h.until(lambda: not h.core.registry.get("a").active,  # type: ignore[union-attr]
            limit=2.0, silent=(a,))
    assert h.core.counters.lease_expiries == 1
    assert ("warning", "the supervisor was busy without reading reports; silence and resend "
            "waits count from now") in h.logs


def test_a_stall_restarts_the_resend_wait() -> None:
    # Found by `scripts/bench scale` at 30,000 workers: the rebuild step took 5.7 s, every
    # set it sent carried the step's start time, and the reports read after it (queued before
    # the workers saw their sets) made the reconciler send the whole fleet its set again.
    h = Harness(config(lease=6.0, lease_margin=1.0, tick=0.5), {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    wait = h.core.reconciler.first_wait
    queued = a.force_report(h.now)  # a report on its way before a saw the set below
    h.run(verbs.call(h.core, "drain", {"worker": "b"}, h.now)[2])  # a is sent b's tasks
    h.now += wait + 1.0  # the step that sent it kept the supervisor busy this long
    h.run(h.core.handle(Stalled(wait + 1.0), h.now))
    h.deliver(a, queued)  # read only now: older than the set, which is not lost
    assert h.core.counters.resends == 0, "resent: the wait began before the stall"
    h.until(lambda: len(a.running) == 6 and not b.running, limit=5.0)
    assert h.core.counters.resends == 0


@pytest.mark.parametrize("late", [0.5, 1.0, 3.0, 10.0])
def test_a_report_read_late_is_judged_by_when_it_was_sent(late: float) -> None:
    # Found by `scripts/bench scale` at 100,000 workers: no single long step, but reading fell
    # more than a wait behind after the warm-up sent every worker its set; each report read
    # then was older than the set and was taken for a lost set (215,000 resends).
    h = Harness(config(lease=6.0, lease_margin=1.0, tick=0.5), {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    wait = h.core.reconciler.first_wait
    queued = a.force_report(h.now)  # on its way before a saw the set below
    h.run(verbs.call(h.core, "drain", {"worker": "b"}, h.now)[2])  # a is sent b's tasks
    h.now += wait * late  # read only now (no stall: just a backlog)
    h.deliver(a, queued)
    assert h.core.counters.resends == 0, f"resent for a report read {wait * late:g} s late"
    h.until(lambda: len(a.running) == 6 and not b.running, limit=5.0)
    assert h.core.counters.resends == 0


def test_a_set_lost_is_still_sent_again() -> None:
    """The other side: reports sent well after a set that still do not show it mean it was
    lost, and it goes out again (a reset)."""
    h = Harness(config(lease=6.0, lease_margin=1.0, tick=0.5), {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    wait = h.core.reconciler.first_wait
    actions = verbs.call(h.core, "drain", {"worker": "b"}, h.now)[2]
    h.run([x for x in actions if getattr(x, "identity", None) != a.identity])  # a's set: lost
    h.until(lambda: h.core.counters.resends >= 1, limit=wait + 3.0)
    h.until(lambda: len(a.running) == 6 and not b.running, limit=5.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_workers_back_in_one_batch_are_placed_once_and_within_capacity(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    n = rng.randint(6, 14)
    caps = [rng.choice([3, 5, 8, 13]) for _ in range(n)]
    tasks = {f"task-{i:03d}": float(rng.choice([1, 1, 1, 2])) for i in range(sum(caps) // 2)}
    h = Harness(config(lease=4.0, lease_margin=1.0, tick=0.5, replicas=rng.choice([1, 2])),
                tasks)
    workers = [ModelWorker(f"w{i:02d}", max_load=c) for i, c in enumerate(caps)]
    start(h, *workers)
    # Most of the fleet falls silent, its replicas pile up as pending, then it comes back.
    keep = workers[: max(2, n // 4)]
    gone = tuple(w for w in workers if w not in keep)
    h.until(lambda: all(not h.core.registry.get(w.id).active  # type: ignore[union-attr]
                        for w in gone), silent=gone)
    places: list[int] = []
    placement = h.core.assigner.placement
    real = placement.place

    def counted() -> object:
        places.append(len(placement.view.pending()))
        return real()

    monkeypatch.setattr(placement, "place", counted)
    h.now += 0.5
    h.run(h.core.handle(BatchStart(), h.now))
    for w in gone:  # as the daemon hands them over: one by one, as it reads them
        h.run(h.core.handle(Report(w.identity, w.force_report(h.now)), h.now))
    h.run(h.core.handle(BatchEnd(), h.now))
    assert not places, "the arrivals wait for the settle window"
    h.until(lambda: bool(places), limit=h.core.config.settle + 1.0)
    assert len(places) == 1, f"placement ran {len(places)} times for one batch"
    monkeypatch.undo()
    p = h.core.assigner.placement
    for w in workers:
        load = sum(p.view.tasks[t] for t in p.view.tasks_of(w.id))
        assert load <= w.max_load + 1e-9, (w.id, load, w.max_load)
    # What fits is placed, and the workers end up running exactly their desired sets.
    h.until(lambda: all(set(w.running) == set(p.view.tasks_of(w.id)) for w in workers), limit=20)
    for task in p.view.pending():
        assert p.view.pending_reason(task)


def test_passes_wait_while_a_budget_of_hand_offs_is_in_flight() -> None:
    # Found by `scripts/bench scale` at 100,000 workers: a supervisor behind on reading
    # confirmations ran a pass (an O(fleet) search) every interval only to find its plan
    # pinned by the last passes' hand-offs, and so never caught up.
    cfg = config(lease=10.0, lease_margin=2.0, tick=0.5, move_budget=2, replicas=1)
    h = Harness(cfg, {f"t{i:02d}": 1.0 for i in range(12)})
    a, b = ModelWorker("a", max_load=12), ModelWorker("b", max_load=12)
    start(h, a, b)
    c = h.add(ModelWorker("c", max_load=12))
    conv = h.core.rebalancing
    # a and b do not report: the tasks they hand over stay pinned (their stops unconfirmed).
    h.until(lambda: len(h.core.assigner.handoffs.pinned) >= 2, limit=8.0, silent=(a, b))
    passes = h.core.counters.rebalance_moves
    h.step(h.core.config.report_interval * 2, silent=(a, b))
    assert conv.skipped >= 1 and h.core.counters.rebalance_moves == passes
    h.until(lambda: conv.balanced and not h.core.assigner.handoffs.pinned, limit=60.0)
    assert len(c.running) == 4 and len(a.running) == len(b.running) == 4


def test_a_worker_outside_every_hand_off_stays_on_the_fast_path() -> None:
    # Found by `scripts/bench scale` at 100,000 workers: while any hand-off was in flight
    # (nearly always, in a big fleet) no worker's report took the settled fast path.
    h = Harness(config(), {f"t{i:02d}": 1.0 for i in range(12)})
    ws = [ModelWorker(f"w{i}") for i in range(6)]
    start(h, *ws)
    h.step(1.0)
    h.step(1.0)
    handoffs = h.core.assigner.handoffs
    h.run(verbs.call(h.core, "drain", {"worker": "w0"}, h.now)[2])  # its tasks move
    assert handoffs.pinned
    outside = [w for w in ws if not handoffs.involves(w.id)]
    assert len(outside) >= 3
    for w in outside:
        h.core.registry.get(w.id).digest = None  # type: ignore[union-attr]  # as after a set
        h.report(w)  # read in full: it settles again
    before = h.core.registry.changes
    for w in outside:
        h.report(w)
    assert handoffs.pinned, "the hand-offs ended: the test shows nothing"
    assert h.core.registry.changes == before, "a report outside the hand-offs was read in full"
    inside = [w for w in ws if handoffs.involves(w.id)]
    h.report(inside[0])
    assert h.core.registry.changes == before + 1  # and one in a hand-off is


def two_workers() -> tuple[Harness, ModelWorker, WorkerRecord]:
    """Workers a and b running at lease 4 s + margin 1 s: the harness, a, and a's record."""
    h = Harness(config(lease=4.0, lease_margin=1.0), {f"t{i}": 1.0 for i in range(4)})
    a = ModelWorker("a")
    start(h, a, ModelWorker("b"))
    rec = h.core.registry.get("a")
    assert rec is not None
    return h, a, rec


def test_a_worker_that_keeps_coming_back_is_timed_out_once_per_silence() -> None:
    # Worker timeouts are lazy timers: a revival arms a worker again while an older arming
    # may still wait in its bucket; only the latest one counts.
    h, a, rec = two_workers()
    for n in range(1, 6):
        h.until(lambda: not rec.active, limit=10.0, silent=(a,))
        assert h.core.counters.lease_expiries == n
        h.step(0.5 * n)  # back, at a different phase of the tick each time
        assert rec.active
    for _ in range(120):  # a minute of steady reports: never taken for silent again
        h.step(0.5)
        assert rec.active
    assert h.core.counters.lease_expiries == 5 and h.core.counters.revivals == 5
    h.until(lambda: not rec.active, limit=10.0, silent=(a,))
    assert 5.0 <= h.now - rec.last_received <= 5.5 + 1e-9  # lease + margin, one tick late at most


def test_silence_is_judged_as_of_the_last_time_no_report_waited() -> None:
    # Found by `scripts/bench scale` at 100,000 workers: a supervisor behind on reading (its
    # reports waiting in the socket) took 215,000 live workers for silent.
    from corral.supervisor.events import Tick

    h, _, rec = two_workers()
    silence, half_lease = 5.0, 2.0
    behind_since = h.now  # from here on, reports wait unread (a backlog): none is delivered
    while h.now < behind_since + 1.5:  # 1.5 s behind
        h.now += 0.5
        h.run(h.core.handle(Tick(read_until=behind_since), h.now))
    caught_up = h.now
    while rec.active:  # caught up: still nothing from a
        h.now += 0.5
        h.run(h.core.handle(Tick(read_until=h.now), h.now))
    # Not before lease + margin of silence as of the last time nothing waited unread, and at
    # most that backlog (1.5 s) and a tick later.
    assert silence <= h.now - rec.last_received <= silence + 1.5 + 0.5 + 1e-9
    assert h.now > caught_up
    # A supervisor that never catches up still sees a death: at most half a lease late.
    c = ModelWorker("c")
    h.add(c)
    h.step(1.0)
    crec = h.core.registry.get("c")
    assert crec is not None and crec.active
    stuck = h.now
    while crec.active:
        h.now += 0.5
        h.run(h.core.handle(Tick(read_until=stuck), h.now))
        assert h.now - crec.last_received <= silence + half_lease + 0.5 + 1e-9
    assert h.now - crec.last_received >= silence + half_lease - 1e-9


@pytest.mark.parametrize("seed", range(5))
def test_renewals_in_a_batch_leave_at_its_end_in_order(seed: int) -> None:
    """Inside a batch a settled worker's report returns nothing and its renewal waits for
    `BatchEnd`, which returns every renewal due, in the order the reports came; outside a
    batch the renewal comes back at once."""
    from corral.common.wire.protocol import Renewal
    from corral.supervisor.events import RawReport, Send

    rng = random.Random(seed)
    workers = [ModelWorker(f"w{i}-{'x' * rng.randint(0, 9)}", max_load=rng.choice([3, 8]))
               for i in range(rng.randint(2, 7))]
    h = Harness(config(lease=4.0, lease_margin=1.0, tick=0.5),
                {f"t{i}": 1.0 for i in range(rng.randint(1, 12))})
    start(h, *workers)
    h.until(lambda: all(h.core.registry.get(w.id).digest is not None  # type: ignore[union-attr]
                        for w in workers))
    h.now += 1.0  # past renew_every (lease / 5): every report is answered
    order = rng.sample(workers, len(workers))

    def raw(w: ModelWorker) -> RawReport:
        from corral.common.wire.codec import encode, glance_status

        frame = encode(w.force_report(h.now))
        return RawReport(w.identity, glance_status(frame), frame)

    assert h.core.handle(BatchStart(), h.now) == []
    for w in order:
        assert h.core.handle(raw(w), h.now) == [], "a renewal left before the batch's end"
    out = h.core.handle(BatchEnd(), h.now)
    assert [a.identity for a in out if isinstance(a, Send)] == [w.identity for w in order]
    assert all(isinstance(a, Send) and isinstance(a.message, Renewal) for a in out)
    h.run(out)
    h.now += 1.0
    alone = h.core.handle(raw(order[0]), h.now)
    assert [a.identity for a in alone if isinstance(a, Send)] == [order[0].identity]
