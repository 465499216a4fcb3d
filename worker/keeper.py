"""The agent's side of the lease keeper: a small process, not frozen with the agent and not
ended with it, that holds the ``exec`` task groups to the lease (`keeperproc` is the process;
its docstring has the whole protocol).

A lease protects only if its holder can act on expiry. The agent acts on it itself when it
runs; the keeper acts when the agent cannot — SIGSTOPped, stuck, killed, or between two
incarnations. It listens in the worker's runtime directory (`rundir`), so the next agent with
the same id on the same host finds it: `open` attaches to a keeper that is there and adopts
its groups (same processes, same tokens, same specs), or ends them when that keeper is of
another version or ran other settings (`fingerprint`), or spawns a fresh keeper.

Lifecycle::

    created  -> attached   `open`: attached to the keeper left behind (adopting its groups),
                           or to a fresh one
    attached -> lost       its end of the link reads EOF: the keeper died (`lost` says how);
                           the agent stops its tasks and exits with EXIT_KEEPER_LOST
    attached -> handed     `hand_over`: the agent leaves its groups to the keeper (USR2)
    attached -> closed     `close`: every task has stopped; the keeper ends what may be left
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import keeperproc
from .rundir import RunDir

PROCESS = keeperproc.__file__
HELLO_TIMEOUT = keeperproc.HELLO_WAIT + 1.0
CLOSE_WAIT = keeperproc.LAST_WAIT + 1.0
ATTACH_TRIES = 20  # a keeper closing as we connect: try again (it unlinks its socket first)
SNDBUF = 1 << 20
READ_SIZE = keeperproc.READ_SIZE


def fingerprint(handler: str, exec_template: str | None) -> str:
    """What the running tasks were started with: an agent with other settings ends them.

    >>> fingerprint("exec", "sleep 60") == fingerprint("exec", "sleep 60")
    True
    """
    text = json.dumps([handler, exec_template])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fields(pid: int, token: int, task: str, spec: str | None) -> bytes:
    """A group's record: ``pid NUL token NUL task NUL spec`` (``-``: no spec)."""
    tail = b"-" if spec is None else b"S" + spec.encode()
    return b"%d\0%d\0%s\0%s" % (pid, token, task.encode("utf-8", "surrogateescape"), tail)


@dataclass(frozen=True)
class AdoptedGroup:
    """A task process group handed over by the keeper: its leader (and pidfd), its grant."""

    task: str
    pid: int
    pidfd: int
    token: int
    spec: str | None


@dataclass(frozen=True)
class Found:
    """What `open` found: the groups adopted and the lease they run under, and a keeper that
    was ended instead (why, and how many tasks it had)."""

    groups: tuple[AdoptedGroup, ...] = ()
    deadline: float = 0.0
    ended: str | None = None
    ended_tasks: int = 0


