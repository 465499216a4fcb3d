"""Placement as a state machine: random histories of joins, leaves, capacity and mode changes,
task adds, reshapes and removals, exclusions and restarts rebuilt from what workers report,
with replicas 1–3, mixed costs, zones and labels. After each event the books must hold; after
each convergence, everything the placement promises (tests/unit/placement_checks.py): the
balance criterion and spread repairs, coverage before redundancy, pending replicas that fit
nowhere, no replica moved twice, stickiness, and the same utilization profile for a twin
placement that saw the same history under other worker names. A third of the histories
require the zone spread: then no two replicas of a task are ever in one zone (`check_books`).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from corral.common.placement import PREFER, REQUIRE, Assigned, Mode, Placement, TaskShape

from .placement_checks import (
    EPS,
    check_balanced,
    check_books,
    check_coverage,
    check_pending_fits_nowhere,
    check_stops_cover,
    converge,
    covered,
    is_open,
    profile,
    zone,
)

WORKERS = 10
TASKS = 30
# The twin's names: a bijection that reverses and shuffles the sort order of worker ids.
TWIN = {f"w{i}": f"n{(7 * i + 3) % WORKERS:02d}" for i in range(WORKERS)}
ZONES = [[""], ["a", "b"], ["a", "b", "c"], ["eu/r1", "eu/r2", "us/r1"],
         ["a", "a", "a", "b", "c", "d", "e"]]  # the last: five zones of uneven size

caps = st.sampled_from([0, 1, 2, 3, 4, 5, 8, 2.5, 1000])
costs = st.sampled_from([1.0, 1.0, 1.0, 2.0, 0.5])
labels = st.sampled_from([{}, {}, {"gpu": "true"}])
workers = st.integers(0, WORKERS - 1)
tasks = st.integers(0, TASKS - 1)


class PlacementMachine(RuleBasedStateMachine):
    @initialize(replicas=st.integers(1, 3), zones=st.sampled_from(ZONES),
                tolerance=st.sampled_from([0.0, 0.0, 0.1]), budget=st.sampled_from([1, 3, 20]),
                spread=st.sampled_from([PREFER, PREFER, REQUIRE]))
    def start(self, replicas: int, zones: list[str], tolerance: float, budget: int,
              spread: str) -> None:
        self.p = Placement(replicas, spread=spread)
        self.twin = Placement(replicas, spread=spread)
        self.zones, self.tol, self.budget = zones, tolerance, budget
        # Equal workers are interchangeable while every task has one replica, cost 1 and no
        # labels, and nothing is excluded: then renaming must not change the outcome.
        self.uniform = replicas == 1

    def both(self) -> list[tuple[Placement, dict[str, str]]]:
        return [(self.p, {w: w for w in TWIN}), (self.twin, TWIN)]

    # -- events -------------------------------------------------------------------------------

    @rule(i=workers, cap=caps, z=st.integers(0, 6), gpu=labels)
    def join_or_resize(self, i: int, cap: float, z: int, gpu: dict[str, str]) -> None:
        """A new worker (with a zone and labels), or a known one's capacity change."""
        for p, name in self.both():
            w = name[f"w{i}"]
            if p.view.has_worker(w):
                p.upsert_worker(w, cap, p.view.mode(w))
            else:
                p.upsert_worker(w, cap, zone=self.zones[z % len(self.zones)], labels=gpu)
            check_books(p)  # a capacity cut sheds at once

    @rule(i=workers)
    def leave(self, i: int) -> None:
        for p, name in self.both():
            w = name[f"w{i}"]
            had = set(p.view.tasks_of(w))
            diff = p.remove_worker(w)
            assert set(diff.workers[w].remove) == had if had else not diff

    @rule(i=workers, hold=st.booleans())
    def mode(self, i: int, hold: bool) -> None:
        for p, name in self.both():
            w = name[f"w{i}"]
            if p.view.has_worker(w):
                p.upsert_worker(w, p.view.max_load(w), Mode.HOLD if hold else Mode.ELIGIBLE)

    @rule(k=tasks, cost=costs, replicas=st.sampled_from([None, None, 1, 2, 3]), gpu=labels)
    def add(self, k: int, cost: float, replicas: int | None, gpu: dict[str, str]) -> None:
        self.uniform &= cost == 1.0 and replicas in (None, 1) and not gpu
        for p, _ in self.both():
            p.add_tasks({f"t{k:02d}": TaskShape(cost, replicas, gpu)})

    @rule(k=tasks, cost=costs, replicas=st.sampled_from([None, 1, 2, 3]), gpu=labels)
    def reshape(self, k: int, cost: float, replicas: int | None, gpu: dict[str, str]) -> None:
        self.uniform &= cost == 1.0 and replicas in (None, 1) and not gpu
        for p, _ in self.both():
            p.upsert_tasks({f"t{k:02d}": TaskShape(cost, replicas, gpu)})
            check_books(p)

    @rule(k=tasks)
    def remove(self, k: int) -> None:
        for p, _ in self.both():
            p.remove_tasks([f"t{k:02d}"])
            assert f"t{k:02d}" not in p.view.tasks

    @rule(k=tasks, i=workers, lift=st.booleans())
    def exclusion(self, k: int, i: int, lift: bool) -> None:
        self.uniform &= lift
        for p, name in self.both():
            t, w = f"t{k:02d}", name[f"w{i}"]
            if lift:
                p.include(t, w)
            else:
                owned = w in p.view.owners(t)
                assert p.exclude(t, w) == owned
                assert w not in p.view.owners(t)

    @rule(extra=st.integers(0, TASKS - 1))
    def restart(self, extra: int) -> None:
        """A restarted supervisor rebuilds from what workers report running: every claim is
        assigned (those the core refuses come with their reason), then place and converge."""
        order = sorted(self.p.view.workers)  # the twin hears the same reports in the same order
        for which, (p, name) in enumerate(self.both()):
            q = Placement(p.replicas, spread=p.spread)
            view = p.view
            q.add_tasks({t: view.shape(t) for t in view.tasks})
            for w in view.workers:
                q.upsert_worker(w, view.max_load(w), view.mode(w), view.zone(w), view.labels(w))
            for w in (name[x] for x in order):
                for t in view.tasks_of(w):
                    verdict = q.assign(t, w)
                    assert verdict, f"{w} runs {t} legitimately, refused: {verdict}"
                    if p.spread == REQUIRE:  # and a second replica in its zone is refused
                        mate = next((x for x in q.view.workers if x != w and x not in
                                     q.view.owners(t) and zone(q, x) == zone(q, w)), None)
                        if mate is not None and q.view.replicas_of(t) > len(q.view.owners(t)):
                            assert q.can_assign(t, mate) in (Assigned.ZONE, Assigned.NO_ROOM,
                                                             Assigned.EXCLUDED, Assigned.LABELS)
            for w in (name[x] for x in order):  # then what no placement gave them
                assert q.assign("unknown", w) is Assigned.UNKNOWN_TASK
                t = f"t{extra:02d}"
                verdict = q.assign(t, w)  # an orphan it still runs: taken if it fits
                if t in q.view.tasks and not verdict:
                    assert verdict is not Assigned.UNKNOWN_TASK
            check_books(q)
            if which == 0:
                self.p = q
            else:
                self.twin = q

    # -- convergence ----------------------------------------------------------------------------

    @rule()
    def converge(self) -> None:
        """Both placements (the twin saw the same history under other worker names) end at
        the fixed point. While equal workers are interchangeable — one replica, one task
        shape, no exclusions, all along — they end with the same utilizations.
        (Beyond that, two workers equal in load, max_load, zone and labels may still hold
        different tasks with different partners; which of them a tie picks can lead to
        different fixed points, and no rule free of names can tell them apart in general.)"""
        for p, _ in self.both():
            converge(p, self.tol, self.budget)
            check_balanced(p, self.tol)
            check_pending_fits_nowhere(p)
            check_coverage(p)
        if self.uniform:
            assert profile(self.p) == profile(self.twin), "renaming workers changed the outcome"

    @precondition(lambda self: self.p.view.workers)
    @rule(cap=caps, i=workers)
    def join_when_balanced(self, cap: float, i: int) -> None:
        """Stickiness on a join: from the fixed point, a worker joins; on a plain fleet (one
        replica, one cost, no zones, labels or exclusions) every move goes to the joiner and
        it ends below the utilization the most utilized worker had."""
        for p, name in self.both():
            converge(p, self.tol, self.budget)
            w = name[f"w{i}"]
            if p.view.has_worker(w):
                p.remove_worker(w)
                converge(p, self.tol, self.budget)
            top = max((p.view.utilization(x) for x in p.view.workers if is_open(p, x)), default=0.0)
            p.upsert_worker(w, cap, zone=self.zones[0])
            moves = converge(p, self.tol, self.budget)
            check_balanced(p, self.tol)
            view = p.view
            plain = (p.replicas == 1 and len(set(view.tasks.values())) <= 1 and not view.excluded()
                     and not p.topology.zoned and not any(view.shape(t).require for t in view.tasks)
                     and all(view.replicas_of(t) == 1 for t in view.tasks))
            if plain and moves:
                assert all(m.target == w for m in moves), moves
                assert p.view.utilization(w) < top - self.tol + EPS

    @precondition(lambda self: self.p.view.workers)
    @rule(i=workers)
    def leave_when_balanced(self, i: int) -> None:
        """Stickiness on a leave: placing after it adds only the departed replicas, and stops
        a survivor's replica only when that raises coverage (a task without any owner gets
        one in its place), never to trade one task's redundancy for another's; the
        convergence then moves no replica twice, stops nothing without a coverage gain
        either (`converge` checks every pass), and ends balanced."""
        for p, name in self.both():
            converge(p, self.tol, self.budget)
            w = name[f"w{i}"]
            before = {t: set(p.view.owners(t)) for t in p.view.tasks}
            departed = len(p.view.tasks_of(w))
            p.remove_worker(w)
            bare = covered(p)
            diff = p.place()
            check_stops_cover(p, diff, (), bare)
            preempted = sum(len(d.remove) for d in diff.workers.values())
            assert diff.moved() <= departed + preempted
            for t, owners in before.items():
                lost = owners - {w} - set(p.view.owners(t))
                assert len(lost) <= preempted, f"{t} lost {lost} on {w}'s leave"
            converge(p, self.tol, self.budget)
            check_balanced(p, self.tol)

    @invariant()
    def books(self) -> None:
        if hasattr(self, "p"):
            check_books(self.p)
            assert self.p.convergence.fallbacks == 0, "a convergence plan got stuck"
            assert self.p.convergence.unfrozen == 0, "a replica had to move twice"


PlacementMachine.TestCase.settings = settings(stateful_step_count=25)
test_placement_machine = PlacementMachine.TestCase
