"""The ``exec`` handler: one process group per task, and never an orphan.

``--exec "recorder --room {task}"`` is split once with `shlex` and run without a shell; every
``{task}`` inside an argument is replaced by the task id, so a task id with spaces, quotes or
``;`` stays inside its one argument. The task also gets ``CORRAL_TASK`` and ``CORRAL_WORKER``
in its environment.

Lifecycle of one task's process group (the group id is the leader's pid)::

    running  -> (gone)    the leader exited by itself: the rest of the group is killed and
                          the task is reported as failed (the agent restarts it with backoff)
    running  -> stopping  stop: SIGTERM to the whole group
    stopping -> (gone)    the leader exited and the group is empty
    stopping -> killed    ``stop_grace`` passed: SIGKILL to the whole group
    killed   -> (gone)    the leader is reaped

Nothing here blocks the agent's loop except `close`, the last call on every exit path, which
waits at most ``stop_grace`` and then kills. If the agent itself is killed with SIGKILL, each
leader gets SIGKILL from the kernel (``PR_SET_PDEATHSIG`` on Linux); what a leader forked into
its group is then left to the service manager (systemd's default ``KillMode=control-group``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .events import TaskFailed, TaskStopped

# While a stopped leader is gone but members of its group linger, look again this often: their
# exits send no SIGCHLD to the agent (they are not its children).
LINGER_CHECK = 0.05
_PR_SET_PDEATHSIG = 1


@dataclass
class _Group:
    popen: subprocess.Popen[bytes]
    kill_at: float | None = None  # set by stop: SIGKILL the group at this time
    killed: bool = False

    @property
    def pgid(self) -> int:
        return self.popen.pid


class ExecRunner:
    """Runs each task as ``argv`` (with ``{task}`` substituted) in a new session."""

    has_ready = False

    def __init__(self, template: str, stop_grace: float, worker_id: str) -> None:
        self._argv = shlex.split(template)
        self._grace = stop_grace
        self._env = {**os.environ, "CORRAL_WORKER": worker_id}
        self._groups: dict[str, _Group] = {}
        self._preexec = _die_with_parent()

    def command(self, task: str) -> list[str]:
        return [arg.replace("{task}", task) for arg in self._argv]

    def tasks(self) -> list[str]:
        return [t for t, g in self._groups.items() if g.kill_at is None]

    def ready(self) -> bool:
        return True

    def start(self, task: str) -> None:
        if task in self._groups:
            raise RuntimeError(f"task {task!r} still has a process group")
        self._groups[task] = _Group(
            subprocess.Popen(
                self.command(task),
                stdin=subprocess.DEVNULL,
                env={**self._env, "CORRAL_TASK": task},
                start_new_session=True,  # its own process group: stop and kill reach them all
                preexec_fn=self._preexec,  # only a prctl call: see _die_with_parent
            )
        )

    def stop(self, task: str, now: float) -> bool:
        """Begin stopping: True if it is already gone, else a `TaskStopped` comes from poll."""
        group = self._groups.get(task)
        if group is None:
            return True
        if group.popen.poll() is not None:
            _signal(group.pgid, signal.SIGKILL)  # the leader is gone: take the stragglers
            del self._groups[task]
            return True
        if group.kill_at is None:
            group.kill_at = now + self._grace
            _signal(group.pgid, signal.SIGTERM)
        return False

    def poll(self, now: float) -> list[TaskStopped | TaskFailed]:
        """Reap exited leaders, escalate overdue stops; report what ended."""
        out: list[TaskStopped | TaskFailed] = []
        for task, group in list(self._groups.items()):
            code = group.popen.poll()
            if group.kill_at is None:
                if code is not None:
                    _signal(group.pgid, signal.SIGKILL)  # a crashed task's leftovers
                    del self._groups[task]
                    out.append(TaskFailed(task, _describe(code)))
                continue
            if code is not None and (group.killed or not _group_alive(group.pgid)):
                del self._groups[task]
                out.append(TaskStopped(task))
            elif now >= group.kill_at and not group.killed:
                _signal(group.pgid, signal.SIGKILL)
                group.killed = True
                if code is not None:
                    del self._groups[task]
                    out.append(TaskStopped(task))
        return out

    def next_deadline(self, now: float) -> float | None:
        times = []
        for group in self._groups.values():
            if group.kill_at is None or group.killed:
                continue
            if group.popen.returncode is not None:  # leader reaped, group still lingering
                times.append(min(group.kill_at, now + LINGER_CHECK))
            else:
                times.append(group.kill_at)
        return min(times, default=None)

    def close(self) -> list[str]:
        """Stop every group now (SIGTERM, at most ``stop_grace``, SIGKILL) and reap them all;
        the tasks that were still running or stopping."""
        if not self._groups:
            return []
        deadline = time.monotonic() + self._grace
        for group in self._groups.values():
            if group.kill_at is None:
                _signal(group.pgid, signal.SIGTERM)
        for group in self._groups.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                group.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            _signal(group.pgid, signal.SIGKILL)
        for group in self._groups.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                group.popen.wait(timeout=self._grace + 1.0)  # SIGKILLed: only a D-state hangs
        stopped = list(self._groups)
        self._groups.clear()
        return stopped


def _signal(pgid: int, sig: signal.Signals) -> None:
    # The group may be empty already (ProcessLookupError); a setuid member may refuse.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code}"
    return f"exited with status {code}"


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook that makes the kernel SIGKILL the task's leader when the agent dies, so
    even ``kill -9`` of the agent leaves no task behind. Linux only; elsewhere None. It only
    calls prctl (async-signal-safe), looked up here, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the agent died before prctl took effect
            os._exit(1)

    return hook
