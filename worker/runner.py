"""Between the state machine's StartTask/StopTask actions and a handler.

`Runner` is what the loop needs from a handler: start, stop (possibly finishing later),
``poll`` for tasks that ended, and ``close`` to end everything on the way out. `CallRunner`
adapts a plain `Handler` (log, python:…); `corral.worker.process.ExecRunner` runs processes.
`TaskExecutor` wraps a runner with what every handler gets: the spec parsed and the
`TaskContext` built (fencing token, spec, the lease deadline), exceptions caught and counted (a
handler never crashes the agent; a bad spec is a failure of its task), and the journal written
at the true start and stop, with the token and the spec's version — one line per event: a stop
the lease keeper made is its line (``by_keeper``), and a task adopted from it gets an
``adopt`` line, not a second start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from corral.common.errors import ConfigError

from .config import LeaseLoss, WorkerConfig
from .events import Event, StartTask, TaskFailed, TaskStarted, TaskStopped
from .handlers import (
    Handler,
    LogHandler,
    SpecError,
    StartError,
    TaskContext,
    caller,
    load_python_handler,
    parse_spec,
    spec_version,
)
from .journal import Journal
from .keeper import AdoptedGroup, KeeperLink, fingerprint
from .process import ExecRunner
from .rundir import RunDir


class Runner(Protocol):
    @property
    def has_ready(self) -> bool:
        """Whether ``ready()`` means anything (else the worker is ready at once)."""

    def start(self, ctx: TaskContext) -> None:
        """Start ``ctx.task``; raise if it cannot be started."""

    def stop(self, task: str, now: float, lapsed: bool = False) -> TaskStopped | None:
        """The stop if the task has stopped; None if a `TaskStopped` will come from `poll`.
        ``lapsed``: the lease lapsed (the keeper may be ending ``exec`` tasks already)."""

    def poll(self, now: float) -> list[TaskStopped | TaskFailed]:
        """Tasks that finished stopping, or ended on their own."""

    def next_deadline(self, now: float) -> float | None:
        """When `poll` has something to do that no signal will announce."""

    def ready(self) -> bool: ...

    @property
    def keeper(self) -> KeeperLink | None:
        """The lease keeper the loop must start, feed and watch (``exec`` only)."""

    def tasks(self) -> list[str]:
        """Started tasks that no one has asked to stop yet."""

    def settled(self, task: str) -> None:
        """``task``'s end has been recorded (or left to the keeper, ``by_keeper``)."""

    def fds(self) -> list[int]:
        """Descriptors readable when a task ends that sends no SIGCHLD (adopted ones)."""

    def adopt(self, groups: tuple[AdoptedGroup, ...]) -> None:
        """Take over what a previous agent of this id left running (``exec`` only)."""

    def hand_over(self) -> None:
        """Leave every task running to the keeper, for the next agent (``exec`` only)."""

    def close(self) -> list[TaskStopped]:
        """End every task now, waiting a bounded time; the stops of those that ended."""


