"""The ``exec`` handler: one process group per task, and never an orphan (docs/worker.md,
"exec", for operators).

``--exec "recorder --room {task} --url {spec.stream.url}"`` is split once with `shlex` and
run without a shell; every ``{task}`` inside an argument is replaced by the task id and every
``{spec.KEY}`` (``{spec.a.b}``: nested) by that value of the task's spec — a string as it is,
anything else as JSON — in one pass, so a task id or a value with spaces, quotes, ``;`` or
braces stays inside its one argument. A spec without a key the command names is a failure of
that task (`SpecError`: reported, retried with backoff), never of the agent. The task also gets
``CORRAL_TASK``, ``CORRAL_WORKER``, ``CORRAL_FENCING_TOKEN`` (decimal), ``CORRAL_TASK_SPEC``
(the spec as JSON, ``{}`` for none) and ``CORRAL_SPEC_VERSION`` in its environment.

Lifecycle of one task's process group (the group id is the leader's pid)::

    running  -> (gone)    the leader exited by itself: the rest of the group is killed and
                          the task is reported as failed (the agent restarts it with backoff)
    running  -> stopping  stop: SIGTERM to the whole group
    stopping -> (gone)    the leader exited and the group is empty
    stopping -> killed    ``stop_grace`` passed: SIGKILL to the whole group
    killed   -> (gone)    the leader is reaped

Nothing here blocks the agent's loop except `close`, the last call on every exit path, which
waits at most ``stop_grace`` and then kills. If the agent itself is killed with SIGKILL, each
leader gets SIGKILL from the kernel (``PR_SET_PDEATHSIG`` on Linux), and the lease keeper
(`corral.worker.keeper`), which every group registers with before it execs, SIGKILLs the
whole groups. The keeper also ends the groups when the lease lapses while the agent is frozen.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .events import TaskFailed, TaskStopped
from .handlers import SpecError, StartError, TaskContext
from .keeper import KeeperLink
from .template import PLACEHOLDER

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
    """Runs each task as ``argv`` (placeholders substituted) in a new session."""

    has_ready = False

    def __init__(self, template: str, stop_grace: float, worker_id: str,
                 keeper: KeeperLink | None = None) -> None:
        self._argv = shlex.split(template)  # the worker's config checked it (template.check)
        self._grace = stop_grace
        self._env = {**os.environ, "CORRAL_WORKER": worker_id}
        self._groups: dict[str, _Group] = {}
        self._die_with_parent = _die_with_parent()
        self.keeper = keeper

    def command(self, task: str | TaskContext) -> list[str]:
        """``argv`` for this task; `SpecError` if its spec lacks a key the command names."""
        ctx = TaskContext(task) if isinstance(task, str) else task

        def value(m: re.Match[str]) -> str:
            if m.group(1) is None:
                return ctx.task
            return _spec_value(ctx.spec, m.group(1))

        return [PLACEHOLDER.sub(value, arg) for arg in self._argv]

    def tasks(self) -> list[str]:
        return [t for t, g in self._groups.items() if g.kill_at is None]

    def ready(self) -> bool:
        return True

    def start(self, ctx: TaskContext) -> None:
        task = ctx.task
        if task in self._groups:
            raise RuntimeError(f"task {task!r} still has a process group")
        argv = self.command(ctx)
        env = {**self._env, "CORRAL_TASK": task, "CORRAL_FENCING_TOKEN": str(ctx.token),
               "CORRAL_TASK_SPEC": ctx.spec_text if ctx.spec_text is not None else "{}",
               "CORRAL_SPEC_VERSION": ctx.spec_version}
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: stop and kill reach them all
                preexec_fn=self._child_hook(task),  # prctl, and a write to the keeper
            )
        except OSError as exc:  # gone since the start's check, or named per task
            raise StartError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        self._groups[task] = _Group(popen)

    def _child_hook(self, task: str) -> Callable[[], None] | None:
        hooks = [h for h in (self._die_with_parent,
                             self.keeper.child_hook(task) if self.keeper else None) if h]
        if len(hooks) < 2:
            return hooks[0] if hooks else None
        first, second = hooks

        def both() -> None:
            first()
            second()

        return both

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
        groups = _LiveGroups()
        for task, group in list(self._groups.items()):
            code = group.popen.poll()
            if group.kill_at is None:
                if code is not None:
                    _signal(group.pgid, signal.SIGKILL)  # a crashed task's leftovers
                    del self._groups[task]
                    out.append(TaskFailed(task, _describe(code)))
                continue
            if code is not None and (group.killed or not groups.alive(group.pgid)):
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


def _spec_value(spec: object, path: str) -> str:
    """The text a ``{spec.PATH}`` placeholder becomes.

    >>> _spec_value({"a": {"b": 5}, "s": "x y"}, "a.b"), _spec_value({"s": "x y"}, "s")
    ('5', 'x y')
    """
    value = spec
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise SpecError(f"--exec names {{spec.{path}}}, but the task's spec has no "
                            f"{path!r}")
        value = value[key]
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _signal(pgid: int, sig: signal.Signals) -> None:
    # The group may be empty already (ProcessLookupError); a setuid member may refuse.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _LiveGroups:
    """Which process groups still have a live member, read once per `poll` from /proc when
    first asked. A zombie is not live: an orphaned member that has exited waits for whoever
    reaps orphans (init, or a subreaper), which may take a second or more — its task has
    ended all the same. Without /proc: `killpg(pgid, 0)`, which counts zombies."""

    def __init__(self) -> None:
        self._live: set[int] | None = None
        self._read = False

    def alive(self, pgid: int) -> bool:
        if not self._read:
            self._read, self._live = True, _live_groups()
        return pgid in self._live if self._live is not None else _group_alive(pgid)


def _live_groups() -> set[int] | None:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    live = set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended meanwhile
        if fields[0] != b"Z":
            live.add(int(fields[2]))  # state, ppid, pgrp
    return live


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
