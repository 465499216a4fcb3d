"""The supervisor state machine, stepped with a fake clock against model workers."""

from __future__ import annotations

from corral.common.protocol import Instructions, Refusal, Status, WorkerState
from corral.supervisor import verbs
from corral.supervisor.events import Report
from corral.supervisor.records import Phase

from .fleet import Harness, ModelWorker, config

TASKS = {f"t{i:02d}": 1.0 for i in range(12)}


def start(h: Harness, *workers: ModelWorker) -> None:
    for w in workers:
        h.add(w)
    h.until(h.running)
    h.step(1.0)


def test_warmup_assigns_nothing_then_places_everything_once() -> None:
    h = Harness(config(warmup=5.0), dict(TASKS))
    a, b, c = (h.add(ModelWorker(x)) for x in "abc")
    h.step(1.0)
    assert h.core.phase is Phase.WARMUP and not h.owners()
    assert all(w.lease_until > h.now for w in (a, b, c)), "warm-up renews leases"
    h.until(h.running)
    assert h.core.phase is Phase.RUNNING and h.fetches == 1
    h.step(1.0)
    assert sorted(h.owners()) == sorted(TASKS)
    assert sorted(len(w.running) for w in (a, b, c)) == [4, 4, 4]


def test_expect_workers_ends_warmup_early() -> None:
    h = Harness(config(warmup=30.0, expect_workers=2), dict(TASKS))
    h.add(ModelWorker("a"))
    h.step(1.0)
    assert h.core.phase is Phase.WARMUP
    h.add(ModelWorker("b"))
    h.step(1.0)
    assert h.core.phase is Phase.RUNNING and h.now < 5


def test_restarted_supervisor_rebuilds_from_reports_without_restarting_anything() -> None:
    h = Harness(config(replicas=2), dict(TASKS), epoch=7)
    # Leases granted by the previous supervisor are still good for a few seconds.
    a = h.add(ModelWorker("a", running={t: 6 for t in list(TASKS)[:8]}, lease_until=3.0))
    b = h.add(ModelWorker("b", running={t: 6 for t in list(TASKS)[4:12]}, lease_until=3.0))
    # c holds t05 too, under an older epoch: with replicas 2, a and b (epoch 6) keep it.
    c = h.add(ModelWorker("c", running={"t05": 5, "gone": 6}, lease_until=3.0))
    h.until(h.running)
    h.step(1.0)
    starts_stops = [(w.id, e[1:]) for w in (a, b) for e in w.journal]
    assert starts_stops == []  # nothing a or b ran was stopped or restarted
    assert "t05" not in c.running and "gone" not in c.running
    assert all(e == 7 for w in (a, b) for e in w.running.values()), "re-confirmed at epoch 7"
    owners = h.owners()
    assert all(len(owners[t]) == 2 for t in TASKS)


def test_claims_resolve_to_highest_epoch_then_lowest_id() -> None:
    h = Harness(config(replicas=1), {"x": 1.0})
    b = h.add(ModelWorker("b", running={"x": 3}, lease_until=3.0))
    a = h.add(ModelWorker("a", running={"x": 3}, lease_until=3.0))
    c = h.add(ModelWorker("c", running={"x": 2}, lease_until=3.0))
    start(h)
    assert "x" in a.running and "x" not in b.running and "x" not in c.running
    assert [e[1:] for e in a.journal] == []


def test_query_diff_adds_and_removes() -> None:
    h = Harness(config(), {"a1": 1, "a2": 1, "a3": 1})
    w = ModelWorker("w")
    start(h, w)
    h.source = {"a2": 1, "a3": 1, "b1": 1}
    h.run(verbs.call(h.core, "query", {}, h.now)[2])
    h.step(1.0)
    assert sorted(w.running) == ["a2", "a3", "b1"]
    assert [e[1:] for e in w.journal if e[2] == "a2"] == [("start", "a2")]


def test_periodic_query_is_a_poll_on_the_wheel() -> None:
    h = Harness(config(query_interval=10.0), {"a": 1})
    w = ModelWorker("w")
    start(h, w)
    h.source = {"a": 1, "b": 1}
    before = h.fetches
    h.until(lambda: h.fetches == before + 1, limit=11)
    h.step(1.0)
    assert sorted(w.running) == ["a", "b"]


