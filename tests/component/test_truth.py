"""Truth over trust, on the pure core with model workers and peers that lie: an assignment is
covered only once it runs, a peer's claims are believed only in range and with evidence, a
flood of made-up ids costs little, and no input is echoed back unbounded."""

from __future__ import annotations

import random
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.common.wire.codec import encode, glance_status
from corral.common.wire.protocol import (
    MAX_LOAD,
    MAX_STATE_EPOCH,
    Status,
    WorkerState,
    make_token,
)
from corral.supervisor import verbs, views
from corral.supervisor.events import RawReport

from .modelfleet import Harness, ModelWorker, config


class Liar:
    """A plain peer, not a worker: it reports whatever it is told to, and runs nothing."""

    def __init__(self, h: Harness, id: str, max_load: float = MAX_LOAD,
                 identity: bytes | None = None, **fields: Any) -> None:
        self.h, self.id, self.seq = h, id, 0
        self.identity = identity or f"liar-{id}".encode()
        self.fields = {"max_load": max_load, "running": {}, **fields}

    def report(self, **over: Any) -> None:
        self.seq += 1
        body = {**self.fields, **over}
        st = Status(self.id, 7, self.seq, self.h.now, body.pop("max_load"), body.pop("running"),
                    **body)
        frame = encode(st)
        self.h.run(self.h.core.handle(RawReport(self.identity, glance_status(frame), frame),
                                      self.h.now))


def running_by_the_workers(h: Harness) -> int:
    """Tasks with an owner that the supervisor's records show running (brute force)."""
    q = h.core.queries
    count = 0
    for task in q.task_ids():
        owners = set(q.owners(task))
        old = h.core.assigner.handoffs.old_owner(task)
        if old is not None:
            owners.add(old)
        if not q.owners(task):
            continue
        for w in owners:
            rec = h.core.registry.get(w)
            if rec is not None and rec.active and task in rec.status.running \
                    and task not in rec.status.starting:
                count += 1
                break
    return count


def status(h: Harness) -> dict[str, Any]:
    return views.status(h.core.queries, h.now)


def test_a_peer_that_never_runs_its_tasks_loses_them_and_is_never_counted_as_running() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(12)}
    h = Harness(config(start_timeout=5.0, failure_cooldown=300.0), tasks)
    for x in "ab":
        h.add(ModelWorker(x, max_load=10))
    liar = Liar(h, "greedy")
    for _ in range(8):  # the warm-up: the liar reports too
        liar.report()
        h.step(0.5)
    h.until(h.running)
    given_to_liar: set[str] = set()
    deadline = h.now + 30
    while h.now < deadline:
        liar.report()
        h.step(0.5)
        given_to_liar |= set(h.core.queries.task_ids(worker="greedy"))
        s = status(h)
        assert s["tasks_running"] == running_by_the_workers(h)
        assert s["tasks_running"] <= s["tasks_assigned"]
        for task in h.core.queries.task_ids(worker="greedy"):
            assert h.core.queries.task(task).states["greedy"] != "running"  # type: ignore[union-attr]
        if not list(h.core.queries.task_ids(worker="greedy")) and s["tasks_running"] == 12:
            break
    assert given_to_liar, "the liar, with the most room, was given tasks"
    assert not list(h.core.queries.task_ids(worker="greedy")), "it lost them"
    assert status(h)["tasks_running"] == 12
    assert h.core.counters.start_timeouts >= len(given_to_liar)
    t = h.core.queries.task(sorted(given_to_liar)[0])
    assert t is not None and t.excluded["greedy"] == "not started within 5 s"
    row = views.tasks(h.core.queries)["tasks"][0]
    assert {"running_on", "states", "excluded"} <= set(row)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.lists(st.sampled_from(
    ["step", "step", "step", "kill", "restart", "fail", "hide", "unhide", "liar", "tasks"]),
    min_size=10, max_size=60))
