"""The worker state machine: pure. ``handle(event, now) -> actions``; time is a parameter, and
there are no sockets, threads or clock reads in here.

Worker phases (reported as their `WorkerState`; stopping and exited as lame_duck)::

    starting -> ready       HandlerReady, or ``ready_after`` seconds passed
    starting -> lame_duck   first StopRequested before it was ever ready
    ready    -> lame_duck   first StopRequested: applies removes, starts nothing new
    lame_duck -> stopping   it holds no task any more (exit 0), ``drain_timeout`` passed (0),
                            or a second StopRequested (0)
    any      -> stopping    a Refusal for this incarnation (exit 3)
    stopping -> exited      every task has stopped: one last report, then Exit(code)
    starting|ready|lame_duck -> handing_over -> exited   HandOverRequested: a last report,
                            HandOver (the keeper keeps the tasks for the next agent), Exit(0)

`Adopted` tasks (left with the keeper by a previous agent) run, under their grants and lease.
Tasks and their lifecycles are `corral.worker.tasks.TaskTable`'s; the machine decides whether
they may start (phase, lease). What a set asks (remove wins over add, a reset stops the rest,
the tokens) is read by `corral.worker.sets`, the one reading the worker's stand-ins in tests
and benchmarks share. A set that comes in ``parts`` is put together by
`corral.worker.assembly.Assembler` and applied only whole; every part taken renews the lease
(it answers one of our reports).

The lease (docs/protocol.md "Leases"): only an applied instruction set (or a part of one)
renews it, to ``max(lease_expires, answers_sent_at + lease)``, announced by a `LeaseExtended`
action (for the lease keeper) before any start it allows. Every `handle` first expires what
is due at ``now``, so a renewal that arrives after the lease lapsed cannot undo the lapse:
with ``on_lease_loss=stop`` the tasks are already gone, and the supervisor will send them
again. A lease still lapsed half a lease later asks the loop to open its connections again
(`Reconnect`).
New tasks are started only under a held lease.
"""

from __future__ import annotations

from enum import StrEnum

from corral.common.wire.protocol import Instructions, Refusal, Status, WorkerState

from . import events as ev
from .assembly import Assembler
from .config import (
    FIRST_REPORT_INTERVAL,
    MAX_REPORT_INTERVAL,
    MIN_REPORT_INTERVAL,
    RECONNECT_FRACTION_OF_LEASE,
    REPORT_FRACTION_OF_LEASE,
    SHORT_LEASE_FRACTION,
    LeaseLoss,
    WorkerConfig,
)
from .sets import has_content, plan_set, unwanted
from .tasks import TaskState, TaskTable

__all__ = ["Phase", "TaskState", "WorkerMachine"]


class Phase(StrEnum):
    STARTING = "starting"
    READY = "ready"
    LAME_DUCK = "lame_duck"
    STOPPING = "stopping"
    HANDING_OVER = "handing_over"
    EXITED = "exited"


_REPORTED = {
    Phase.STARTING: WorkerState.STARTING,
    Phase.READY: WorkerState.READY,
    Phase.LAME_DUCK: WorkerState.LAME_DUCK,
    Phase.STOPPING: WorkerState.LAME_DUCK,
    Phase.HANDING_OVER: WorkerState.HANDING_OVER,
    Phase.EXITED: WorkerState.LAME_DUCK,
}


