"""The placement's books: workers, tasks, who owns what, loads — kept consistent, no policy.

`Ledger` holds the state `Placement` decides about and the primitives that change it while
keeping every derived figure right: a worker's load is the sum of its tasks' costs; a task is
*pending* exactly while it has fewer owners than it wants; a task is *crowded* exactly while
two of its owners share a top zone domain (only those can be zone-degraded, see `zones`);
every change bumps ``version``. It never refuses anything: `Placement` checks first. Which open
workers have the labels a task needs, and their zone tree, are kept per need in ``opens``
(`openindex`), told by the ledger whenever the open set, labels or topology change.

The dicts are plain and shared by reference with the placing, rebalancing and pending-reason
modules, which read them directly on hot paths. Iteration order never depends on ``hash()``
of a string: dicts keep insertion order and callers sort where an order is chosen.
"""

from __future__ import annotations

from typing import TypeVar

from .diff import Diff
from .dryrun import Snapshot
from .openindex import OpenIndex
from .shapes import NO_LABELS, Labels, describe
from .strategies import EPS, Got, Owners, WaterLevel
from .zones import Path, Topology, topology

T = TypeVar("T")
K = TypeVar("K")


_INTERN_LIMIT = 65_536  # distinct costs, label sets and zone paths kept shared at once
_TABLES = ("cap", "load", "eligible", "open", "path", "rank", "labels", "paths", "top_of",
           "tasks_of", "cost", "costs", "want", "need", "owners", "pending", "excluded",
           "crowded", "levels", "_interned", "_degraded", "_deg_dirty")