def test_tasks_running_is_what_owners_report_running_over_random_histories(
        seed: int, ops: list[str]) -> None:
    rng = random.Random(seed)
    tasks = {f"t{i:02d}": 1.0 for i in range(rng.randrange(4, 16))}
    h = Harness(config(start_timeout=3.0, replicas=rng.choice([1, 2])), dict(tasks))
    workers = [h.add(ModelWorker(f"w{i}", max_load=rng.choice([3, 5, 10]))) for i in range(3)]
    liars: list[Liar] = []
    h.until(h.running)
    for op in ops:
        w = rng.choice(workers)
        if op == "kill" and w.identity in h.workers:
            h.workers.pop(w.identity)
        elif op == "restart":
            new = w.restarted(h.now)
            h.replace(w, new)
            workers[workers.index(w)] = new
        elif op == "fail" and w.running:
            w.failing.add(rng.choice(sorted(w.running)))
            w.fail(sorted(w.running)[0], h.now)
        elif op == "hide" and w.running:
            w.hide.add(rng.choice(sorted(w.running)))
        elif op == "unhide":
            w.hide.clear()
            w.failing.clear()
        elif op == "liar":
            liars.append(Liar(h, f"liar{len(liars)}", max_load=rng.choice([5.0, 50.0])))
        elif op == "tasks":
            h.source = {f"t{i:02d}": 1.0 for i in rng.sample(range(20), rng.randrange(1, 12))}
            h.run(h.core.handle(verbs.Command("query", {}), h.now))
        for liar in liars:
            liar.report()
        h.step(0.5)
        s = status(h)
        assert s["tasks_running"] == running_by_the_workers(h), (op, s)


def test_one_peers_epoch_claim_is_not_evidence_two_connections_or_a_token_are() -> None:
    h = Harness(config(warmup=30.0), {"a": 1.0})
    Liar(h, "x").report(applied=(MAX_STATE_EPOCH + 5, 1))  # in the wire's range, above ours
    assert h.persisted == [] and h.core.life.epoch == 1
    assert h.core.counters.epoch_claims_refused == 1
    assert ("warning", "refused to raise the epoch on this worker's word: no task runs under "
            "it and no other worker backs it, or it is out of range") in h.logs
    assert h.log_fields[h.logs[-1][1]]["connection"] == b"liar-x".hex()
    # A second connection backs the lower of the two claims.
    Liar(h, "y").report(applied=(4000, 1))
    assert h.core.life.epoch == 4001 and h.persisted == [4001]
    # A task running under a token of epoch 6000 is evidence on its own.
    Liar(h, "z").report(running={"a": make_token(6000, 3)})
    assert h.core.life.epoch == 6001
    # One worker's word near ours is believed (a lone worker after a lost state file).
    Liar(h, "near").report(applied=(6500, 1))
    assert h.core.life.epoch == 6501
    # Never past the state file's range, whatever the evidence.
    Liar(h, "u").report(running={"a": make_token(MAX_STATE_EPOCH, 1)})
    assert h.core.life.epoch == 6501
    # One worker's word far from ours alone moves nothing.
    lone = Harness(config(warmup=30.0), {"a": 1.0})
    Liar(lone, "far").report(applied=(5000, 1))
    assert lone.core.life.epoch == 1 and lone.core.counters.epoch_claims_refused == 1


def test_a_flood_of_made_up_ids_from_one_connection_costs_little_and_goes_away() -> None:
    h = Harness(config(fresh_ids=64, forget_after=3600.0), {"a": 1.0, "b": 1.0})
    real = h.add(ModelWorker("real", max_load=10))
    h.until(h.running)
    before = len(h.logs)
    for i in range(3000):
        Liar(h, f"ghost-{i}", identity=b"one-connection", max_load=1.0).report()
    assert len(h.core.registry) == 1 + 64
    assert h.core.counters.fresh_ids_refused == 3000 - 64
    assert all(level == "debug" for level, _ in h.logs[before:])
    h.step(0.5)
    cursor = h.core.feed.last
    h.until(lambda: len(h.core.registry) == 1, limit=30)  # lease + margin, then forgotten
    assert h.core.registry.get("real") is not None and real.lease_until > h.now
    events = h.core.feed.after(cursor, 5000)["events"]
    assert "timeout" not in {e["kind"] for e in events}
    forgotten = {e["worker"] for e in events if e["kind"] == "forget"}  # rows a page drops
    assert forgotten == {f"ghost-{i}" for i in range(64)}
    # the bucket refills: a minute later new ids get in again
    h.now += 60.0
    Liar(h, "late-ghost", identity=b"one-connection", max_load=1.0).report()
    assert h.core.registry.get("late-ghost") is not None


