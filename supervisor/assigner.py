"""The assigner: placement and hand-offs in, the changes of the desired assignment out.

It owns the desired assignment (`Placement`) and the make-before-break hand-offs in flight,
and answers "what should this worker run" (`desired`: what placement gives it, plus what it
still runs for a hand-off). Every change it makes while the core handles one event gathers in
the effects' `Changes` (one diff, and the workers that get their whole set as a reset); the
core turns them into instruction sets at the event's end, at most one per worker per event.
Moves and their reasons go to the change feed. The task list is the `TaskBook`'s; failing
tasks are `Failures`'; pacing rebalance passes is `Rebalancing`'s.

**Settling.** A worker that arrives (joins, comes back, becomes ready) while replicas wait for
a place opens a window of ``--settle`` seconds: every placement waits for its end, and then
places once over all the workers that arrived in it — a fleet coming back after its leases
lapsed, or restarted at once, shares the replicas instead of the first ones filling up and the
rest being moved after (docs/supervisor.md, "Lifecycle"). A rebuild whose workers were still
arriving waits the same way. Rebalance passes wait too (they would place what is pending).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from corral.common.placement import Mode, Placement, PlacementView
from corral.common.timers import TimerWheel
from corral.common.wire.protocol import WorkerState
from corral.common.wire.tasklist import TaskEntry

from .config import SupervisorConfig
from .counters import Counters
from .effects import Effects
from .feed import Feed
from .handoffs import Handoffs
from .records import WorkerRecord
from .taskbook import ListChange, TaskBook, shape_of

PLACED = "placed"  # the reason of a first placement (not a move)
SETTLE = ("settle",)  # the settle window's timer key


class Assigner:
    def __init__(self, config: SupervisorConfig, counters: Counters, feed: Feed,
                 effects: Effects, book: TaskBook, wheel: TimerWheel[Any]) -> None:
        self.config = config
        self.placement = Placement(config.replicas, config.strategy, config.zone_spread)
        self.handoffs = Handoffs()
        self.book = book
        self._counters = counters
        self._feed = feed
        self._changes = effects.changes  # one for the effects' life
        self._wheel = wheel
        self._deferring = False  # inside a batch of reports (see `defer`)
        self._place_due = False  # a placement waits for the batch's end or the window's
        self.settle_until: float | None = None  # while a settle window is open: its end
        self._arrived = float("-inf")  # when a worker last arrived

    # -- reading -------------------------------------------------------------------------------

    @property
    def view(self) -> PlacementView:
        """The placement, read-only (loads, owners, pending replicas and why)."""
        return self.placement.view

    def desired(self, worker: str) -> Mapping[str, None]:
        """What ``worker`` should run: its placement, plus the tasks it keeps running until a
        new owner confirms them (make-before-break)."""
        mine = self.placement.view.tasks_of(worker)
        releasing = self.handoffs.releasing(worker)
        return {**mine, **releasing} if releasing else mine

    def owns(self, worker: str, task: str) -> bool:
        return worker in self.placement.view.owners(task)

    def holds(self, worker: str) -> bool:
        """Does placement give ``worker`` any task?"""
        return bool(self.placement.view.tasks_of(worker))

    def clear(self) -> None:
        """Forget the assignment (demoted: the next leader decides)."""
        self.placement = Placement(self.config.replicas, self.config.strategy,
                                   self.config.zone_spread)
        self.handoffs = Handoffs()
        self.book.clear()
        self._changes.take()  # and what this event changed is not sent
        self._wheel.cancel(SETTLE)
        self.settle_until, self._place_due = None, False

    # -- batches -------------------------------------------------------------------------------

    def defer(self) -> None:
        """A batch of reports starts: arrivals' placement waits for `place_deferred`."""
        self._deferring = True

    def place_deferred(self) -> None:
        """The batch is over: place once what its arrivals asked for (unless a settle window
        keeps it for its end)."""
        self._deferring = False
        if self._place_due and self.settle_until is None:
            self._place_due = False
            self.place(PLACED)

    def _place_soon(self, now: float) -> None:
        """A worker arrived: place what is pending — after a settle window, if anything is."""
        self._arrived = now
        if self.config.settle > 0 and self.placement.view.pending_count():
            self._open_window(now)
        elif self._deferring:
            self._place_due = True
        else:
            self.place(PLACED)

    def _open_window(self, now: float) -> None:
        if self.settle_until is None:
            self.settle_until = now + self.config.settle
            self._wheel.schedule_timeout(SETTLE, self.settle_until)
        self._place_due = True

    def arrived(self, now: float) -> None:
        """A worker joined or came back before the supervisor runs (for `place_rebuilt`)."""
        self._arrived = now

    def place_rebuilt(self, now: float) -> None:
        """The rebuild's placement: at once, unless workers are still arriving (one arrived
        within a settle window before now): then at the end of a window from now."""
        if (self.config.settle > 0 and now - self._arrived < self.config.settle
                and self.placement.view.pending_count()):
            self._open_window(now)
        else:
            self.place(PLACED)

    def settled(self) -> None:
        """The settle window closed (its timer): place once over every worker there is."""
        self.settle_until = None
        if self._place_due:
            self._place_due = False
            self.place(PLACED)

    def sent(self, worker: str, add: Collection[str], stop: Iterable[str] = ()) -> None:
        """``worker`` was told to run ``add`` and to stop ``stop``. What it stops stays pinned
        until it reports so. A task the placement gave back to the worker releasing it ends
        that hand-off; otherwise its new owner is the one to confirm it. A reset of the
        releasing worker lists what it still releases: that ends nothing."""
        handoffs = self.handoffs
        handoffs.resumed(worker, add)
        handoffs.stopping(worker, stop)
        if not handoffs:
            return
        owners = self.placement.view.owners
        for task in add:
            old = handoffs.old_owner(task)
            if old != worker:
                handoffs.expect(task, worker)
            elif worker in owners(task):
                handoffs.release(task)

    # -- workers -------------------------------------------------------------------------------

    def mode(self, rec: WorkerRecord) -> Mode:
        if rec.drained or rec.status.state is not WorkerState.READY:
            return Mode.HOLD
        return Mode.ELIGIBLE

    def upsert(self, rec: WorkerRecord) -> None:
        """Tell placement the worker's capacity, mode, failure domain and labels. A zone or
        labels that changed (a new incarnation started elsewhere, or differently) make it a
        new worker to placement: its replicas move as for a leave, then it joins afresh."""
        p, st = self.placement, rec.status
        view = p.view
        if view.has_worker(rec.id) and (view.zone(rec.id) != st.zone
                                        or view.labels(rec.id) != dict(st.labels)):
            self.gone([rec.id])
        self._changes.diff.merge(p.upsert_worker(rec.id, st.max_load, self.mode(rec),
                                                 zone=st.zone, labels=st.labels))

    def admit(self, rec: WorkerRecord, now: float) -> None:
        """A worker joins (or comes back) while running: adopt what it runs that is short of
        replicas, place what is pending, and reset it to its desired set."""
        p = self.placement
        self.upsert(rec)
        if rec.status.state is not WorkerState.LAME_DUCK:
            for task in rec.status.running:
                p.assign(task, rec.id)  # refused unless it is short, fits and is allowed
        self._place_soon(now)
        if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
            self.drain(rec, now)
        self._changes.reset(rec.id)

    def update_mode(self, rec: WorkerRecord, now: float) -> None:
        """Its state, max load or drained flag changed."""
        if not self.placement.view.has_worker(rec.id):
            return
        self.upsert(rec)
        if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
            self.drain(rec, now)
        else:
            self._place_soon(now)

    def gone(self, workers: list[str]) -> dict[str, int]:
        """These workers are gone (lease + margin of silence): their replicas move, placed
        once for all of them. Returns how many each had."""
        had: dict[str, int] = {}
        for worker in workers:
            had[worker] = len(self.placement.view.tasks_of(worker))
            self.handoffs.forget_worker(worker)
            self.placement.remove_worker(worker)
        self.place("worker gone", source=workers[0] if len(workers) == 1 else None)
        for worker in workers:
            self._changes.diff.workers.pop(worker, None)
        return had

    def drain(self, rec: WorkerRecord, now: float) -> None:
        """Make-before-break: new owners first; the worker stops a task once one reports it.
        A task already in a hand-off stays until that one ends (at most replicas + 1 owners);
        the next report of the draining worker moves it then."""
        p, handoffs = self.placement, self.handoffs
        for task in list(p.view.tasks_of(rec.id)):
            if task in handoffs.pinned:
                continue
            p.unassign(task, rec.id)
            handoffs.start(task, rec.id)
        self.place("drain", source=rec.id)

    def place(self, reason: str, source: str | None = None) -> None:
        """Place what is pending. Replicas that *move* (a worker gone, drained, failing) go
        to the feed one by one; a first placement (new tasks) as one line. While a settle
        window is open, at its end (as placed)."""
        if self.settle_until is not None:
            self._place_due = True
            return
        diff = self.placement.place()
        if not diff:
            return
        moved = diff.moved()
        self._counters.tasks_moved += moved
        self._changes.diff.merge(diff)
        if reason == PLACED:
            self._feed.add("placed", replicas=moved)
        elif self._feed.enabled:
            cost = self.placement.view.tasks
            for w, d in diff.workers.items():
                for task in d.add:
                    self._feed.add("move", task=task, to=w, source=source, reason=reason,
                                   cost=cost.get(task))

    def exclude(self, task: str, worker: str) -> None:
        """``task`` keeps failing on ``worker``: off it (placed elsewhere by the next `place`)."""
        self.placement.exclude(task, worker)
        self._changes.diff.remove(worker, task)

    def include(self, task: str, worker: str) -> None:
        """A failure cool-down ended: the task may go back to that worker."""
        self.placement.include(task, worker)
        self.place(PLACED)

    # -- task lists ----------------------------------------------------------------------------

    def join_placement(self, rec: WorkerRecord) -> None:
        """A worker joins placement during a rebuild: its capacity, mode, failure domain and
        labels. New to placement, it sheds nothing, so there is no diff to send."""
        shed = self.placement.upsert_worker(rec.id, rec.status.max_load, self.mode(rec),
                                            zone=rec.status.zone, labels=rec.status.labels)
        assert not shed, "a worker new to placement had tasks to shed"

    def apply(self, tasks: Mapping[str, TaskEntry]) -> ListChange:
        """A new task list while running: what it changed."""
        p, changes = self.placement, self._changes
        change = self.book.compare(tasks)
        if change.removed:
            changes.diff.merge(p.remove_tasks(change.removed))
            for task in change.removed:
                source = self.handoffs.release(task)
                if source is not None:
                    changes.diff.remove(source, task)
        for task in change.respecified:  # a new version: its owners restart it with it
            changes.respec[task] = None
            for w in p.view.owners(task):
                changes.diff.add(w, task)
            self._feed.add("respec", task=task)
        self._counters.spec_changes += len(change.respecified)
        if change.reshaped:  # cost, replicas or required labels: surplus or misfit stop
            changes.diff.merge(p.upsert_tasks(change.reshaped))
        if change.added:
            p.add_tasks({t: shape_of(e) for t, e in change.added.items()})
        if change.added or change.reshaped:
            self.place(PLACED)
        return change

    # -- reports -------------------------------------------------------------------------------

    def confirm(self, rec: WorkerRecord) -> int:
        """``rec`` reports tasks it was handed: their old owners may stop them now. Returns
        how many hand-offs ended."""
        waiting = self.handoffs.awaiting(rec.id)
        if not waiting:
            return 0
        ended = 0
        running, owners = rec.status.running, self.placement.view.owners
        for task in [t for t in waiting if t in running and rec.id in owners(t)]:
            del waiting[task]
            old = self.handoffs.release(task)
            ended += 1
            if old is not None and old != rec.id and old not in owners(task):
                self._changes.diff.remove(old, task)
                self.handoffs.stopping(old, (task,))  # now: a drain in this event must wait
                self._feed.add("handoff", task=task, source=old, to=rec.id)
        return ended

    def adopt(self, rec: WorkerRecord, task: str) -> bool:
        """``rec`` runs ``task`` although not told to: keep it if the task is short of a
        replica there (placement refuses otherwise)."""
        if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
            return False
        return bool(self.placement.assign(task, rec.id))

    # -- convergence ---------------------------------------------------------------------------

    def rebalance(self) -> tuple[int, bool]:
        """One budgeted pass toward the balance criterion: (moves started, balanced now).
        Moves are make-before-break, one replica of a task per pass, and a task already in a
        hand-off is not moved again until its old owner stopped it (so at most replicas + 1
        owners); the rest of the pass — pending replicas the moves made room for, a redundant
        replica displaced to cover another task — is sent as plain starts and stops."""
        tol, budget = self.config.rebalance_tolerance, self.config.move_budget
        p, handoffs = self.placement, self.handoffs
        if budget <= 0 or p.is_balanced(tol, handoffs.pinned):
            return 0, True
        diff, moves = p.rebalance(tol, budget, pinned=handoffs.pinned)
        cost = p.view.tasks
        for m in moves:
            handoffs.start(m.task, m.source)
            diff.workers[m.source].remove.pop(m.task, None)  # the old owner stops it later
            self._feed.add("move", task=m.task, to=m.target, source=m.source,
                           reason="rebalance", cost=cost.get(m.task))
        self._changes.diff.merge(diff)
        self._counters.tasks_moved += diff.moved()
        self._counters.rebalance_moves += len(moves)
        return len(moves), p.is_balanced(tol, handoffs.pinned)

    def outlook(self) -> tuple[bool, int, int]:
        """(balanced, moves a full convergence still plans, zone-degraded tasks)."""
        p, tol = self.placement, self.config.rebalance_tolerance
        look = p.outlook(tol, self.handoffs.pinned)
        return look.balanced, look.planned_moves, p.view.zone_degraded()
