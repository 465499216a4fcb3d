"""Workers driven by the real, pure `WorkerMachine`, and a driver for `SupervisorCore`, on a
fake clock.

`ModelWorker` wraps a `WorkerMachine` (the worker agent's own state machine) with a stand-in
for its loop: starts and stops complete at once (or a task fails, when told to), and a journal
of starts and stops lets tests check that nothing was restarted or run twice. What a real
worker cannot be made to do on purpose — report a task it does not run, or hide one it does —
is fault injection (``hide`` / ``stray``). `Harness` delivers the workers' reports, carries out
the core's actions (task queries answered from a dict, sends delivered or dropped), and
advances time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from corral.common.wire.codec import decode, encode, glance_status
from corral.common.wire.protocol import Instructions, Refusal, Status, make_token
from corral.common.wire.tasklist import TaskEntry
from corral.supervisor.config import SupervisorConfig
from corral.supervisor.core import SupervisorCore
from corral.supervisor.events import (
    Continue,
    Fetch,
    Heard,
    PersistEpoch,
    RawReport,
    Send,
    Stop,
    TasksFetched,
    Tick,
)
from corral.supervisor.lifecycle import Phase
from corral.worker import events as wev
from corral.worker.config import WorkerConfig
from corral.worker.sets import Grant
from corral.worker.state import WorkerMachine

REPORT_INTERVAL = 1.0


class ModelWorker:
    def __init__(self, id: str, max_load: float = 10, incarnation: int = 1,
                 running: dict[str, int] | None = None, lease_until: float = -1.0,
                 journal: list[tuple[float, str, str]] | None = None, now: float = 0.0,
                 zone: str = "") -> None:
        self.id = id
        self.max_load = max_load
        self.incarnation = incarnation
        self.zone = zone
        self.cfg = WorkerConfig(supervisor="tcp://unused:1", worker_id=id, handler="log",
                                max_load=max_load, report_interval=REPORT_INTERVAL, zone=zone)
        self.machine = WorkerMachine(self.cfg, incarnation, now, waits_for_handler=False)
        self.journal: list[tuple[float, str, str]] = journal if journal is not None else []
        self.refused: str | None = None
        self.exited: int | None = None
        self.failing: set[str] = set()  # tasks whose start fails
        self.hide: set[str] = set()  # fault injection: left out of reports
        self.stray: dict[str, int] = {}  # fault injection: reported though not run
        self.last: Status | None = None
        self._now = now
        if running:
            self._preload(running, lease_until, now)

    def _preload(self, running: dict[str, int], lease_until: float, now: float) -> None:
        """Tasks it runs already, granted by an earlier supervisor under the given tokens
        (an epoch number n stands for make_token(n, 0)), with a lease until ``lease_until``."""
        self._feed(wev.Tick(), now)  # a first report, which the earlier set answers
        by_token: dict[int, list[str]] = {}
        for task, token in running.items():
            by_token.setdefault(token, []).append(task)
        for seq, (token, tasks) in enumerate(sorted(by_token.items()), start=1):
            tokens = {t: token if token >= make_token(1, 0) else make_token(token, 0)
                      for t in tasks}
            epoch = max(token >> 22, token if token < make_token(1, 0) else 0)
            msg = Instructions(epoch, seq, self.incarnation, lease_until - now, 0, now,
                               add=tuple(tasks), tokens=tokens)
            self._feed(wev.Received(msg), now)
        self.last = None

    # -- what the supervisor sees ------------------------------------------------------------

    @property
    def identity(self) -> bytes:
        return f"{self.id}@{self.incarnation:x}".encode()

    @property
    def running(self) -> dict[str, int]:
        """What it holds (its machine's view): task -> the token it runs it under (from its
        latest report; 0 for a task started since)."""
        tokens = self.last.running if self.last is not None else {}
        return {t: tokens.get(t, 0) for t in self.machine.task_states()}

    @property
    def lease_until(self) -> float:
        return self.machine.lease_expires if self.machine.lease_held else -1.0

    def report(self, now: float) -> Status | None:
        """Time passed: the machine reports if a report is due (or anything changed)."""
        statuses = self._feed(wev.Tick(), now)
        if not statuses:
            return None
        return self._faulty(statuses[-1])

    def force_report(self, now: float) -> Status:
        """A report now, whether due or not (the machine is told something changed: a test's
        poke, as a reconnecting channel would)."""
        self.machine._dirty = True  # type: ignore[attr-defined]
        status = self.report(now)
        assert status is not None
        return status

    def _faulty(self, st: Status) -> Status:
        if not (self.hide or self.stray):
            return st
        running = {t: tok for t, tok in st.running.items() if t not in self.hide}
        running.update(self.stray)
        return msgspec.structs.replace(st, running=running)

    def deliver(self, msg: Instructions | Refusal, now: float) -> None:
        self._feed(wev.Received(msg), now)

    def drain(self, now: float) -> None:
        """SIGTERM: lame duck."""
        self._feed(wev.StopRequested(), now)

    def fail(self, task: str, now: float) -> None:
        """The task's process died by itself."""
        self._feed(wev.TaskFailed(task, "died"), now)

    def _feed(self, event: wev.Event, now: float) -> list[Status]:
        self._now = now
        statuses: list[Status] = []
        queue: list[wev.Event] = [event]
        while queue:
            for a in self.machine.handle(queue.pop(0), now):
                if isinstance(a, wev.SendStatus):
                    self.last = a.status
                    statuses.append(a.status)
                elif isinstance(a, wev.StartTask):
                    if a.task in self.failing:
                        queue.append(wev.TaskFailed(a.task, "start failed"))
                    else:
                        self.journal.append((now, "start", a.task))
                        queue.append(wev.TaskStarted(a.task))
                elif isinstance(a, wev.StopTask):
                    self.journal.append((now, "stop", a.task))
                    queue.append(wev.TaskStopped(a.task))
                elif isinstance(a, wev.Log) and a.event == "refused by the supervisor":
                    self.refused = str(a.fields.get("reason"))
                elif isinstance(a, wev.Exit):
                    self.exited = a.code
        return statuses

    def restarted(self, now: float) -> ModelWorker:
        """The same id, a new process: nothing running, the journal kept."""
        return ModelWorker(self.id, self.max_load, self.incarnation + 1, journal=self.journal,
                           now=now, zone=self.zone)

    def hand_over(self, now: float) -> Status:
        """SIGUSR2 (an ``exec`` agent): its last report, ``handing_over``; it exits 0 and its
        task processes run on with its lease keeper."""
        (last,) = self._feed(wev.HandOverRequested(), now)
        return last

    def successor(self, now: float) -> ModelWorker:
        """The next process with this id, adopting from the keeper what this one ran (after a
        hand-over, or a crash within the lease): same tasks, same tokens, same lease."""
        new = ModelWorker(self.id, self.max_load, self.incarnation + 1, journal=self.journal,
                          now=now, zone=self.zone)
        held = self.last.running if self.last is not None else {}
        grants = {t: Grant(held.get(t, 0), None) for t in self.machine.task_states()}
        new._feed(wev.Adopted(grants, self.machine.lease_expires), now)
        new.journal += [(now, "adopt", t) for t in grants]
        return new