class WorkerMachine:
    """One worker incarnation's decisions. See the module docstring for the transitions."""

    def __init__(
        self, cfg: WorkerConfig, incarnation: int, now: float, *, waits_for_handler: bool
    ) -> None:
        self._cfg = cfg
        self.incarnation = incarnation
        self._phase = Phase.STARTING
        # Prewarm: without a ready() and a ready_after the worker is ready at once.
        self._ready_at: float | None = None if cfg.ready_after is None else now + cfg.ready_after
        if not waits_for_handler and self._ready_at is None:
            self._phase = Phase.READY
        self._tasks = TaskTable(cfg.backoff)
        self._assembler = Assembler()
        self._labels = dict(cfg.labels)
        self._applied: tuple[int, int] = (0, 0)
        self._drained = False  # the supervisor says an operator drained this worker
        self._lease_expires = 0.0
        self._lease_held = False
        self._seq = 0
        self._last_sent_at: float | None = None
        self._next_report = now  # the first Tick reports at once
        # Between changes, one report per interval: the configured one, else derived from
        # the lease the supervisor grants (see config.REPORT_FRACTION_OF_LEASE).
        self._interval = cfg.report_interval or FIRST_REPORT_INTERVAL
        self._lease_length = 0.0  # the lease the supervisor grants (from its sets)
        self._reconnect_at: float | None = None  # a lapsed lease still lapsed then: Reconnect
        self._dirty = False
        self._drain_deadline = 0.0
        self._exit_code = ev.EXIT_OK
        self._counters: dict[str, int] = dict.fromkeys(
            ("sets_applied", "sets_stale", "sets_foreign", "sets_while_stopping",
             "refusals_foreign", "adds_without_token"), 0)

    # -- read-only views (for the loop and tests) ---------------------------------------------

    @property
    def counters(self) -> dict[str, int]:
        return {**self._counters, **self._tasks.counters, **self._assembler.counters}

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def lease_expires(self) -> float:
        """When the lease ends (or ended) on the loop's clock; 0.0 before the first one."""
        return self._lease_expires

    def task_states(self) -> dict[str, TaskState]:
        return self._tasks.states()

    @property
    def lease_held(self) -> bool:
        """Whether it holds a lease (as of the last event handled)."""
        return self._lease_held

    @property
    def applied(self) -> tuple[int, int]:
        """``(epoch, seq)`` of the last instruction set applied: the assignment it holds."""
        return self._applied

    def owns(self, task: str, now: float) -> bool:
        """Whether a request for ``task`` may be answered at ``now`` (request serving checks
        this before and after the handler): the task runs here, under a lease that holds at
        ``now`` — or without one under ``on_lease_loss=keep``, which chose availability."""
        return self._tasks.is_running(task) and (
            (self._lease_held and now < self._lease_expires)
            or self._cfg.on_lease_loss is LeaseLoss.KEEP)

    def next_deadline(self) -> float:
        """The earliest time at which a Tick has something to do (0.0: at once)."""
        if self._dirty:  # a change made after the last Tick (e.g. a failed restart)
            return 0.0
        times = [self._next_report]
        if self._lease_held:
            times.append(self._lease_expires)
        if self._reconnect_at is not None:
            times.append(self._reconnect_at)
        if self._phase is Phase.STARTING and self._ready_at is not None:
            times.append(self._ready_at)
        if self._phase is Phase.LAME_DUCK:
            times.append(self._drain_deadline)
        # A past retry time that cannot fire would spin the loop: only when restarts may happen.
        times += self._tasks.deadlines(self._may_restart())
        return min(times)

    # -- the one entry point -------------------------------------------------------------------

    def handle(self, event: ev.Event, now: float) -> list[ev.Action]:
        out: list[ev.Action] = []
        if self._phase is Phase.EXITED:
            return out
        self._expire(now, out)
        if isinstance(event, ev.Received):
            if isinstance(event.message, Instructions):
                self._on_instructions(event.message, now, out)
            else:
                self._on_refusal(event.message, out)
        elif isinstance(event, ev.StopRequested):
            self._on_stop_requested(now, out)
        elif isinstance(event, ev.HandOverRequested):
            self._hand_over(now, out)
            return out
        elif isinstance(event, ev.Adopted):
            self._adopt(event, now)
        elif isinstance(event, ev.HandlerReady):
            if self._phase is Phase.STARTING:
                self._become_ready(out)
        elif isinstance(event, ev.TaskStarted):
            self._dirty |= self._tasks.started(event.task, now)
        elif isinstance(event, ev.TaskFailed):
            self._dirty |= self._tasks.failed(event, now, self._may_start(), out)
        elif isinstance(event, ev.TaskStopped):
            self._dirty |= self._tasks.stopped(event.task, self._may_start(), out)
        elif isinstance(event, ev.KeeperLost):
            out.append(ev.Log("error", "lease keeper gone: stopping every task",
                              {"reason": event.reason, "tasks": len(self._tasks)}))
            self._shut_down(ev.EXIT_KEEPER_LOST, out)
        self._settle(now, out)
        if isinstance(event, ev.Tick):
            self._report_if_due(now, out)
        return out

    # -- deadlines -----------------------------------------------------------------------------

    def _expire(self, now: float, out: list[ev.Action]) -> None:
        if self._lease_held and now >= self._lease_expires:
            self._lease_held = False
            self._dirty = True
            keep = self._cfg.on_lease_loss is LeaseLoss.KEEP
            out.append(ev.Log("warning", "lease lost: no renewal from the supervisor",
                              {"tasks": len(self._tasks), "action": "keep" if keep else "stop"}))
            if not keep:
                self._tasks.stop_all(out, lapsed=True)
            self._reconnect_at = self._lease_expires + \
                self._lease_length * RECONNECT_FRACTION_OF_LEASE
        if self._reconnect_at is not None and now >= self._reconnect_at:
            self._reconnect_at = None
            out.append(ev.Reconnect())
        if self._phase is Phase.STARTING and self._ready_at is not None and now >= self._ready_at:
            self._become_ready(out)
        if self._phase is Phase.LAME_DUCK and now >= self._drain_deadline:
            out.append(ev.Log("warning", "drain timeout: stopping the remaining tasks",
                              {"tasks": len(self._tasks)}))
            self._shut_down(ev.EXIT_OK, out)
        self._dirty |= self._tasks.expire(now, self._may_restart(), out)

    # -- events --------------------------------------------------------------------------------

    def _on_instructions(self, msg: Instructions, now: float, out: list[ev.Action]) -> None:
        why = unwanted(msg, self.incarnation, self._applied)
        if why is not None:  # another incarnation's, or not newer than the one applied
            self._counters[why] += 1
            return
        if self._phase is Phase.STOPPING:
            self._counters["sets_while_stopping"] += 1
            return
        if msg.parts != 1 or msg.part != 0:
            taken, whole = self._assembler.offer(msg)
            if taken:
                self._renew(msg, now, out)  # each part answers one of our reports
            if whole is None:
                return
            msg = whole
        self._apply(msg, now, out)

    def _apply(self, msg: Instructions, now: float, out: list[ev.Action]) -> None:
        self._counters["sets_applied"] += 1
        self._applied = (msg.epoch, msg.seq)
        if msg.drained is not self._drained:  # an operator's drain, kept for the next supervisor
            self._drained, self._dirty = msg.drained, True
        pending = self._assembler.pending
        if pending is not None and pending <= self._applied:
            self._assembler.forget()  # superseded by what was just applied
        # A set with something in it is confirmed by a report at once; a bare renewal is not
        # (nobody waits for it, and a report per renewal would double the supervisor's load).
        if has_content(msg):
            self._dirty = True
        self._renew(msg, now, out)
        may_start = self._may_start()
        # What the set asks (corral.worker.sets: remove wins, a reset stops the rest, tokens);
        # the table decides what that means for each task's lifecycle.
        plan = plan_set(self._tasks, msg)
        for task in plan.stop:
            self._tasks.stop(task, out)
        self._counters["adds_without_token"] += plan.without_token
        for task, grant in plan.want.items():
            self._tasks.add(task, grant, may_start, out)

    def _renew(self, msg: Instructions, now: float, out: list[ev.Action]) -> None:
        # The set answers one of our reports, so its send time cannot be later than our latest
        # report: clamping keeps a confused or hostile echo from stretching the lease.
        if self._last_sent_at is None:
            return
        answered = min(msg.answers_sent_at, self._last_sent_at)
        expires = answered + msg.lease
        if expires > self._lease_expires and now < expires:
            out.append(ev.LeaseExtended(expires))  # before any StartTask it allows
        self._lease_expires = max(self._lease_expires, expires)
        self._lease_length = msg.lease
        if self._cfg.report_interval is None:
            self._interval = min(max(msg.lease * REPORT_FRACTION_OF_LEASE,
                                     MIN_REPORT_INTERVAL), MAX_REPORT_INTERVAL)
        if answered == self._last_sent_at:
            # The latest report was answered: the extra one planned for a lease running short
            # is not needed (it was planned against the lease before this renewal, so with it
            # every renewed worker reported twice per interval: a third more messages).
            self._next_report = max(self._next_report, answered + self._interval)
        held = now < self._lease_expires
        if held:
            self._reconnect_at = None  # answered: the connection works
        if held and not self._lease_held:
            out.append(ev.Log("info", "lease held", {"epoch": msg.epoch, "lease": msg.lease}))
            self._dirty = True  # lease_held changes in the report
        self._lease_held = held

    def _on_refusal(self, msg: Refusal, out: list[ev.Action]) -> None:
        if msg.incarnation != self.incarnation:
            self._counters["refusals_foreign"] += 1
            return
        out.append(ev.Log("error", "refused by the supervisor",
                          {"code": msg.code, "reason": msg.reason, "epoch": msg.epoch}))
        self._shut_down(ev.EXIT_REFUSED, out)

    def _on_stop_requested(self, now: float, out: list[ev.Action]) -> None:
        if self._phase in (Phase.STARTING, Phase.READY):
            self._phase = Phase.LAME_DUCK
            self._drain_deadline = now + self._cfg.drain_timeout
            self._dirty = True
            out.append(ev.Log("info", "lame duck: draining", {
                "tasks": len(self._tasks), "drain_timeout": self._cfg.drain_timeout}))
        elif self._phase is Phase.LAME_DUCK:
            out.append(ev.Log("info", "second stop request: stopping now",
                              {"tasks": len(self._tasks)}))
            self._shut_down(ev.EXIT_OK, out)

    def _hand_over(self, now: float, out: list[ev.Action]) -> None:
        if self._phase in (Phase.STOPPING, Phase.EXITED):
            out.append(ev.Log("info", "already stopping: no hand-over"))
            return
        self._phase = Phase.HANDING_OVER
        out.append(ev.Log("info", "handing over: the tasks keep running for the next agent",
                          {"tasks": len(self._tasks)}))
        out.append(ev.SendStatus(self._status(now)))  # the last word: handing over
        out += [ev.HandOver(), ev.Exit(ev.EXIT_OK)]
        self._phase = Phase.EXITED

    def _adopt(self, event: ev.Adopted, now: float) -> None:
        for task, grant in event.grants.items():  # running already, under that grant
            self._tasks.adopt(task, grant, now)
        self._lease_expires = max(self._lease_expires, event.lease_expires)
        self._lease_held = bool(event.grants)  # `_expire` ends it if it has lapsed already
        self._dirty = True

    # -- helpers -------------------------------------------------------------------------------

    def _become_ready(self, out: list[ev.Action]) -> None:
        self._phase = Phase.READY
        self._dirty = True
        out.append(ev.Log("info", "ready"))

    def _may_start(self) -> bool:
        # `_expire` ran first, so a held lease is valid at `now`.
        return self._phase is Phase.READY and self._lease_held

    def _may_restart(self) -> bool:
        # A crashed task is still ours: restart it while draining too, and under `keep` even
        # without a lease (the operator chose availability).
        return self._phase in (Phase.READY, Phase.LAME_DUCK) and (
            self._lease_held or self._cfg.on_lease_loss is LeaseLoss.KEEP
        )

    def _shut_down(self, code: int, out: list[ev.Action]) -> None:
        self._exit_code = max(self._exit_code, code)
        self._assembler.forget()
        if self._phase is not Phase.STOPPING:
            self._phase = Phase.STOPPING
            self._dirty = True
        self._tasks.stop_all(out)

    def _settle(self, now: float, out: list[ev.Action]) -> None:
        if self._phase is Phase.LAME_DUCK and not self._tasks:
            out.append(ev.Log("info", "drained: no tasks left"))
            self._shut_down(ev.EXIT_OK, out)
        if self._phase is Phase.STOPPING and not self._tasks:
            self._phase = Phase.EXITED
            out.append(ev.SendStatus(self._status(now)))  # the last word: holds nothing
            out.append(ev.Exit(self._exit_code))

    def _report_if_due(self, now: float, out: list[ev.Action]) -> None:
        if self._phase is not Phase.EXITED and (self._dirty or now >= self._next_report):
            out.append(ev.SendStatus(self._status(now)))

    def _status(self, now: float) -> Status:
        self._seq += 1
        self._last_sent_at = now
        self._next_report = now + self._interval
        if self._lease_held and self._lease_length:
            # One report more when the lease runs short with no renewal since this report (an
            # answer was lost or late): once, not in a loop.
            short = self._lease_expires - self._lease_length * SHORT_LEASE_FRACTION
            if now < short < self._next_report:
                self._next_report = short
        self._dirty = False
        return Status(
            worker=self._cfg.worker_id,
            incarnation=self.incarnation,
            seq=self._seq,
            sent_at=now,
            max_load=self._cfg.max_load,
            running=self._tasks.tokens(),
            starting=self._tasks.not_running(),
            drained=self._drained,
            state=_REPORTED[self._phase],
            applied=self._applied,
            failures=self._tasks.failures(),
            last_errors=self._tasks.last_errors(),
            lease_held=self._lease_held,
            zone=self._cfg.zone,
            labels=self._labels,
        )