class Ledger:
    __slots__ = (
        "_deg_dirty", "_deg_seen", "_degraded", "_interned", "bare", "cap", "cost", "costs",
        "crowded", "eligible", "excluded", "journal", "labels", "levels", "load", "need", "open",
        "opens", "owners", "path", "paths", "pending", "rank", "replicas", "strict", "tasks_of",
        "top_of", "topo", "version", "want",
    )

    def __init__(self, replicas: int, strict: bool = False) -> None:
        self.replicas = replicas  # replicas a task wants unless its shape says otherwise
        self.strict = strict  # zone spread required: never two owners of a task in one zone
        self.version = 0
        # workers
        self.cap: dict[str, float] = {}
        self.load: dict[str, float] = {}
        self.eligible: dict[str, bool] = {}  # mode: True = may take new replicas
        self.open: dict[str, None] = {}  # eligible and max_load > 0, in insertion order
        self.opens = OpenIndex(self)  # per label need: the open workers, their live zone tree
        self.path: dict[str, Path] = {}
        # worker -> its zone and labels, as one string: orders break ties by it before names,
        # and unlabelled workers come first (scarce labelled ones stay free for tasks that
        # need them)
        self.rank: dict[str, str] = {}
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
        # Owner tuples, not lists: a task without owners shares the empty tuple, tasks placed in
        # one block share one, and tuples are smaller (at a million tasks: most of the memory).
        self.owners: dict[str, Owners] = {}
        self.pending: dict[str, None] = {}  # fewer owners than wanted, in the order they got so
        self.bare = 0  # tasks with no owner at all (all pending ones: a fresh task list)
        self.excluded: dict[str, dict[str, None]] = {}  # task -> workers it must not go to
        self.crowded: dict[str, None] = {}
        self.levels: dict[Labels, WaterLevel] = {}  # one water-filling heap per label need
        self._interned: dict[object, object] = {}  # costs, label sets and paths, shared
        self._degraded: dict[str, None] = {}
        self._deg_dirty: dict[str, None] = {}
        self._deg_seen = -1  # opens.version the degraded set was last fully computed for
        self.journal: Snapshot | None = None  # set during a dry run (see `journal`)

    def intern(self, value: T) -> T:
        """One shared object per distinct cost, label set or path: a million tasks of cost 1.0
        that need gpu=true hold two references, not two million objects. Only a cache: once it
        holds many more values than a fleet has kinds of (workers with zones of their own come
        and go), it starts over, and values already shared stay shared."""
        interned = self._interned
        if len(interned) >= _INTERN_LIMIT:
            interned.clear()
        return interned.setdefault(value, value)  # type: ignore[return-value]

    def sizes(self) -> dict[str, int]:
        """Entries per table (what a long-lived supervisor reports, to show none grows)."""
        sizes = {f"placement_{name.lstrip('_')}": len(getattr(self, name)) for name in _TABLES}
        return sizes | {f"placement_{k}": v for k, v in self.opens.sizes().items()}

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

    def may_take(self, task: str, worker: str) -> bool:
        """No replica of the task there yet, not excluded from it, every label it needs."""
        if worker in self.owners[task] or worker in self.excluded.get(task, ()):
            return False
        need = self.need.get(task)
        return not need or need <= self.labels[worker]

    def clash(self, task: str, worker: str) -> bool:
        """Zone spread is required and another owner of the task is in the worker's zone."""
        if not self.strict:
            return False
        zone, path = self.path[worker][0], self.path
        return any(o != worker and path[o][0] == zone for o in self.owners[task])

    def degraded(self) -> dict[str, None]:
        """The zone-degraded tasks (see `zones`), recomputed only for what changed."""
        if not self.topo.zoned:
            self._degraded.clear()
            return self._degraded
        opens = self.opens
        if self._deg_seen != opens.version:
            check, self._deg_seen = self.crowded, opens.version
            self._degraded = {}
        else:
            check = self._deg_dirty
        path, owners, deg = self.path, self.owners, self._degraded
        for t in list(check):
            paths = [path[o] for o in owners[t]]
            if t in self.crowded and opens.tree(self.need_of(t)).degraded(paths):
                deg[t] = None
            else:
                deg.pop(t, None)
        self._deg_dirty = {}
        return deg

    def touch(self, worker: str) -> None:
        for level in self.levels.values():
            level.touch(worker)

    def recheck(self, task: str) -> None:
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
                self.recheck(t)
        self.opens.changed()

    # -- workers ------------------------------------------------------------------------------

    def add_worker(self, worker: str, cap: float, eligible: bool, path: Path,
                   labels: Labels) -> None:
        self.cap[worker] = cap
        self.load[worker] = 0.0
        self.eligible[worker] = eligible
        self.tasks_of[worker] = {}
        path = self.path[worker] = self.intern(path)
        self.labels[worker] = self.intern(labels)
        self.rank[worker] = f"{path[-1]}\x00{describe(labels)}" if labels or path[-1] else ""
        n = self.paths.get(path, 0)
        self.paths[path] = n + 1
        if self.topo.zoned:
            self.top_of[worker] = self.topo.top(path)
        if n == 0:
            self._retopologize()
        self.set_worker(worker, cap, eligible)  # bumps the version

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
            self.opens.changed()
        self.version += 1

    def drop_worker(self, worker: str) -> dict[str, None]:
        """Forget the worker; its replicas become pending. Returns the tasks it had."""
        tasks = self.tasks_of.pop(worker)
        owners_of, want, default = self.owners, self.want, self.replicas
        crowded, zoned = self.crowded, self.topo.zoned
        # One lean pass (thousands of tasks when a zone dies): the usual owner tuples are
        # rebuilt without a generator; only a crowded task can change that by losing an owner.
        owners: Owners
        for task in tasks:
            old = owners_of[task]
            if len(old) == 1:
                owners = owners_of[task] = ()
                self.bare += 1
            elif len(old) == 2:
                owners = owners_of[task] = (old[1],) if old[0] == worker else (old[0],)
            else:
                owners = owners_of[task] = tuple(o for o in old if o != worker)
            if len(owners) < want.get(task, default):
                self.pending[task] = None
            if zoned and task in crowded:
                self.recheck(task)
        was_open = worker in self.open
        self.open.pop(worker, None)
        del self.cap[worker], self.load[worker], self.eligible[worker], self.labels[worker]
        path = self.path.pop(worker)
        del self.rank[worker]
        self.top_of.pop(worker, None)
        if not _count_down(self.paths, path):
            self._retopologize()
        if was_open:
            self.opens.changed()
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
        self.owners[task] = ()
        self.pending[task] = None
        self.bare += 1
        self.version += 1

    def drop_task(self, task: str) -> None:
        """Forget a task that has no owners left."""
        cost = self.cost.pop(task)
        _count_down(self.costs, cost)
        if not self.owners.pop(task):
            self.bare -= 1
        self.want.pop(task, None)
        self.need.pop(task, None)
        self.excluded.pop(task, None)
        for d in (self.pending, self.crowded, self._degraded, self._deg_dirty):
            d.pop(task, None)
        self.version += 1

    def set_cost(self, task: str, cost: float) -> None:
        old = self.cost[task]
        cost = self.cost[task] = self.intern(cost)
        _count_down(self.costs, old)
        self.costs[cost] = self.costs.get(cost, 0) + 1
        for w in self.owners[task]:
            load = self.load[w] + cost - old
            self.load[w] = load if load > EPS else 0.0
            self.touch(w)
        self.version += 1

    def set_want(self, task: str, want: int | None) -> None:
        if want is not None:
            self.want[task] = want
        elif task in self.want:
            del self.want[task]
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

    def _save(self, task: str, worker: str) -> None:
        j = self.journal
        if j is not None:
            j.owners.setdefault(task, self.owners[task])
            if worker not in j.tasks_of:
                j.tasks_of[worker] = dict(self.tasks_of[worker])

    def link(self, task: str, worker: str) -> None:
        assert worker not in self.owners[task], f"{task} linked to {worker} twice"
        self._save(task, worker)
        owners = self.owners[task] = (*self.owners[task], worker)
        if len(owners) == 1:
            self.bare -= 1
        self.tasks_of[worker][task] = None
        self.load[worker] += self.cost[task]
        self.touch(worker)
        if len(owners) >= self.want_of(task):
            self.pending.pop(task, None)
        self.recheck(task)
        self.version += 1

    def unlink(self, task: str, worker: str) -> None:
        self._save(task, worker)
        owners = self.owners[task] = tuple(o for o in self.owners[task] if o != worker)
        if not owners:
            self.bare += 1
        del self.tasks_of[worker][task]
        load = self.load[worker] - self.cost[task]
        self.load[worker] = load if load > EPS else 0.0
        self.touch(worker)
        if len(owners) < self.want_of(task):
            self.pending[task] = None
        self.recheck(task)
        self.version += 1

    def record(self, got: Got, diff: Diff, placed: list[str], r: int,
               spread: bool = False) -> None:
        """Book-keeping for replicas a strategy just added in round ``r`` (it updated owners
        and loads: one more owner per task); ``spread``: every new owner is alone in its top
        domain (so no task became crowded). ``pending`` is left for `settle`."""
        tasks_of, add_many = self.tasks_of, diff.add_many
        start = len(placed)  # ``placed`` gathers a whole round: this call's come after
        j = self.journal
        if j is not None:  # strategies changed owners and loads: `journal.begin` saved them
            for w in got:
                if w not in j.tasks_of:
                    j.tasks_of[w] = dict(tasks_of[w])
        if r == 0:
            self.bare -= sum(map(len, got.values()))
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
        if self.topo.zoned and r > 0 and not (spread and r == 1):  # one owner: never crowded
            top, crowded, owners = self.top_of, self.crowded, self.owners
            for t in placed[start:]:
                o = owners[t]
                if len(o) == 2 and top[o[0]] != top[o[1]] and t not in crowded:
                    continue  # the usual case, decided without a set
                self.recheck(t)
        self.version += 1

    def settle(self, short: set[str]) -> None:
        """After a placing call (`record`): the pending tasks are now exactly those of
        ``short`` (the ones a round could not give a replica), in their old order."""
        self.pending = {t: None for t in self.pending if t in short} if short else {}


def _count_down(counts: dict[K, int], key: K) -> int:
    """One fewer of ``key``; gone at zero. Returns how many are left."""
    n = counts.pop(key) - 1
    if n:
        counts[key] = n
    return n