def config(**kw: Any) -> SupervisorConfig:
    base: dict[str, Any] = dict(tasks="file:unused", warmup=5.0, lease=4.0, lease_margin=1.0,
                                tick=0.5, report_interval=REPORT_INTERVAL, query_interval=60.0,
                                state_file="/nonexistent")
    base.update(kw)
    return SupervisorConfig(**base)


def entries(tasks: dict[str, float] | Iterable[str]) -> dict[str, TaskEntry]:
    items = tasks.items() if isinstance(tasks, dict) else ((t, 1.0) for t in tasks)
    return {t: TaskEntry(float(c)) for t, c in items}


class Harness:
    def __init__(self, cfg: SupervisorConfig, tasks: dict[str, Any] | None = None,
                 epoch: int = 1, now: float = 0.0) -> None:
        self.now = now  # a supervisor started later (a restart) starts its warm-up then
        self.core = SupervisorCore(cfg, epoch, self.now)
        self.source: dict[str, Any] | None = tasks
        self.workers: dict[bytes, ModelWorker] = {}
        self.drop: Callable[[ModelWorker, Instructions | Refusal], bool] = lambda w, m: False
        self.sent: list[tuple[str, Instructions | Refusal]] = []
        self.fetches = 0
        self.persisted: list[int] = []
        self.heard: list[int] = []  # the counts handed to the election (HA), in order
        self.stopped: str | None = None
        self.logs: list[tuple[str, str]] = []
        self.log_fields: dict[str, dict[str, Any]] = {}  # event -> the fields it last had

    def add(self, w: ModelWorker) -> ModelWorker:
        self.workers[w.identity] = w
        return w

    def replace(self, old: ModelWorker, new: ModelWorker) -> ModelWorker:
        self.workers.pop(old.identity, None)
        return self.add(new)

    def run(self, actions: list[Any]) -> None:
        queue = list(actions)
        while queue:
            a = queue.pop(0)
            if isinstance(a, Send):
                w = self.workers.get(a.identity)
                if w is None:
                    continue
                # As a worker gets it: a `Renewal` is an `Instructions` on the wire.
                msg = decode(encode(a.message))
                assert isinstance(msg, Instructions | Refusal)
                self.sent.append((w.id, msg))
                if not self.drop(w, msg):
                    w.deliver(msg, self.now)
            elif isinstance(a, Fetch):
                self.fetches += 1
                src = self.source
                tasks = None if src is None else (
                    src if all(isinstance(v, TaskEntry) for v in src.values()) else entries(src))
                ev = TasksFetched(tasks, None if src is not None else "source down", a.reset)
                queue.extend(self.core.handle(ev, self.now))
            elif isinstance(a, PersistEpoch):
                self.persisted.append(a.epoch)
            elif isinstance(a, Stop):
                self.stopped = a.reason
            elif isinstance(a, Heard):
                self.heard.append(a.count)
            else:
                self.logs.append((a.level, a.event))
                self.log_fields[a.event] = dict(a.fields)

    def deliver(self, w: ModelWorker, status: Status | None, last: bool = False) -> None:
        """``status`` reaches the supervisor as the daemon hands it over: a frame with its
        task maps still encoded (`RawReport`). ``last``: its final report, sent as it exits."""
        if status is not None and (w.exited is None or last):
            frame = encode(status)
            self.run(self.core.handle(RawReport(w.identity, glance_status(frame), frame),
                                      self.now))

    def report(self, w: ModelWorker) -> None:
        """A report from ``w`` now, due or not."""
        self.deliver(w, w.force_report(self.now))

    def step(self, dt: float = 0.5, silent: tuple[ModelWorker, ...] = ()) -> None:
        """Advance time; every worker's machine sees it, and the reports of those not in
        ``silent`` reach the supervisor."""
        self.now = round(self.now + dt, 9)
        for w in list(self.workers.values()):
            status = w.report(self.now)
            if w not in silent:
                self.deliver(w, status)
        self.run(self.core.handle(Tick(), self.now))
        if self.core.busy:  # as the daemon: a slice of the rebuild once reports were read
            self.run(self.core.handle(Continue(), self.now))

    def until(self, pred: Callable[[], bool], limit: float = 60.0, dt: float = 0.5,
              silent: tuple[ModelWorker, ...] = ()) -> float:
        end = self.now + limit
        while not pred():
            assert self.now < end, "condition not reached in time"
            self.step(dt, silent)
        return self.now

    def running(self) -> bool:
        return self.core.life.phase is Phase.RUNNING

    def owners(self) -> dict[str, list[str]]:
        """Who really runs what (the workers' own view)."""
        out: dict[str, list[str]] = {}
        for w in self.workers.values():
            for t in w.running:
                out.setdefault(t, []).append(w.id)
        return out


def start(h: Harness, *workers: ModelWorker) -> None:
    """Add ``workers`` and run until the supervisor runs, a second more."""
    for w in workers:
        h.add(w)
    h.until(h.running)
    h.step(1.0)


def rows(h: Harness, verb: str, **args: object) -> dict:  # type: ignore[type-arg]
    """A control verb's answer (it must succeed); its actions carried out."""
    from corral.supervisor import verbs

    result, error, actions = verbs.call(h.core, verb, dict(args), h.now)
    assert error is None, error
    h.run(actions)
    return result  # type: ignore[no-any-return]
