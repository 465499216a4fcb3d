"""The supervisor state machine, stepped with a fake clock against workers driven by the real
worker state machine (tests/component/modelmodelfleet.py)."""

from __future__ import annotations

import json

import msgspec
import pytest

from corral.common.wire.codec import encode, glance_status
from corral.common.wire.protocol import (
    PROTOCOL_VERSION,
    Instructions,
    Refusal,
    Status,
    WorkerState,
    make_token,
    token_epoch,
)
from corral.supervisor import verbs
from corral.supervisor.events import RawReport, Report
from corral.supervisor.lifecycle import Phase
from corral.supervisor.records import WorkerRecord

from .modelfleet import Harness, ModelWorker, config, rows, start

TASKS = {f"t{i:02d}": 1.0 for i in range(12)}


def test_warmup_assigns_nothing_then_places_everything_once() -> None:
    h = Harness(config(warmup=5.0), dict(TASKS))
    a, b, c = (h.add(ModelWorker(x)) for x in "abc")
    h.step(1.0)
    assert h.core.life.phase is Phase.WARMUP and not h.owners()
    assert all(w.lease_until > h.now for w in (a, b, c)), "warm-up renews leases"
    h.until(h.running)
    assert h.core.life.phase is Phase.RUNNING and h.fetches == 1
    h.step(1.0)
    assert sorted(h.owners()) == sorted(TASKS)
    assert sorted(len(w.running) for w in (a, b, c)) == [4, 4, 4]


def test_expect_workers_ends_warmup_early() -> None:
    h = Harness(config(warmup=30.0, expect_workers=2), dict(TASKS))
    h.add(ModelWorker("a"))
    h.step(1.0)
    assert h.core.life.phase is Phase.WARMUP
    h.add(ModelWorker("b"))
    h.step(1.0)
    assert h.core.life.phase is Phase.RUNNING and h.now < 5


def test_joins_are_one_debug_line_each_summed_up_at_info_and_in_the_feed() -> None:
    """A flood of made-up ids must not flood the log: every new id is one line at debug; the
    warm-up's end counts them at info, and the change feed has each join."""
    h = Harness(config(warmup=5.0), dict(TASKS))
    for x in "abc":
        h.add(ModelWorker(x))
    h.until(h.running)
    assert ("debug", "worker joined") in h.logs and ("info", "worker joined") not in h.logs
    assert h.log_fields["warm-up over; querying tasks"]["workers"] == 3
    h.add(ModelWorker("late"))
    h.step(1.0)
    assert ("info", "worker joined") not in h.logs
    assert h.log_fields["worker joined"]["worker"] == "late"
    joins = [e["worker"] for e in h.core.feed.after(0, 100)["events"] if e["kind"] == "join"]
    assert joins == ["a", "b", "c", "late"]


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
    assert [s for s in starts_stops if s[1][0] == "stop"] == []  # nothing a or b ran stopped
    assert "t05" not in c.running and "gone" not in c.running
    # Kept tasks keep the tokens they run under.
    assert all(token_epoch(tok) == 6 for tok in a.running.values() if tok)
    owners = h.owners()
    assert all(len(owners[t]) == 2 for t in TASKS)


def test_claims_resolve_to_newest_token_then_lowest_id() -> None:
    h = Harness(config(replicas=1), {"x": 1.0})
    b = h.add(ModelWorker("b", running={"x": 3}, lease_until=3.0))
    a = h.add(ModelWorker("a", running={"x": 3}, lease_until=3.0))
    c = h.add(ModelWorker("c", running={"x": 2}, lease_until=3.0))
    start(h)
    assert "x" in a.running and "x" not in b.running and "x" not in c.running
    assert [e for e in a.journal if e[1] == "stop"] == []


