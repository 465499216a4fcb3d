"""Between the state machine's StartTask/StopTask actions and a handler.

`Runner` is what the loop needs from a handler: start, stop (possibly finishing later),
``poll`` for tasks that ended, and ``close`` to end everything on the way out. `CallRunner`
adapts a plain `Handler` (log, python:…); `corral.worker.process.ExecRunner` runs processes.
`TaskExecutor` wraps a runner with what every handler gets: the spec parsed and the
`TaskContext` built (fencing token, spec, the lease deadline), exceptions caught and counted (a
handler never crashes the agent; a bad spec is a failure of its task), and the journal written
at the true start and stop, with the token and the spec's version.
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
)
from .journal import Journal
from .keeper import KeeperLink
from .process import ExecRunner


class Runner(Protocol):
    @property
    def has_ready(self) -> bool:
        """Whether ``ready()`` means anything (else the worker is ready at once)."""

    def start(self, ctx: TaskContext) -> None:
        """Start ``ctx.task``; raise if it cannot be started."""

    def stop(self, task: str, now: float) -> bool:
        """True if the task has stopped; False if a `TaskStopped` will come from `poll`."""

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

    def close(self) -> list[str]:
        """End every task now, waiting a bounded time; the tasks it ended."""


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

    def stop(self, task: str, now: float) -> bool:
        self._started.discard(task)  # even if stop raises: there is nothing better to try
        self._handler.stop(task)
        return True

    def poll(self, now: float) -> list[TaskStopped | TaskFailed]:
        return []

    def next_deadline(self, now: float) -> float | None:
        return None

    def ready(self) -> bool:
        return self._ready is None or bool(self._ready())

    def tasks(self) -> list[str]:
        return sorted(self._started)

    def close(self) -> list[str]:
        return []  # every task went through stop()


def build(cfg: WorkerConfig) -> Runner:
    """The runner for ``cfg.handler``; `ConfigError` if a python handler cannot be loaded."""
    if cfg.handler == "exec":
        if cfg.exec_template is None:
            raise ConfigError("exec", "--exec is required with --handler exec")
        keeper = KeeperLink(cfg.stop_grace, cfg.on_lease_loss is LeaseLoss.STOP, cfg.journal,
                        cfg.worker_id)
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

    def stop(self, task: str, now: float) -> list[Event]:
        try:
            done = self._runner.stop(task, now)
        except Exception as exc:  # it may still run, but no retry could know better
            self.handler_errors += 1
            self._log.error("handler stop raised; taking the task as stopped",
                            task=task, error=repr(exc))
            done = True
        if not done:
            return []
        self._stopped(task)
        return [TaskStopped(task)]

    def poll(self, now: float) -> list[Event]:
        events: list[Event] = []
        for event in self._runner.poll(now):
            self._stopped(event.task)
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
        for task in self._runner.close():
            self._stopped(task)
        if self._journal is not None:
            self._journal.close()

    def _stopped(self, task: str) -> None:
        if self._journal is not None and task in self._journaled:  # one stop line per start
            self._journaled.discard(task)
            self._journal.stop(task)
