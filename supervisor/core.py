"""The supervisor's state machine: ``handle(event, now) -> actions``. No I/O, no clock reads.

The daemon's loop (`supervisor.daemon`) decodes bytes into events, steps this machine with the
monotonic time, and carries out the actions it returns (send a message, query the task source,
persist the epoch, stop). Component tests step it with a fake clock.

Events: `Report` (a worker's status), `TasksFetched` (a task query finished), `Command` (a
control verb that changes state), and the passage of time (`expire`). Code runs only on these:
nothing polls workers. Lifecycle phases are in `records.Phase`.
"""

from __future__ import annotations

from typing import Any

from corral.common.placement import Mode
from corral.common.protocol import REFUSE_DUPLICATE_ID, Refusal, Status, WorkerState, token_epoch

from .config import SupervisorConfig
from .events import (
    _NONE,
    QUERY,
    QUERY_RETRY,
    REBALANCE,
    WARMUP,
    Action,
    Command,
    Fetch,
    PersistEpoch,
    Report,
    RoleChanged,
    Send,
    Stop,
    TasksFetched,
)
from .leadership import Leadership
from .records import Phase, WorkerRecord


class SupervisorCore(Leadership):
    """Events in, actions out. The state it shares with `Assigner` is set up there."""

    def __init__(
        self, config: SupervisorConfig, epoch: int, now: float, log: Any = None
    ) -> None:
        super().__init__(config, epoch, now, log)
        self.wheel.schedule_timeout(WARMUP, now + config.warmup)
        if config.ha:
            self.leader, self.epoch = False, 0  # until the election says otherwise

    # -- entry points ---------------------------------------------------------------------------

    def handle(
        self, event: Report | TasksFetched | Command | RoleChanged, now: float
    ) -> list[Action]:
        if type(event) is Report:
            self.counters.reports += 1
            return self.on_report(event.identity, event.status, now)
        if type(event) is TasksFetched:
            self._on_tasks(event, now)
        elif type(event) is RoleChanged:
            self._on_role(event.role, now)
        elif type(event) is Command:
            self._on_command(event, now)
        else:
            raise TypeError(f"not an event: {event!r}")
        return self._flush(now)

    def next_deadline(self) -> float | None:
        return self.wheel.next_deadline()

    def expire(self, now: float) -> list[Action]:
        for fired in self.wheel.expire(now):
            key = fired.key
            if type(key) is str:
                self._timeout(key, now)
            elif key == WARMUP:
                self._end_warmup(now)
            elif key == QUERY:
                self._out.append(Fetch(reset=False))
            elif key == QUERY_RETRY:
                self._out.append(Fetch(reset=True))
            elif key == REBALANCE:
                self._rebalance(now)
            elif key[0] == "include":
                self.placement.include(key[1], key[2])
                self._place()
            elif key[0] == "forget":
                rec = self.workers.get(key[1])
                if rec is not None and not rec.active:
                    del self.workers[key[1]]
        return self._flush(now)

    # -- reports: the hot path ------------------------------------------------------------------

    def on_report(self, identity: bytes, st: Status, now: float) -> list[Action]:
        """One worker report: the hot path (the daemon counts reports per batch).

        Most reports come from a settled worker saying what it said last time. Their digest —
        computed from the report just decoded, which is in the CPU cache — matches the one kept
        on the record, so the report only moves the seq and the clocks. At fleet scale the cost
        of a report is cache misses on per-worker objects, not bytecode: this path touches a
        handful, the full path (and replacing the stored status) dozens.
        """
        rec = self.workers.get(st.worker)
        if rec is None:
            self._join(identity, st, now)
            return self._flush(now)
        running, failures = st.running, st.failures
        digest = hash((
            identity, st.incarnation, st.state, st.max_load, st.applied, st.serve, st.lease_held,
            tuple(running.items()) if running else None,
            tuple(failures.items()) if failures else None,
        ))
        if digest == rec.digest:
            if st.seq <= rec.last_seq:
                self.counters.stale_reports += 1
                return _NONE
            rec.last_seq = st.seq
            rec.seen_sent_at = st.sent_at
            rec.last_received = now
            if now - rec.last_sent_at >= self._renew:
                self._send(rec, now)
                out, self._out = self._out, []
                return out
            return _NONE
        rec.digest = None
        if st.incarnation != rec.incarnation:
            self._other_incarnation(rec, identity, st, now)
            return self._flush(now)
        if st.seq <= rec.last_seq:
            self.counters.stale_reports += 1
            return _NONE
        if identity != rec.identity:
            # Same id and incarnation from another connection: someone else's report.
            self.counters.impostor_reports += 1
            return _NONE
        prev = rec.status
        rec.status = st
        rec.last_seq = st.seq
        rec.seen_sent_at = st.sent_at
        # The timeout is re-armed lazily: it fires at the old deadline, sees this later report
        # and moves itself to last_received + lease + margin. Same deadline, no timer work here.
        rec.last_received = now
        if not rec.active:
            self._revive(rec, now)
        elif st.state is not prev.state or st.max_load != prev.max_load:
            self._worker_changed(rec, prev, now)
        if st.failures:
            self._check_failures(rec, now)
        if self.phase is Phase.RUNNING:
            in_flight = self.handoffs.tasks
            if in_flight:
                waiting = self.handoffs.awaiting(rec.id)
                if waiting:
                    self._confirm_handoffs(rec, waiting)
            # The usual report needs no work: everything sent was applied and it runs exactly
            # what it should. Anything else takes the full reconciliation.
            if (
                st.applied < rec.expect
                or st.running.keys() != rec.desired.keys()
                or rec.mismatch_since is not None
                or rec.resend_wait != self._base_wait
                or in_flight
            ):
                self._reconcile(rec, now)
            elif rec.active and not self._diff.workers and not self._resets:
                rec.digest = digest  # settled: the same report next time takes the fast path
        if self._diff.workers or self._out or self._resets:  # cheap: no per-worker scan
            return self._flush(now)
        if now - rec.last_sent_at >= self._renew:
            self._send(rec, now)
            out, self._out = self._out, []
            return out
        return _NONE

    def _join(self, identity: bytes, st: Status, now: float) -> None:
        if self.phase is Phase.STOPPING:
            return
        rec = WorkerRecord(st, identity, now)
        rec.resend_wait = self.config.report_interval
        self._number_on(rec, st)
        self.workers[rec.id] = rec
        self.active_workers += 1
        self.wheel.schedule_timeout(rec.id, now + self._silence)
        self.counters.joins += 1
        self.log.info("worker joined", worker=rec.id, max_load=st.max_load, state=str(st.state),
                      running=len(st.running))
        self._notice_epochs(st)
        if self.phase is Phase.RUNNING:
            self._admit(rec, now)
        else:
            self._send(rec, now)  # renew its lease: it keeps running what it runs
            expect = self.config.expect_workers
            if self.phase is Phase.WARMUP and expect and self.active_workers >= expect:
                self._end_warmup(now)

    def _other_incarnation(
        self, rec: WorkerRecord, identity: bytes, st: Status, now: float
    ) -> None:
        inc = st.incarnation
        if inc in rec.refused:
            self.counters.refused_reports += 1
            self._refuse(identity, inc, rec.conflict or "refused")
            return
        if inc == rec.prev_incarnation and rec.active:
            # The incarnation this one replaced speaks again. One late report is a straggler
            # from a dying process; two mean two live processes share the id.
            rec.prev_reports += 1
            if rec.prev_reports < 2:
                self.counters.stale_reports += 1
                return
            newer = rec.incarnation
            rec.refused[newer] = None
            rec.conflict = (
                f"two live workers use id {rec.id!r}: incarnation {newer:x} started while "
                f"{inc:x} was running and was refused"
            )
            self.log.error("duplicate worker id", worker=rec.id, refused=f"{newer:x}",
                           kept=f"{inc:x}")
            self.counters.duplicate_ids += 1
            self._refuse(rec.identity, newer, rec.conflict)
            rec.prev_incarnation = 0
        else:
            rec.prev_incarnation, rec.prev_reports = rec.incarnation, 0
            rec.takeover_at = now
            self.counters.restarts += 1
            self.log.info("worker restarted", worker=rec.id, incarnation=f"{inc:x}")
        rec.new_incarnation(st, identity)
        rec.resend_wait = self.config.report_interval
        self._number_on(rec, st)
        rec.last_received = now
        self.wheel.schedule_timeout(rec.id, now + self._silence)
        if not rec.active:
            self._revive(rec, now)
            return
        self._notice_epochs(st)
        if self.phase is Phase.RUNNING:
            self._update_mode(rec, now)
            self._send(rec, now, reset=True)  # the new process runs its desired set
        else:
            self._send(rec, now)

    def _number_on(self, rec: WorkerRecord, st: Status) -> None:
        """A worker process that already applied sets of this epoch (the live one of two
        sharing an id, taken back after the newcomer was refused; or one forgotten and back)
        drops any set numbered at or below what it applied: go on from there."""
        if st.applied[0] == self.epoch:
            rec.out_seq = max(rec.out_seq, st.applied[1])

    def _refuse(self, identity: bytes, incarnation: int, reason: str) -> None:
        self._out.append(Send(identity, Refusal(self.epoch, incarnation, REFUSE_DUPLICATE_ID,
                                                reason)))

    def _notice_epochs(self, st: Status) -> None:
        """Before this supervisor has said anything of substance, it takes an epoch above any
        a worker has seen — a lost state file must not make workers ignore it."""
        seen = max(st.applied[0], token_epoch(max(st.running.values(), default=0)))
        if seen < self.epoch or self.config.ha:  # with HA the epoch is etcd's fencing token
            return
        if self._content_sent:
            self.counters.foreign_epochs += 1
            self.log.error("a worker applied a newer epoch: is another supervisor running?",
                           worker=st.worker, epoch=seen, ours=self.epoch)
            return
        self.epoch = seen + 1
        self._out.append(PersistEpoch(self.epoch))
        self.log.warning("epoch raised above what workers have seen", epoch=self.epoch)

    # -- worker lifecycle ----------------------------------------------------------------------

    def _admit(self, rec: WorkerRecord, now: float) -> None:
        """A worker joins (or comes back) while running: adopt what it runs that is short of
        replicas, place what is pending, rebalance toward it, and send it a reset."""
        p = self.placement
        self._diff.merge(p.upsert_worker(rec.id, rec.status.max_load, self._mode(rec)))
        self._bind(rec)
        if rec.status.state is not WorkerState.LAME_DUCK:
            for task in rec.status.running:
                if self._fits(rec, task):
                    p.assign(task, rec.id)
        self._place()
        if self._mode(rec) is Mode.ELIGIBLE:
            self._want_rebalance(now)
        if rec.status.state is WorkerState.LAME_DUCK:
            self._drain(rec)
        self._send(rec, now, reset=True)

    def _revive(self, rec: WorkerRecord, now: float) -> None:
        rec.active = True
        self.wheel.schedule_timeout(rec.id, now + self._silence)
        self.active_workers += 1
        self.wheel.cancel(("forget", rec.id))
        self.counters.revivals += 1
        self.log.info("worker is back", worker=rec.id, running=len(rec.status.running))
        if self.phase is Phase.RUNNING:
            rec.got_reset = False
            self._admit(rec, now)
        else:
            self._send(rec, now)

    def _worker_changed(self, rec: WorkerRecord, prev: Status, now: float) -> None:
        st = rec.status
        if self.phase is not Phase.RUNNING:
            return
        if st.state is WorkerState.LAME_DUCK and prev.state is not WorkerState.LAME_DUCK:
            self.log.info("worker is draining (lame duck)", worker=rec.id,
                          tasks=len(self.placement.tasks_of(rec.id)))
        self._update_mode(rec, now)

    def _update_mode(self, rec: WorkerRecord, now: float) -> None:
        p = self.placement
        if not p.has_worker(rec.id):
            return
        was = p.mode(rec.id), p.max_load(rec.id)
        mode = self._mode(rec)
        self._diff.merge(p.upsert_worker(rec.id, rec.status.max_load, mode))
        if rec.drained or rec.status.state is WorkerState.LAME_DUCK:
            self._drain(rec)
        else:
            self._place()
        if mode is Mode.ELIGIBLE and (was[0] is not Mode.ELIGIBLE or rec.status.max_load > was[1]):
            self._want_rebalance(now)

    def _timeout(self, worker: str, now: float) -> None:
        rec = self.workers.get(worker)
        if rec is None or not rec.active:
            return
        due = rec.last_received + self._silence
        if now < due:  # it reported since this was armed: re-arm from its last report
            self.wheel.schedule_timeout(worker, due)
            return
        rec.active = False
        rec.digest = None
        self.active_workers -= 1
        self.counters.lease_expiries += 1
        tasks = len(self.placement.tasks_of(worker))
        self.handoffs.forget_worker(worker)
        self.placement.remove_worker(worker)
        self._place()
        self._diff.workers.pop(worker, None)
        self.wheel.schedule_timeout(("forget", worker), now + self.config.forget_after)
        self.log.warning("worker silent past lease + margin; its tasks move", worker=worker,
                         tasks=tasks, silent_s=round(now - rec.last_received, 3))

    # -- lifecycle and commands ----------------------------------------------------------------

    def _end_warmup(self, now: float) -> None:
        self.warm = True
        if self.phase is not Phase.WARMUP or not self.leader:
            return
        self.phase = Phase.QUERYING
        self.wheel.cancel(WARMUP)
        self._out.append(Fetch(reset=True))
        self.log.info("warm-up over; querying tasks", workers=self.active_workers,
                      after_s=round(now - self.started_at, 3))

    def _on_command(self, cmd: Command, now: float) -> None:
        """Control verbs that change state (the read-only ones are in views.py). Raises
        LookupError for an unknown worker and ValueError for a bad verb."""
        if cmd.verb in ("drain", "undrain"):
            worker = cmd.args.get("worker")
            rec = self.workers.get(worker) if isinstance(worker, str) else None
            if rec is None:
                raise LookupError(f"no worker {worker!r}")
            rec.drained = cmd.verb == "drain"
            rec.digest = None
            self.log.info(f"worker {cmd.verb}ed by operator", worker=rec.id)
            if rec.active and self.phase is Phase.RUNNING:
                self._update_mode(rec, now)
        elif cmd.verb == "query":
            self._out.append(Fetch(reset=self.phase is Phase.QUERYING))
        elif cmd.verb == "shutdown":
            self.phase = Phase.STOPPING
            self._out.append(Stop(str(cmd.args.get("reason", "asked to stop"))))
        else:
            raise ValueError(f"not a state-changing verb: {cmd.verb!r}")