def test_query_diff_adds_and_removes() -> None:
    h = Harness(config(), {"a1": 1, "a2": 1, "a3": 1})
    w = ModelWorker("w")
    start(h, w)
    h.source = {"a2": 1, "a3": 1, "b1": 1}
    rows(h, "query")
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
    h.until(lambda: not h.core.registry.get("a").active, silent=(a,))  # type: ignore[union-attr]
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
    rows(h, "query")
    assert "b" not in w.running
    h.until(lambda: "b" in w.running, limit=5)
    # Recovered by a resend, or — when a later renewal was applied first, so the set looks
    # applied — by the correction of a running set that disagrees.
    assert h.core.counters.resends + h.core.counters.reconciliations >= 1


def test_running_set_that_disagrees_is_corrected() -> None:
    h = Harness(config(), {"a": 1, "b": 1})
    w = ModelWorker("w")
    start(h, w)
    w.stray["stray"] = make_token(1, 99)  # reports a task it was never given
    h.until(lambda: h.core.counters.reconciliations >= 1, limit=4)
    sent = [m for _, m in h.sent if isinstance(m, Instructions) and "stray" in m.remove]
    assert sent, "the stray task was told to stop"


def test_stale_and_duplicate_reports_are_dropped() -> None:
    h = Harness(config(), {"a": 1})
    w = ModelWorker("w")
    start(h, w)
    old = Status("w", w.incarnation, 1, 0.0, 10, {})
    count = h.core.counters.stale_reports
    assert h.core.handle(Report(w.identity, old), h.now) == []
    st = w.force_report(h.now)
    h.core.handle(Report(w.identity, st), h.now)
    h.core.handle(Report(w.identity, st), h.now)
    assert h.core.counters.stale_reports == count + 2
    assert h.core.handle(Report(b"someone-else", w.force_report(h.now)), h.now) == []
    assert h.core.counters.impostor_reports == 1


def test_drain_is_make_before_break() -> None:
    h = Harness(config(replicas=1), dict(TASKS))
    a, b = ModelWorker("a", max_load=10), ModelWorker("b", max_load=20)
    start(h, a, b)
    moving = set(a.running)
    rows(h, "drain", worker="a")
    h.until(lambda: not a.running, limit=10)
    for task in moving:
        started = min(t for t, e, x in b.journal if x == task and e == "start")
        stopped = max(t for t, e, x in a.journal if x == task and e == "stop")
        assert started <= stopped, f"{task} had a gap"
    w = h.core.queries.worker("a")
    assert w is not None and w.drained and w.assigned == 0
    rows(h, "undrain", worker="a")
    h.until(lambda: len(a.running) >= 3, limit=20)  # convergence moves work back
    h.until(lambda: all(len(v) == 1 for v in h.owners().values()), limit=5)  # hand-offs end


def test_lame_duck_worker_hands_off_and_keeps_tasks_nobody_can_take() -> None:
    h = Harness(config(replicas=1), {f"t{i}": 1.0 for i in range(6)})
    a, b = ModelWorker("a", max_load=6), ModelWorker("b", max_load=2)
    start(h, a, b)
    a.drain(h.now)
    for _ in range(8):
        h.step(0.5)
    assert len(b.running) == 2  # b is full
    assert len(a.running) == len([t for t in (f"t{i}" for i in range(6)) if t not in b.running])
    assert all(len(v) == 1 for v in h.owners().values()) and len(h.owners()) == 6


def test_failing_source_keeps_the_last_good_list() -> None:
    h = Harness(config(query_retry=2.0), None)
    w = ModelWorker("w", running={"kept": 1}, lease_until=3.0)
    h.add(w)
    h.until(lambda: h.core.life.phase is Phase.QUERYING)
    h.step(3.0)
    assert h.core.life.phase is Phase.QUERYING and h.fetches >= 2  # retried
    assert list(w.running) == ["kept"] and w.lease_until > h.now  # leases still renewed
    h.source = {"kept": 1, "new": 1}
    h.until(h.running, limit=5)
    h.step(1.0)
    h.source = None
    rows(h, "query")
    h.source = {}
    rows(h, "query")
    h.step(1.0)
    assert sorted(w.running) == ["kept", "new"]
    assert h.core.counters.source_errors >= 2


