"""Placement: generated fleets checked after every event, plus tables (the issue scenarios
among them). The checkers are in placement_checks.py; the state machine, stickiness and zones
have files of their own (test_placement_machine/sticky/zones.py)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.placement import (
    LEAST_UTILIZED,
    PROPORTIONAL,
    STRATEGIES,
    Assigned,
    Mode,
    Placement,
    TaskShape,
    bulk,
)
from corral.common.placement.diff import Diff

from .placement_checks import (
    EPS,
    check_balanced,
    check_books,
    check_coverage,
    check_once,
    check_pending_fits_nowhere,
    converge,
    profile,
)
from .placement_plan import WorkerSpec, plan


def check_invariants(p: Placement) -> None:
    check_books(p)


def check_diff_targets_eligible(p: Placement, diff: Diff) -> None:
    for w, d in diff.workers.items():
        if d.add:
            assert p.view.mode(w) is Mode.ELIGIBLE, f"{w} ({p.view.mode(w)}) got new tasks"


# -- generated fleets ------------------------------------------------------------------------

caps = st.sampled_from([0, 1, 2, 3, 4, 5, 8, 10, 2.5])
costs = st.sampled_from([1.0, 1.0, 1.0, 2.0, 0.5])
modes = st.sampled_from([Mode.ELIGIBLE, Mode.ELIGIBLE, Mode.ELIGIBLE, Mode.HOLD])
events = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.just(0), st.just(0)),
        st.tuples(st.just("leave"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("join"), st.integers(0, 11), caps),
        st.tuples(st.just("mode"), st.integers(0, 11), modes),
        st.tuples(st.just("add"), st.integers(0, 40), costs),
        st.tuples(st.just("remove"), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("rebalance"), st.integers(0, 5), st.sampled_from([0.0, 0.1, 0.5])),
        st.tuples(st.just("exclude"), st.integers(0, 40), st.integers(0, 11)),
        st.tuples(st.just("include"), st.integers(0, 40), st.integers(0, 11)),
    ),
    max_size=25,
)


@given(
    st.lists(st.tuples(caps, modes), min_size=1, max_size=8),
    st.dictionaries(st.integers(0, 40), costs, max_size=30),
    st.integers(1, 3),
    st.sampled_from(STRATEGIES),
    events,
)
def test_invariants_hold_after_every_event(
    fleet: list[tuple[float, Mode]],
    tasks: dict[int, float],
    replicas: int,
    strategy: str,
    script: list[tuple[str, int, Any]],
) -> None:
    p = Placement(replicas, strategy)
    for i, (cap, mode) in enumerate(fleet):
        p.upsert_worker(f"w{i}", cap, mode)
    p.add_tasks({f"t{k}": c for k, c in tasks.items()})
    diff = p.place()
    check_invariants(p)
    check_pending_fits_nowhere(p)
    check_diff_targets_eligible(p, diff)
    for op, n, x in script:
        if op == "place":
            diff = p.place()
            check_diff_targets_eligible(p, diff)
            check_invariants(p)
            check_pending_fits_nowhere(p)
        elif op == "leave":
            ws = sorted(p.view.workers)
            if not ws:
                continue
            gone = ws[n % len(ws)]
            before = {t: list(p.view.owners(t)) for t in p.view.tasks}
            had = set(p.view.tasks_of(gone))
            diff = p.remove_worker(gone)
            diff.merge(p.place())
            check_invariants(p)
            check_pending_fits_nowhere(p)
            check_coverage(p)
            # Leaving moves exactly the departed worker's tasks, except that a task left
            # without any replica may displace another task's redundant one (coverage first).
            displaced = {(w, t) for w, d in diff.workers.items() if w != gone for t in d.remove}
            for w, t in displaced:
                assert len(before[t]) >= 2 and len(p.view.owners(t)) >= 1, f"{t} displaced from {w}"
            for t, owners in before.items():
                kept = [w for w in owners if w != gone and (w, t) not in displaced]
                assert all(w in p.view.owners(t) for w in kept), f"{t} lost a surviving owner"
                if t not in had and not any(x == t for _, x in displaced):
                    assert (
                        list(p.view.owners(t)) == owners or len(owners) < p.replicas
                    ), f"{t} was not {gone}'s but moved"
            assert set(diff.workers[gone].remove) == had if had else gone not in diff.workers
        elif op == "join":
            p.upsert_worker(f"w{n}", x, Mode.ELIGIBLE)
            check_invariants(p)  # a capacity cut sheds at once
            diff = p.place()
            check_invariants(p)
            check_pending_fits_nowhere(p)
        elif op == "mode":
            if p.view.has_worker(f"w{n}"):
                p.upsert_worker(f"w{n}", p.view.max_load(f"w{n}"), x)
                check_invariants(p)
        elif op == "add":
            p.add_tasks({f"t{n}": x})
            check_invariants(p)
        elif op == "remove":
            diff = p.remove_tasks([f"t{n}"])
            assert f"t{n}" not in p.view.tasks
            check_invariants(p)
        elif op == "exclude":
            owned = f"w{x}" in p.view.owners(f"t{n}")
            assert p.exclude(f"t{n}", f"w{x}") == owned
            assert f"w{x}" not in p.view.owners(f"t{n}")
            p.place()
            check_invariants(p)
            check_pending_fits_nowhere(p)
        elif op == "include":
            p.include(f"t{n}", f"w{x}")
            p.place()
            check_invariants(p)
            check_pending_fits_nowhere(p)
        else:
            before_max = max((p.view.utilization(w) for w in p.view.eligible()), default=0.0)
            pinned = set(list(p.view.tasks)[::2])
            before = {t: list(p.view.owners(t)) for t in pinned}
            raised = p.convergence.raised
            diff, moves = p.rebalance(tolerance=x, budget=n, pinned=pinned)
            assert {t: list(p.view.owners(t)) for t in pinned} == before, "moved a pinned task"
            assert len(moves) <= n
            after_max = max((p.view.utilization(w) for w in p.view.eligible()), default=0.0)
            if diff.moved() == len(moves) and p.convergence.raised == raised:
                # Only moves, none of the rare passes that must trade tasks between full
                # workers (`convergence`): the maximum utilization did not rise.
                assert after_max <= before_max + EPS, "a rebalance raised the max utilization"
            check_diff_targets_eligible(p, diff)
            check_invariants(p)


@given(
    st.lists(caps, min_size=1, max_size=6),
    st.integers(0, 30),
    st.integers(1, 3),
    st.sampled_from(STRATEGIES),
)
def test_coverage_before_redundancy(
    fleet: list[float], ntasks: int, replicas: int, strategy: str
) -> None:
    """With unit costs, while any task has no owner, no task has a second one."""
    p = Placement(replicas, strategy)
    for i, cap in enumerate(fleet):
        p.upsert_worker(f"w{i}", cap)
    p.add_tasks([f"t{i}" for i in range(ntasks)])
    p.place()
    check_invariants(p)
    counts = [len(p.view.owners(t)) for t in p.view.tasks]
    if 0 in counts:
        assert max(counts) <= 1, counts
    # And every task that can have min(replicas, eligible) owners given capacity does, or is
    # reported pending (checked by check_invariants); pending fits nowhere:
    check_pending_fits_nowhere(p)


@given(
    st.lists(st.integers(1, 12), min_size=2, max_size=6),
    st.integers(0, 40),
    st.integers(1, 3),
)
def test_least_utilized_is_optimal_or_within_one_task(
    fleet: list[int], ntasks: int, replicas: int
) -> None:
    """Unit costs. The best possible max utilization is found by trying every level (a worker
    holds at most one replica of each task). With one replica, water-filling reaches it and
    places everything that fits. With more, the distinct-owner rule can cost greedy at most
    one task on the most utilized worker, but never coverage: every task that can get a first
    replica gets one."""
    p = Placement(replicas, LEAST_UTILIZED)
    for i, cap in enumerate(fleet):
        p.upsert_worker(f"w{i}", cap)
    p.add_tasks([f"t{i}" for i in range(ntasks)])
    p.place()
    placed = sum(len(p.view.owners(t)) for t in p.view.tasks)
    covered = sum(1 for t in p.view.tasks if p.view.owners(t))
    best_total = min(ntasks * replicas, sum(min(c, ntasks) for c in fleet))
    levels = sorted({k / c for c in fleet for k in range(0, min(c, ntasks) + 1)})
    best = next(
        lv for lv in levels
        if sum(min(int(lv * c + 1e-9), c, ntasks) for c in fleet) >= min(placed, best_total)
    )
    top = max(p.view.workers, key=lambda w: (p.view.utilization(w), w))
    got = p.view.utilization(top)
    assert covered == min(ntasks, sum(fleet))
    if replicas == 1:
        assert placed == best_total
        assert got <= best + 1e-9, (got, best)
    else:
        assert got <= best + 1 / p.view.max_load(top) + 1e-9, (got, best)


# -- tables ----------------------------------------------------------------------------------


def _counts(result: Any) -> dict[str, int]:
    return {w: len(d.add) for w, d in sorted(result.diff.items())}


def test_seed_rule_three_workers_10_20_40_and_35_tasks() -> None:
    fleet = [WorkerSpec("a", 10), WorkerSpec("b", 20), WorkerSpec("c", 40)]
    tasks = [f"t{i:02d}" for i in range(35)]
    assert _counts(plan(fleet, tasks, strategy=PROPORTIONAL)) == {"a": 5, "b": 10, "c": 20}
    assert _counts(plan(fleet, tasks, strategy=LEAST_UTILIZED)) == {"a": 5, "b": 10, "c": 20}


def test_seed_rule_weights_from_free_capacity_with_ceil() -> None:
    # free: a = 10 - 5 = 5, b = 10 - 0 = 10; 5 new tasks: ceil(5 * 5/15) = 2, ceil(5 * 10/15) = 4.
    # The seed hands out contiguous runs in worker order, so a takes 2 and b the other 3.
    running = tuple(f"old{i}" for i in range(5))
    fleet = [WorkerSpec("a", 10, tasks=running), WorkerSpec("b", 10)]
    tasks = {**dict.fromkeys(running, 1.0), **{f"new{i}": 1.0 for i in range(5)}}
    result = plan(fleet, tasks, strategy=PROPORTIONAL)
    assert sorted(result.diff["a"].add) == ["new0", "new1"]
    assert sorted(result.diff["b"].add) == ["new2", "new3", "new4"]


def test_seed_rule_with_replicas_uses_replicas_times_weight() -> None:
    # 6 tasks x 2 replicas over two equal empty workers: each takes ceil(12 * 1/2) = 6.
    fleet = [WorkerSpec("a", 10), WorkerSpec("b", 10)]
    result = plan(fleet, [f"t{i}" for i in range(6)], replicas=2, strategy=PROPORTIONAL)
    assert _counts(result) == {"a": 6, "b": 6}
    assert all(sorted(o) == ["a", "b"] for o in result.assignment.values())


def test_existing_placements_are_kept_and_stale_ones_removed() -> None:
    fleet = [WorkerSpec("a", 4, tasks=("x", "gone")), WorkerSpec("b", 4, tasks=("y",))]
    result = plan(fleet, ["x", "y", "z"])
    assert result.assignment["x"] == ["a"] and result.assignment["y"] == ["b"]
    assert result.diff["a"].remove == {"gone": None}
    assert "z" in result.diff["a"].add or "z" in result.diff["b"].add


def test_pending_when_nothing_fits_then_placed_when_capacity_appears() -> None:
    p = Placement(replicas=2)
    p.upsert_worker("a", 1)
    p.add_tasks(["t1", "t2"])
    p.place()
    assert p.view.pending() == {"t1": 1, "t2": 2}  # coverage first: t1 got a; nothing else fits
    p.upsert_worker("b", 5)
    diff = p.place()
    assert sorted(diff.workers["b"].add) == ["t1", "t2"]
    assert p.view.pending() == {"t2": 1}  # the second replica of t2 needs a third worker


def test_ineligible_workers_get_nothing_new_but_keep_their_tasks() -> None:
    p = Placement()
    p.upsert_worker("a", 10)
    p.add_tasks(["t1"])
    p.place()
    p.upsert_worker("a", 10, Mode.HOLD)  # e.g. lame duck, or drained
    p.upsert_worker("b", 10, Mode.HOLD)  # e.g. starting
    p.add_tasks(["t2"])
    p.place()
    assert list(p.view.owners("t1")) == ["a"] and p.view.pending() == {"t2": 1}


def test_capacity_cut_sheds_most_recent_tasks() -> None:
    p = Placement()
    p.upsert_worker("a", 3)
    p.add_tasks(["t1", "t2", "t3"])
    p.place()
    diff = p.upsert_worker("a", 1)
    assert list(diff.workers["a"].remove) == ["t3", "t2"]
    assert p.view.load("a") == 1 and p.view.pending() == {"t2": 1, "t3": 1}


def test_rebalance_after_join_moves_toward_the_new_worker_within_budget() -> None:
    p = Placement()
    p.upsert_worker("a", 10)
    p.add_tasks([f"t{i}" for i in range(8)])
    p.place()
    p.upsert_worker("b", 10)
    _, moves = p.rebalance(tolerance=0.0, budget=3)
    assert len(moves) == 3 and all(m.source == "a" and m.target == "b" for m in moves)
    _diff, moves = p.rebalance(tolerance=0.0, budget=10)
    assert p.view.load("a") == p.view.load("b") == 4
    assert p.rebalance(tolerance=0.0, budget=10)[1] == []  # balanced: nothing more to do


def test_rebalance_respects_tolerance() -> None:
    p = Placement()
    p.upsert_worker("a", 10)
    p.upsert_worker("b", 10)
    p.add_tasks([f"t{i}" for i in range(3)])
    p.place()  # 2 and 1: spread 0.1
    assert p.rebalance(tolerance=0.1, budget=5)[1] == []


def test_diff_add_then_remove_cancels() -> None:
    d = Diff()
    d.add("w", "t")
    d.remove("w", "t")
    assert not d
    d.remove("w", "u")
    d.add("w", "u")
    assert not d


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="replicas"):
        Placement(replicas=0)
    with pytest.raises(ValueError, match="strategy"):
        Placement(strategy="magic")
    p = Placement()
    with pytest.raises(ValueError, match="max_load"):
        p.upsert_worker("a", -1)
    with pytest.raises(ValueError, match="cost"):
        p.add_tasks({"t": 0})
    with pytest.raises(ValueError, match="cost"):
        TaskShape(cost=float("inf"))
    with pytest.raises(ValueError, match="replicas"):
        TaskShape(replicas=0)
    with pytest.raises(ValueError, match="label"):
        TaskShape(require={"gpu": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="zone"):
        p.upsert_worker("z", 1, zone="eu-1//host")
    p.upsert_worker("b", 1, zone="eu-1/rack-7", labels={"gpu": "true"})
    p.upsert_worker("b", 2)  # capacity changes keep zone and labels
    assert p.view.zone("b") == "eu-1/rack-7" and p.view.labels("b") == {"gpu": "true"}
    with pytest.raises(ValueError, match="zone is fixed"):
        p.upsert_worker("b", 2, zone="eu-1/rack-8")
    with pytest.raises(ValueError, match="labels are fixed"):
        p.upsert_worker("b", 2, labels={})


def test_result_does_not_depend_on_the_order_tasks_arrive_in() -> None:
    fleet = [WorkerSpec(f"w{i}", 3 + i) for i in range(5)]
    tasks = [f"t{i}" for i in range(20)]
    assert plan(fleet, tasks, 2).assignment == plan(fleet, list(reversed(tasks)), 2).assignment


# -- issue 11: the scenarios that broke the promise -------------------------------------------


def _fleet(n: int, seed: int = 7) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"w{i:04d}": float(rng.choice((50, 75, 100, 150))) for i in range(n)}


def _converged(caps: dict[str, float], tasks: int, replicas: int = 1) -> Placement:
    p = Placement(replicas)
    for w, c in caps.items():
        p.upsert_worker(w, c)
    p.add_tasks([f"t{i:05d}" for i in range(tasks)])
    converge(p, 0.0, 20, light=tasks > 500)
    check_books(p)
    return p


@pytest.mark.parametrize("ntasks", [4000, 100])
@pytest.mark.parametrize("joiner", ["joiner", "aaa", "zzz"])
def test_a_big_worker_joining_a_mixed_fleet_gets_its_share_whatever_its_name(
    ntasks: int, joiner: str
) -> None:
    """4,000 (or 100) tasks on 200 workers of max loads 50/75/100/150, a 150 joins: the
    convergence (budget 20, tolerance 0, as the supervisor runs it) ends at the fixed point
    and the joiner is no emptier than any other 150-worker minus one task."""
    caps = _fleet(200)
    p = _converged(caps, ntasks)
    p.upsert_worker(joiner, 150)
    moves = converge(p, 0.0, 20, light=True)
    assert p.is_balanced(0.0)
    check_books(p)
    assert all(m.target == joiner for m in moves)
    peers = [p.view.load(w) for w, c in caps.items() if c == 150]
    assert p.view.load(joiner) >= max(peers) - 1, (p.view.load(joiner), max(peers))
    assert p.view.load(joiner) >= (1 if ntasks == 100 else 30)


def test_the_joiner_s_name_changes_nothing() -> None:
    caps = _fleet(200)
    outcomes = set()
    for joiner in ("aaa", "mmm", "zzz"):
        p = _converged(caps, 4000)
        p.upsert_worker(joiner, 150)
        converge(p, 0.0, 20, light=True)
        outcomes.add((p.view.load(joiner), tuple(profile(p))))
    assert len(outcomes) == 1


@pytest.mark.parametrize(("workers", "tasks"), [(4, 18), (10, 45)])
def test_a_leave_with_two_replicas_re_places_evenly(workers: int, tasks: int) -> None:
    """Replicas 2: 4 workers x 18 tasks, one leaves -> 12/12/12; 10 x 45 -> all 10."""
    p = _converged({f"w{i}": 100.0 for i in range(workers)}, tasks, replicas=2)
    departed = len(p.view.tasks_of("w1"))
    p.remove_worker("w1")
    placed = p.place().moved()
    moves = converge(p, 0.0, 20)
    loads = sorted(p.view.load(w) for w in p.view.workers)
    assert loads[-1] - loads[0] == 0, loads
    assert placed == departed and not moves  # the departed replicas, and nothing else


@pytest.mark.parametrize(("workers", "tasks"), [(4, 18), (10, 45), (20, 400)])
def test_a_worker_s_tasks_have_their_other_replicas_on_many_workers(
    workers: int, tasks: int
) -> None:
    """Not one fixed partner: the other replicas of one worker's tasks are spread, so that
    when it leaves, its replicas can go anywhere (20 x 400 takes the bulk block path)."""
    p = _converged({f"w{i}": 100.0 for i in range(workers)}, tasks, replicas=2)
    for w in p.view.workers:
        partners = {o for t in p.view.tasks_of(w) for o in p.view.owners(t) if o != w}
        assert len(partners) >= min(workers - 1, len(p.view.tasks_of(w)) // 2), (w, partners)


def test_assign_refuses_what_would_break_a_rule_and_says_why() -> None:
    p = Placement(replicas=2)
    p.upsert_worker("a", 2)
    p.upsert_worker("b", 1)
    p.upsert_worker("c", 5, labels={"gpu": "true"})
    p.upsert_worker("d", 5, Mode.HOLD)
    p.add_tasks({"t1": 1.0, "t2": 1.0, "big": 3.0, "g": TaskShape(require={"gpu": "true"})})
    p.exclude("t1", "b")
    assert p.assign("t1", "a") is Assigned.OK and Assigned.OK
    assert p.assign("t1", "a") is Assigned.OWNER
    assert p.assign("t1", "b") is Assigned.EXCLUDED  # even when loads are equal (issue 11)
    assert p.assign("t1", "c") is Assigned.OK
    assert p.assign("t1", "d") is Assigned.COMPLETE
    assert p.assign("big", "a") is Assigned.NO_ROOM
    assert p.assign("g", "a") is Assigned.LABELS
    assert p.assign("nope", "a") is Assigned.UNKNOWN_TASK
    assert p.assign("t2", "nobody") is Assigned.UNKNOWN_WORKER
    assert p.assign("t2", "d") is Assigned.OK  # on hold: keeps what it already runs
    assert p.can_assign("t2", "b") is Assigned.OK and p.view.owners("t2") == ("d",)
    assert not any(v for v in Assigned if v is not Assigned.OK)
    check_books(p)


def test_a_pass_moves_one_replica_of_a_task_at_a_time() -> None:
    """Two workers run all 12 tasks (replicas 2); two more join. Every pass hands over at
    most one replica of any task, and the end is 6/6/6/6 with no replica moved twice."""
    p = Placement(replicas=2)
    tasks = [f"t{i:02d}" for i in range(12)]
    p.add_tasks(tasks)
    for w in "ab":
        p.upsert_worker(w, 12)
        for t in tasks:
            assert p.assign(t, w)
    p.upsert_worker("c", 12)
    p.upsert_worker("d", 12)
    moves = converge(p, 0.0, 20)  # checks one replica per task per pass
    assert sorted(p.view.load(w) for w in "abcd") == [6, 6, 6, 6]
    check_once(moves)


def test_planned_moves_are_the_moves_the_passes_make() -> None:
    caps = _fleet(50)
    p = _converged(caps, 1000, replicas=2)
    p.upsert_worker("new", 150)
    planned = p.planned_moves(0.0)
    assert planned and not p.is_balanced(0.0)
    made = converge(p, 0.0, 7, light=True)
    assert sorted(map(str, made)) == sorted(map(str, planned))
    assert p.planned_moves(0.0) == [] and p.is_balanced(0.0)


def test_not_balanced_while_a_pending_replica_fits() -> None:
    p = Placement()
    p.upsert_worker("a", 2)
    p.add_tasks(["t1"])
    assert not p.is_balanced(0.0)  # t1 fits on a
    p.place()
    assert p.is_balanced(0.0)


def test_a_rebalance_makes_room_for_a_pending_replica_and_starts_it() -> None:
    """w1 is full with t1 (cost 2) that w2 could hold; t2 needs w1's labels: the plan moves
    t1 and starts t2 in the room it left."""
    p = Placement()
    p.upsert_worker("w1", 2, labels={"gpu": "true"})
    p.add_tasks({"t1": 2.0})
    p.place()
    p.upsert_worker("w2", 4)
    p.add_tasks({"t2": TaskShape(2.0, require={"gpu": "true"})})
    assert p.place().moved() == 0 and p.view.pending() == {"t2": 1}
    moves = converge(p, 0.0, 20)
    assert [str(m) for m in moves] == ["Move(task='t1', source='w1', target='w2')"]
    assert p.view.owners("t2") == ("w1",) and not p.view.pending()


def test_coverage_before_redundancy_when_the_fleet_is_full() -> None:
    """Replicas 2 on two workers of 3: three tasks fill them. Two more tasks each get a
    first replica by displacing a second one; nothing gets a second replica meanwhile."""
    p = Placement(replicas=2)
    p.upsert_worker("a", 3)
    p.upsert_worker("b", 3)
    p.add_tasks(["t1", "t2", "t3"])
    p.place()
    p.add_tasks(["t4", "t5"])
    diff = p.place()
    assert all(len(p.view.owners(t)) >= 1 for t in p.view.tasks)
    assert sum(len(d.remove) for d in diff.workers.values()) == 2
    check_coverage(p)
    check_books(p)


# -- task shapes and pending reasons ------------------------------------------------------------


def test_task_shapes_carry_cost_replicas_and_required_labels() -> None:
    p = Placement(replicas=2)
    for w, gpu in (("a", True), ("b", True), ("c", False), ("d", False)):
        p.upsert_worker(w, 10, labels={"gpu": "true"} if gpu else {})
    p.add_tasks({"one": TaskShape(replicas=1), "three": TaskShape(2.0, 3),
                 "g": TaskShape(require={"gpu": "true"}), "plain": 1.0})
    p.add_tasks(["ids", "work"])  # ids still mean cost 1, default replicas
    p.place()
    assert len(p.view.owners("one")) == 1 and len(p.view.owners("three")) == 3
    assert set(p.view.owners("g")) == {"a", "b"} and len(p.view.owners("ids")) == 2
    assert p.view.shape("three") == TaskShape(2.0, 3) and p.view.replicas_of("plain") == 2
    check_books(p)


def test_upsert_tasks_reshapes_in_place_and_sheds_what_no_longer_fits() -> None:
    p = Placement(replicas=2)
    p.upsert_worker("a", 3, zone="z1", labels={"gpu": "true"})
    p.upsert_worker("b", 3, zone="z1")
    p.upsert_worker("c", 3, zone="z2")
    p.add_tasks({"t": 1.0, "u": 1.0, "v": 1.0})
    p.place()
    # cost up: an owner pushed over its max_load sheds it
    loads = {w: p.view.load(w) for w in "abc"}
    diff = p.upsert_tasks({"t": 3.0})
    assert all(p.view.load(w) <= p.view.max_load(w) for w in "abc")
    assert {w for w, d in diff.workers.items() if "t" in d.remove} == \
        {w for w in "abc" if "t" not in p.view.tasks_of(w) and loads[w] - 1 + 3 > 3}
    # fewer replicas: the surplus goes from the most crowded zone
    p.upsert_tasks({"t": 1.0})
    p.place()
    p.upsert_tasks({"u": TaskShape(replicas=3)})
    p.place()
    assert set(p.view.owners("u")) == {"a", "b", "c"}
    diff = p.upsert_tasks({"u": TaskShape(replicas=2)})
    assert "c" in p.view.owners("u")  # one of the two z1 replicas went; the lone z2 one stays
    assert sum(1 for d in diff.workers.values() if "u" in d.remove) == 1
    # new required labels: owners without them shed it at once
    diff = p.upsert_tasks({"v": TaskShape(require={"gpu": "true"})})
    assert set(p.view.owners("v")) <= {"a"}
    p.place()
    assert p.view.owners("v") == ("a",) and p.view.pending() == {"v": 1}
    check_books(p)
    check_pending_fits_nowhere(p)


def test_pending_reasons_say_what_to_change() -> None:
    p = Placement(replicas=3)
    p.upsert_worker("a", 1, labels={"gpu": "true"})
    p.upsert_worker("b", 1)
    p.upsert_worker("c", 5, Mode.HOLD, labels={"gpu": "true"})
    p.add_tasks({"tpu": TaskShape(require={"tpu": "v4"}), "two": TaskShape(replicas=2),
                 "gpu": TaskShape(replicas=1, require={"gpu": "true"}),
                 "big": TaskShape(4.0, replicas=1), "banned": TaskShape(replicas=1)})
    p.exclude("banned", "a")
    p.exclude("banned", "b")
    p.place()
    reasons = p.view.pending_reasons()
    assert reasons["tpu"] == "no live worker has tpu=v4"
    assert reasons["big"] == "no room for cost 4 on the 2 live workers that could take it"
    assert reasons["banned"] == "excluded from 2 of the 2 live workers"
    assert set(reasons) == set(p.view.pending())
    p2 = Placement(replicas=3)
    p2.upsert_worker("a", 5, labels={"gpu": "true"})
    p2.add_tasks({"g": TaskShape(require={"gpu": "true"})})
    p2.place()
    assert p2.view.pending_reasons() == {"g": "needs 3 replicas, only 1 live workers with gpu=true"}


# -- zones -------------------------------------------------------------------------------------


def test_replicas_go_to_distinct_zones_then_the_emptiest() -> None:
    p = Placement(replicas=2)
    for i, z in enumerate("aabbbc"):
        p.upsert_worker(f"w{i}", 10, zone=z)
    p.add_tasks([f"t{i}" for i in range(12)])
    p.place()
    assert all(len({p.view.zone(w) for w in p.view.owners(t)}) == 2 for t in p.view.tasks)
    assert p.view.zone_degraded() == 0


def test_hierarchical_zones_spread_at_the_highest_level_first() -> None:
    p = Placement(replicas=3)
    for w, z in (("e1", "eu/r1"), ("e2", "eu/r1"), ("e3", "eu/r2"), ("u1", "us/r1")):
        p.upsert_worker(w, 10, zone=z)
    p.add_tasks([f"t{i}" for i in range(4)])
    p.place()
    for t in p.view.tasks:
        zones = sorted(p.view.zone(w) for w in p.view.owners(t))
        assert zones == ["eu/r1", "eu/r2", "us/r1"], zones  # 2 regions, then 2 eu racks
    assert p.view.zone_degraded() == 0


def test_a_zone_that_comes_back_gets_its_replicas_back_within_the_budget() -> None:
    p = Placement(replicas=2)
    for i, z in enumerate("aabbcc"):
        p.upsert_worker(f"w{i}", 20, zone=z)
    p.add_tasks([f"t{i:02d}" for i in range(24)])
    converge(p, 0.0, 5)
    p.remove_worker("w4")
    p.remove_worker("w5")  # zone c is gone: its replicas go to a and b, still distinct
    converge(p, 0.0, 5)
    assert p.view.zone_degraded() == 0 and not p.view.pending()
    p.upsert_worker("w4", 20, zone="c")
    p.upsert_worker("w5", 20, zone="c")
    converge(p, 0.0, 5)
    check_balanced(p, 0.0)
    assert {p.view.zone(w) for w in p.view.workers if p.view.tasks_of(w)} == {"a", "b", "c"}
    p2 = Placement(replicas=3)
    for i, z in enumerate("ab"):
        p2.upsert_worker(f"w{i}", 10, zone=z)
        p2.upsert_worker(f"x{i}", 10, zone=z)
    p2.add_tasks([f"t{i}" for i in range(6)])
    converge(p2, 0.0, 5)
    assert p2.view.zone_degraded() == 0  # 3 replicas in 2 zones: 2 + 1 is as even as it gets
    p2.upsert_worker("c", 10, zone="c")
    assert p2.view.zone_degraded() == 6  # (2, 1, 0) over three live zones: one can move to c
    passes = 0
    while p2.rebalance(0.0, 5)[0]:
        passes += 1
    assert passes >= 2 and p2.view.zone_degraded() == 0  # repaired within the budget per pass
    assert all(len({p2.view.zone(w) for w in p2.view.owners(t)}) == 3 for t in p2.view.tasks)


def test_a_tolerance_bounds_the_gap_not_one_task_s_step() -> None:
    """A tolerance of 0.05 (`--rebalance-tolerance 0.05`) on workers whose one-task step is
    smaller than that (max load 600: 1/600): they must still shed load to an empty joiner
    until the joiner is within the tolerance (plus one task) of them."""
    p = Placement()
    for w in ("a", "b"):
        p.upsert_worker(w, 600)
    p.add_tasks([f"t{i:04d}" for i in range(600)])
    p.place()
    p.upsert_worker("new", 600)
    moves = converge(p, 0.05, 20, light=True)
    assert moves and all(m.target == "new" for m in moves)
    utils = sorted(p.view.utilization(w) for w in p.view.workers)
    assert utils[-1] - utils[0] <= 0.05 + 1 / 600 + EPS, utils
    check_balanced(p, 0.05)


@st.composite
def _adoptions(draw: st.DrawFn, plain: bool = False
               ) -> tuple[list[Any], list[Any], list[tuple[str, list[str]]]]:
    """Workers (cap, labels, zone), tasks (cost or shape), and per worker the tasks it claims:
    some unknown, some repeated, some excluded, some needing labels it lacks. ``plain``: bare
    costs and no zones (the book `assign_many` checks in one pass)."""
    workers = [(f"w{i}", draw(st.sampled_from([0.0, 1.0, 2.5, 4.0])),
                {} if plain else draw(st.sampled_from([{}, {"gpu": "true"}])),
                "" if plain else draw(st.sampled_from(["", "z1", "z2"])))
               for i in range(draw(st.integers(1, 4)))]
    costs = st.sampled_from([1.0, 0.5, 2.0, 0.1, 0.7])
    shapes = costs if plain else st.one_of(
        costs, st.builds(TaskShape, st.sampled_from([1.0, 1.5]), st.sampled_from([None, 1, 3]),
                         st.sampled_from([{}, {"gpu": "true"}])))
    tasks = [(f"t{i}", draw(shapes)) for i in range(draw(st.integers(1, 10)))]
    names = [t for t, _ in tasks] + ["unknown"]
    claims = [(draw(st.sampled_from([w for w, *_ in workers] + ["nobody"])),
               draw(st.lists(st.sampled_from(names), max_size=8)))
              for _ in range(draw(st.integers(1, 6)))]
    return workers, tasks, claims


@given(st.booleans().flatmap(_adoptions), st.integers(1, 3), st.randoms(use_true_random=False))
def test_assign_many_is_assign_one_by_one(case: Any, replicas: int, rnd: random.Random) -> None:
    workers, tasks, claims = case
    plain = all(isinstance(c, float) for _, c in tasks) and not any(z for *_, z in workers)
    ps = [Placement(replicas) for _ in range(2)]
    for p in ps:
        for w, cap, labels, zone in workers:
            p.upsert_worker(w, cap, zone=zone, labels=labels)
        p.add_tasks(dict(tasks))
    excluded = [] if plain and rnd.random() < 0.5 else [
        (t, w) for t, _ in tasks for w, *_ in workers if rnd.random() < 0.15]
    for p in ps:
        for t, w in excluded:
            p.exclude(t, w)
    one, many = ps
    if plain and not excluded:
        assert bulk.plain(many.book)  # the one-pass path is the one checked
    for w, claimed in claims:
        took = [t for t in claimed if one.assign(t, w)]
        assert many.assign_many(w, claimed) == took
    assert one.view.assignment() == many.view.assignment()
    for w, *_ in workers:
        assert one.view.load(w) == pytest.approx(many.view.load(w))
        assert dict(one.view.tasks_of(w)) == dict(many.view.tasks_of(w))
    assert one.view.pending() == many.view.pending()
    check_invariants(many)


@given(st.lists(st.sampled_from([f"t{i}" for i in range(8)]), max_size=12),
       st.lists(st.sampled_from([f"t{i}" for i in range(8)]), max_size=6),
       st.sampled_from([1.0, 0.25, 3]), st.integers(1, 2))
def test_tasks_of_one_cost_added_in_bulk_are_added_one_by_one(
        ids: list[str], known: list[str], cost: float, replicas: int) -> None:
    bulk_p, one_p = Placement(replicas), Placement(replicas)
    for p in (bulk_p, one_p):
        p.upsert_worker("w", 4.0)
        p.add_tasks(dict.fromkeys(known, 2.0))  # known tasks keep their cost
    bulk_p.add_uniform(ids, cost)
    one_p.add_tasks({t: float(cost) for t in ids})
    for p in (bulk_p, one_p):
        p.place()
    assert bulk_p.view.assignment() == one_p.view.assignment()
    assert list(bulk_p.view.tasks.items()) == list(one_p.view.tasks.items())  # costs, order
    assert list(bulk_p.view.pending()) == list(one_p.view.pending())
    check_invariants(bulk_p)


def test_a_bulk_of_tasks_with_a_bad_cost_is_refused() -> None:
    p = Placement()
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="cost must be a finite number > 0"):
            p.add_uniform(["a"], bad)
    assert not p.view.tasks


@given(st.lists(st.sampled_from([f"t{i}" for i in range(8)]), max_size=12),
       st.sampled_from([1.0, 0.25, 3]), st.integers(1, 2), st.integers(0, 4))
def test_a_fill_in_steps_is_add_uniform_and_nothing_until_its_last_step(
        ids: list[str], cost: float, replicas: int, stop_after: int) -> None:
    filled, added = Placement(replicas), Placement(replicas)
    for p in (filled, added):
        p.upsert_worker("w", 4.0)
    added.add_uniform(ids, cost)
    steps = filled.fill(dict.fromkeys(ids), cost)
    taken = 0
    for _ in steps:
        taken += 1
        if taken == stop_after:
            break
        assert not filled.view.tasks, "the book changed before the last step"
    if taken == stop_after:  # dropped midway: as if never begun
        assert not filled.view.tasks and not filled.view.pending()
        return
    assert list(filled.view.tasks.items()) == list(added.view.tasks.items())
    assert list(filled.view.pending()) == list(added.view.pending())
    for p in (filled, added):
        p.place()
    assert filled.view.assignment() == added.view.assignment()
    check_invariants(filled)


def test_a_fill_is_only_for_a_placement_with_no_task() -> None:
    p = Placement()
    p.add_uniform(["a"], 1.0)
    with pytest.raises(ValueError, match="no task yet"):
        p.fill({"b": None}, 1.0)
    with pytest.raises(ValueError, match="cost must be a finite number > 0"):
        Placement().fill({"b": None}, 0.0)
