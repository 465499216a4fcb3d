"""The ``exec`` handler: one process group per task, held to the lease by the keeper, and
never an orphan (docs/worker.md, "exec", for operators).

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
    running  -> stopping  stop: the keeper is told (the stop and its line are ours), then
                          SIGTERM to the whole group
    running  -> lapsed    stop once the lease has lapsed, and the keeper said it is ending the
                          group already (K): its stop, its journal line
    stopping -> (gone)    the leader exited and the group is empty
    stopping -> killed    ``stop_grace`` passed: SIGKILL to the whole group
    killed   -> (gone)    the leader is gone
    running  -> (handed)  `hand_over`: the keeper holds it for the next agent (USR2)

Tasks no longer die with the agent: every group registers with the lease keeper
(`corral.worker.keeper`) before it execs, and the keeper ends them at the lease's end unless a
new agent with this id adopts them first (`adopt`: same processes, same tokens). An adopted
leader is not our child: it is watched through its pidfd (`fds`), its exit status unknown.
Nothing here blocks the agent's loop except `close`, the last call on every exit path but a
hand-over, which waits at most ``stop_grace`` and then kills.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .events import TaskFailed, TaskStopped
from .handlers import SpecError, StartError, TaskContext
from .keeper import AdoptedGroup, KeeperLink
from .template import PLACEHOLDER

# While a stopped leader is gone but members of its group linger, look again this often: their
# exits send no SIGCHLD to the agent (they are not its children).
LINGER_CHECK = 0.05
ADOPTED_END = "ended (adopted: not our child, its exit status is unknown)"


@dataclass
class _Group:
    pid: int  # the leader's, and the group id
    popen: subprocess.Popen[bytes] | None  # None: adopted (`pidfd` watches it)
    pidfd: int | None = None
    kill_at: float | None = None  # set by stop: SIGKILL the group at this time
    killed: bool = False
    lapsed: bool = False  # the lease lapsed and the keeper said (K) it is ending it: its stop

    def ended(self) -> str | None:
        """None while the leader runs; else how it ended."""
        if self.popen is not None:
            code = self.popen.poll()
            return None if code is None else _describe(code)
        assert self.pidfd is not None
        return ADOPTED_END if _readable(self.pidfd, 0.0) else None

    def wait(self, timeout: float) -> None:
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=max(0.0, timeout))
        elif self.pidfd is not None:
            _readable(self.pidfd, timeout)

    def forget(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class ExecRunner:
    """Runs each task as ``argv`` (placeholders substituted) in a new session."""

    has_ready = False

    def __init__(self, template: str, stop_grace: float, worker_id: str,
                 keeper: KeeperLink | None = None) -> None:
        self._argv = shlex.split(template)  # the worker's config checked it (template.check)
        self._grace = stop_grace
        self._env = {**os.environ, "CORRAL_WORKER": worker_id}
        self._groups: dict[str, _Group] = {}
        self._settle: dict[str, tuple[int, bool]] = {}  # ended: (pid, the keeper's line)
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
        return [t for t, g in self._groups.items() if g.kill_at is None and not g.lapsed]

    def ready(self) -> bool:
        return True

    def fds(self) -> list[int]:
        """The adopted leaders' pidfds: readable when one ends (no SIGCHLD comes for them)."""
        return [g.pidfd for g in self._groups.values() if g.pidfd is not None]

    def adopt(self, groups: Iterable[AdoptedGroup]) -> None:
        """Take over groups a previous agent of this id left running (from the keeper)."""
        for g in groups:
            self._groups[g.task] = _Group(g.pid, None, g.pidfd)

    def start(self, ctx: TaskContext) -> None:
        task = ctx.task
        if task in self._groups:
            raise RuntimeError(f"task {task!r} still has a process group")
        argv = self.command(ctx)
        env = {**self._env, "CORRAL_TASK": task, "CORRAL_FENCING_TOKEN": str(ctx.token),
               "CORRAL_TASK_SPEC": ctx.spec_text if ctx.spec_text is not None else "{}",
               "CORRAL_SPEC_VERSION": ctx.spec_version}
        hook = self.keeper.child_hook(task, ctx.token, ctx.spec_text) if self.keeper else None
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: stop and kill reach them all
                preexec_fn=hook,  # registers the group with the keeper before it execs
            )
        except OSError as exc:  # gone since the start's check, or named per task
            raise StartError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
        self._groups[task] = _Group(popen.pid, popen)

    def stop(self, task: str, now: float, lapsed: bool = False) -> TaskStopped | None:
        """Begin stopping: the stop if it is already gone, else None (`poll` says when).
        ``lapsed``: the lease lapsed (a group the keeper is ending already is left to it)."""
        group = self._groups.get(task)
        if group is None:
            return TaskStopped(task)
        if group.ended() is not None:
            _signal(group.pid, signal.SIGKILL)  # the leader is gone: take the stragglers
            return TaskStopped(task, by_keeper=self._gone(task, group))
        if group.kill_at is None and not group.lapsed:
            if lapsed and self.keeper is not None and self.keeper.claimed(group.pid):
                group.lapsed = True  # the keeper is ending it (the lease's end): its stop
            else:
                group.kill_at = now + self._grace
                if self.keeper is not None:
                    self.keeper.announce(group.pid, time.monotonic() + self._grace)
                _signal(group.pid, signal.SIGTERM)
        return None

    def poll(self, now: float) -> list[TaskStopped | TaskFailed]:
        """Reap exited leaders, escalate overdue stops; report what ended."""
        out: list[TaskStopped | TaskFailed] = []
        groups = _LiveGroups()
        for task, group in list(self._groups.items()):
            how = group.ended()
            if group.kill_at is None and not group.lapsed:
                if how is not None:
                    _signal(group.pid, signal.SIGKILL)  # a crashed task's leftovers
                    out.append(TaskFailed(task, how, by_keeper=self._gone(task, group)))
                continue
            if how is not None and (group.killed or not groups.alive(group.pid)):
                out.append(TaskStopped(task, by_keeper=self._gone(task, group)))
            elif group.kill_at is not None and now >= group.kill_at and not group.killed:
                _signal(group.pid, signal.SIGKILL)
                group.killed = True
                if how is not None:
                    out.append(TaskStopped(task, by_keeper=self._gone(task, group)))
        return out

    def settled(self, task: str) -> None:
        """``task``'s end is recorded: tell the keeper whose line it was."""
        pid, by_keeper = self._settle.pop(task, (0, False))
        if pid and self.keeper is not None:
            self.keeper.settled(pid, by_keeper)

    def _gone(self, task: str, group: _Group) -> bool:
        """``task``'s group has ended: is its stop line the keeper's (it said so: K)?"""
        del self._groups[task]
        group.forget()
        keeper = self.keeper
        by_keeper = keeper is not None and keeper.alive() and (
            group.lapsed or keeper.claimed(group.pid))
        self._settle[task] = (group.pid, by_keeper)
        return by_keeper

    def next_deadline(self, now: float) -> float | None:
        times = []
        for group in self._groups.values():
            if group.kill_at is None and not group.lapsed:
                continue
            if group.ended() is not None:
                times.append(now + LINGER_CHECK)  # the leader is gone, its group not yet
            elif group.kill_at is not None and not group.killed:
                times.append(group.kill_at)
        return min(times, default=None)

    def hand_over(self) -> None:
        """Leave every group to the keeper, for the next agent of this id: nothing stops."""
        assert self.keeper is not None
        self.keeper.hand_over()
        for group in self._groups.values():
            group.forget()
        self._groups.clear()

    def close(self) -> list[TaskStopped]:
        """Stop every group now (SIGTERM, at most ``stop_grace``, SIGKILL) and wait for them;
        the tasks that ended. One that will not end (a process stuck in the kernel) is left to
        the keeper, which ends and records it."""
        if not self._groups:
            return []
        deadline = time.monotonic() + self._grace
        lost = self.keeper is None or not self.keeper.alive()
        for group in self._groups.values():
            if group.kill_at is None and (lost or not group.lapsed):
                if self.keeper is not None:
                    self.keeper.announce(group.pid, deadline)
                _signal(group.pid, signal.SIGTERM)
                group.lapsed = False
        for group in self._groups.values():
            group.wait(deadline - time.monotonic())
            _signal(group.pid, signal.SIGKILL)
        out = []
        for task, group in list(self._groups.items()):
            group.wait(self._grace + 1.0)  # SIGKILLed: only a D-state hangs
            if group.ended() is not None:
                out.append(TaskStopped(task, by_keeper=self._gone(task, group)))
        for group in self._groups.values():
            group.forget()
        self._groups.clear()
        return out


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


def _readable(fd: int, timeout: float) -> bool:
    """Whether a pidfd says its process has ended, waiting up to ``timeout`` seconds."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout * 1000))))