def test_timeout_reassigns_only_after_lease_plus_margin() -> None:
    cfg = config(lease=4.0, lease_margin=1.0, tick=0.5)
    h = Harness(cfg, dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b", max_load=20)
    start(h, a, b)
    lost = set(a.running)
    last_report = h.now  # a reported at this instant, then goes silent
    while h.now + 0.5 < last_report + 5.0:
        h.step(0.5, silent=(a,))
        assert not lost & set(b.running), f"moved early at {h.now}"
    moved_at = h.until(lambda: lost <= set(b.running), limit=3, silent=(a,))
    assert moved_at <= last_report + 5.0 + 0.5 + 1.0  # + one tick (+ b's next report)
    assert not a.running, "a stopped its tasks itself when its lease lapsed"
    lapse = max(t for t, e, _ in a.journal if e == "stop")
    first_elsewhere = min(t for t, e, task in b.journal if e == "start" and task in lost)
    assert lapse <= first_elsewhere, "the worker gave its tasks up before others got them"
    assert h.core.counters.lease_expiries == 1


def test_only_the_dead_workers_tasks_move() -> None:
    h = Harness(config(), dict(TASKS))
    a, b, c = ModelWorker("a"), ModelWorker("b"), ModelWorker("c")
    start(h, a, b, c)
    before_b, before_c = dict(b.running), dict(c.running)
    h.until(lambda: not h.core.workers["a"].active, silent=(a,))
    h.step(1.0, silent=(a,))
    assert set(before_b) <= set(b.running) and set(before_c) <= set(c.running)
    assert [e for e in b.journal + c.journal if e[1] == "stop"] == []


def test_lost_instruction_is_reconciled() -> None:
    h = Harness(config(), {"a": 1})
    w = ModelWorker("w")
    start(h, w)
    h.source = {"a": 1, "b": 1}
    drop_once = {"armed": True}

    def drop(worker: ModelWorker, msg: Instructions | Refusal) -> bool:
        if drop_once["armed"] and isinstance(msg, Instructions) and msg.add:
            drop_once["armed"] = False
            return True
        return False

    h.drop = drop
    h.run(verbs.call(h.core, "query", {}, h.now)[2])
    assert "b" not in w.running
    h.until(lambda: "b" in w.running, limit=5)
    assert h.core.counters.resends >= 1


def test_running_set_that_disagrees_is_corrected() -> None:
    h = Harness(config(), {"a": 1, "b": 1})
    w = ModelWorker("w")
    start(h, w)
    w.stop("b", h.now)  # e.g. the process died and the worker dropped it
    w.running["stray"] = 1
    h.until(lambda: sorted(w.running) == ["a", "b"], limit=4)
    assert h.core.counters.reconciliations >= 1


def test_stale_and_duplicate_reports_are_dropped() -> None:
    h = Harness(config(), {"a": 1})
    w = ModelWorker("w")
    start(h, w)
    old = Status("w", w.incarnation, 1, 0.0, 10, {})
    count = h.core.counters.stale_reports
    assert h.core.handle(Report(w.identity, old), h.now) == []
    st = w.report(h.now)
    h.core.handle(Report(w.identity, st), h.now)
    h.core.handle(Report(w.identity, st), h.now)
    assert h.core.counters.stale_reports == count + 2
    assert h.core.handle(Report(b"someone-else", w.report(h.now)), h.now) == []
    assert h.core.counters.impostor_reports == 1


def test_drain_is_make_before_break() -> None:
    h = Harness(config(replicas=1), dict(TASKS))
    a, b = ModelWorker("a", max_load=10), ModelWorker("b", max_load=20)
    start(h, a, b)
    moving = set(a.running)
    h.run(verbs.call(h.core, "drain", {"worker": "a"}, h.now)[2])
    h.until(lambda: not a.running, limit=10)
    for task in moving:
        started = min(t for t, e, x in b.journal if x == task and e == "start")
        stopped = max(t for t, e, x in a.journal if x == task and e == "stop")
        assert started <= stopped, f"{task} had a gap"
    assert h.core.workers["a"].drained and not h.core.placement.tasks_of("a")
    h.run(verbs.call(h.core, "undrain", {"worker": "a"}, h.now)[2])
    h.until(lambda: len(a.running) >= 3, limit=20)  # the rebalance moves work back
    h.until(lambda: all(len(v) == 1 for v in h.owners().values()), limit=5)  # hand-offs end


def test_lame_duck_worker_hands_off_and_keeps_tasks_nobody_can_take() -> None:
    h = Harness(config(replicas=1), {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a", max_load=6), ModelWorker("b", max_load=2)
    start(h, a, b)
    a.state = WorkerState.LAME_DUCK
    for _ in range(8):
        h.step(0.5)
    assert len(b.running) == 2  # b is full
    assert len(a.running) == len([t for t in (f"t{i}" for i in range(6)) if t not in b.running])
    assert all(len(v) == 1 for v in h.owners().values()) and len(h.owners()) == 6


def test_failing_source_keeps_the_last_good_list() -> None:
    h = Harness(config(query_retry=2.0), None)
    w = ModelWorker("w", running={"kept": 1}, lease_until=3.0)
    h.add(w)
    h.until(lambda: h.core.phase is Phase.QUERYING)
    h.step(3.0)
    assert h.core.phase is Phase.QUERYING and h.fetches >= 2  # retried
    assert w.running == {"kept": 1} and w.lease_until > h.now  # leases still renewed
    h.source = {"kept": 1, "new": 1}
    h.until(h.running, limit=5)
    h.step(1.0)
    h.source = None
    h.run(verbs.call(h.core, "query", {}, h.now)[2])
    h.source = {}
    h.run(verbs.call(h.core, "query", {}, h.now)[2])
    h.step(1.0)
    assert sorted(w.running) == ["kept", "new"]
    assert h.core.counters.source_errors >= 2


def test_restarted_worker_gets_its_tasks_back_at_once() -> None:
    h = Harness(config(), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    mine = set(a.running)
    a2 = h.replace(a, a.restarted())
    h.step(1.0)
    assert set(a2.running) == mine
    assert h.core.counters.restarts == 1


def test_two_live_workers_with_one_id_refuse_the_newer() -> None:
    h = Harness(config(), dict(TASKS))
    a = ModelWorker("a")
    start(h, a)
    twin = h.add(ModelWorker("a", incarnation=99))
    h.step(1.0)
    h.step(1.0)
    h.step(1.0)
    assert twin.refused and "two live workers" in twin.refused
    assert a.refused is None
    rows = verbs.call(h.core, "workers", {}, h.now)[0]["workers"]
    assert rows[0]["conflict"] and h.core.counters.duplicate_ids == 1


def test_epoch_rises_above_what_workers_applied() -> None:
    h = Harness(config(), {"x": 1}, epoch=2)
    w = h.add(ModelWorker("w", applied=(9, 4), running={"x": 9}, lease_until=3.0))
    h.until(h.running)
    h.step(1.0)
    assert h.core.epoch == 10 and h.persisted == [10]
    assert w.applied[0] == 10 and w.journal == []


def test_task_failing_repeatedly_moves_and_shows_as_failing() -> None:
    h = Harness(config(max_failures=3), {"x": 1})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    bad, good = (a, b) if "x" in a.running else (b, a)
    bad.failures["x"] = 3
    h.step(1.0)
    h.step(1.0)
    assert "x" in good.running and "x" not in bad.running
    assert verbs.call(h.core, "status", {}, h.now)[0]["tasks_failing"] == 1


def test_control_errors_have_a_fixed_shape() -> None:
    h = Harness(config(), {"x": 1})
    _, err, _ = verbs.call(h.core, "nope", {}, h.now)
    assert err is not None and err.code == "unknown_verb"
    _, err, _ = verbs.call(h.core, "drain", {"worker": "ghost"}, h.now)
    assert err is not None and err.code == "not_found"
    _, err, _ = verbs.call(h.core, "drain", {}, h.now)
    assert err is not None and err.code == "bad_request"
    _, err, _ = verbs.call(h.core, "tasks", {"bogus": 1}, h.now)
    assert err is not None and err.code == "bad_request"


def test_shutdown_verb_stops() -> None:
    h = Harness(config(), {"x": 1})
    h.run(verbs.call(h.core, "shutdown", {"reason": "test"}, h.now)[2])
    assert h.stopped == "test" and h.core.phase is Phase.STOPPING


def test_renewals_come_at_least_every_renew_interval() -> None:
    h = Harness(config(lease=5.0), {"x": 1})
    w = ModelWorker("w")
    start(h, w)
    for _ in range(20):
        h.step(0.5)
        assert w.lease_until - h.now >= 5.0 - 1.0 - 1.0 - 1e-9  # renew every lease/5 + a report


def test_json_views_keep_the_contract_keys() -> None:
    h = Harness(config(), dict(TASKS))
    start(h, ModelWorker("a"), ModelWorker("b"))
    status = verbs.call(h.core, "status", {}, h.now)[0]
    assert {"phase", "epoch", "workers_active", "workers_total", "tasks_assigned",
            "tasks_pending", "tasks_failing"} <= set(status)
    row = verbs.call(h.core, "workers", {}, h.now)[0]["workers"][0]
    assert {"id", "state", "active", "max_load", "running", "utilization",
            "last_report_age_s"} <= set(row)
    asg = verbs.call(h.core, "assignments", {}, h.now)[0]
    assert {"version", "assignments", "pending"} <= set(asg)
    assert sorted(asg["assignments"]) == sorted(TASKS)
