"""A protocol-level model of workers and a driver for `SupervisorCore`, with a fake clock.

`ModelWorker` follows docs/protocol.md (apply newer sets only, reset = diff, lease from
``answers_sent_at``) and keeps a journal of starts and stops, so tests can check that nothing
was restarted or run twice. `Harness` delivers reports, carries out the core's actions (task
queries answered from a dict, sends delivered or dropped), and advances time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from corral.common.protocol import Instructions, Refusal, Status, WorkerState
from corral.supervisor.config import SupervisorConfig
from corral.supervisor.core import SupervisorCore
from corral.supervisor.events import Fetch, PersistEpoch, Report, Send, Stop, TasksFetched
from corral.supervisor.records import Phase


@dataclass
class ModelWorker:
    id: str
    max_load: float = 10
    incarnation: int = 1
    state: WorkerState = WorkerState.READY
    running: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    seq: int = 0
    applied: tuple[int, int] = (0, 0)
    lease_until: float = -1.0
    journal: list[tuple[float, str, str]] = field(default_factory=list)
    refused: str | None = None
    dropped: int = 0

    @property
    def identity(self) -> bytes:
        return f"{self.id}@{self.incarnation:x}".encode()

    def report(self, now: float) -> Status:
        self.seq += 1
        return Status(self.id, self.incarnation, self.seq, now, self.max_load,
                      dict(self.running), self.state, applied=self.applied,
                      failures=dict(self.failures), lease_held=now < self.lease_until)

    def deliver(self, msg: Instructions | Refusal, now: float) -> None:
        if isinstance(msg, Refusal):
            if msg.incarnation == self.incarnation:
                self.refused = msg.reason
            return
        if msg.incarnation != self.incarnation or (msg.epoch, msg.seq) <= self.applied:
            self.dropped += 1
            return
        self.applied = (msg.epoch, msg.seq)
        self.lease_until = max(self.lease_until, msg.answers_sent_at + msg.lease)
        lame = self.state is WorkerState.LAME_DUCK
        if msg.reset:
            want = set(msg.add)
            for t in [t for t in self.running if t not in want]:
                self.stop(t, now)
            for t in msg.add:
                if t in self.running:
                    self.running[t] = msg.epoch
                elif not lame:
                    self.start(t, msg.epoch, now)
        else:
            for t in msg.remove:
                if t in self.running:
                    self.stop(t, now)
            for t in msg.add:
                if t in self.running:
                    self.running[t] = msg.epoch
                elif not lame:
                    self.start(t, msg.epoch, now)

    def start(self, task: str, epoch: int, now: float) -> None:
        self.running[task] = epoch
        self.journal.append((now, "start", task))

    def stop(self, task: str, now: float) -> None:
        del self.running[task]
        self.journal.append((now, "stop", task))

    def check_lease(self, now: float) -> None:
        """The default --on-lease-loss stop."""
        if self.running and now >= self.lease_until:
            for t in list(self.running):
                self.stop(t, now)

    def restarted(self) -> ModelWorker:
        return replace(self, incarnation=self.incarnation + 1, running={}, seq=0,
                       applied=(0, 0), lease_until=-1.0, journal=self.journal)


def config(**kw: Any) -> SupervisorConfig:
    base: dict[str, Any] = dict(tasks="file:unused", warmup=5.0, lease=4.0, lease_margin=1.0,
                                tick=0.5, report_interval=1.0, query_interval=60.0,
                                state_file="/nonexistent")
    base.update(kw)
    return SupervisorConfig(**base)


class Harness:
    def __init__(self, cfg: SupervisorConfig, tasks: dict[str, float] | None = None,
                 epoch: int = 1) -> None:
        self.now = 0.0
        self.core = SupervisorCore(cfg, epoch, self.now)
        self.source: dict[str, float] | None = tasks
        self.workers: dict[bytes, ModelWorker] = {}
        self.drop: Callable[[ModelWorker, Instructions | Refusal], bool] = lambda w, m: False
        self.sent: list[tuple[str, Instructions | Refusal]] = []
        self.fetches = 0
        self.persisted: list[int] = []
        self.stopped: str | None = None

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
                self.sent.append((w.id, a.message))
                if not self.drop(w, a.message):
                    w.deliver(a.message, self.now)
            elif isinstance(a, Fetch):
                self.fetches += 1
                src = self.source
                ev = TasksFetched(dict(src) if src is not None else None,
                                  None if src is not None else "source down", a.reset)
                queue.extend(self.core.handle(ev, self.now))
            elif isinstance(a, PersistEpoch):
                self.persisted.append(a.epoch)
            elif isinstance(a, Stop):
                self.stopped = a.reason

    def report(self, w: ModelWorker) -> None:
        if w.refused is None:
            self.run(self.core.handle(Report(w.identity, w.report(self.now)), self.now))

    def step(self, dt: float = 0.5, silent: tuple[ModelWorker, ...] = ()) -> None:
        """Advance time; every worker not in ``silent`` reports once per report interval."""
        start = self.now
        self.now = round(self.now + dt, 9)
        for w in list(self.workers.values()):
            w.check_lease(self.now)
            if w not in silent and int(self.now) != int(start):
                self.report(w)
        self.run(self.core.expire(self.now))

    def until(self, pred: Callable[[], bool], limit: float = 60.0, dt: float = 0.5,
              silent: tuple[ModelWorker, ...] = ()) -> float:
        end = self.now + limit
        while not pred():
            assert self.now < end, "condition not reached in time"
            self.step(dt, silent)
        return self.now

    def running(self) -> bool:
        return self.core.phase is Phase.RUNNING

    def owners(self) -> dict[str, list[str]]:
        """Who really runs what (the model workers' own view)."""
        out: dict[str, list[str]] = {}
        for w in self.workers.values():
            for t in w.running:
                out.setdefault(t, []).append(w.id)
        return out
