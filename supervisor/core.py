"""The supervisor's state machine: ``handle(event, now) -> actions``. No I/O, no clock reads.

The daemon (`supervisor.daemon`) decodes bytes into events, steps this machine with the
monotonic time, and carries out the actions it returns; component tests step it with a fake
clock. One entry point for everything: `Report` (a worker's status), `TasksFetched` (a task
query ended), `Command` (a control verb that changes state), `RoleChanged` (HA), `PeerGone`
(a send found no connection), and `Tick` (time passed: timers fire). Code runs only on these.

The core is a composition of parts with one job each, wired here and nowhere else:

* `Lifecycle` — phases, warm-up, epoch, HA role, the leader's deadline;
* `Registry` — worker records, identities and incarnations, timeouts;
* `Assigner` — placement and hand-offs in, one diff per event out; "what should it run";
* `Reconciler` — does a worker run what it should, did it get what was sent;
* `Dispatch` — builds, numbers, tokens and sends instruction sets (only while leading);
* `Feed` — the change feed; `Queries` (supervisor/queries.py) — the read-only views.
"""

from __future__ import annotations

from typing import Any

from corral.common.protocol import (
    REFUSE_DUPLICATE_ID,
    REFUSE_UNAUTHORIZED,
    Refusal,
    WorkerState,
    token_epoch,
)
from corral.common.timerwheel import TimerWheel

from .assigner import INCLUDE, Assigner
from .config import SupervisorConfig
from .counters import Counters
from .dispatch import Dispatch
from .events import (
    Action,
    Command,
    Event,
    Fetch,
    Log,
    PeerGone,
    PersistEpoch,
    Report,
    RoleChanged,
    Send,
    Stop,
    TasksFetched,
    Tick,
)
from .feed import Feed
from .ha import Role
from .lifecycle import Lifecycle, Phase, RoleChange
from .queries import Queries
from .reconciler import Reconciler
from .records import WorkerRecord
from .registry import FORGET, Outcome, Registry

# Timer keys: a worker's timeout is keyed by its id (a str); everything else by a tuple.
WARMUP = ("warmup",)
QUERY = ("query",)
QUERY_RETRY = ("query_retry",)
REBALANCE = ("rebalance",)
_NONE: list[Action] = []
_SAME_PROCESS = (Outcome.REVIVED, Outcome.CHANGED, Outcome.UNCHANGED)


