"""Placement: which worker runs which task replica. Pure, deterministic, incremental.

`Placement` holds the *desired* assignment and changes it only through events — workers come,
change capacity or leave; tasks are added, reshaped or removed; pending replicas are placed; a
rebalance pass is asked for. Each change returns a `Diff`: per worker, the tasks to add and to
remove. The supervisor turns diffs into instruction sets; when workers act is its business.
What it says about its workers and tasks — loads, owners, pending replicas and why — is
read through ``placement.view`` (a `PlacementView`), which changes nothing.

**Balanced** — the criterion every convergence ends at (docs/supervisor.md, "Balance
criterion", states it in full). With u the utilization (summed cost ÷ max_load), a *move* of a
replica of cost c from an eligible worker a to a worker b that may take it (room, labels, not
excluded, no replica of the task yet, no lower zone spread; see `rebalance`), the placement is
balanced with tolerance τ when

    u_b + c/max_load_b ≥ u_a − τ    for every such move,

and no zone-degraded task can be repaired (with τ = 0 and unit costs: on equal workers, loads
differ by at most one; a larger τ is a gap a fleet may keep to spare moves). Workers on hold
are neither sources nor targets; tasks being handed over (``pinned``) stay put. `rebalance`
makes budgeted passes toward this fixed point (see `convergence`); `is_balanced` tells whether
it holds (and nothing pending fits), `outlook` and `planned_moves` what the remaining passes
would do.

Rules every change keeps (tests/unit/test_placement*.py check them under hypothesis):

* coverage before redundancy — every task gets its first replica before any gets a second,
  and a replica is stopped to make room only for a task that has none;
* the replicas of one task are on distinct workers, in distinct zones when the live zones
  with room allow (else as evenly spread as they allow; with zone spread required, never two
  in one zone — the rest stay pending);
* no worker is above its ``max_load`` (a capacity cut sheds tasks at once);
* a task runs only on workers with every label it requires (a hard constraint);
* only eligible workers get anything new; `assign` records what a worker already runs and
  refuses, with the reason, what would break a rule above;
* a replica that fits nowhere stays *pending* — reported with the reason, never dropped —
  and is placed by the next `place()` that finds room;
* existing placements are kept: a worker leaving moves exactly its own replicas.

Two strategies choose where a new replica goes (see `strategies`): ``least-utilized`` (the
default; water-filling) and ``proportional`` (the supervisor seed's rule).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Iterable, Iterator, Mapping

from . import bulk, coverage, rebalance, shapes
from .convergence import ConvergencePlan
from .coverage import LEAST_UTILIZED, PROPORTIONAL, STRATEGIES
from .diff import Diff, Move, WorkerDiff
from .ledger import Ledger
from .modes import Mode
from .reshape import reshape
from .shapes import NO_LABELS, Labels, TaskShape, describe
from .strategies import EPS
from .verdicts import Assigned, Outlook
from .view import PlacementView
from .zones import PREFER, SPREADS, Topology, zone_path

__all__ = ["LEAST_UTILIZED", "PROPORTIONAL", "STRATEGIES", "Assigned", "Mode", "Outlook",
           "Placement", "PlacementView", "TaskShape"]


Shape = float | TaskShape


def _shape(task: str, spec: Shape) -> tuple[float, int | None, Labels]:
    if isinstance(spec, TaskShape):
        return spec.cost, spec.replicas, spec.needs
    if isinstance(spec, bool) or not isinstance(spec, int | float) or not spec > 0 \
            or math.isinf(spec):
        raise ValueError(f"task {task!r}: cost must be a finite number > 0, got {spec!r}")
    return float(spec), None, NO_LABELS


class Placement:
    """The desired assignment of task replicas to workers, changed one event at a time."""

    def __init__(self, replicas: int = 1, strategy: str = LEAST_UTILIZED,
                 spread: str = PREFER) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if spread not in SPREADS:
            raise ValueError(f"zone spread must be one of {', '.join(SPREADS)}, got {spread!r}")
        self.strategy = strategy
        self.spread = spread
        # the state; placement modules read it directly
        self.book = Ledger(replicas, strict=spread != PREFER)
        self.convergence = ConvergencePlan(strategy)  # the plan of the current convergence
        self._balanced: tuple[int, float, bool] | None = None
        self.view = PlacementView(self.book)  # what it says about its workers and tasks

    # -- the placement as a whole ------------------------------------------------------------

    @property
    def replicas(self) -> int:
        """The default replicas per task (a task's shape may override it)."""
        return self.book.replicas

    @property
    def version(self) -> int:
        return self.book.version

    def sizes(self) -> dict[str, int]:
        """Entries per table of the placement (none may grow without bound)."""
        plan = self.convergence
        return self.book.sizes() | {"placement_plan_steps": len(plan.steps),
                                    "placement_plan_arrived": len(plan.arrived)}

    @property
    def topology(self) -> Topology:
        return self.book.topo

    # -- workers -----------------------------------------------------------------------------

    def upsert_worker(self, worker: str, max_load: float, mode: Mode = Mode.ELIGIBLE,
                      zone: str | None = None,
                      labels: Mapping[str, str] | None = None) -> Diff:
        """Add a worker or change its capacity or mode. ``zone`` ("eu-1/rack-7/host-3"; empty:
        none) and ``labels`` are fixed for a worker's incarnation: None keeps them; a different
        value is refused (remove the worker and add it again). A cut below its load sheds
        tasks (they become pending; call `place`). Returns the removals."""
        if not max_load >= 0 or math.isinf(max_load):
            raise ValueError(f"max_load must be a finite number >= 0, got {max_load!r}")
        b, eligible = self.book, Mode(mode) is Mode.ELIGIBLE
        if worker not in b.cap:
            b.add_worker(worker, float(max_load), eligible, zone_path(zone or ""),
                         shapes.labels(labels))
        else:
            if zone is not None and zone_path(zone) != b.path[worker]:
                raise ValueError(f"worker {worker!r}: its zone is fixed "
                                 f"({self.view.zone(worker)!r}); remove it and add it again")
            if labels is not None and shapes.labels(labels) != b.labels[worker]:
                raise ValueError(f"worker {worker!r}: its labels are fixed "
                                 f"({describe(b.labels[worker])}); remove it and add it again")
            b.set_worker(worker, float(max_load), eligible)
        return self.enforce_capacity(worker)

    def enforce_capacity(self, worker: str, diff: Diff | None = None) -> Diff:
        """Shed the worker's most recently placed tasks until its load fits its max_load."""
        diff = diff if diff is not None else Diff()
        b = self.book
        cap, tasks = b.cap[worker], b.tasks_of[worker]
        while b.load[worker] > cap + EPS and tasks:
            task = next(reversed(tasks))
            b.unlink(task, worker)
            diff.remove(worker, task)
        return diff

    def remove_worker(self, worker: str) -> Diff:
        """The worker is gone: all its replicas become pending (call `place` to move them)."""
        diff = Diff()
        if worker in self.book.cap:
            tasks = self.book.drop_worker(worker)
            if tasks:
                diff.workers[worker] = WorkerDiff(remove=dict(tasks))
        return diff

    # -- tasks -------------------------------------------------------------------------------

    def add_tasks(self, tasks: Mapping[str, Shape] | Iterable[str]) -> None:
        """New tasks: id -> cost or `TaskShape`, or ids (cost 1). All their replicas start
        pending. A task already known is left as it is (`upsert_tasks` changes shapes)."""
        b = self.book
        if not isinstance(tasks, Mapping):
            self.add_uniform(list(tasks), 1.0)
            return
        plain: dict[str, float] = {}
        known = b.cost
        for task, spec in tasks.items():
            if type(spec) is float and 0.0 < spec < math.inf:  # the usual task, checked inline
                if task not in known:
                    plain[task] = spec
                continue
            cost, want, need = _shape(task, spec)
            if task in known:
                continue
            if want is None and not need:
                plain[task] = cost
            else:
                b.add_task(task, cost, want, need)
        bulk.add_plain(b, plain)

    def add_uniform(self, tasks: Collection[str], cost: float) -> None:
        """`add_tasks` for tasks of one plain cost (no replicas or labels of their own): a
        million take C-level updates, not a loop. A task already known is left as it is."""
        cost = _bulk_cost(cost)
        known = self.book.cost
        if not known.keys().isdisjoint(tasks):
            tasks = [t for t in tasks if t not in known]
        bulk.add_uniform(self.book, dict.fromkeys(tasks), cost)

    def fill(self, tasks: Collection[str], cost: float) -> Iterator[None]:
        """`add_uniform` into a placement with no task yet, in steps: iterate it (each step
        ~0.45 s at a million tasks); nothing changes before the last one (see `bulk.fill`)."""
        cost = _bulk_cost(cost)
        if self.book.cost:
            raise ValueError("fill is for a placement with no task yet; use add_uniform")
        return bulk.fill(self.book, tasks, cost)

    def upsert_tasks(self, tasks: Mapping[str, Shape]) -> Diff:
        """Add new tasks and change the shape of known ones in place (see `reshape`: a new
        cost changes loads, fewer replicas or new required labels shed owners). Shed and
        missing replicas are pending: call `place`. Returns the removals."""
        b, diff = self.book, Diff()
        for task, spec in tasks.items():
            cost, want, need = _shape(task, spec)
            if task not in b.cost:
                b.add_task(task, cost, want, need)
            else:
                reshape(b, task, cost, want, need, diff)
        b.version += 1
        return diff

    def remove_tasks(self, tasks: Iterable[str]) -> Diff:
        """Tasks that no longer exist: every replica is removed."""
        b, diff = self.book, Diff()
        for task in tasks:
            if task not in b.cost:
                continue
            for w in list(b.owners[task]):
                b.unlink(task, w)
                diff.remove(w, task)
            b.drop_task(task)
        b.version += 1
        return diff

    # -- replicas ----------------------------------------------------------------------------

    def can_assign(self, task: str, worker: str) -> Assigned:
        """Would `assign` take it? OK, or the reason it would refuse."""
        b = self.book
        owners = b.owners.get(task)
        if owners is None:
            return Assigned.UNKNOWN_TASK
        if worker not in b.cap:
            return Assigned.UNKNOWN_WORKER
        if worker in owners:
            return Assigned.OWNER
        if len(owners) >= b.want_of(task):
            return Assigned.COMPLETE
        ex = b.excluded.get(task)
        if ex and worker in ex:
            return Assigned.EXCLUDED
        need = b.need.get(task)
        if need and not need <= b.labels[worker]:
            return Assigned.LABELS
        if b.load[worker] + b.cost[task] > b.cap[worker] + EPS:
            return Assigned.NO_ROOM
        if b.strict and b.clash(task, worker):
            return Assigned.ZONE
        return Assigned.OK

    def assign(self, task: str, worker: str) -> Assigned:
        """Record that ``worker`` runs ``task`` (rebuilding from reports, adopting a task a
        worker already runs). Refused, with the reason, when the task or worker is unknown,
        the worker already owns it, the task has all its replicas, or the worker is excluded
        from it, lacks a label it requires or has no room for it. A worker on hold may be
        given a task it already runs (it keeps what it runs). Zone spread is not checked —
        reality may be crowded; rebalance passes repair it without stopping anything — unless
        it is required: then a second replica in one zone is refused."""
        verdict = self.can_assign(task, worker)
        if verdict:
            self.book.link(task, worker)
        return verdict

    def assign_many(self, worker: str, tasks: Iterable[str]) -> list[str]:
        """`assign` for many tasks of one worker, in order (a rebuild adopting what each
        worker runs): the same checks, the worker's figures moved once. Returns the tasks it
        took; the rest were refused (see `can_assign` for why)."""
        b = self.book
        if worker not in b.cap:
            return []
        room, load = b.cap[worker] + EPS, b.load[worker]
        if bulk.plain(b):  # nothing but ownership, replicas and room to check: one pass
            return bulk.link_fitting(b, worker, tasks, room)
        owners_of, cost, want, default = b.owners, b.cost, b.want, b.replicas
        excluded, need, labels = b.excluded, b.need, b.labels[worker]
        take: list[str] = []
        for task in dict.fromkeys(tasks):
            owners = owners_of.get(task)
            if owners is None or worker in owners or len(owners) >= want.get(task, default):
                continue
            if excluded and worker in excluded.get(task, ()):
                continue
            wanted = need.get(task) if need else None
            if wanted and not wanted <= labels:
                continue
            c = cost[task]
            if load + c > room or (b.strict and b.clash(task, worker)):
                continue
            load += c
            take.append(task)
        bulk.link_many(b, worker, take)
        return take

    def unassign(self, task: str, worker: str) -> bool:
        """Take one replica off a worker (it becomes pending)."""
        if worker not in self.book.owners.get(task, ()):
            return False
        self.book.unlink(task, worker)
        return True

    def exclude(self, task: str, worker: str) -> bool:
        """Never place ``task`` on ``worker`` again (until `include`); takes it off now if the
        worker owns it (it becomes pending). True if the worker owned it."""
        if task not in self.book.cost:
            return False
        self.book.excluded.setdefault(task, {})[worker] = None
        self.book.version += 1
        return self.unassign(task, worker)

    def include(self, task: str, worker: str) -> None:
        """Lift an exclusion (call `place` to use the worker again)."""
        ex = self.book.excluded.get(task)
        if ex is not None and worker in ex:
            del ex[worker]
            if not ex:
                del self.book.excluded[task]
            self.book.version += 1

    # -- placing and rebalancing -------------------------------------------------------------

    def place(self) -> Diff:
        """Place every pending replica that fits somewhere, coverage before redundancy (see
        `coverage`). A replica still pending afterwards fits on no worker that may take it."""
        return coverage.place(self.book, self.strategy)

    def rebalance(self, tolerance: float, budget: int, pinned: Container[str] = ()
                  ) -> tuple[Diff, list[Move]]:
        """One pass of the current convergence (see `convergence`): at most ``budget`` of its
        planned moves, at most one step for any task, ``pinned`` tasks left for later;
        planned afresh whenever anything changed since the last pass. The diff is the whole
        pass: the moves (hand them over make-before-break) and, beside them, plain starts
        of pending replicas the moves made room for and, rarely, stops of redundant replicas
        displaced to cover another task. Convergence is done when `is_balanced` holds; a
        pass that changes nothing while it does not means the rest waits on ``pinned``."""
        moves, diff = self.convergence.step(self.book, tolerance, budget, pinned)
        return diff, moves

    def is_balanced(self, tolerance: float, pinned: Container[str] = ()) -> bool:
        """Is the convergence done: no pending replica fits anywhere and the criterion holds
        (given ``pinned``)? Exact. O(W) when it plainly does; remembered until the next
        change when nothing is pinned."""
        if not pinned and self._balanced and self._balanced[:2] == (self.version, tolerance):
            return self._balanced[2]
        verdict = rebalance.balanced(self.book, tolerance, pinned)
        if not pinned:
            self._balanced = (self.version, tolerance, verdict)
        return verdict

    def outlook(self, tolerance: float, pinned: Container[str] = ()) -> Outlook:
        """For status views: is the convergence done, how many moves does its plan still
        hold, and does the plan reach the fixed point (or is it the first `PLAN_AHEAD`
        moves of a longer convergence)?"""
        moves = self.planned_moves(tolerance, pinned)
        return Outlook(self.is_balanced(tolerance, pinned), len(moves), self.convergence.complete)

    def planned_moves(self, tolerance: float, pinned: Container[str] = ()) -> list[Move]:
        """The moves the current convergence still plans to make (planning it if anything
        changed since): how far from balanced the placement is, in moves."""
        steps = self.convergence.plan(self.book, tolerance, pinned)
        return [Move(s.task, s.source, s.target) for s in steps
                if s.source is not None and s.target is not None]


def _bulk_cost(cost: float) -> float:
    """The one cost of a bulk of tasks, checked as `_shape` checks each task's."""
    if not (isinstance(cost, float | int) and 0 < cost < math.inf):
        raise ValueError(f"a task's cost must be a finite number > 0, got {cost!r}")
    return float(cost)
