"""The placement's books: workers, tasks, who owns what, loads — kept consistent, no policy.

`Ledger` holds the state `Placement` decides about and the primitives that change it while
keeping every derived figure right: a worker's load is the sum of its tasks' costs; a task is
*pending* exactly while it has fewer owners than it wants; a task is *crowded* exactly while
two of its owners share a top zone domain (only those can be zone-degraded, see `zones`);
every change bumps ``version``. It never refuses anything: `Placement` checks first.

The dicts are plain and shared by reference with the placing, rebalancing and pending-reason
modules, which read them directly on hot paths. Iteration order never depends on ``hash()``
of a string: dicts keep insertion order and callers sort where an order is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from .diff import Diff
from .shapes import NO_LABELS, Labels
from .strategies import EPS, Got, WaterLevel
from .zones import LiveTree, Path, Topology, topology

T = TypeVar("T")


@dataclass(frozen=True)
class Snapshot:
    """Some tasks' owner lists and some workers' task sets and loads, to put back exactly."""

    owners: dict[str, list[str]]
    workers: dict[str, tuple[dict[str, None], float]]
    version: int


class Ledger:
    __slots__ = (
        "_deg_dirty",
        "_deg_seen",
        "_degraded",
        "_interned",
        "_live",
        "_open_for",
        "cap",
        "cost",
        "costs",
        "crowded",
        "eligible",
        "excluded",
        "labels",
        "levels",
        "load",
        "need",
        "open",
        "open_version",
        "owners",
        "path",
        "paths",
        "pending",
        "replicas",
        "tasks_of",
        "top_of",
        "topo",
        "version",
        "want",
        "zone_of",
    )

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas  # replicas a task wants unless its shape says otherwise
        self.version = 0
        # workers
        self.cap: dict[str, float] = {}
        self.load: dict[str, float] = {}
        self.eligible: dict[str, bool] = {}  # mode: True = may take new replicas
        self.open: dict[str, None] = {}  # eligible and max_load > 0, in insertion order
        self.open_version = 0  # bumps when `open` or its labels change (live trees, reasons)
        self.path: dict[str, Path] = {}
        self.zone_of: dict[str, str] = {}  # worker -> its zone ("" for none): ties, views
        self.labels: dict[str, Labels] = {}
        self.paths: dict[Path, int] = {}  # workers per distinct zone path
        self.topo = Topology()
        self.top_of: dict[str, str] = {}  # worker -> its top zone domain, when zoned
        self.tasks_of: dict[str, dict[str, None]] = {}
        # tasks
        self.cost: dict[str, float] = {}
        self.costs: dict[float, int] = {}  # tasks per distinct cost (the smallest bounds moves)
        self.want: dict[str, int] = {}  # replicas, only where a task overrides the default
        self.need: dict[str, Labels] = {}  # required labels, only where a task has some
        self.owners: dict[str, list[str]] = {}
        self.pending: dict[str, None] = {}  # fewer owners than wanted, in the order they got so
        self.excluded: dict[str, dict[str, None]] = {}  # task -> workers it must not go to
        self.crowded: dict[str, None] = {}
        self.levels: dict[Labels, WaterLevel] = {}  # one water-filling heap per label need
        self._interned: dict[object, object] = {}  # costs, label sets and paths, shared
        self._open_for: dict[Labels, dict[str, None]] = {}
        self._live: dict[Labels, LiveTree] = {}
        self._degraded: dict[str, None] = {}
        self._deg_dirty: dict[str, None] = {}
        self._deg_seen = -1  # open_version the degraded set was last fully computed for

    def intern(self, value: T) -> T:
        """One shared object per distinct cost, label set or path: a million tasks of cost 1.0
        that need gpu=true hold two references, not two million objects."""
        return self._interned.setdefault(value, value)  # type: ignore[return-value]

    # -- derived figures ----------------------------------------------------------------------

    def want_of(self, task: str) -> int:
        return self.want.get(task, self.replicas)

    def need_of(self, task: str) -> Labels:
        return self.need.get(task, NO_LABELS)

    def util(self, worker: str) -> float:
        cap, load = self.cap[worker], self.load[worker]
        if cap > 0:
            return load / cap
        return float("inf") if load > EPS else 0.0

    def open_for(self, need: Labels) -> dict[str, None]:
        """The open workers that have every label in ``need`` (insertion order)."""
        if not need:
            return self.open
        got = self._open_for.get(need)
        if got is None:
            labels = self.labels
            got = self._open_for[need] = {w: None for w in self.open if need <= labels[w]}
        return got

    def live_tree(self, need: Labels) -> LiveTree:
        tree = self._live.get(need)
        if tree is None:
            path = self.path
            tree = self._live[need] = LiveTree(self.topo, (path[w] for w in self.open_for(need)))
        return tree

    def degraded(self) -> dict[str, None]:
        """The zone-degraded tasks (see `zones`), recomputed only for what changed."""
        if not self.topo.zoned:
            self._degraded.clear()
            return self._degraded
        if self._deg_seen != self.open_version:
            check, self._deg_seen = self.crowded, self.open_version
            self._degraded = {}
        else:
            check = self._deg_dirty
        path, owners, deg = self.path, self.owners, self._degraded
        for t in list(check):
            if t in self.crowded and self.live_tree(self.need_of(t)).degraded(
                [path[o] for o in owners[t]]
            ):
                deg[t] = None
            else:
                deg.pop(t, None)
        self._deg_dirty = {}
        return deg

    def _changed_open(self) -> None:
        self.open_version += 1
        self._open_for.clear()
        self._live.clear()

    def touch(self, worker: str) -> None:
        for level in self.levels.values():
            level.touch(worker)

    def _recheck(self, task: str) -> None:
        """Keep ``crowded`` right after the task's owners changed."""
        if not self.topo.zoned:
            return
        owners, top = self.owners[task], self.top_of
        if len(owners) > 1 and len({top[o] for o in owners}) < len(owners):
            self.crowded[task] = None
        elif task in self.crowded:
            del self.crowded[task]
        else:
            return
        self._deg_dirty[task] = None

    def _retopologize(self) -> None:
        topo = topology(self.paths)
        if topo == self.topo:
            return
        self.topo = topo
        self.top_of = {w: topo.top(p) for w, p in self.path.items()} if topo.zoned else {}
        self.crowded = {}
        self._deg_seen = -1
        if topo.zoned:
            for t in self.owners:
                self._recheck(t)
        self._changed_open()

    # -- workers ------------------------------------------------------------------------------

    def add_worker(self, worker: str, cap: float, eligible: bool, path: Path,
                   labels: Labels) -> None:
        self.cap[worker] = cap
        self.load[worker] = 0.0
        self.eligible[worker] = eligible
        self.tasks_of[worker] = {}
        path = self.path[worker] = self.intern(path)
        self.zone_of[worker] = path[-1]
        self.labels[worker] = self.intern(labels)
        n = self.paths.get(path, 0)
        self.paths[path] = n + 1
        if self.topo.zoned:
            self.top_of[worker] = self.topo.top(path)
        if n == 0:
            self._retopologize()
        self.set_worker(worker, cap, eligible)
        self.version += 1

    def set_worker(self, worker: str, cap: float, eligible: bool) -> None:
        self.cap[worker] = cap
        self.eligible[worker] = eligible
        self.touch(worker)
        now = eligible and cap > 0
        if now != (worker in self.open):
            if now:
                self.open[worker] = None
            else:
                del self.open[worker]
            self._changed_open()
        self.version += 1

    def drop_worker(self, worker: str) -> dict[str, None]:
        """Forget the worker; its replicas become pending. Returns the tasks it had."""
        tasks = self.tasks_of.pop(worker)
        for task in tasks:
            owners = self.owners[task]
            owners.remove(worker)
            if len(owners) < self.want_of(task):
                self.pending[task] = None
            self._recheck(task)
        was_open = worker in self.open
        self.open.pop(worker, None)
        del self.cap[worker], self.load[worker], self.eligible[worker], self.labels[worker]
        path = self.path.pop(worker)
        del self.zone_of[worker]
        self.top_of.pop(worker, None)
        n = self.paths.pop(path) - 1
        if n:
            self.paths[path] = n
        else:
            self._retopologize()
        if was_open:
            self._changed_open()
        self.version += 1
        return tasks

    # -- tasks --------------------------------------------------------------------------------

    def add_task(self, task: str, cost: float, want: int | None, need: Labels) -> None:
        cost = self.intern(cost)
        self.cost[task] = cost
        self.costs[cost] = self.costs.get(cost, 0) + 1
        if want is not None:
            self.want[task] = want
        if need:
            self.need[task] = self.intern(need)
        self.owners[task] = []
        self.pending[task] = None
        self.version += 1

    def drop_task(self, task: str) -> None:
        """Forget a task that has no owners left."""
        cost = self.cost.pop(task)
        n = self.costs.pop(cost) - 1
        if n:
            self.costs[cost] = n
        del self.owners[task]
        self.want.pop(task, None)
        self.need.pop(task, None)
        self.excluded.pop(task, None)
        for d in (self.pending, self.crowded, self._degraded, self._deg_dirty):
            d.pop(task, None)
        self.version += 1

    def set_cost(self, task: str, cost: float) -> None:
        old = self.cost[task]
        cost = self.cost[task] = self.intern(cost)
        n = self.costs.pop(old) - 1
        if n:
            self.costs[old] = n
        self.costs[cost] = self.costs.get(cost, 0) + 1
        for w in self.owners[task]:
            load = self.load[w] + cost - old
            self.load[w] = load if load > EPS else 0.0
            self.touch(w)
        self.version += 1

    def set_want(self, task: str, want: int | None) -> None:
        if want is None:
            self.want.pop(task, None)
        else:
            self.want[task] = want
        if len(self.owners[task]) < self.want_of(task):
            self.pending[task] = None
        else:
            self.pending.pop(task, None)
        self.version += 1

    def set_need(self, task: str, need: Labels) -> None:
        if need:
            self.need[task] = self.intern(need)
        else:
            self.need.pop(task, None)
        self._deg_dirty[task] = None
        self.version += 1

    # -- replicas -----------------------------------------------------------------------------

    def link(self, task: str, worker: str) -> None:
        owners = self.owners[task]
        owners.append(worker)
        self.tasks_of[worker][task] = None
        self.load[worker] += self.cost[task]
        self.touch(worker)
        if len(owners) >= self.want_of(task):
            self.pending.pop(task, None)
        self._recheck(task)
        self.version += 1

    def unlink(self, task: str, worker: str) -> None:
        owners = self.owners[task]
        owners.remove(worker)
        del self.tasks_of[worker][task]
        load = self.load[worker] - self.cost[task]
        self.load[worker] = load if load > EPS else 0.0
        self.touch(worker)
        if len(owners) < self.want_of(task):
            self.pending[task] = None
        self._recheck(task)
        self.version += 1

    def record(self, got: Got, diff: Diff, placed: list[str]) -> None:
        """Book-keeping for replicas a strategy just added (it updated owners and loads)."""
        tasks_of, add_many = self.tasks_of, diff.add_many
        if len(self.levels) > 1:
            for w in got:  # loads changed behind the other needs' heaps
                self.touch(w)
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
        pending, owners_of, want, default = self.pending, self.owners, self.want, self.replicas
        for t in placed:
            if len(owners_of[t]) >= want.get(t, default):
                pending.pop(t, None)
        if self.topo.zoned:
            for t in placed:
                self._recheck(t)
        self.version += 1

    def snapshot(self, tasks: Mapping[str, None], workers: Mapping[str, None]) -> Snapshot:
        return Snapshot(
            {t: list(self.owners[t]) for t in tasks},
            {w: (dict(self.tasks_of[w]), self.load[w]) for w in workers},
            self.version,
        )

    def restore(self, snap: Snapshot) -> None:
        for t, o in snap.owners.items():
            self.owners[t][:] = o  # in place: callers may hold the list
            self._recheck(t)
        for w, (tasks, load) in snap.workers.items():
            mine = self.tasks_of[w]  # in place: the supervisor holds this dict
            mine.clear()
            mine.update(tasks)
            self.load[w] = load
            self.touch(w)
        self.version = snap.version
