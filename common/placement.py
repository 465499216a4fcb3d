"""Placement: which worker runs which task replica. Pure, deterministic, incremental.

`Placement` holds the *desired* assignment and changes it only through events — workers come,
change capacity or leave; tasks are added or removed; pending replicas are placed; a rebalance
is asked for. Each change returns a `Diff`: per worker, the tasks to add and to remove. The
supervisor turns diffs into instruction sets; when the workers actually act is its business.

Rules every change keeps (tests/unit/test_placement.py checks them under hypothesis):

* coverage before redundancy — every task gets its first replica before any gets a second;
* the replicas of one task are on distinct workers;
* no worker is above its ``max_load`` (a capacity cut sheds tasks at once);
* only *eligible* workers get anything new (not starting, lame duck, drained or inactive);
* a replica that fits nowhere stays *pending* — reported, never dropped — and is placed by
  the next `place()` that finds room;
* existing placements are kept: a worker leaving moves exactly its own tasks.

Two strategies choose where a replica goes (see `strategies`): ``least-utilized`` (the
default; water-filling, the lowest maximum utilization integer placement allows) and
``proportional`` (the supervisor seed's rule: weights from free capacity, ceil(n × weight)).

Iteration order never depends on ``hash()`` of a string (it changes per process): tasks are
kept in insertion-ordered dicts and sorted where an order is chosen.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Iterable, Mapping
from enum import StrEnum

from . import strategies
from .diff import Diff, Move, WorkerDiff
from .rebalance import plan_moves
from .strategies import EPS as _EPS

LEAST_UTILIZED = "least-utilized"
PROPORTIONAL = "proportional"
STRATEGIES = (LEAST_UTILIZED, PROPORTIONAL)


_NONE: dict[str, None] = {}


class Mode(StrEnum):
    """What placement may do with a worker.

    eligible — keeps its tasks and takes new ones;
    hold     — keeps its tasks, takes nothing new (starting, lame duck awaiting make-before-break,
               drained by an operator, capacity unknown).
    A worker that is gone (inactive, dead, evicted) is removed with `Placement.remove_worker`.
    """

    ELIGIBLE = "eligible"
    HOLD = "hold"


class Placement:
    """The desired assignment of task replicas to workers, changed one event at a time."""

    def __init__(self, replicas: int = 1, strategy: str = LEAST_UTILIZED) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.replicas = replicas
        self.strategy = strategy
        self._cap: dict[str, float] = {}
        self._load: dict[str, float] = {}
        self._mode: dict[str, Mode] = {}
        # Workers that may take new replicas (eligible, max_load > 0), in insertion order.
        self._open: dict[str, None] = {}
        self._level = strategies.WaterLevel()
        # task -> workers it must not be placed on (it kept failing there)
        self._excluded: dict[str, dict[str, None]] = {}
        self._tasks_of: dict[str, dict[str, None]] = {}
        self._cost: dict[str, float] = {}
        self._owners: dict[str, list[str]] = {}
        # Tasks with fewer owners than `replicas`, in the order they became short.
        self._pending: dict[str, None] = {}
        self.version = 0

    # -- queries -----------------------------------------------------------------------------

    @property
    def workers(self) -> list[str]:
        return list(self._cap)

    @property
    def tasks(self) -> Mapping[str, float]:
        return self._cost

    def has_worker(self, worker: str) -> bool:
        return worker in self._cap

    def max_load(self, worker: str) -> float:
        return self._cap[worker]

    def mode(self, worker: str) -> Mode:
        return self._mode[worker]

    def load(self, worker: str) -> float:
        return self._load[worker]

    def utilization(self, worker: str) -> float:
        cap, load = self._cap[worker], self._load[worker]
        if cap > 0:
            return load / cap
        return math.inf if load > _EPS else 0.0

    def tasks_of(self, worker: str) -> Mapping[str, None]:
        return self._tasks_of.get(worker, {})

    def owners(self, task: str) -> list[str]:
        return self._owners.get(task, [])

    def assignment(self) -> dict[str, list[str]]:
        return {t: list(o) for t, o in self._owners.items()}

    def pending(self) -> dict[str, int]:
        """Tasks short of replicas -> how many replicas are missing."""
        return {t: self.replicas - len(self._owners[t]) for t in self._pending}

    def eligible(self) -> list[str]:
        return [w for w, m in self._mode.items() if m is Mode.ELIGIBLE]

    def _update_open(self, worker: str) -> None:
        self._level.touch(worker)
        if self._mode.get(worker) is Mode.ELIGIBLE and self._cap[worker] > 0:
            self._open[worker] = None
        else:
            self._open.pop(worker, None)

    # -- workers -----------------------------------------------------------------------------

    def upsert_worker(self, worker: str, max_load: float, mode: Mode = Mode.ELIGIBLE) -> Diff:
        """Add a worker or change its capacity or mode. A cut below its load sheds tasks (they
        become pending; call `place`). Returns the removals."""
        if not max_load >= 0 or math.isinf(max_load):
            raise ValueError(f"max_load must be a finite number >= 0, got {max_load!r}")
        diff = Diff()
        if worker not in self._cap:
            self._load[worker] = 0.0
            self._tasks_of[worker] = {}
        self._cap[worker] = float(max_load)
        self._mode[worker] = Mode(mode)
        self._update_open(worker)
        self.version += 1
        return self.enforce_capacity(worker, diff)

    def enforce_capacity(self, worker: str, diff: Diff | None = None) -> Diff:
        """Shed the worker's most recently placed tasks until its load fits its max_load."""
        diff = diff if diff is not None else Diff()
        cap = self._cap[worker]
        tasks = self._tasks_of[worker]
        while self._load[worker] > cap + _EPS and tasks:
            task = next(reversed(tasks))
            self._unassign(task, worker)
            diff.remove(worker, task)
        return diff

    def remove_worker(self, worker: str) -> Diff:
        """The worker is gone: all its replicas become pending (call `place` to move them)."""
        diff = Diff()
        if worker not in self._cap:
            return diff
        tasks = self._tasks_of.pop(worker)
        owners_of, pending = self._owners, self._pending
        for task in tasks:
            owners_of[task].remove(worker)
            pending[task] = None
        if tasks:
            diff.workers[worker] = WorkerDiff(remove=dict(tasks))
        del self._cap[worker], self._load[worker], self._mode[worker]
        self._open.pop(worker, None)
        self.version += 1
        return diff

    # -- tasks -------------------------------------------------------------------------------

    def add_tasks(self, tasks: Mapping[str, float] | Iterable[str]) -> None:
        """New tasks (id -> cost, or ids with cost 1); all their replicas start pending."""
        items = tasks.items() if isinstance(tasks, Mapping) else ((t, 1.0) for t in tasks)
        for task, cost in items:
            if not cost > 0 or math.isinf(cost):
                raise ValueError(f"task {task!r}: cost must be a finite number > 0, got {cost!r}")
            if task in self._cost:
                continue
            self._cost[task] = float(cost)
            self._owners[task] = []
            self._pending[task] = None
        self.version += 1

    def remove_tasks(self, tasks: Iterable[str]) -> Diff:
        """Tasks that no longer exist: every replica is removed."""
        diff = Diff()
        for task in tasks:
            if task not in self._cost:
                continue
            for w in list(self._owners[task]):
                self._unassign(task, w)
                diff.remove(w, task)
            del self._cost[task], self._owners[task]
            self._pending.pop(task, None)
            self._excluded.pop(task, None)
        self.version += 1
        return diff

    def assign(self, task: str, worker: str) -> bool:
        """Record that ``worker`` runs ``task`` (rebuilding from reports after a restart).

        Refused (False) when the task is unknown, the worker unknown, already an owner, or the
        task already has all its replicas. Capacity is not checked here: reality may be over
        it; `enforce_capacity` sheds the excess.
        """
        owners = self._owners.get(task)
        if owners is None or worker not in self._cap or worker in owners:
            return False
        if len(owners) >= self.replicas:
            return False
        self._assign(task, worker)
        return True

    def unassign(self, task: str, worker: str) -> bool:
        """Take one replica off a worker (it becomes pending)."""
        if worker not in self._owners.get(task, ()):
            return False
        self._unassign(task, worker)
        return True

    def exclude(self, task: str, worker: str) -> bool:
        """Never place ``task`` on ``worker`` again (until `include`); takes it off now if the
        worker owns it (it becomes pending). True if the worker owned it."""
        if task not in self._cost:
            return False
        self._excluded.setdefault(task, {})[worker] = None
        return self.unassign(task, worker)

    def include(self, task: str, worker: str) -> None:
        """Lift an exclusion (call `place` to use the worker again)."""
        ex = self._excluded.get(task)
        if ex is not None:
            ex.pop(worker, None)
            if not ex:
                del self._excluded[task]

    def excluded(self) -> dict[str, list[str]]:
        """Every exclusion, copied (for views)."""
        return {t: list(ws) for t, ws in self._excluded.items()}

    def excluded_from(self, task: str) -> Collection[str]:
        """The workers ``task`` must not go to (a live, read-only view; cheap per task)."""
        return self._excluded.get(task, _NONE)

    def _assign(self, task: str, worker: str) -> None:
        owners = self._owners[task]
        owners.append(worker)
        self._tasks_of[worker][task] = None
        self._load[worker] += self._cost[task]
        self._level.touch(worker)
        if len(owners) >= self.replicas:
            self._pending.pop(task, None)
        self.version += 1

    def _unassign(self, task: str, worker: str) -> None:
        self._owners[task].remove(worker)
        del self._tasks_of[worker][task]
        load = self._load[worker] - self._cost[task]
        self._load[worker] = load if load > _EPS else 0.0
        self._level.touch(worker)
        self._pending[task] = None
        self.version += 1

    # -- placing -----------------------------------------------------------------------------

    def place(self) -> Diff:
        """Place every pending replica that fits somewhere, coverage before redundancy.

        Round r gives an r+1-th owner to every task that has exactly r, so all tasks get a
        first replica before any gets a second. A replica still pending afterwards fits on no
        eligible worker that does not already own the task.
        """
        diff = Diff()
        if not self._pending:
            return diff
        owners_of = self._owners
        by_have: dict[int, list[str]] = {}
        for task in self._pending:
            by_have.setdefault(len(owners_of[task]), []).append(task)
        carry: list[str] = []  # tasks that got their r-th replica in the previous round
        for r in range(self.replicas):
            batch = carry + by_have.get(r, [])
            if not batch:
                continue
            placed: list[str] = []
            for group in self._by_cost(batch):
                self._place_group(group, r, diff, placed)
            carry = placed
        return diff

    def _place_group(self, group: list[str], r: int, diff: Diff, placed: list[str]) -> None:
        cost = self._cost[group[0]]
        args = (self._cap, self._load, self._owners)
        ex = self._excluded
        if self.strategy == PROPORTIONAL:
            got, group = strategies.proportional(group, cost, self._open, *args, ex)
            self._level.invalidate()
            self._record(got, diff, placed)
        elif len(group) >= 8 * len(self._mode):
            # A big batch (a full placement): the O(n) block pass first; the heap after.
            got, group = strategies.fill_blocks(
                group, cost, r, self.replicas, list(self._open), *args, ex
            )
            self._level.invalidate()
            self._record(got, diff, placed)
        got = strategies.water_fill(group, cost, self._open, *args, self._level, ex)
        self._record(got, diff, placed)

    def _by_cost(self, batch: list[str]) -> list[list[str]]:
        """The batch as groups of equal cost, biggest first (like LPT scheduling), each sorted
        by id so the result does not depend on the order tasks arrived in."""
        cost = self._cost
        first = cost[batch[0]]
        if all(cost[t] == first for t in batch):
            return [sorted(batch)]
        groups: dict[float, list[str]] = {}
        for t in batch:
            groups.setdefault(cost[t], []).append(t)
        return [sorted(groups[c]) for c in sorted(groups, reverse=True)]

    def _record(self, got: dict[str, list[str]], diff: Diff, placed: list[str]) -> None:
        """Book-keeping for replicas a strategy just added (it updated owners and loads)."""
        pending, owners_of, replicas = self._pending, self._owners, self.replicas
        tasks_of, add_many = self._tasks_of, diff.add_many
        for w, tasks in got.items():
            if len(tasks) == 1:  # the usual case after a death: one replica per worker
                task = tasks[0]
                tasks_of[w][task] = None
                diff.add(w, task)
                placed.append(task)
            else:
                tasks_of[w].update(dict.fromkeys(tasks))
                add_many(w, tasks)
                placed.extend(tasks)
        for t in placed:
            if len(owners_of[t]) >= replicas:
                pending.pop(t, None)
        self.version += 1

    # -- rebalancing -------------------------------------------------------------------------

    def spread(self) -> float:
        """max − min utilization over eligible workers (0 with fewer than two)."""
        utils = [self.utilization(w) for w in self.eligible()]
        return max(utils) - min(utils) if len(utils) > 1 else 0.0

    def rebalance(
        self, tolerance: float, budget: int, pinned: Container[str] = ()
    ) -> tuple[Diff, list[Move]]:
        """Move up to ``budget`` replicas from the most to the least utilized eligible workers
        while the spread exceeds ``tolerance``; ``pinned`` tasks stay put. A move is made only
        if it lowers the higher of the two workers' utilizations, so no rebalance ever raises
        the maximum utilization (see `rebalance.plan_moves`)."""
        moves = plan_moves(self, tolerance, budget, pinned)
        diff = Diff()
        for m in moves:
            diff.remove(m.source, m.task)
            diff.add(m.target, m.task)
        return diff, moves