def test_live_workers_are_listed_first() -> None:
    h = Harness(config(), {"a": 1.0})
    for x in ("a1", "b1", "c1"):
        h.add(ModelWorker(x))
    h.until(h.running)
    h.workers.pop(next(i for i, w in h.workers.items() if w.id == "a1"))
    h.until(lambda: not h.core.registry.get("a1").active)  # type: ignore[union-attr]
    rows = views.workers(h.core.queries, h.now)["workers"]
    assert [r["id"] for r in rows] == ["b1", "c1", "a1"]
    page = views.workers(h.core.queries, h.now, limit=1, after="b1")
    assert [r["id"] for r in page["workers"]] == ["c1"] and page["next"] == "c1"
    assert [r["id"] for r in views.workers(h.core.queries, h.now, after="c1")["workers"]] == \
        ["a1"]


def test_forget_drops_only_a_silent_worker() -> None:
    h = Harness(config(), {"a": 1.0})
    h.add(ModelWorker("w1"))
    w2 = h.add(ModelWorker("w2"))
    h.until(h.running)
    _, error, _ = verbs.call(h.core, "forget", {"worker": "w1"}, h.now)
    assert error is not None and error.code == "bad_request" and "active" in error.message
    h.workers.pop(w2.identity)
    h.until(lambda: not h.core.registry.get("w2").active)  # type: ignore[union-attr]
    result, error, _ = verbs.call(h.core, "forget", {"worker": "w2"}, h.now)
    assert error is None and result == {"forgotten": "w2"}
    assert h.core.registry.get("w2") is None
    _, error, _ = verbs.call(h.core, "forget", {"worker": "w2"}, h.now)
    assert error is not None and error.code == "not_found"


def test_reports_with_forbidden_characters_are_refused_and_counted() -> None:
    h = Harness(config(), {"a": 1.0})
    h.until(lambda: h.now > 1)
    Liar(h, "esc\x1b[2J").report()
    Liar(h, "ok").report(running={"t\x00": 1})
    Liar(h, "bidi").report(zone="eu\u202e1")
    Liar(h, "lbl").report(labels={"k": "v\nw"})
    assert len(h.core.registry) == 0
    assert h.core.counters.bad_ids == 4


@given(st.text(min_size=257, max_size=20_000) | st.text(min_size=1, max_size=50).map(
    lambda s: s + "\x1b[2J"))
@settings(max_examples=40, deadline=None)
def test_control_errors_never_echo_input_unbounded(worker: str) -> None:
    h = Harness(config(), {"a": 1.0})
    for verb in ("drain", "undrain", "forget"):
        _, error, _ = verbs.call(h.core, verb, {"worker": worker}, h.now)
        assert error is not None and error.code == "bad_request", (verb, error)
        assert len(error.message) < 200 and "\x1b" not in error.message
    _, error, _ = verbs.call(h.core, "drain", {"worker": "x" * 256}, h.now)
    assert error is not None and error.code == "not_found" and len(error.message) < 200
    _, error, _ = verbs.call(h.core, "shutdown", {"reason": "r" * 5000}, h.now)
    assert error is not None and error.code == "bad_request"


def test_the_wire_refuses_what_no_real_worker_sends() -> None:
    """Out of range is refused where it is decoded: a worker's max_load, an epoch whose
    tokens would not fit 63 bits."""
    from corral.common.errors import ProtocolError
    from corral.common.wire.codec import decode

    ok = Status("w", 1, 1, 1.0, MAX_LOAD, {}, WorkerState.READY)
    decode(encode(ok))
    for bad in (msgspec.structs.replace(ok, max_load=MAX_LOAD * 2),
                msgspec.structs.replace(ok, applied=(2**41, 1)),
                msgspec.structs.replace(ok, utilization=1e4)):
        try:
            decode(encode(bad))
        except ProtocolError:
            continue
        raise AssertionError(f"decoded {bad}")
