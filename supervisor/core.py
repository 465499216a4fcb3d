"""The supervisor's state machine: ``handle(event, now) -> actions``. No I/O, no clock reads.

The daemon (`supervisor.daemon`) decodes bytes into events, steps this machine with the
monotonic time, and carries out the actions it returns; component tests step it with a fake
clock. One entry point for everything: `Report` (a worker's status), `TasksFetched` (a task
query ended), `Command` (a control verb that changes state), `RoleChanged` (HA), `PeerGone`
(a send found no connection), `Tick` (time passed: timers fire) and `Continue` (the next
slice of work cut into slices). Code runs only on these.

The core is a composition of parts with one job each, wired here and nowhere else:

* `Lifecycle` — phases, warm-up, epoch, HA role, the leader's deadline;
* `Registry` — worker records, identities and incarnations, timeouts;
* `Intake` — what a report means (the hot path);
* `TaskBook` — the task list; `Assigner` — placement and hand-offs, "what should it run";
  `Failures` — failing tasks move; `Rebalancing` — budgeted passes toward balance;
* `Reconciler` — does a worker run what it should, did it get what was sent;
* `Dispatch` — builds, numbers, tokens and sends instruction sets (only while leading);
* `Hearing` — how many workers this supervisor hears (HA compares it among supervisors);
* `Feed` — the change feed; `Queries` — the read-only views, from the parts' read methods.

Data flows one way: a part returns what it decided, or writes it to the one `Effects` object,
which only the core drains at the event's end (the changes become instruction sets, one per
worker). No part calls back into the core. See docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from corral.common.timers import TimerWheel

from .assigner import SETTLE, Assigner
from .config import SupervisorConfig
from .counters import Counters
from .dispatch import Dispatch
from .effects import Effects
from .events import (
    Action,
    BatchEnd,
    BatchStart,
    Command,
    Continue,
    Event,
    PeerGone,
    RawReport,
    Report,
    RoleChanged,
    Stalled,
    TasksFetched,
    Tick,
)
from .failures import INCLUDE, Failures
from .feed import Feed
from .hearing import HEARD, Hearing
from .intake import Intake
from .lifecycle import DEADLINE_PASSED, Lifecycle, Phase, RoleChange
from .queries import Queries
from .rebalancing import REBALANCE, Rebalancing
from .rebuild import SLICE, Rebuild
from .reconciler import Reconciler
from .records import WorkerRecord
from .registry import FORGET, Registry
from .role import Role
from .starts import Starts
from .taskbook import TaskBook

# Timer keys (a worker's timeout is the registry's own: `LazyTimers`).
WARMUP = ("warmup",)
QUERY = ("query",)
QUERY_RETRY = ("query_retry",)
_NONE: list[Action] = []


class SupervisorCore:
    """Events in, actions out."""

    def __init__(self, config: SupervisorConfig, epoch: int, now: float) -> None:
        self.config = config
        self.counters = counters = Counters()
        self.wheel: TimerWheel[Any] = TimerWheel(config.tick, now)
        self.life = life = Lifecycle(epoch, now, bool(config.ha))
        self.feed = feed = Feed()
        self.effects = effects = Effects()
        self.registry = Registry(self.wheel, counters, config.lease + config.lease_margin,
                                 config.forget_after, now, config.fresh_ids)
        self.book = TaskBook()
        self.assigner = Assigner(config, counters, feed, effects, self.book, self.wheel)
        self.failures = Failures(config, self.wheel, counters, self.assigner, feed, effects)
        self.starts = Starts(config.start_timeout)
        self.reconciler = Reconciler(config, counters, self.assigner, life, effects)
        self.dispatch = Dispatch(config, life, counters, effects, self.book)
        self.rebalancing = Rebalancing(self.wheel, self.assigner, life, feed,
                                       config.report_interval)
        self.intake = Intake(config, counters, life, self.registry, self.assigner,
                             self.failures, self.starts, self.reconciler, self.dispatch,
                             self.rebalancing, feed, effects)
        self.hearing = Hearing(config, self.registry, effects, self.wheel, now)
        self.rebuilding: Rebuild | None = None  # the warm-up's rebuild, while in slices
        self.rebuild_slice = SLICE
        self.queries = Queries(config, life, counters, feed, self.registry, self.assigner,
                               self.book, self.rebalancing, self.starts, self.failures,
                               self.dispatch, self.wheel)
        self._read = self.intake.report
        self.wheel.schedule_timeout(WARMUP, now + config.warmup)
        life.warmup_until = now + config.warmup

    # -- the one entry point ------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Action]:
        if type(event) is RawReport or type(event) is Report:  # the hot path
            if self._read(event, now):
                self._joins_seen(now)
                return self._flush(now)
            return _NONE if self.effects.holding else self.effects.take()
        if type(event) is BatchStart:  # every action waits for `BatchEnd`, in order
            self.effects.hold()
            self.assigner.defer()
            return _NONE
        if type(event) is BatchEnd:
            self.effects.release()
            self.assigner.place_deferred()
            return self._flush(now)
        self.feed.at(now)
        match event:
            case Tick(read_until=read_until):
                # Judged at most half a lease behind: a worker whose renewals come later than
                # that loses its lease anyway, and a supervisor that never catches up must
                # still see deaths.
                judged = now if read_until is None else min(read_until, now)
                self._tick(now, max(judged, now - self.config.lease / 2))
            case Continue():
                self._rebuild_step(now)
            case TasksFetched():
                self._tasks(event, now)
            case Command():
                self._command(event, now)
            case RoleChanged(role=role):
                self._role(role, now)
            case Stalled(seconds=seconds):
                self.registry.stalled(now)
                self.reconciler.stalled(now)
                self.counters.stalls += 1
                self.effects.log("warning", "the supervisor was busy without reading reports; "
                                 "silence and resend waits count from now",
                                 {"busy_s": round(seconds, 3)})
            case PeerGone(identity=identity):
                rec = self.registry.peer_gone(identity, now)
                if rec is not None:
                    self.intake.took_over(rec, now)
            case _:
                raise TypeError(f"not an event: {event!r}")
        return self._flush(now)

    @property
    def busy(self) -> bool:
        """Work is cut into slices (a rebuild): step with `Continue` whenever the reports
        that arrived meanwhile were read."""
        return self.rebuilding is not None

    def next_deadline(self) -> float | None:
        """When the next `Tick` has something to do."""
        due = self.wheel.next_deadline()
        silence = self.registry.next_deadline()
        if silence is not None and (due is None or silence < due):
            due = silence
        until = self.life.leader_until
        if until != float("inf") and self.life.leader:
            return until if due is None else min(due, until)
        return due

    # -- time ---------------------------------------------------------------------------------

    def _tick(self, now: float, read_until: float) -> None:
        if self.life.deadline_passed(now):
            # The election thread may be stuck in a request: the deadline is enforced here,
            # so a leader stops acting before etcd can give the key to anyone else.
            self._role(Role(False, error=DEADLINE_PASSED), now)
        for fired in self.wheel.expire(now):
            key = fired.key
            if key == WARMUP:
                self._end_warmup(now)
            elif key == QUERY:
                self.effects.fetch(reset=False)
            elif key == QUERY_RETRY:
                self.effects.fetch(reset=True)
            elif key == REBALANCE:
                self.rebalancing.run(now)
            elif key == SETTLE:  # the arrivals of a settle window share what was pending
                self.assigner.settled()
                self.rebalancing.want(now)
            elif key == HEARD:
                self.hearing.recount(read_until)
            elif key[0] == INCLUDE:
                if self.life.running:
                    self.failures.cooled(key[1], key[2])
                    self.rebalancing.want(now)
            elif key[0] == FORGET and self.registry.forget(key[1]):
                self.feed.add("forget", worker=key[1])  # a dashboard drops the row at once
        self.registry.prune(now)
        silent = self.registry.expire(now, read_until)
        if silent:
            self._timed_out(silent, now)

    def _timed_out(self, silent: list[WorkerRecord], now: float) -> None:
        """Workers silent past lease + margin: their replicas move, placed once for all of
        them (a rack's worth of workers timing out together is one placement, not one each)."""
        running = self.life.running
        moved = self.assigner.gone([r.id for r in silent]) if running else {}
        for rec in silent:
            self.intake.unsettle(rec)  # its next report is a comeback: read it in full
            self.starts.forget_worker(rec.id)
            tasks, quiet = moved.get(rec.id, 0), round(now - rec.last_received, 3)
            fields = {"worker": rec.id, "tasks": tasks, "silent_s": quiet}
            if rec.held:
                self.effects.log("warning", "worker silent past lease + margin; its tasks "
                                 "move", fields)
                self.feed.add("timeout", worker=rec.id, tasks=tasks, silent_s=quiet)
            else:  # it never held a task: news for nobody (a flood of made-up ids is many)
                self.effects.log("debug", "worker that held no task went silent", fields)
        if running:
            self.rebalancing.want(now)
        for rec in silent:
            if rec.contender is not None:  # a process waiting for this id takes it now
                self.registry.accept_contender(rec, now)
                self.intake.took_over(rec, now)

    def _joins_seen(self, now: float) -> None:
        """--expect-workers: the warm-up ends once that many have reported."""
        expect = self.config.expect_workers
        if expect and self.life.phase is Phase.WARMUP and self.registry.active >= expect:
            self._end_warmup(now)

    def _end_warmup(self, now: float) -> None:
        if self.life.end_warmup():
            self.wheel.cancel(WARMUP)
            self.effects.fetch(reset=True)
            self.effects.log("info", "warm-up over; querying tasks", {
                "workers": self.registry.active,
                "after_s": round(now - self.life.started_at, 3)})

    # -- task lists, commands, roles ----------------------------------------------------------

    def _tasks(self, ev: TasksFetched, now: float) -> None:
        self.counters.task_queries += 1
        life, tasks = self.life, ev.tasks
        if tasks is None or (not tasks and not self.config.allow_empty):
            self.counters.source_errors += 1
            why = (f"task query failed; keeping the last good list: {ev.error}" if tasks is None
                   else "task source returned no tasks; keeping the last list (--allow-empty "
                   "lets an empty list remove every task)")
            self.effects.log("error", why)
            self.book.refuse(ev.error or why, now)
            if life.phase is Phase.QUERYING:
                self.wheel.schedule_timeout(QUERY_RETRY, now + self.config.query_retry)
            return
        self.book.accept()
        if life.phase is Phase.QUERYING:
            if self.rebuilding is not None:  # a newer list (`corralctl query`): start over
                self.assigner.clear()
                self.effects.log("info", "a new task list during the rebuild; starting over",
                                 {"tasks": len(tasks)})
            # Its slices run on `Continue`, the first too: one can take half a second at a
            # million tasks, too long to add to the list's own handling.
            self.rebuilding = Rebuild(self.assigner, tasks, self.registry, self.effects,
                                      self.rebuild_slice)
        elif life.running:
            change = self.assigner.apply(tasks)
            for task in change.removed:  # what is kept per task goes with it
                self.starts.forget_task(task)
            self.dispatch.forget_tasks(change.removed)
            added, removed = len(change.added), len(change.removed)
            respec = len(change.respecified) + len(change.reshaped)
            if added or removed or respec:
                self.effects.log("info", "task list changed", {
                    "added": added, "removed": removed, "respecified": respec,
                    "tasks": len(tasks)})
                self.feed.add("tasks", added=added, removed=removed, respecified=respec,
                              total=len(tasks))
                self.rebalancing.want(now)

    def _rebuild_step(self, now: float) -> None:
        """One slice of the rebuild; once it is done, the supervisor runs."""
        job, life = self.rebuilding, self.life
        if job is None:
            return
        if life.phase is Phase.STOPPING:
            self.rebuilding = None
            return
        done = job.step(now)
        if done:
            self.rebuilding = None
        if not job.assigned or life.running:
            return
        life.start_running()
        interval = self.config.query_interval
        self.wheel.schedule_poll(QUERY, interval, now + interval)
        tasks = len(self.book.entries)
        self.effects.log("info", "running", {
            "epoch": life.epoch, "tasks": tasks, "workers": self.registry.active,
            "pending": self.assigner.view.pending_count(),
            "rebuild_slices": job.slices, "rebuild_stages_s": dict(job.stage_s)})
        self.feed.add("running", tasks=tasks, workers=self.registry.active)
        self.rebalancing.want(now)

    def _command(self, cmd: Command, now: float) -> None:
        """Control verbs that change state (the read-only ones are in views.py). Raises
        LookupError for an unknown worker and ValueError for a bad verb."""
        if cmd.verb in ("drain", "undrain"):
            rec = self.registry.named(cmd.args.get("worker"))
            self.registry.set_drained(rec, cmd.verb == "drain")
            self.intake.unsettle(rec)
            self.effects.log("info", f"worker {cmd.verb}ed by operator", {"worker": rec.id})
            self.feed.add(cmd.verb, worker=rec.id)
            if rec.active and self.life.running:
                self.assigner.update_mode(rec, now)
                self.rebalancing.want(now)
        elif cmd.verb == "forget":
            rec = self.registry.named(cmd.args.get("worker"))
            if rec.active:
                raise ValueError(f"worker {rec.id!r:.80} is active: only a silent worker "
                                 "(inactive) can be forgotten")
            self.registry.forget(rec.id)
            self.effects.log("info", "worker forgotten by operator", {"worker": rec.id})
            self.feed.add("forget", worker=rec.id)
        elif cmd.verb == "query":
            self.effects.fetch(reset=self.life.phase is Phase.QUERYING)
        elif cmd.verb == "shutdown":
            self.life.stop()
            self.effects.stop(str(cmd.args.get("reason", "asked to stop")))
        else:
            raise ValueError(f"not a state-changing verb: {cmd.verb!r}")

    def _role(self, role: Role, now: float) -> None:
        """The election decided: promote (a standby that already heard the workers for a
        whole warm-up queries at once and rebuilds from their reports, so nothing moves or
        restarts), demote (stop sending at once; forget the assignment), or renew."""
        before = self.life.epoch
        change = self.life.on_role(role, now)
        role = self.life.role or role  # as recorded: a leading role past its deadline is not
        if change is RoleChange.PROMOTED:
            # Back in its own epoch (a late keep-alive held the key after its deadline): sets
            # and grants number on, else the workers would drop them as stale.
            same = self.life.epoch == before
            if not same:
                self.dispatch.new_epoch()
            for rec in self.registry:  # sets are numbered afresh in a new epoch
                self.dispatch.start_over(rec, renumber=not same)
                self.reconciler.start_over(rec)
                self.intake.unsettle(rec)
            # Renewals at once to every worker heard: a cut-off leader left their leases short.
            renewed = self.dispatch.renew_all(self.hearing.heard(now), now)
            self.effects.log("info", "leading", {"epoch": self.life.epoch, "renewed": renewed,
                                                 "workers": self.registry.active})
            self.feed.add("role", role="leader", epoch=self.life.epoch)
            if self.life.warm:
                self._end_warmup(now)
        elif change is RoleChange.DEMOTED:
            self.rebuilding = None
            self.assigner.clear()
            self.starts.clear()
            self.failures.clear()
            for key in (QUERY, QUERY_RETRY):
                self.wheel.cancel(key)
            self.rebalancing.stop()
            for rec in self.registry:
                self.intake.unsettle(rec)
            self.effects.log("warning", "no longer the leader; standing by",
                             {"reason": role.error or "not the leader"})
            self.feed.add("role", role="standby", reason=role.error)

    # -- output -------------------------------------------------------------------------------

    def _flush(self, now: float) -> list[Action]:
        """Everything this event decided, as actions: one instruction set per worker."""
        changes = self.effects.changes
        if changes.waiting:
            self.counters.assignment_events += 1
            diff, resets, respec = changes.take()
            changed = diff.compact()
            registry, assigner, send = self.registry, self.assigner, self.dispatch.send
            for w in {**resets, **dict.fromkeys(changed)}:
                rec = registry.get(w)
                if rec is None or not rec.active:
                    continue
                if w in resets:
                    sent = send(rec, now, assigner.desired(w), reset=True, respec=respec)
                else:
                    d = changed[w]
                    sent = send(rec, now, assigner.desired(w), add=d.add, remove=d.remove,
                                respec=respec)
                if sent.content:  # what it should run changed: judge its next report in full
                    self.intake.unsettle(rec)
                    self.reconciler.expect(rec, now)
                    self.life.spoke()
                if sent.adds or sent.stops:
                    assigner.sent(w, sent.adds, sent.stops)
                if sent.adds:
                    self.starts.sent(rec, sent.adds, now)
        return self.effects.take()
