"""The tasks a worker holds, each with its lifecycle, its assignment and its failures. Pure.

`TaskTable` is the part of `WorkerMachine` that knows about single tasks: the machine decides
*whether* tasks may start (phase, lease) and passes that in; the table decides *what* happens
to each task and appends the resulting `StartTask`/`StopTask`/`Log` actions.

Task lifecycle (``running`` in reports lists every held task, whatever its state)::

    starting -> running     TaskStarted
    (adopted) -> running    a process a previous agent of this id left running (`adopt`)
    starting -> backoff     TaskFailed (start raised)
    running  -> backoff     TaskFailed (it ended on its own); restart after Backoff.delay
    backoff  -> starting    its retry time came, and the worker may run tasks
    starting|running -> stopping   removed, reset away, lease lost (stop), or shutting down
    running  -> stopping    added again with another spec: restarted once it has stopped
    backoff  -> starting    added again with another spec: at once, failures cleared
    backoff  -> (gone)      removed, reset away, lease lost, shutting down: nothing to stop
    stopping -> (gone)      TaskStopped; or -> starting if it was added again meanwhile

Every held task keeps the `Grant` it was started under: the fencing token of the assignment
(reported in ``running``) and the spec (canonical JSON text, None for none). A task added again
with the same spec is left alone and keeps its token; with another spec it is restarted under
the new grant (a spec change is a new version of the task).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from corral.common.wire.protocol import MAX_ERROR_CHARS

from . import events as ev
from .config import Backoff
from .sets import Grant


def one_line(text: str) -> str:
    """A failure's reason as a report carries it: one line, no control characters, at most
    `MAX_ERROR_CHARS` (the start of a long one: where it says what failed).

    >>> one_line("Traceback:\\n  boom\\x1b[2J")
    'Traceback: boom?[2J'
    """
    flat = " ".join("".join(c if c.isprintable() or c in "\t\n\r" else "?" for c in text)
                    .split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[:MAX_ERROR_CHARS - 1] + "…"


class TaskState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"


@dataclass
class _Task:
    """Mutable bookkeeping for one held task (internal; never leaves the table)."""

    state: TaskState
    grant: Grant  # the assignment it runs (or will run) under
    failures: int = 0
    since: float = 0.0  # when it entered RUNNING
    retry_at: float = 0.0  # BACKOFF: when to start it again
    again: Grant | None = None  # STOPPING: added again meanwhile: start it so once stopped
    last_error: tuple[float, str] | None = None  # while failures count: (when, why) of the last


class TaskTable:
    """Every task the worker holds. Methods that change something return True (the machine
    then reports) or append actions to ``out``."""

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self._tasks: dict[str, _Task] = {}
        # The tasks with a timer: in backoff, or running with failures still counted. Only
        # these are looked at when time passes (a worker may hold thousands of tasks, and
        # every event first expires what is due).
        self._timed: dict[str, None] = {}
        self.counters: dict[str, int] = dict.fromkeys(
            ("adds_not_started", "spec_restarts", "task_failures"), 0)

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task: object) -> bool:
        return task in self._tasks

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._tasks))

    # -- views -------------------------------------------------------------------------------

    def states(self) -> dict[str, TaskState]:
        return {t: rec.state for t, rec in self._tasks.items()}

    def is_running(self, task: str) -> bool:
        rec = self._tasks.get(task)
        return rec is not None and rec.state is TaskState.RUNNING

    def tokens(self) -> dict[str, int]:
        """task -> the fencing token it runs under (the report's ``running``)."""
        return {t: rec.grant.token for t, rec in self._tasks.items()}

    def not_running(self) -> tuple[str, ...]:
        """Held tasks that are not running now: waiting to start, or in restart backoff (the
        report's ``starting``; the supervisor counts a task covered only once it runs)."""
        return tuple(t for t, rec in self._tasks.items()
                     if rec.state is TaskState.STARTING or rec.state is TaskState.BACKOFF)

    def failures(self) -> dict[str, int]:
        return {t: rec.failures for t, rec in self._tasks.items() if rec.failures}

    def last_errors(self) -> dict[str, tuple[float, str]]:
        """task -> (when, why) of its last failure, for the tasks in `failures` (so the
        report's maps change together: the supervisor's settled digest covers ``failures``)."""
        return {t: rec.last_error for t, rec in self._tasks.items()
                if rec.failures and rec.last_error is not None}

    def deadlines(self, restarts: bool) -> list[float]:
        """Times at which `expire` has something to do (restarts only if ``restarts``)."""
        times = []
        for task in self._timed:
            rec = self._tasks[task]
            if rec.state is TaskState.BACKOFF and restarts:
                times.append(rec.retry_at)
            elif rec.state is TaskState.RUNNING and rec.failures:
                times.append(rec.since + self._backoff.reset_after)
        return times

    # -- changes -----------------------------------------------------------------------------

    def expire(self, now: float, restarts: bool, out: list[ev.Action]) -> bool:
        """Restart tasks whose backoff is over (if ``restarts``); clear the failure count of
        tasks that stayed up long enough. True if a count was cleared."""
        changed = False
        for task in list(self._timed):
            rec = self._tasks[task]
            if restarts and rec.state is TaskState.BACKOFF and now >= rec.retry_at:
                self._start(task, rec, out)
            elif (rec.state is TaskState.RUNNING and rec.failures
                  and now >= rec.since + self._backoff.reset_after):
                rec.failures = 0
                del self._timed[task]
                changed = True
        return changed

    def add(self, task: str, grant: Grant, may_start: bool, out: list[ev.Action]) -> None:
        rec = self._tasks.get(task)
        if rec is not None and rec.state is not TaskState.STOPPING \
                and rec.grant.spec == grant.spec:
            return  # held: left alone, under the token it was started with
        if not may_start:
            self.counters["adds_not_started"] += 1
        elif rec is None:
            rec = self._tasks[task] = _Task(TaskState.STARTING, grant)
            self._start(task, rec, out)
        elif rec.state is TaskState.STOPPING:
            rec.again = grant
        else:  # another spec: a new version of the task, restarted under the new grant
            self.counters["spec_restarts"] += 1
            out.append(ev.Log("info", "spec changed: restarting the task",
                              {"task": task, "token": grant.token}))
            rec.failures = 0
            self._timed.pop(task, None)
            if rec.state is TaskState.BACKOFF:
                rec.grant = grant
                self._start(task, rec, out)
            else:
                self.stop(task, out)
                rec.again = grant

    def adopt(self, task: str, grant: Grant, now: float) -> None:
        """``task`` runs already, under ``grant``: a previous agent's process, handed over."""
        self._tasks[task] = _Task(TaskState.RUNNING, grant, since=now)

    def stop(self, task: str, out: list[ev.Action], lapsed: bool = False) -> None:
        rec = self._tasks.get(task)
        if rec is None:
            return
        rec.again = None
        self._timed.pop(task, None)
        if rec.state is TaskState.BACKOFF:
            del self._tasks[task]
        elif rec.state is not TaskState.STOPPING:
            rec.state = TaskState.STOPPING
            out.append(ev.StopTask(task, lapsed))

    def stop_all(self, out: list[ev.Action], lapsed: bool = False) -> None:
        for task in sorted(self._tasks):
            self.stop(task, out, lapsed)

    def started(self, task: str, now: float) -> bool:
        rec = self._tasks.get(task)
        if rec is None or rec.state is not TaskState.STARTING:
            return False
        rec.state = TaskState.RUNNING
        rec.since = now
        if rec.failures:  # its failure count is cleared once it stays up long enough
            self._timed[task] = None
        return True

    def failed(self, event: ev.TaskFailed, now: float, may_start: bool,
               out: list[ev.Action]) -> bool:
        rec = self._tasks.get(event.task)
        if rec is None:
            return False
        if rec.state is TaskState.STOPPING:  # it ended while being stopped: that is a stop
            return self.stopped(event.task, may_start, out)
        self.counters["task_failures"] += 1
        rec.failures += 1
        rec.last_error = (now, one_line(event.reason))
        rec.state = TaskState.BACKOFF
        self._timed[event.task] = None
        delay = self._backoff.delay(rec.failures)
        rec.retry_at = now + delay
        out.append(ev.Log("warning", "task failed", {"task": event.task, "reason": event.reason,
                                                     "failures": rec.failures, "retry_in": delay}))
        return True

    def stopped(self, task: str, may_start: bool, out: list[ev.Action]) -> bool:
        rec = self._tasks.get(task)
        if rec is None:
            return False
        if rec.state is TaskState.STOPPING and rec.again is not None and may_start:
            rec.grant, rec.again = rec.again, None
            self._start(task, rec, out)
        else:
            del self._tasks[task]
            self._timed.pop(task, None)
        return True

    def _start(self, task: str, rec: _Task, out: list[ev.Action]) -> None:
        self._timed.pop(task, None)  # starting: no timer until it runs or fails again
        rec.state = TaskState.STARTING
        out.append(ev.StartTask(task, rec.grant.token, rec.grant.spec))