class SupervisorCore:
    """Events in, actions out."""

    def __init__(self, config: SupervisorConfig, epoch: int, now: float) -> None:
        self.config = config
        self.counters = Counters()
        self.wheel: TimerWheel[Any] = TimerWheel(config.tick, now)
        self.life = Lifecycle(epoch, now, bool(config.ha))
        self.feed = Feed()
        self._out: list[Action] = []
        self.registry = Registry(self.wheel, self.counters, config.lease + config.lease_margin,
                                 config.forget_after)
        self.assigner = Assigner(config, self.wheel, self.counters, self.feed, self._out)
        self.reconciler = Reconciler(config, self.counters, self.assigner, self.life)
        self.dispatch = Dispatch(config, self.life, self.counters, self._out,
                                 self.assigner.desired, self.assigner.spec)
        self.queries = Queries(self)
        self.balanced = True  # the last rebalance pass found the criterion met
        self._curve = bool(config.authorized_keys)
        self._resend_wait = self.reconciler.first_wait
        self.wheel.schedule_timeout(WARMUP, now + config.warmup)

    # -- the one entry point ------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Action]:
        if type(event) is Report:  # the hot path: one per worker message
            return self._report(event, now)
        self.feed.at(now)
        match event:
            case Tick():
                self._tick(now)
            case TasksFetched():
                self._tasks(event, now)
            case Command():
                self._command(event, now)
            case RoleChanged(role=role):
                self._role(role, now)
            case PeerGone(identity=identity):
                rec = self.registry.peer_gone(identity, now)
                if rec is not None:
                    self._took_over(rec, now)
            case _:
                raise TypeError(f"not an event: {event!r}")
        return self._flush(now)

    def next_deadline(self) -> float | None:
        """When the next `Tick` has something to do."""
        due = self.wheel.next_deadline()
        until = self.life.leader_until
        if until != float("inf") and self.life.leader:
            return until if due is None else min(due, until)
        return due

    # -- reports: the hot path ----------------------------------------------------------------

    def _report(self, ev: Report, now: float) -> list[Action]:
        """Most reports come from a settled worker saying what it said last time. Their
        digest — computed from the report just decoded, which is in the CPU cache — matches
        the one kept on the record, so the report only moves the seq and the clocks. At fleet
        scale the cost of a report is cache misses on per-worker objects, not bytecode: this
        path touches a handful, the full path dozens. ``applied`` is not in the digest: a
        settled worker has applied every set with content (so later ones are renewals), and
        each renewal would otherwise break the fast path for the next report."""
        self.counters.reports += 1
        st = ev.status
        if self._curve and ev.key_name != st.worker:
            return self._unauthorized(ev)
        rec = self.registry.records.get(st.worker)
        if rec is not None:
            running, failures = st.running, st.failures
            digest = hash((
                ev.identity, st.incarnation, st.state, st.max_load, st.serve,
                st.lease_held, tuple(running.items()) if running else None,
                tuple(failures.items()) if failures else None,
            ))
            if digest == rec.digest:
                if st.seq <= rec.last_seq:
                    self.counters.stale_reports += 1
                    return _NONE
                rec.last_seq = st.seq
                rec.seen_sent_at = st.sent_at
                rec.last_received = now
                if now - rec.last_sent_at >= self.dispatch.renew_every:
                    self.dispatch.renew(rec, now)
                    return self._take_out()
                return _NONE
        else:
            digest = None
        self.feed.at(now)
        self._full_report(ev, now, digest)
        return self._flush(now)

    def _full_report(self, ev: Report, now: float, digest: int | None) -> None:
        st = ev.status
        outcome, rec = self.registry.classify(ev.identity, st, now)
        if outcome is Outcome.STALE or outcome is Outcome.IMPOSTOR:
            return
        rec.digest = None
        running = self.life.running
        if outcome is Outcome.REFUSED:
            self._refuse(ev.identity, st.incarnation, REFUSE_DUPLICATE_ID,
                         rec.conflict or "this worker incarnation was refused")
            return
        if outcome is Outcome.WAITING:
            # Is the id's holder still connected? A send to a gone peer comes back as PeerGone.
            if self.registry.probe_due(rec, now, self.config.report_interval / 2):
                self.dispatch.renew(rec, now)
            self.feed.add("contested", worker=rec.id, incarnation=f"{st.incarnation:x}")
            return
        if outcome in _SAME_PROCESS and rec.contender is not None:
            # The live holder spoke while a contender waited: that is a second live process
            # with its id, refused for good.
            identity, inc, why = self.registry.refuse_contender(rec)
            self._out.append(Log("error", "duplicate worker id", {"worker": rec.id,
                                 "refused": f"{inc:x}", "kept": f"{rec.incarnation:x}"}))
            self.feed.add("refused", worker=rec.id, reason=why)
            self._refuse(identity, inc, REFUSE_DUPLICATE_ID, why)
        if outcome is Outcome.JOINED:
            self._joined(rec, now)
        elif outcome is Outcome.RESTARTED:
            self._took_over(rec, now)
        elif outcome is Outcome.REVIVED:
            self.feed.add("revive", worker=rec.id)
            self._out.append(Log("info", "worker is back", {"worker": rec.id,
                                                            "running": len(st.running)}))
            self._notice_epochs(rec)
            self._up(rec, now)
        elif outcome is Outcome.CHANGED and running:
            self.feed.add("state", worker=rec.id, state=str(st.state), max_load=st.max_load)
            self.assigner.update_mode(rec, now)
            self._want_converge(now)
        if not running:
            if self.dispatch.renewal_due(rec, now) and not self.assigner.pending_change:
                self.dispatch.renew(rec, now)
            return
        if st.failures:
            self.assigner.check_failures(rec, now)
        in_flight = bool(self.assigner.handoffs)
        if in_flight and self.assigner.confirm(rec):
            self._want_converge(now)  # tasks pinned by their hand-off may move now
        if (rec.drained or st.state is WorkerState.LAME_DUCK) and rec.desired:
            self.assigner.drain(rec, now)  # tasks that waited for another hand-off to end
        if in_flight or self.reconciler.needed(rec):
            self.reconciler.check(rec, now)
        elif rec.active and digest is not None and not self.assigner.pending_change:
            rec.digest = digest  # settled: the same report next time takes the fast path
        if not self.assigner.pending_change and self.dispatch.renewal_due(rec, now):
            self.dispatch.renew(rec, now)

    def _joined(self, rec: WorkerRecord, now: float) -> None:
        st = rec.status
        rec.resend_wait = self._resend_wait
        self._number_on(rec)
        self._out.append(Log("info", "worker joined", {
            "worker": rec.id, "max_load": st.max_load, "state": str(st.state),
            "running": len(st.running), "zone": st.zone or None}))
        self.feed.add("join", worker=rec.id, max_load=st.max_load, zone=st.zone)
        self._notice_epochs(rec)
        if self.life.phase is Phase.STOPPING:
            return
        self._up(rec, now)
        expect = self.config.expect_workers
        if self.life.phase is Phase.WARMUP and expect and self.registry.active >= expect:
            self._end_warmup(now)

    def _took_over(self, rec: WorkerRecord, now: float) -> None:
        """A new incarnation holds the id now (a restart, or a contender whose rival left)."""
        rec.resend_wait = self._resend_wait
        self._number_on(rec)
        self.wheel.schedule_timeout(rec.id, now + self.config.lease + self.config.lease_margin)
        self._out.append(Log("info", "worker restarted", {
            "worker": rec.id, "incarnation": f"{rec.incarnation:x}"}))
        self.feed.add("restart", worker=rec.id, incarnation=f"{rec.incarnation:x}")
        self._notice_epochs(rec)
        if self.life.running and self.assigner.placement.has_worker(rec.id):
            self.assigner.update_mode(rec, now)  # the new process runs its desired set
            self.assigner.reset(rec.id)
        else:
            self._up(rec, now)

    def _up(self, rec: WorkerRecord, now: float) -> None:
        """A worker (new or back) takes part: admitted while running, renewed otherwise."""
        if self.life.running:
            rec.got_reset = False
            self.assigner.admit(rec, now)
            self._want_converge(now)
        elif self.life.leader:
            self.dispatch.renew(rec, now)  # its lease holds: it keeps running what it runs

    def _number_on(self, rec: WorkerRecord) -> None:
        """A worker process that already applied sets of this epoch (the live one of two
        sharing an id, taken back after the newcomer was refused; or one forgotten and back)
        drops any set numbered at or below what it applied: go on from there."""
        applied = rec.status.applied
        if applied[0] == self.life.epoch:
            rec.out_seq = max(rec.out_seq, applied[1])

    def _notice_epochs(self, rec: WorkerRecord) -> None:
        """A lost state file must not make workers ignore us: before anything of substance
        was said, the epoch rises above any a worker has seen."""
        st = rec.status
        seen = max(st.applied[0], token_epoch(max(st.running.values(), default=0)))
        if seen < self.life.epoch or (seen == self.life.epoch and self.life.content_sent):
            return  # ours (a worker that was away and is back), or older
        epoch = self.life.raise_epoch(seen)
        if epoch is not None:
            self._out.append(PersistEpoch(epoch))
            self._out.append(Log("warning", "epoch raised above what workers have seen",
                                 {"epoch": epoch}))
        elif not self.config.ha:
            self.counters.foreign_epochs += 1
            self._out.append(Log("error", "a worker applied a newer epoch: is another "
                                 "supervisor running?",
                                 {"worker": rec.id, "epoch": seen, "ours": self.life.epoch}))

    def _refuse(self, identity: bytes, incarnation: int, code: str, reason: str) -> None:
        if self.life.leader:
            self._out.append(Send(identity, Refusal(self.life.epoch, incarnation, code, reason)))

    def _unauthorized(self, ev: Report) -> list[Action]:
        """Curve: a report under an id its key does not name is counted and refused."""
        self.counters.unauthorized_reports += 1
        name = ev.key_name
        reason = (f"this worker's key is authorised as {name!r}, not as {ev.status.worker!r}"
                  if name else "this worker's key is not authorised")
        self._refuse(ev.identity, ev.status.incarnation, REFUSE_UNAUTHORIZED, reason)
        return self._take_out()

    # -- time ---------------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        if self.life.deadline_passed(now):
            # The election thread may be stuck in a request: the deadline is enforced here,
            # so a leader stops acting before etcd can give the key to anyone else.
            self._role(Role(False, error="the leader's etcd deadline passed"), now)
        silent: list[WorkerRecord] = []
        for fired in self.wheel.expire(now):
            key = fired.key
            if type(key) is str:
                rec = self.registry.timeout(key, now)
                if rec is not None:
                    silent.append(rec)
            elif key == WARMUP:
                self._end_warmup(now)
            elif key == QUERY:
                self._out.append(Fetch(reset=False))
            elif key == QUERY_RETRY:
                self._out.append(Fetch(reset=True))
            elif key == REBALANCE:
                self._converge(now)
            elif key[0] == INCLUDE:
                if self.life.running:
                    self.assigner.include(key[1], key[2])
                    self._want_converge(now)
            elif key[0] == FORGET:
                self.registry.forget(key[1])
        if silent:
            self._timed_out(silent, now)

    def _timed_out(self, silent: list[WorkerRecord], now: float) -> None:
        """Workers silent past lease + margin: their replicas move, placed once for all of
        them (a rack's worth of workers timing out together is one placement, not one each)."""
        running = self.life.running
        moved = self.assigner.gone([r.id for r in silent]) if running else {}
        for rec in silent:
            tasks, quiet = moved.get(rec.id, 0), round(now - rec.last_received, 3)
            self._out.append(Log("warning", "worker silent past lease + margin; its tasks "
                                 "move", {"worker": rec.id, "tasks": tasks, "silent_s": quiet}))
            self.feed.add("timeout", worker=rec.id, tasks=tasks, silent_s=quiet)
        if running:
            self._want_converge(now)
        for rec in silent:
            if rec.contender is not None:  # a process waiting for this id takes it now
                self.registry.accept_contender(rec, now)
                self._took_over(rec, now)

    def _end_warmup(self, now: float) -> None:
        if self.life.end_warmup():
            self.wheel.cancel(WARMUP)
            self._out.append(Fetch(reset=True))
            self._out.append(Log("info", "warm-up over; querying tasks", {
                "workers": self.registry.active,
                "after_s": round(now - self.life.started_at, 3)}))

    # -- convergence --------------------------------------------------------------------------

    def _want_converge(self, now: float) -> None:
        """Something may have unbalanced the placement: passes follow until it is balanced.
        Events come in bursts (a fleet starting), so the first pass waits a report interval
        and covers them all, instead of an O(fleet) pass per report."""
        self.balanced = False
        if REBALANCE not in self.wheel:
            self.wheel.schedule_timeout(REBALANCE, now + self.config.report_interval)

    def _converge(self, now: float) -> None:
        if not self.life.running:
            return
        started, balanced = self.assigner.rebalance()
        if started:
            self.feed.add("rebalance", moves=started)
        # Passes go on until one finds the criterion met. (Tasks pinned by a hand-off could
        # not move: when a hand-off ends, the core asks for another pass.)
        if not balanced or started:
            self.wheel.schedule_timeout(REBALANCE, now + self.config.report_interval)
        else:
            self.balanced = True

    # -- task lists, commands, roles ----------------------------------------------------------

    def _tasks(self, ev: TasksFetched, now: float) -> None:
        self.counters.task_queries += 1
        life, tasks = self.life, ev.tasks
        if tasks is None or (not tasks and not self.config.allow_empty):
            self.counters.source_errors += 1
            why = (f"task query failed; keeping the last good list: {ev.error}" if tasks is None
                   else "task source returned no tasks; keeping the last list (--allow-empty "
                   "lets an empty list remove every task)")
            self._out.append(Log("error", why))
            if life.phase is Phase.QUERYING:
                self.wheel.schedule_timeout(QUERY_RETRY, now + self.config.query_retry)
            return
        if life.phase is Phase.QUERYING:
            active = sorted((r for r in self.registry if r.active), key=lambda r: r.id)
            self.assigner.rebuild(tasks, active, now)
            life.start_running()
            interval = self.config.query_interval
            self.wheel.schedule_poll(QUERY, interval, now + interval)
            self._out.append(Log("info", "running", {
                "epoch": life.epoch, "tasks": len(tasks), "workers": self.registry.active,
                "pending": len(self.assigner.placement.pending())}))
            self.feed.add("running", tasks=len(tasks), workers=self.registry.active)
            self._want_converge(now)
        elif life.running:
            added, removed, respec = self.assigner.apply(tasks)
            if added or removed or respec:
                self._out.append(Log("info", "task list changed", {
                    "added": added, "removed": removed, "respecified": respec,
                    "tasks": len(tasks)}))
                self.feed.add("tasks", added=added, removed=removed, respecified=respec,
                              total=len(tasks))
                self._want_converge(now)

    def _command(self, cmd: Command, now: float) -> None:
        """Control verbs that change state (the read-only ones are in views.py). Raises
        LookupError for an unknown worker and ValueError for a bad verb."""
        if cmd.verb in ("drain", "undrain"):
            worker = cmd.args.get("worker")
            rec = self.registry.get(worker) if isinstance(worker, str) else None
            if rec is None:
                raise LookupError(f"no worker {worker!r}")
            rec.drained = cmd.verb == "drain"
            rec.digest = None
            self._out.append(Log("info", f"worker {cmd.verb}ed by operator", {"worker": rec.id}))
            self.feed.add(cmd.verb, worker=rec.id)
            if rec.active and self.life.running:
                self.assigner.update_mode(rec, now)
                self._want_converge(now)
        elif cmd.verb == "query":
            self._out.append(Fetch(reset=self.life.phase is Phase.QUERYING))
        elif cmd.verb == "shutdown":
            self.life.stop()
            self._out.append(Stop(str(cmd.args.get("reason", "asked to stop"))))
        else:
            raise ValueError(f"not a state-changing verb: {cmd.verb!r}")

    def _role(self, role: Role, now: float) -> None:
        """The election decided: promote (a standby that already heard the workers for a
        whole warm-up queries at once and rebuilds from their reports, so nothing moves or
        restarts), demote (stop sending at once; forget the assignment), or renew."""
        change = self.life.on_role(role)
        if change is RoleChange.PROMOTED:
            self.registry.reset_numbering()
            self.dispatch.new_epoch()
            self._out.append(Log("info", "leading", {"epoch": self.life.epoch,
                                                     "workers": self.registry.active}))
            self.feed.add("role", role="leader", epoch=self.life.epoch)
            if self.life.warm:
                self._end_warmup(now)
        elif change is RoleChange.DEMOTED:
            self.assigner.clear()
            for key in (QUERY, QUERY_RETRY, REBALANCE):
                self.wheel.cancel(key)
            for rec in self.registry:
                rec.desired, rec.digest = {}, None
            self._out.append(Log("warning", "no longer the leader; standing by",
                                 {"reason": role.error or "not the leader"}))
            self.feed.add("role", role="standby", reason=role.error)

    # -- output -------------------------------------------------------------------------------

    def _flush(self, now: float) -> list[Action]:
        """Everything this event decided, as actions: one instruction set per worker."""
        assigner = self.assigner
        if assigner.pending_change:
            self.counters.assignment_events += 1
            diff, resets, respec = assigner.take()
            changed = diff.compact()
            registry, send = self.registry, self.dispatch.send
            for w in {**resets, **dict.fromkeys(changed)}:
                rec = registry.get(w)
                if rec is None or not rec.active:
                    continue
                if w in resets:
                    added = send(rec, now, reset=True, respec=respec)
                else:
                    d = changed[w]
                    added = send(rec, now, add=d.add, remove=d.remove, respec=respec)
                if added:
                    assigner.sent(w, added)
        return self._take_out()

    def _take_out(self) -> list[Action]:
        if not self._out:
            return _NONE
        out = self._out.copy()
        self._out.clear()
        return out
