"""Task assignment: from placement changes to one instruction set per affected worker.

`Assigner` holds the supervisor's state and everything that changes the assignment — a task
list arriving (the first one rebuilds from what workers report, with reset), pending replicas
being placed, rebalancing, failing tasks moving, hand-offs completing, reconciliation of a
worker whose reports disagree with what it should run. Changes gather in one `Diff` per
event; `_flush` turns the diff into instruction sets, at most one per worker per event.
`SupervisorCore` (core.py) adds the events and the lifecycle on top.
"""

from __future__ import annotations

from typing import Any

from corral.common import logs
from corral.common.diff import Diff
from corral.common.placement import Mode, Placement
from corral.common.protocol import Instructions, WorkerState
from corral.common.reconcile import resolve_claims
from corral.common.timerwheel import TimerWheel

from .config import SupervisorConfig
from .counters import Counters
from .events import QUERY, QUERY_RETRY, REBALANCE, Action, Send, TasksFetched
from .handoffs import Handoffs
from .records import Phase, WorkerRecord


class Assigner:
    def __init__(self, config: SupervisorConfig, epoch: int, now: float, log: Any) -> None:
        self.config = config
        self.epoch = epoch
        self.phase = Phase.WARMUP
        self.started_at = now
        self.log = log if log is not None else logs.get("supervisor")
        self.placement = Placement(config.replicas, config.strategy)
        self.workers: dict[str, WorkerRecord] = {}
        self.active_workers = 0
        self.handoffs = Handoffs()
        self.task_list: dict[str, float] | None = None
        self.counters = Counters()
        self.wheel: TimerWheel[Any] = TimerWheel(config.tick, now)
        self._base_wait = config.report_interval
        self._silence = config.lease + config.lease_margin
        self._renew = config.renew_every
        self._diff = Diff()  # what the current event changes, per worker
        self._resets: dict[str, None] = {}  # workers that get their whole desired set
        self._out: list[Action] = []
        self._content_sent = False  # once true, the epoch may no longer move
        # HA: only the leader sends; a standby keeps its registry warm from the reports.
        # Without --ha a supervisor is always the leader.
        self.leader = True
        self.leader_until = float("inf")
        self.warm = False  # the warm-up has run its course (a promoted standby skips it)

    # -- building and sending instruction sets -------------------------------------------------

    def _send(self, rec: WorkerRecord, now: float, *, reset: bool = False,
              add: tuple[str, ...] = (), remove: tuple[str, ...] = ()) -> None:
        """One instruction set to ``rec`` (a lease renewal when empty). The first set carrying
        tasks that a worker incarnation gets from this epoch is always a reset."""
        if not self.leader:
            return
        if self.phase is Phase.RUNNING and (reset or ((add or remove) and not rec.got_reset)):
            reset = True
            want = dict(self.placement.tasks_of(rec.id))
            want.update(self.handoffs.releasing(rec.id))
            add, remove = tuple(want), ()
            rec.got_reset = True
        elif self.phase is not Phase.RUNNING:
            reset, add, remove = False, (), ()
        if add and self.handoffs:
            for task in add:
                if self.handoffs.old_owner(task) == rec.id:
                    self.handoffs.release(task)  # it came back to its old owner: no hand-off
                else:
                    self.handoffs.expect(task, rec.id)
        rec.out_seq += 1
        msg = Instructions(self.epoch, rec.out_seq, rec.incarnation, self.config.lease,
                           rec.last_seq, rec.seen_sent_at, reset, add, remove)
        if reset or add or remove:
            rec.digest = None  # what it should run changed: judge its next report in full
            rec.expect_seq, rec.expect_since, rec.mismatch_since = rec.out_seq, now, None
            rec.expect = (self.epoch, rec.out_seq)
            self._content_sent = True
        rec.last_sent_at = now
        self._out.append(Send(rec.identity, msg))

    def _flush(self, now: float) -> list[Action]:
        """Everything this event decided, as actions: one instruction set per worker."""
        if self._diff or self._resets:
            self.counters.assignment_events += 1
            changed = self._diff.compact()
            for w in {**self._resets, **dict.fromkeys(changed)}:
                rec = self.workers.get(w)
                if rec is None or not rec.active:
                    continue
                if w in self._resets:
                    self._send(rec, now, reset=True)
                else:
                    d = changed[w]
                    self._send(rec, now, add=tuple(d.add), remove=tuple(d.remove))
            self._diff = Diff()
            self._resets = {}
        out, self._out = self._out, []
        return out

    # -- placement events ----------------------------------------------------------------------

    def _bind(self, rec: WorkerRecord) -> None:
        """Point the record at placement's live desired set (after the worker is added)."""
        rec.desired = self.placement.tasks_of(rec.id)

    def _mode(self, rec: WorkerRecord) -> Mode:
        if rec.drained or rec.status.state is not WorkerState.READY:
            return Mode.HOLD
        return Mode.ELIGIBLE

    def _place(self) -> None:
        diff = self.placement.place()
        if diff:
            self.counters.tasks_moved += diff.moved()
            self._diff.merge(diff)

    def _want_rebalance(self, now: float) -> None:
        """Joins and capacity changes come in bursts (a fleet starting): one rebalance event a
        report interval later covers them all, instead of an O(fleet) pass per report."""
        if REBALANCE not in self.wheel:
            self.wheel.schedule_timeout(REBALANCE, now + self.config.report_interval)

    def _rebalance(self, now: float) -> None:
        """Move tasks toward under-used workers, make-before-break, at most the move budget per
        event; if the budget ran out, continue one report interval later."""
        budget = self.config.move_budget
        if self.phase is not Phase.RUNNING or budget <= 0:
            return
        p = self.placement
        _, moves = p.rebalance(self.config.rebalance_tolerance, budget,
                               pinned=self.handoffs.tasks)
        started = 0
        for m in moves:
            if m.task in self.handoffs:
                # A second replica of a task moved in the same pass: undo it (the task goes
                # back to its source), or the task would have replicas + 2 owners until both
                # hand-offs end. The next pass may move it once this hand-off is over.
                p.unassign(m.task, m.target)
                p.assign(m.task, m.source)
                continue
            self.handoffs.start(m.task, m.source)
            self._diff.add(m.target, m.task)
            started += 1
        self.counters.tasks_moved += started
        if len(moves) >= budget or started < len(moves):
            self.wheel.schedule_timeout(REBALANCE, now + self.config.report_interval)

    def _drain(self, rec: WorkerRecord) -> None:
        """Make-before-break: new owners first; the worker stops a task once one reports it."""
        p = self.placement
        for task in list(p.tasks_of(rec.id)):
            p.unassign(task, rec.id)
            self.handoffs.start(task, rec.id)
        self._place()

    def _fits(self, rec: WorkerRecord, task: str) -> bool:
        """Could ``rec`` adopt ``task`` (short of replicas, room for it, not excluded)?"""
        p = self.placement
        cost = p.tasks.get(task)
        if cost is None or len(p.owners(task)) >= p.replicas or rec.id in p.owners(task):
            return False
        if not p.has_worker(rec.id) or rec.id in p.excluded_from(task):
            return False
        return p.load(rec.id) + cost <= p.max_load(rec.id) + 1e-9

    def _confirm_handoffs(self, rec: WorkerRecord, waiting: dict[str, None]) -> None:
        """``rec`` reports tasks it was handed: their old owners may stop them now."""
        running, owners = rec.status.running, self.placement.owners
        for task in [t for t in waiting if t in running and rec.id in owners(t)]:
            del waiting[task]
            old = self.handoffs.release(task)
            if old is not None and old != rec.id and old not in owners(task):
                orec = self.workers.get(old)
                if orec is not None and orec.active:
                    self._diff.remove(old, task)

    def _check_failures(self, rec: WorkerRecord, now: float) -> None:
        """A task failing --max-failures times in a row on a worker moves elsewhere and stays
        off that worker for --failure-cooldown."""
        if self.phase is not Phase.RUNNING:
            return
        moved = False
        for task, n in rec.status.failures.items():
            if n >= self.config.max_failures and rec.id in self.placement.owners(task):
                self.placement.exclude(task, rec.id)
                self._diff.remove(rec.id, task)
                self.wheel.schedule_timeout(("include", task, rec.id),
                                            now + self.config.failure_cooldown)
                self.counters.failures_moved += 1
                self.log.warning("task keeps failing; moving it", task=task, worker=rec.id,
                                 failures=n)
                moved = True
        if moved:
            self._place()

    # -- reconciliation ------------------------------------------------------------------------

    def _reconcile(self, rec: WorkerRecord, now: float) -> None:
        """Compare what ``rec`` reports running with what it should run; correct a difference
        that outlives one report interval, or resend everything if a set was lost."""
        st = rec.status
        if rec.expect_seq:
            epoch, seq = st.applied
            if epoch < self.epoch or (epoch == self.epoch and seq < rec.expect_seq):
                if now - rec.expect_since >= rec.resend_wait:
                    # Lost, or the report is older than our set (a backlog here): a reset
                    # converges either way. Back off, so an overloaded supervisor, whose every
                    # report is late, does not answer each one with yet another set.
                    self.counters.resends += 1
                    rec.resend_wait = min(rec.resend_wait * 2, 16 * self.config.report_interval)
                    self._resets[rec.id] = None
                return
            rec.resend_wait = self.config.report_interval
        desired = self.placement.tasks_of(rec.id)
        assert rec.desired is desired, f"{rec.id}: stale desired set"  # see _bind
        releasing = self.handoffs.releasing(rec.id)
        running = st.running
        if releasing:
            if running.keys() == desired.keys() | releasing.keys():
                rec.mismatch_since = None
                return
        elif running.keys() == desired.keys():
            rec.mismatch_since = None
            return
        if rec.mismatch_since is None:
            rec.mismatch_since = now
            return
        if now - rec.mismatch_since < self.config.report_interval:
            return
        # Tasks it runs that are short of replicas are adopted rather than stopped.
        if st.state is not WorkerState.LAME_DUCK and not rec.drained:
            for task in running:
                if task not in desired and task not in releasing and self._fits(rec, task):
                    self.placement.assign(task, rec.id)
        self.counters.reconciliations += 1
        for task in desired:
            if task not in running:
                self._diff.add(rec.id, task)
        for task in running:
            if task not in desired and task not in releasing:
                self._diff.remove(rec.id, task)
        rec.mismatch_since = None

    # -- task lists ----------------------------------------------------------------------------

    def _on_tasks(self, ev: TasksFetched, now: float) -> None:
        self.counters.task_queries += 1
        tasks = ev.tasks
        if tasks is None or (not tasks and not self.config.allow_empty):
            self.counters.source_errors += 1
            if tasks is None:
                self.log.error("task query failed; keeping the last good list", error=ev.error)
            else:
                self.log.error("task source returned no tasks; keeping the last list "
                               "(--allow-empty lets an empty list remove every task)")
            if self.phase is Phase.QUERYING:
                self.wheel.schedule_timeout(QUERY_RETRY, now + self.config.query_retry)
            return
        if self.phase is Phase.QUERYING:
            self._rebuild(tasks)
            self.phase = Phase.RUNNING
            interval = self.config.query_interval
            self.wheel.schedule_poll(QUERY, interval, now + interval)
            self.log.info("running", epoch=self.epoch, tasks=len(tasks),
                          workers=self.active_workers,
                          pending=len(self.placement.pending()))
        elif self.phase is Phase.RUNNING:
            self._apply_task_list(tasks)
        self.task_list = dict(tasks)

    def _rebuild(self, tasks: dict[str, float]) -> None:
        """The first task list after warm-up: keep what workers already run (a task claimed by
        more than ``replicas`` workers keeps the highest epoch, then the lowest id), place the
        rest, and send every worker its whole desired set as a reset."""
        p = self.placement
        p.add_tasks(tasks)
        active = sorted((r for r in self.workers.values() if r.active), key=lambda r: r.id)
        claims: dict[str, list[tuple[str, int]]] = {}
        for rec in active:
            p.upsert_worker(rec.id, rec.status.max_load, self._mode(rec))
            self._bind(rec)
            for task, epoch in rec.status.running.items():
                if task in tasks:
                    claims.setdefault(task, []).append((rec.id, epoch))
        kept, surplus = resolve_claims(claims, p.replicas)
        for task, ws in kept.items():
            for w in ws:
                p.assign(task, w)
        if surplus:
            self.log.warning("tasks ran on more workers than replicas; extra copies stop",
                             tasks=len(surplus), copies=sum(len(v) for v in surplus.values()))
        for rec in active:
            p.enforce_capacity(rec.id)
        for rec in active:
            if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
                self._drain(rec)
        self._place()
        for rec in active:
            self._resets[rec.id] = None

    def _apply_task_list(self, tasks: dict[str, float]) -> None:
        p = self.placement
        removed = [t for t in p.tasks if t not in tasks]
        added = {t: c for t, c in tasks.items() if t not in p.tasks}
        if removed:
            self._diff.merge(p.remove_tasks(removed))
            for task in removed:
                old = self.handoffs.release(task)
                if old is not None and old in self.workers:
                    self._diff.remove(old, task)
        if added:
            p.add_tasks(added)
            self._place()
        if added or removed:
            self.log.info("task list changed", added=len(added), removed=len(removed),
                          tasks=len(tasks))
