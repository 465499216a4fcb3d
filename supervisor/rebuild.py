"""The rebuild that ends the warm-up, cut into slices that the daemon runs between its reads.

The first task list after the warm-up is matched against what the workers report running:
every task they run is kept where it runs (a task claimed by more than its replicas keeps the
newest claims: the highest fencing token, then the lowest worker id), the rest is placed, and
every worker gets its whole set as a reset. At a million tasks and 100,000 workers that is
seconds of work (BENCHMARKS.md). Done as one step, the supervisor would read
no report meanwhile: leases would be renewed late, a backlog would pile up and silence would
be judged late. So the core runs one slice per turn of its loop (`SupervisorCore.busy` makes
the loop come back at once) and reads whatever arrived in between.

Stages, in order; a slice does at most ``budget`` items of work (a task, a claim, a worker)::

    TASKS   -> WORKERS   every task of the list is known to placement
    WORKERS -> CLAIMS    every active worker's capacity, mode and running set were read
    CLAIMS  -> FINISH    tasks claimed by several workers were resolved, and each worker was
                         given what it keeps
    FINISH  -> RESETS    (in one go) workers that changed meanwhile are read again, those gone
                         meanwhile removed; capacity enforced, drains started, the rest
                         placed (after a settle window, if workers were still arriving: see
                         `Assigner`): the assignment is complete (`assigned`), the
                         supervisor runs
    RESETS  -> DONE      every worker still active was reset (its whole set), a slice of
                         workers at a time; nothing of FINISH's diff is sent on its own

Until FINISH nothing reaches `Changes`: before the supervisor runs, a set to a worker is a
bare renewal, and every worker gets its whole set as a reset at the end anyway. A worker whose
reset is still to come while the supervisor runs is judged as any other: a report that does not
match what it should run gets its whole set at once (its first set with content is a reset).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum
from itertools import islice, repeat
from operator import is_

from corral.common.placement import resolve_claims
from corral.common.wire.protocol import Status, WorkerState
from corral.common.wire.tasklist import TaskEntry

from .assigner import Assigner
from .effects import Effects
from .records import WorkerRecord
from .registry import Registry
from .taskbook import shape_of

# Items per slice (a task added, a claim collected or resolved and assigned, a worker read):
# under the 1 s that counts as a stall, and long enough that the reports arriving meanwhile
# are read in big batches, which cost less each (BENCHMARKS.md, "Design measurements").
SLICE = 100_000


def _one_plain_cost(entries: Mapping[str, TaskEntry]) -> float | None:
    """The cost, if every entry is one shared plain entry (a list of bare ids shares one):
    checked by identity, in C."""
    first = next(iter(entries.values()), None)
    shape = None if first is None else shape_of(first)
    if type(shape) is float and all(map(is_, entries.values(), repeat(first))):
        return shape
    return None


class Stage(Enum):
    TASKS = "tasks"
    WORKERS = "workers"
    CLAIMS = "claims"
    FINISH = "finish"
    RESETS = "resets"
    DONE = "done"


_DONE = object()

# A reset costs about as much as ten claims (its set is built, numbered and tokened); a worker
# read (it joins placement) as much as four.
RESET_ITEMS = 10
WORKER_ITEMS = 4


class Rebuild:
    """One rebuild in progress; `step` runs the next slice and says whether it is done."""

    def __init__(self, assigner: Assigner, tasks: Mapping[str, TaskEntry], registry: Registry,
                 effects: Effects, budget: int = SLICE) -> None:
        self._assigner = assigner
        self._effects = effects
        self._registry = registry
        self.budget = max(1, budget)
        self.stage = Stage.TASKS
        self.slices = 0
        # Seconds from the first slice to the end of each stage (by the `now` of the slices),
        # for the "running" log: where a slow rebuild spent its time.
        self.stage_s: dict[str, float] = {}
        self._began: float | None = None
        assigner.book.start(tasks)
        self._entries = assigner.book.entries
        self._task_items: Iterator[tuple[str, TaskEntry]] = iter(self._entries.items())
        self._fill = self._fill_all()  # the bulk path of `_tasks`, if it applies
        active = sorted((r for r in registry if r.active), key=lambda r: r.id)
        self._workers: Iterator[WorkerRecord] = iter(active)
        self._read: dict[str, Status] = {}  # worker -> the status its claims were read from
        # Claims: per worker what it runs (its report's map, in its order; placement refuses
        # what is not listed); a task's first claim, and every claim of the few listed tasks
        # that more than one worker runs.
        self._claimed: dict[str, Mapping[str, int]] = {}
        self._first: dict[str, str] = {}
        self._multi: dict[str, list[tuple[str, int]]] = {}
        self._losers: dict[str, set[str]] = {}  # worker -> claimed tasks it must not keep
        self._assign_items: Iterator[tuple[str, Mapping[str, int]]] | None = None
        self._reset_items: Iterator[WorkerRecord] | None = None
        self._surplus_tasks = self._surplus_copies = 0

    @property
    def assigned(self) -> bool:
        """The assignment is complete (only resets are left to send)."""
        return self.stage is Stage.RESETS or self.stage is Stage.DONE

    def step(self, now: float) -> bool:
        """One slice of work; True once the rebuild is done (every active worker was reset)."""
        self.slices += 1
        if self._began is None:
            self._began = now
        budget = self.budget
        while budget > 0 and self.stage is not Stage.DONE:
            stage = self.stage
            if self.stage is Stage.TASKS:
                budget -= self._tasks(budget)
            elif self.stage is Stage.WORKERS:
                budget -= self._read_workers(budget)
            elif self.stage is Stage.CLAIMS:
                budget -= self._assign(budget)
            elif self.stage is Stage.FINISH:
                budget -= self._finish(now)
            else:
                budget -= self._resets(budget)
            if self.stage is not stage:
                self.stage_s[stage.value] = round(now - self._began, 3)
        return self.stage is Stage.DONE

    def _tasks(self, budget: int) -> int:
        if self._fill is not None:  # a whole slice per step
            if next(self._fill, _DONE) is _DONE:
                self.stage = Stage.WORKERS
            return budget
        chunk = dict(islice(self._task_items, budget))
        if chunk:
            p, cost = self._assigner.placement, _one_plain_cost(chunk)
            if cost is not None:  # bare ids: added in bulk
                p.add_uniform(chunk, cost)
            else:
                p.add_tasks({t: shape_of(e) for t, e in chunk.items()})
        if len(chunk) < budget:
            self.stage = Stage.WORKERS
        return max(1, len(chunk))

    def _fill_all(self) -> Iterator[None] | None:
        """A list of bare ids (one shared plain entry) into a placement with no task yet, as
        every rebuild starts: in a few big steps, not a chunk at a time (`Placement.fill`)."""
        entries, p = self._entries, self._assigner.placement
        cost = _one_plain_cost(entries)
        if cost is None or p.view.tasks:
            return None
        return p.fill(entries, cost)

    def _read_workers(self, budget: int) -> int:
        """Each worker joins placement (no tasks yet, so no diff) and its running set becomes
        claims."""
        a, entries, first, multi = self._assigner, self._entries, self._first, self._multi
        read = self._read
        used = 0
        for rec in self._workers:
            a.join_placement(rec)
            w = rec.id
            st = read[w] = rec.status
            running = st.running
            # Most tasks run on one worker: those claims are recorded in C; a task claimed
            # before is rare, and gathered with every claim on it, tokens read back. Tasks
            # not listed are claimed too: placement refuses them (they are unknown to it).
            self._claimed[w] = running
            if first.keys().isdisjoint(running):
                first.update(dict.fromkeys(running, w))
            else:
                for task in running:
                    other = first.setdefault(task, w)
                    if other != w and task in entries:
                        multi.setdefault(task, [(other, read[other].running[task])]).append(
                            (w, running[task]))
            used += WORKER_ITEMS + len(running)
            if used >= budget:
                return used
        self._end_claims()
        return max(1, used)

    def _end_claims(self) -> None:
        """Tasks claimed by more than their replicas keep the newest claims (the few tasks
        claimed twice: resolved in one go); the others lose them."""
        _, surplus = resolve_claims(self._multi, self._assigner.placement.view.replicas_of)
        for task, ws in surplus.items():
            for w in ws:
                self._losers.setdefault(w, set()).add(task)
        self._surplus_tasks = len(surplus)
        self._surplus_copies = sum(map(len, surplus.values()))
        self._first, self._multi = {}, {}
        self._assign_items = iter(self._claimed.items())
        self.stage = Stage.CLAIMS

    def _assign(self, budget: int) -> int:
        assert self._assign_items is not None
        p, losers = self._assigner.placement, self._losers
        used = 0
        for w, tasks in self._assign_items:
            lost = losers.get(w)
            p.assign_many(w, [t for t in tasks if t not in lost] if lost else tasks)
            used += 1 + len(tasks)
            if used >= budget:
                return used
        self._claimed, self._assign_items = {}, None
        self.stage = Stage.FINISH
        return max(1, used)

    def _finish(self, now: float) -> int:
        """Reports read since a worker's claims were: a worker that changed (a restart, a new
        capacity or state) is read again; one gone silent leaves placement (its tasks are
        placed elsewhere); one that joined takes part, adopting what it runs that is short."""
        a = self._assigner
        p, read = a.placement, self._read
        active = sorted((r for r in self._registry if r.active), key=lambda r: r.id)
        now_active = {r.id for r in active}
        for w in [w for w in read if w not in now_active]:
            a.handoffs.forget_worker(w)
            p.remove_worker(w)
        for rec in active:
            seen = read.get(rec.id)
            if seen is rec.status:
                continue
            a.upsert(rec)
            if seen is None and rec.status.state is not WorkerState.LAME_DUCK:
                p.assign_many(rec.id, rec.status.running)  # what is short, fits and is allowed
        self._read = {}
        if self._surplus_tasks:
            self._effects.log("warning", "tasks ran on more workers than replicas; extra "
                              "copies stop", {"tasks": self._surplus_tasks,
                                              "copies": self._surplus_copies})
        for rec in active:
            p.enforce_capacity(rec.id)
        for rec in active:
            if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
                a.drain(rec, now)
        placed = p.view.pending_count()
        a.place_rebuilt(now)  # at once, or after a settle window if workers still arrive
        # Every active worker gets its whole set as a reset, a slice at a time: what this
        # step changed per worker is in those resets, so it is not sent now as well (it would
        # be every worker's set twice, and a whole fleet's sets in one turn of the loop).
        self._effects.changes.drop_diff()
        self._reset_items = iter(active)
        self.stage = Stage.RESETS
        return len(active) + placed

    def _resets(self, budget: int) -> int:
        """Every worker gets its whole set (the core's flush sends them at the slice's end);
        one gone meanwhile does not (its tasks were moved when it went), nor one whose first
        set with content went out meanwhile (that was a reset: see `Dispatch.send`)."""
        assert self._reset_items is not None
        changes = self._effects.changes
        used = 0
        for rec in self._reset_items:
            if rec.active and not rec.got_reset:
                changes.reset(rec.id)
            used += RESET_ITEMS
            if used >= budget:
                return used
        self._reset_items = None
        self.stage = Stage.DONE
        return max(1, used)
