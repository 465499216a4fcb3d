"""The narrow read-only API over the supervisor's state: what views, metrics, the routing map
and the change feed may know. Nothing outside the core's parts reaches into them; everything
here returns plain values or frozen views, built from the parts' public methods.

Lists come in a stable order (worker ids, task ids, sorted) and page by cursor (the last id of
the previous page), so a 100,000-worker fleet answers its first page without building all of
it. The sorted orders are cached until the set of workers or tasks changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from corral.common.timers import TimerWheel
from corral.common.wire.protocol import WorkerState
from corral.common.wire.routemap import MapVersions, RouteMap, WorkerEntry

from .assigner import Assigner
from .config import SupervisorConfig
from .counters import Counters
from .dispatch import Dispatch
from .failures import Failures, LastError
from .feed import Feed
from .lifecycle import Lifecycle, Phase
from .rebalancing import Rebalancing
from .records import WorkerRecord
from .registry import Registry
from .role import Role
from .starts import Starts
from .taskbook import TaskBook


class Countable(Protocol):
    def as_dict(self) -> Mapping[str, float]: ...


OUTLOOK_MAX_AGE = 1.0  # seconds a status may show an older plan of a changing placement


@dataclass(frozen=True)
class WorkerView:
    id: str
    address: str
    state: str  # inactive | drained | starting | ready | lame_duck
    active: bool
    drained: bool
    max_load: float
    running: float  # the cost it reports running (0 once inactive: its lease is gone)
    assigned: int  # replicas placement gives it
    last_received: float
    incarnation: int
    lease_held: bool
    failing: tuple[str, ...]
    conflict: str | None
    zone: str
    labels: Mapping[str, str]
    serve_utilization: float
    serve_qps: float
    serve_errors: float
    contended: bool  # another process waits for its id

    @property
    def utilization(self) -> float:
        return self.running / self.max_load if self.max_load else 0.0


@dataclass(frozen=True)
class TaskView:
    id: str
    cost: float
    owners: tuple[str, ...]
    tokens: Mapping[str, int]  # owner -> the fencing token it reports running the task under
    missing: int
    pending_reason: str | None
    releasing: str | None  # the old owner while a hand-off is in flight
    failing_on: tuple[str, ...]
    spec: str | None
    # owner -> running | starting (given, not running yet) | failing (restart backoff)
    states: Mapping[str, str]
    excluded: Mapping[str, str]  # worker it is kept off -> why
    last_error: LastError | None = None  # its last failure, wherever it was

    @property
    def running_on(self) -> tuple[str, ...]:
        return tuple(w for w, s in self.states.items() if s == "running")


class Queries:
    """Built from the parts it reads (never written through it)."""

    def __init__(self, config: SupervisorConfig, life: Lifecycle, counters: Counters,
                 feed: Feed, registry: Registry, assigner: Assigner, book: TaskBook,
                 rebalancing: Rebalancing, starts: Starts, failures: Failures,
                 dispatch: Dispatch, wheel: TimerWheel[Any]) -> None:
        self.config = config
        self._life = life
        self._counters = counters
        self._feed = feed
        self._registry = registry
        self._assigner = assigner
        self._book = book
        self._rebalancing = rebalancing
        self._starts = starts
        self._failures = failures
        self._dispatch = dispatch
        self._wheel = wheel
        self._live: tuple[tuple[int, int], list[str], list[str]] = ((-1, -1), [], [])
        self._ids: tuple[int, list[str]] = (-1, [])
        self._task_ids: tuple[int, list[str]] = (-1, [])
        self._map: MapVersions | None = None
        self._attached: list[Countable] = []
        self._outlook: tuple[tuple[int, int], float, dict[str, Any]] | None = None

    # -- the supervisor -----------------------------------------------------------------------

    def lifecycle(self) -> tuple[str, int, float, bool, Role | None]:
        """(phase, epoch, started_at, leader, the election's latest decision)."""
        life = self._life
        return str(life.phase), life.epoch, life.started_at, life.leader, life.role

    def counters(self) -> dict[str, float]:
        """The core's counters, and those the daemon attached (its I/O, the task source's)."""
        out = self._counters.as_dict()
        for more in self._attached:
            out.update(more.as_dict())
        return out

    def attach(self, counters: Countable) -> None:
        self._attached.append(counters)

    def placement_summary(self) -> dict[str, Any]:
        a = self._assigner
        p = a.placement
        view = p.view
        assigned = view.covered()
        return {
            "tasks_total": len(view.tasks),
            "tasks_assigned": assigned,
            "tasks_running": assigned - len(self._not_running()),
            "tasks_pending": view.pending_count(),
            "replicas": p.replicas,
            "strategy": p.strategy,
            "handoffs": len(a.handoffs),
            "version": p.version,
            "balanced": self._rebalancing.balanced,
            "rebalance_moves": self._counters.rebalance_moves,
            "zone_degraded": view.zone_degraded(),
        }

    def outlook(self, now: float) -> dict[str, Any]:
        """How far the placement is from balanced: the moves a full convergence still plans
        (a dry run; at most the first 500 of a longer one) — for status, not for gauges.
        Planning costs O(fleet): on a placement that changes all the time (a big fleet in
        motion) the answer is at most `OUTLOOK_MAX_AGE` old, so a status poll cannot keep
        the loop from reading reports. Before the supervisor runs there is nothing to judge
        (None): planning over a rebuild's half-built placement took seconds per poll."""
        a = self._assigner
        if not self._life.running:  # no assignment yet (a rebuild in slices is half built)
            return {"balanced": None, "moves_planned": None,
                    "zone_degraded": a.view.zone_degraded()}
        version = (a.placement.version, len(a.handoffs.pinned))  # hand-offs pin tasks
        kept = self._outlook
        if kept is not None and (kept[0] == version or now - kept[1] < OUTLOOK_MAX_AGE):
            return kept[2]
        balanced, planned, degraded = a.outlook()
        look = {"balanced": balanced, "moves_planned": planned, "zone_degraded": degraded}
        self._outlook = (version, now, look)
        return look

    def _owners_now(self, task: str) -> tuple[str, ...]:
        """Who should be running ``task``: its placement owners and a hand-off's old owner."""
        owners = tuple(self._assigner.view.owners(task))
        old = self._assigner.handoffs.old_owner(task)
        return owners if old is None or old in owners else (*owners, old)

    def _not_running(self) -> list[str]:
        """Assigned tasks no owner reports running (O(tasks waiting to start), not O(fleet)):
        only a task some worker waits to start can be one."""
        records = self._registry.records
        out = []
        for task in self._starts.tasks():
            owners = self._owners_now(task)
            if not owners or not self._assigner.view.owners(task):
                continue
            for w in owners:
                rec = records.get(w)
                if rec is not None and rec.active:
                    st = rec.status
                    if task in st.running and task not in st.starting:
                        break
            else:
                out.append(task)
        return out

    def table_sizes(self) -> dict[str, int]:
        """Entries in each of the core's tables (per task, per worker, per connection): what a
        supervisor that runs for weeks shows to prove none grows without bound."""
        a = self._assigner
        return {**self._registry.sizes(), "tasks_listed": len(self._book.entries),
                **a.placement.sizes(), **a.handoffs.sizes(), **self._starts.sizes(),
                "exclusion_reasons": len(self._failures),
                "last_errors": len(self._failures.last), "grants": len(self._dispatch),
                "timers": len(self._wheel), "feed": self._feed.held}

    def warmup(self, now: float) -> dict[str, Any] | None:
        """While the leader warms up (it assigns nothing yet): workers reported, expected
        (--expect-workers; None when not set), seconds left; None otherwise."""
        life = self._life
        if life.phase is not Phase.WARMUP or not life.leader:
            return None
        return {"workers": self._registry.active, "expected": self.config.expect_workers or None,
                "ends_in_s": round(max(0.0, life.warmup_until - now), 1)}

    def source_error(self, now: float) -> dict[str, Any] | None:
        """The task source's last failure, while no good list has come since."""
        refused = self._book.refused
        if refused is None:
            return None
        return {"error": refused[0], "since_s": round(now - refused[1], 1)}

    def events(self, cursor: int | None, limit: int) -> dict[str, Any]:
        return self._feed.after(cursor, limit)

    # -- workers ------------------------------------------------------------------------------

    def worker_count(self) -> tuple[int, int]:
        """(active, known)."""
        reg = self._registry
        return reg.active, len(reg)

    def worker_states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for rec in self._registry:
            state = rec.display_state
            out[state] = out.get(state, 0) + 1
        return out

    def worker(self, worker: str) -> WorkerView | None:
        rec = self._registry.get(worker)
        return None if rec is None else self._view(rec)

    def workers(self, after: str | None = None) -> Iterator[WorkerView]:
        """Every worker, the active ones first, each group in id order; from the one after
        ``after`` (in the group ``after`` is in now: an id that changed group between two
        pages may be listed twice or skipped, as with any listing of a moving fleet)."""
        reg = self._registry
        key, live, silent = self._live
        if key != (reg.generation, reg.liveness):
            live = sorted(w for w, r in reg.records.items() if r.active)
            silent = sorted(w for w, r in reg.records.items() if not r.active)
            self._live = ((reg.generation, reg.liveness), live, silent)
        if after is None:
            order = [*live, *silent]
        else:
            rec = reg.get(after)
            if rec is not None and not rec.active:
                order = silent[bisect.bisect_right(silent, after):]
            else:
                order = [*live[bisect.bisect_right(live, after):], *silent]
        for worker in order:
            rec = reg.get(worker)
            if rec is not None:
                yield self._view(rec)

    def _view(self, rec: WorkerRecord) -> WorkerView:
        st, view = rec.status, self._assigner.view
        cost = view.tasks
        # An inactive worker's last report is stale: its lease is gone, so is its load.
        running = sum(cost.get(t, 1.0) for t in st.running) if rec.active else 0.0
        return WorkerView(
            rec.id, st.serve or rec.identity.decode("utf-8", "replace"), rec.display_state,
            rec.active, rec.drained, st.max_load, running,
            len(view.tasks_of(rec.id)), rec.last_received, rec.incarnation,
            st.lease_held, tuple(sorted(st.failures)), rec.conflict, st.zone, st.labels,
            st.utilization, st.qps, st.errors, rec.contender is not None)

    # -- tasks --------------------------------------------------------------------------------

    def task_ids(self, prefix: str | None = None, after: str | None = None,
                 worker: str | None = None) -> Iterator[str]:
        """Task ids in order; only ``worker``'s, only those starting with ``prefix``."""
        view = self._assigner.view
        if worker is not None:
            ids: list[str] = sorted(view.tasks_of(worker))
        else:
            gen, ids = self._task_ids
            if gen != self._book.generation:
                ids = sorted(view.tasks)
                self._task_ids = (self._book.generation, ids)
        lo = 0
        if prefix:
            lo = bisect.bisect_left(ids, prefix)
        if after is not None:
            lo = max(lo, bisect.bisect_right(ids, after))
        for task in ids[lo:]:
            if prefix and not task.startswith(prefix):
                return
            yield task

    def task(self, task: str) -> TaskView | None:
        a = self._assigner
        view = a.view
        cost = view.tasks.get(task)
        if cost is None:
            return None
        owners = tuple(view.owners(task))
        tokens: dict[str, int] = {}
        states: dict[str, str] = {}
        failing: list[str] = list(view.excluded_from(task))
        for w in self._owners_now(task):
            rec = self._registry.get(w)
            st = rec.status if rec is not None and rec.active else None
            token = st.running.get(task) if st is not None else None
            if st is None or token is None:
                states[w] = "starting"  # given, and not reported yet
                continue
            if w in owners:
                tokens[w] = token
            if task in st.starting:
                states[w] = "failing" if task in st.failures else "starting"
            else:
                states[w] = "running"
            if task in st.failures and w not in failing:
                failing.append(w)
        missing = view.replicas_of(task) - len(owners)
        excluded = self._failures.why(task)
        for w in view.excluded_from(task):
            excluded.setdefault(w, "excluded")
        return TaskView(task, cost, owners, tokens, max(missing, 0),
                        self._pending_reason(task) if missing > 0 else None,
                        a.handoffs.old_owner(task), tuple(sorted(failing)),
                        self._book.spec(task), states, excluded,
                        self._failures.last_error(task))

    def _pending_reason(self, task: str) -> str:
        why = self._assigner.view.pending_reason(task)
        return why or "no eligible worker has room for it"

    def failing_count(self) -> int:
        failing = set(self._assigner.view.excluded())
        reg = self._registry
        for worker in reg.failing:  # only workers that report failures: not the whole fleet
            rec = reg.get(worker)
            if rec is not None and rec.active:
                failing.update(rec.status.failures)
        return len(failing)

    def handoff_tasks(self, after: str | None = None) -> Iterator[str]:
        """Tasks in a make-before-break hand-off, in id order (few: no cache needed)."""
        return (t for t in sorted(self._assigner.handoffs.tasks)
                if after is None or t > after)

    def owners(self, task: str) -> tuple[str, ...]:
        return tuple(self._assigner.view.owners(task))

    def pending(self) -> list[str]:
        return sorted(self._assigner.view.pending())

    # -- the routing map ----------------------------------------------------------------------

    def route_map(self) -> tuple[RouteMap, MapVersions]:
        """The request-routing map, rebuilt only when something it is made of may have
        changed: the placement's version, a worker's reported content, a worker turning
        inactive, a hand-off starting or ending. O(1) to check, O(tasks) to rebuild."""
        versions, epoch = self._map, self._life.epoch
        if versions is None or versions.epoch != epoch:  # warm-up may raise it
            versions = self._map = MapVersions(epoch)
        a = self._assigner
        signature = (a.placement.version, len(a.handoffs), self._registry.changes)
        return versions.current(signature, self._routing), versions

    def _routing(self) -> tuple[dict[str, tuple[str, ...]], dict[str, WorkerEntry]]:
        """Task -> the workers that serve it; worker -> where and in what state it serves.

        A task's owners are the workers the placement gives it, plus the old owner while a
        make-before-break hand-off is in flight — each only once it reports the task running,
        so a request never goes to a worker that has not started it yet (not_owner)."""
        workers: dict[str, WorkerEntry] = {}
        running: dict[str, dict[str, int]] = {}
        for rec in self._registry:
            st = rec.status
            if rec.active and st.serve:
                # Clients know ready, starting, lame_duck: a worker leaving is a lame duck.
                state = "lame_duck" if st.state is WorkerState.HANDING_OVER else st.state.value
                workers[rec.id] = WorkerEntry(st.serve, state)
                running[rec.id] = st.running
        view, handoffs = self._assigner.view, self._assigner.handoffs
        owners_of = view.owners
        tasks: dict[str, tuple[str, ...]] = {}
        for task in view.tasks:
            owners = owners_of(task)
            old = handoffs.old_owner(task) if handoffs.tasks else None
            if old is not None and old not in owners:
                owners = [*owners, old]
            tasks[task] = tuple(w for w in owners if w in running and task in running[w])
        return tasks, workers