def test_restarted_worker_gets_its_tasks_back_at_once() -> None:
    h = Harness(config(), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    mine = set(a.running)
    a2 = h.replace(a, a.restarted(h.now))
    h.step(1.0)
    # The old process's connection is gone: the new one takes the id over at once.
    h.run(h.core.handle(_gone(a), h.now))
    h.step(1.0)
    assert set(a2.running) == mine
    assert h.core.counters.restarts == 1


def _gone(w: ModelWorker) -> object:
    from corral.supervisor.events import PeerGone

    return PeerGone(w.identity)


def test_a_second_live_process_with_a_taken_id_is_sent_nothing_and_refused() -> None:
    h = Harness(config(), dict(TASKS))
    a = ModelWorker("a")
    start(h, a)
    mine = dict(a.running)
    twin = h.add(ModelWorker("a", incarnation=99, now=h.now))
    for _ in range(6):
        h.step(0.5)
    assert twin.refused and "two live workers" in twin.refused
    assert not [m for w, m in h.sent if w == "a" and isinstance(m, Instructions)
                and m.incarnation == 99], "the thief was sent an instruction set"
    assert twin.journal == [] and a.refused is None and a.running.keys() == mine.keys()
    row = rows(h, "workers")["workers"][0]
    assert row["conflict"] and h.core.counters.duplicate_ids == 1


def test_a_contender_takes_the_id_once_the_holder_times_out() -> None:
    h = Harness(config(lease=4.0, lease_margin=1.0), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    new = h.add(ModelWorker("a", incarnation=7, now=h.now))
    h.until(lambda: bool(new.running), limit=12, silent=(a,))
    # a's lease ran out before the newcomer ran anything (a frozen holder)
    first_start = min(t for t, e, _ in new.journal if e == "start")
    last_stop = max(t for t, e, _ in a.journal if e == "stop")
    assert last_stop <= first_start
    assert new.refused is None and h.core.counters.contested_ids == 1


def test_epoch_rises_above_what_workers_applied() -> None:
    h = Harness(config(), {"x": 1}, epoch=2)
    w = h.add(ModelWorker("w", running={"x": 9}, lease_until=3.0))
    h.until(h.running)
    h.step(1.0)
    assert h.core.life.epoch == 10 and h.persisted == [10]
    assert w.machine.applied[0] == 10
    assert [e for e in w.journal if e[1] == "stop"] == []


def test_task_failing_repeatedly_moves_and_shows_as_failing() -> None:
    h = Harness(config(max_failures=3), {"x": 1})
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    bad, good = (a, b) if "x" in a.running else (b, a)
    bad.failing.add("x")
    bad.fail("x", h.now)
    h.until(lambda: "x" in good.running, limit=20)
    assert "x" not in bad.running
    assert rows(h, "status")["tasks_failing"] == 1


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
    _, err, _ = verbs.call(h.core, "workers", {"limit": 0}, h.now)
    assert err is not None and err.code == "bad_request"


def test_shutdown_verb_stops() -> None:
    h = Harness(config(), {"x": 1})
    rows(h, "shutdown", reason="test")
    assert h.stopped == "test" and h.core.life.phase is Phase.STOPPING


def test_renewals_come_at_least_every_renew_interval() -> None:
    h = Harness(config(lease=5.0), {"x": 1})
    w = ModelWorker("w")
    start(h, w)
    for _ in range(20):
        h.step(0.5)
        assert w.lease_until - h.now >= 5.0 - 5.0 / 4 - 1.0 - 1e-9  # lease/5 + a report


def test_json_views_keep_the_contract_keys() -> None:
    h = Harness(config(), dict(TASKS))
    start(h, ModelWorker("a"), ModelWorker("b"))
    status = rows(h, "status")
    assert {"phase", "epoch", "workers_active", "workers_total", "tasks_assigned",
            "tasks_pending", "tasks_failing", "balanced"} <= set(status)
    row = rows(h, "workers")["workers"][0]
    assert {"id", "state", "active", "max_load", "running", "utilization",
            "last_report_age_s", "zone", "labels"} <= set(row)
    asg = rows(h, "assignments")
    assert {"version", "assignments", "pending"} <= set(asg)
    assert sorted(asg["assignments"]) == sorted(TASKS)
    task = rows(h, "tasks")["tasks"][0]
    assert {"task", "cost", "owners", "tokens", "missing", "pending_reason"} <= set(task)


def test_fencing_tokens_only_grow_per_task_across_moves_and_epochs() -> None:
    h = Harness(config(replicas=1), dict(TASKS), epoch=3)
    a, b, c = ModelWorker("a"), ModelWorker("b"), ModelWorker("c")
    start(h, a, b, c)
    seen: dict[str, list[int]] = {}

    def record() -> None:
        for w in h.workers.values():
            if w.last is None:
                continue
            for task, token in w.last.running.items():
                if token and (not seen.get(task) or seen[task][-1] != token):
                    seen.setdefault(task, []).append(token)

    record()
    rows(h, "drain", worker="a")  # a hand-off
    for _ in range(10):
        h.step(0.5)
        record()
    h.until(lambda: not h.core.registry.get("b").active,  # type: ignore[union-attr]
            silent=(b,))  # a failover
    for _ in range(6):
        h.step(0.5, silent=(b,))
        record()
    assert sum(len(v) > 1 for v in seen.values()) >= 4, seen
    for task, tokens in seen.items():
        assert tokens == sorted(set(tokens)), f"{task}: tokens went {tokens}"
        assert all(token_epoch(t) == 3 for t in tokens)


def test_workers_and_tasks_page_and_filter() -> None:
    h = Harness(config(), {f"room-{i:02d}": 1 for i in range(30)})
    ws = [ModelWorker(f"w{i}", zone=f"z{i % 2}") for i in range(5)]
    start(h, *ws)
    first = rows(h, "workers", limit=2)
    assert [w["id"] for w in first["workers"]] == ["w0", "w1"] and first["next"] == "w1"
    rest = rows(h, "workers", after=first["next"])
    assert [w["id"] for w in rest["workers"]] == ["w2", "w3", "w4"] and rest["next"] is None
    assert [w["id"] for w in rows(h, "workers", state="ready", limit=1)["workers"]] == ["w0"]
    page = rows(h, "tasks", task="room-1", limit=4)
    assert [t["task"] for t in page["tasks"]] == [f"room-1{i}" for i in range(4)]
    assert rows(h, "tasks", task="room-1", after=page["next"])["next"] is None
    asg = rows(h, "assignments", task="room-2")
    assert sorted(asg["assignments"]) == [f"room-2{i}" for i in range(10)]


def test_a_worker_with_5000_tasks_gets_them_in_parts_and_runs_them_all() -> None:
    from corral.common.wire.tasklist import TaskEntry
    from corral.supervisor.dispatch import PART_TASKS

    spec = json.dumps({"url": "rtsp://cam/" + "x" * 200}, separators=(",", ":"))
    tasks = {f"cam-{i:05d}": TaskEntry(1.0, spec if i % 2 else None) for i in range(5000)}
    h = Harness(config(), tasks)
    w = ModelWorker("big", max_load=5000)
    start(h, w)
    h.until(lambda: len(w.running) == 5000, limit=10)
    resets = [m for _, m in h.sent if isinstance(m, Instructions) and m.reset and m.add]
    parts = [m for m in resets if m.parts > 1]
    assert parts and len(parts) == parts[0].parts >= 5000 // PART_TASKS
    assert all(len(m.add) <= PART_TASKS for m in parts)
    # Reassembled exactly: every task once, each with its token and its spec.
    assert sorted(t for m in parts for t in m.add) == sorted(tasks)
    assert {t for m in parts for t in m.specs} == {t for t, e in tasks.items() if e.spec}
    assert h.core.counters.set_parts == len(parts)
    assert all(tok > 0 for tok in w.last.running.values())  # type: ignore[union-attr]


def test_tasks_in_a_hand_off_are_listed_and_the_feed_says_who_moved_what() -> None:
    h = Harness(config(replicas=1), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b", max_load=20)
    start(h, a, b)
    cursor = rows(h, "events")["cursor"]
    rows(h, "drain", worker="a")
    moving = {t["task"] for t in rows(h, "tasks", handoffs=True)["tasks"]}
    assert moving == set(a.running) and all(
        t["handoff_from"] == "a" for t in rows(h, "tasks", handoffs=True)["tasks"])
    page = rows(h, "events", after=cursor)
    moves = [e for e in page["events"] if e["kind"] == "move"]
    assert {e["task"] for e in moves} == moving and all(e["cost"] == 1.0 for e in moves)
    assert page["epoch"] == h.core.life.epoch and page["missed"] == 0
    h.until(lambda: not rows(h, "tasks", handoffs=True)["tasks"], limit=10)


def settled_and_reporting() -> tuple[Harness, ModelWorker, WorkerRecord, Status, Status]:
    """A settled worker ``w`` (its record ``rec`` keeps the digest of its report ``kept``) and
    the report ``st`` it makes now, not yet handed over."""
    h = Harness(config(), dict(TASKS))
    w = ModelWorker("w", max_load=20)
    start(h, w)
    rec = h.core.registry.get("w")
    assert rec is not None and rec.digest is not None, "settled"
    return h, w, rec, rec.status, w.force_report(h.now)


def test_a_settled_report_takes_the_fast_path_read_either_way() -> None:
    """The daemon hands reports over with their task maps still encoded (`RawReport`); what
    the fast path compares of a settled worker's report is the same read that way or in full
    (`Report`), so either is recognised as the report it sent last time and only moves the
    seq."""
    h, w, rec, kept, st = settled_and_reporting()
    assert st.running == kept.running
    h.run(h.core.handle(Report(w.identity, st), h.now))
    assert rec.status is kept and rec.last_seq == st.seq, "the full report took the slow path"
    h.report(w)  # a RawReport (modelfleet.py)
    assert rec.status is kept and rec.last_seq > st.seq


@pytest.mark.parametrize("change", [
    {"running": "a token"}, {"running": "one task more"}, {"running": "one task less"},
    {"max_load": 19.0}, {"state": WorkerState.LAME_DUCK}, {"lease_held": False},
    {"failures": {"t00": 1}}, {"serve": "tcp://127.0.0.1:9"}, {"starting": ("t00",)},
])
def test_a_report_that_differs_in_anything_compared_is_read_in_full(
        change: dict[str, object]) -> None:
    """The fast path knows a settled worker's report by a digest of what matters in it (the
    task maps as bytes), so a report that differs in any of that — even one token — is read in
    full and judged."""
    h, w, rec, kept, st = settled_and_reporting()
    assert st.running, "the worker runs tasks"
    running = dict(st.running)
    first = sorted(running)[0]
    if change.get("running") == "a token":
        running[first] += 1
    elif change.get("running") == "one task more":
        running["zz-extra"] = 1
    elif change.get("running") == "one task less":
        del running[first]
    fields = {k: v for k, v in change.items() if k != "running"}
    changed = msgspec.structs.replace(st, running=running, **fields)
    frame = encode(changed)
    h.run(h.core.handle(RawReport(w.identity, glance_status(frame), frame), h.now))
    assert rec.status is not kept and rec.status == changed, "read in full"


def test_a_report_with_bad_task_maps_is_counted_and_dropped() -> None:
    """Task maps are checked only when a report changed; bad ones are then counted and the
    report dropped — nothing else changes, nothing raises."""
    h = Harness(config(), dict(TASKS))
    w = ModelWorker("w", max_load=20)
    start(h, w)
    owners = h.owners()
    for i, bad in enumerate([{"": 1}, [1, 2], {"t00": -1}, {"t00": "x"}, 7]):
        body = {"worker": "w", "incarnation": w.incarnation, "seq": 10**6 + i,
                "sent_at": h.now, "max_load": 20.0, "running": bad}
        frame = msgspec.msgpack.encode((PROTOCOL_VERSION, "status", body))
        h.run(h.core.handle(RawReport(w.identity, glance_status(frame), frame), h.now))
        assert h.core.counters.bad_task_maps == i + 1
    h.step(1.0)
    assert h.owners() == owners