class CallRunner:
    """A `Handler` whose ``start`` and ``stop`` return once done."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._start = caller(handler)  # start(task), start(task, spec) or start(task, spec, ctx)
        ready = getattr(handler, "ready", None)
        self._ready: Callable[[], Any] | None = ready if callable(ready) else None
        self._started: set[str] = set()

    @property
    def has_ready(self) -> bool:
        return self._ready is not None

    @property
    def keeper(self) -> KeeperLink | None:
        return None  # python handlers run in the agent: frozen with it (docs/worker.md)

    def start(self, ctx: TaskContext) -> None:
        self._start(ctx)
        self._started.add(ctx.task)

    def stop(self, task: str, now: float, lapsed: bool = False) -> TaskStopped | None:
        self._started.discard(task)  # even if stop raises: there is nothing better to try
        self._handler.stop(task)
        return TaskStopped(task)

    def poll(self, now: float) -> list[TaskStopped | TaskFailed]:
        return []

    def next_deadline(self, now: float) -> float | None:
        return None

    def ready(self) -> bool:
        return self._ready is None or bool(self._ready())

    def tasks(self) -> list[str]:
        return sorted(self._started)

    def settled(self, task: str) -> None:
        pass

    def fds(self) -> list[int]:
        return []

    def adopt(self, groups: tuple[AdoptedGroup, ...]) -> None:
        raise RuntimeError("only exec tasks outlive their agent")

    def hand_over(self) -> None:
        raise RuntimeError("python handlers run inside the agent: they drain instead")

    def close(self) -> list[TaskStopped]:
        return []  # every task went through stop()


def build(cfg: WorkerConfig) -> Runner:
    """The runner for ``cfg.handler``; `ConfigError` if a python handler cannot be loaded."""
    if cfg.handler == "exec":
        if cfg.exec_template is None:
            raise ConfigError("exec", "--exec is required with --handler exec")
        keeper = KeeperLink(RunDir(cfg.worker_id), cfg.stop_grace,
                            cfg.on_lease_loss is LeaseLoss.STOP,
                            str(cfg.journal) if cfg.journal is not None else None,
                            cfg.worker_id, fingerprint(cfg.handler, cfg.exec_template))
        return ExecRunner(cfg.exec_template, cfg.stop_grace, cfg.worker_id, keeper)
    if cfg.handler == "log":
        return CallRunner(LogHandler())
    return CallRunner(load_python_handler(cfg.handler))


class TaskExecutor:
    """Carries out StartTask/StopTask on a runner and turns the outcome into events."""

    def __init__(self, runner: Runner, journal: Journal | None, log: Any,
                 lease_expires: Callable[[], float] = lambda: 0.0) -> None:
        self._runner = runner
        self._journal = journal
        self._log = log
        self._lease_expires = lease_expires
        self.handler_errors = 0
        self.spec_errors = 0
        self._journaled: set[str] = set()  # started, and no stop line written since

    def start(self, action: StartTask) -> Event:
        task = action.task
        try:
            ctx = TaskContext(task, action.token, parse_spec(action.spec), action.spec,
                              self._lease_expires)
            self._runner.start(ctx)
        except SpecError as exc:  # the task's spec does not suit it: that task fails
            self.spec_errors += 1
            return TaskFailed(task, str(exc))
        except StartError as exc:
            self.handler_errors += 1
            return TaskFailed(task, str(exc))
        except Exception as exc:  # a handler must never crash the agent
            self.handler_errors += 1
            return TaskFailed(task, f"start raised {exc!r}")
        if self._journal is not None:
            self._journal.start(task, ctx.token, ctx.spec_version)
            self._journaled.add(task)
        return TaskStarted(task)

    def adopted(self, groups: tuple[AdoptedGroup, ...]) -> None:
        """Tasks handed over by the keeper: an ``adopt`` line each (they did not start)."""
        for g in groups:
            if self._journal is not None:
                self._journal.adopt(g.task, g.token, spec_version(g.spec), g.pid)
                self._journaled.add(g.task)

    def stop(self, task: str, now: float, lapsed: bool = False) -> list[Event]:
        try:
            done = self._runner.stop(task, now, lapsed)
        except Exception as exc:  # it may still run, but no retry could know better
            self.handler_errors += 1
            self._log.error("handler stop raised; taking the task as stopped",
                            task=task, error=repr(exc))
            done = TaskStopped(task)
        if done is None:
            return []
        self._stopped(done)
        return [done]

    def poll(self, now: float) -> list[Event]:
        events: list[Event] = []
        for event in self._runner.poll(now):
            self._stopped(event)
            events.append(event)
        return events

    def ready(self) -> bool:
        try:
            return self._runner.ready()
        except Exception as exc:  # a broken ready() means "not ready", not a dead agent
            self.handler_errors += 1
            self._log.debug("handler ready() raised", error=repr(exc))
            return False

    def close(self, now: float) -> None:
        """Stop whatever still runs (only on an abnormal exit is anything left)."""
        for task in self._runner.tasks():
            self.stop(task, now)
        for event in self._runner.close():
            self._stopped(event)
        if self._journal is not None:
            self._journal.close()

    def hand_over(self) -> None:
        """Leave the tasks running to the keeper: no stop line, for nothing stopped."""
        self._runner.hand_over()
        self._journaled.clear()

    def _stopped(self, event: TaskStopped | TaskFailed) -> None:
        task = event.task
        if self._journal is not None and task in self._journaled:  # one stop line per start
            self._journaled.discard(task)
            if not event.by_keeper:  # else the keeper wrote it: it made that stop
                self._journal.stop(task)
        self._runner.settled(task)