class KeeperLink:
    def __init__(self, rundir: RunDir, grace: float, stop_on_lapse: bool,
                 journal: str | None, worker_id: str, settings: str) -> None:
        self._rundir = rundir
        self._grace = grace
        self._settings = settings
        self._attach = {"grace": grace, "policy": "stop" if stop_on_lapse else "keep",
                        "journal": journal or "", "worker": worker_id, "fingerprint": settings}
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None  # a keeper we spawned
        self.pid: int | None = None
        self._claimed: set[int] = set()  # groups the keeper said (K) it ends and records
        self._eof = False

    # -- attaching ---------------------------------------------------------------------------

    def open(self) -> Found:
        """Attach to the keeper left in the runtime directory, or end its tasks (another
        version, other settings), or start a fresh one. OSError if none can be had."""
        ended, ended_tasks = None, 0
        for _ in range(ATTACH_TRIES):
            sock, hello = _connect(self._rundir)
            if sock is None:
                break
            why = _mismatch(hello, self._settings)
            if why is not None:
                _end(sock, float(hello.get("grace", 10.0)) + CLOSE_WAIT + 5.0)
                ended, ended_tasks = why, int(hello.get("tasks", 0))
                break
            found = self._adopt(sock, hello)
            if found is not None:
                return found
        self._spawn()
        for _ in range(ATTACH_TRIES):
            sock, hello = _connect(self._rundir)
            if sock is not None:
                found = self._adopt(sock, hello)
                if found is not None:
                    return Found(ended=ended, ended_tasks=ended_tasks)
        raise OSError(f"the lease keeper started in {self._rundir.path} does not answer")

    def _adopt(self, sock: socket.socket, hello: dict[str, Any]) -> Found | None:
        try:
            sock.send(b"A" + json.dumps(self._attach).encode())
            groups = []
            while True:
                record, fds, _, _ = socket.recv_fds(sock, READ_SIZE, 1)
                if record[:1] == b"G" and len(fds) == 1:
                    pid, token, task, spec = record[1:].split(b"\0", 3)
                    groups.append(AdoptedGroup(
                        task.decode("utf-8", "surrogateescape"), int(pid), fds[0], int(token),
                        None if spec == b"-" else spec[1:].decode()))
                elif record[:1] == b"D":
                    deadline = float(record[1:])
                    break
                else:  # EOF: it was closing (its lease ended); it unlinks its socket first
                    for fd in fds:
                        os.close(fd)
                    for g in groups:
                        os.close(g.pidfd)
                    sock.close()
                    return None
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        self._sock, self.pid = sock, int(hello["pid"])
        return Found(tuple(groups), deadline)

    def _spawn(self) -> None:
        """A fresh keeper, once an old one (closing) has ended its tasks and exited."""
        lock = self._rundir.keeper_lock(self._grace + CLOSE_WAIT + 5.0)
        if lock is None:
            raise OSError(f"a lease keeper in {self._rundir.path} neither answers nor exits")
        try:
            self._rundir.remove_socket()  # its keeper is gone: we hold the lock
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
                listener.bind(self._rundir.socket_address())
                listener.listen(16)
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", PROCESS, str(listener.fileno()),
                     str(self._rundir.path)],
                    pass_fds=(listener.fileno(), lock), stdin=subprocess.DEVNULL,
                    start_new_session=True)  # not ended with the agent's process group
        finally:
            os.close(lock)  # the keeper holds it now

    # -- the link, attached --------------------------------------------------------------------

    def fileno(self) -> int:
        """Readable when the keeper says something (K) or is gone (EOF): poll it."""
        assert self._sock is not None
        return self._sock.fileno()

    def extend(self, expires: float) -> None:
        """The lease now lasts until ``expires`` (CLOCK_MONOTONIC)."""
        self._send(b"L%r" % expires)

    def child_hook(self, task: str, token: int, spec: str | None) -> Callable[[], None]:
        """For a task's process, between fork and exec: register its group with the keeper.
        Only write(2)s of one record; a keeper that takes nothing for a second makes the start
        fail (the task is retried), never blocks the agent for longer."""
        fd = self.fileno()
        rest = fields(0, token, task, spec)[1:]  # everything after the pid

        def hook() -> None:
            record = b"+%d" % os.getpid() + rest
            give_up = time.monotonic() + 1.0
            while True:
                try:
                    os.write(fd, record)
                    return
                except BlockingIOError:
                    if time.monotonic() > give_up:
                        raise
                    time.sleep(0.001)

        return hook

    def announce(self, pid: int, kill_at: float) -> None:
        """The agent is stopping group ``pid`` (SIGKILL at ``kill_at``): its stop line."""
        self._send(b"-%d %r" % (pid, kill_at))

    def claimed(self, pid: int) -> bool:
        """Whether the keeper said it ends group ``pid`` itself (and so writes its stop line);
        reads what the keeper sent first."""
        self.poll()
        return pid in self._claimed and not self._eof

    def alive(self) -> bool:
        """Whether the keeper is there (its end of the link has not closed)."""
        self.poll()
        return self._sock is not None and not self._eof

    def settled(self, pid: int, by_keeper: bool) -> None:
        """Group ``pid`` has ended and its stop line is written: by us (W) or not (Y)."""
        self._claimed.discard(pid)
        self._send(b"%s%d" % (b"Y" if by_keeper else b"W", pid))

    def poll(self) -> None:
        """Take what the keeper sent: its claims, or its EOF."""
        while self._sock is not None and not self._eof:
            try:
                record = self._sock.recv(64)
            except BlockingIOError:
                return
            except OSError:
                record = b""
            if not record:
                self._eof = True
            elif record[:1] == b"K":
                self._claimed.add(int(record[1:]))

    def lost(self) -> str | None:
        """Why the keeper is gone, or None while it runs."""
        if self._sock is None:
            return "the keeper was never started"
        self.poll()
        if not self._eof:
            return None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(0.5)
            code = self._proc.returncode
            if code is not None:
                return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return f"its connection closed (keeper pid {self.pid})"

    def hand_over(self) -> None:
        """Leave every group to the keeper, for the next agent of this id (USR2)."""
        self._send(b"H")
        self._drop()

    def close(self) -> None:
        """Every task has stopped: the keeper ends what may be left, exits; it is reaped."""
        if self._sock is None:
            return
        self._send(b"Q")
        self._drop()
        if self._proc is not None:
            try:
                self._proc.wait(CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(CLOSE_WAIT)
        elif self.pid is not None:
            _wait_gone(self.pid, CLOSE_WAIT)

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send(self, record: bytes) -> None:
        if self._sock is None:
            return
        # A full socket means a keeper that stopped reading: EOF follows, or it is frozen
        # together with us. Either way there is nothing better to do than go on.
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionError):
            self._sock.send(record)


def dismiss(rundir: RunDir, wait: float) -> tuple[str, int] | None:
    """End the tasks of a keeper left in ``rundir`` (an agent that runs no ``exec`` tasks
    now, or a test cleaning up) and wait up to ``wait`` for it to exit: (what it was, how many
    tasks it had), or None if there was none."""
    if not rundir.exists():
        return None
    sock, hello = _connect(rundir)
    if sock is None:
        return None
    _end(sock, wait)
    return f"a lease keeper of version {hello.get('version')}", int(hello.get("tasks", 0))


def _connect(rundir: RunDir) -> tuple[socket.socket | None, dict[str, Any]]:
    """A connection to the keeper in ``rundir`` and its hello, or (None, {}) if none is
    there (a socket nobody listens on is removed)."""
    if not rundir.exists():
        return None, {}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(HELLO_TIMEOUT)
    try:
        sock.connect(rundir.socket_address())
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        if isinstance(exc, ConnectionRefusedError):
            rundir.remove_socket()  # its keeper was killed (`_spawn` waits for its lock)
        return None, {}
    try:
        record = sock.recv(READ_SIZE)
        hello = json.loads(record[1:]) if record[:1] == b"V" else None
    except (OSError, ValueError):
        hello = None
    if not isinstance(hello, dict):  # closing, or frozen: a fresh keeper waits for its lock
        sock.close()
        return None, {}
    return sock, hello


def _mismatch(hello: dict[str, Any], settings: str) -> str | None:
    """Why the keeper's tasks cannot be adopted, or None."""
    if hello.get("version") != keeperproc.VERSION:
        return f"the keeper speaks version {hello.get('version')}, this agent {keeperproc.VERSION}"
    theirs = hello.get("fingerprint")
    if theirs and theirs != settings:
        return "its tasks were started with another --handler or --exec"
    return None


def _end(sock: socket.socket, wait: float) -> None:
    """Tell the keeper to end its tasks (X) and wait for it to say it has (EOF)."""
    try:
        sock.send(b"X")
        sock.settimeout(wait)
        while sock.recv(READ_SIZE):
            pass
    except OSError:
        pass
    finally:
        sock.close()


def _wait_gone(pid: int, timeout: float) -> None:
    """Wait (bounded) for a process that is not our child to end."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        if not p.poll(int(timeout * 1000)):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)
