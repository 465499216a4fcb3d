"""The lease keeper process: holds the agent's ``exec`` task groups to the lease, whatever
state the agent is in — frozen, gone, or replaced by its next incarnation (docs/worker.md, "The
lease keeper" and "Hand-over and adoption", for operators).

Run by `corral.worker.keeper` as ``python -I -S keeperproc.py LISTEN_FD DIR`` in a session of
its own — the standard library only, so it starts in milliseconds and stays near 12 MB. It
listens on ``DIR/keeper.sock`` (``SOCK_SEQPACKET``, bound by the agent that spawned it) and
serves one agent at a time; each record is one message. On accepting an agent it says
``V{json}`` (version, pid, grace, the settings fingerprint, tasks held); the agent answers:

    X              end every task (SIGTERM, GRACE, SIGKILL) and exit: another version, or
                   other settings (V and X never change, so any two versions understand this)
    A{json}        attach, with the agent's settings (grace, policy, journal, worker, its
                   fingerprint); the keeper sends each live group as ``G<fields>`` with its
                   pidfd (SCM_RIGHTS), then ``D<deadline>``: the agent adopts them

Attached, the agent sends:

    L<deadline>    the lease now lasts until <deadline> (CLOCK_MONOTONIC)
    +<fields>      a task's group starts (leader pid = group id); sent by the task's own process
                   between fork and exec, so no freeze of the agent leaves a group unknown
    -<pid> <t>     the agent is stopping that group (SIGKILL at <t>): its stop, its stop line
    W<pid> Y<pid>  the agent wrote that group's stop line (W), or leaves it to the keeper (Y)
    H              hand-over: the agent leaves; keep the groups for its successor
    Q              the agent stopped its tasks and leaves: end what is left, exit

and the keeper sends ``K<pid>`` before it signals a group itself (the lease lapsed), so the
agent knows that stop line is the keeper's. At the lease's end it reads the agent first: a
stop announced there (-) is the agent's, and a renewal there (L: sent after the agent's own
lapse, which stopped every group it had seen no K for) means the lease has not ended for the
keeper. Fields are ``pid NUL token NUL task NUL spec`` (spec: ``-`` for none, else ``S`` and
the JSON text). A stop line is written once: by the keeper for a stop it made (K) or a group
that ended while no agent was there, else by the agent.

Lifecycle::

    waiting  -> attached   an agent said A
    attached -> waiting    H, or the agent's end closed (it died): groups kept until the lease
                           ends; a leader that ends meanwhile is recorded by the keeper
    attached -> closing    Q
    waiting  -> closing    the lease ended (every group: SIGTERM, GRACE, SIGKILL), X, or
                           nothing left to keep; the socket is unlinked first
    closing  -> exited     every group ended, or LAST_WAIT after the last SIGKILL was due

It ignores SIGTERM, SIGINT and SIGHUP: the agent, not a service manager's stop, decides how
tasks stop. Only SIGKILL ends it early (an attached agent notices at once: EOF).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import time
from _json import encode_basestring_ascii as _quote

VERSION = 1  # of this protocol; an agent of another version ends the tasks and starts fresh
SOCKET = "keeper.sock"
START_WAIT = 10.0  # a new keeper's wait for its first agent
HELLO_WAIT = 5.0  # a connection that says neither A nor X within this is dropped
LAST_WAIT = 5.0  # closing: how long after the last SIGKILL was due to wait for the ends
READ_SIZE = 256 * 1024  # one record: a spec is at most 64 KiB of JSON
WAITING, ATTACHED, CLOSING = "waiting", "attached", "closing"


class Group:
    __slots__ = ("announced", "cause", "claimed", "fields", "kill_at", "pid", "pidfd", "task",
                 "verdict")

    def __init__(self, pid: int, pidfd: int, fields: bytes, task: str) -> None:
        self.pid, self.pidfd, self.fields, self.task = pid, pidfd, fields, task
        self.announced = False  # the agent is stopping it: the agent records its end
        self.claimed = False  # the keeper signalled it first: the keeper records its end
        self.kill_at: float | None = None
        self.verdict: str | None = None  # "agent" (W) or "keeper" (Y), before its end was seen
        self.cause = ""


class Keeper:
    def __init__(self, listener: socket.socket, directory: str) -> None:
        self.listener = listener
        self.dirfd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
        self.inode = _inode(self.dirfd)
        self.state = WAITING
        self.conn: socket.socket | None = None  # the agent, or a connection saying hello
        self.waiter: socket.socket | None = None  # sent X: closed when the keeper exits
        self.hello_until: float | None = None  # set while `conn` has not attached yet
        self.grace, self.stop_on_lapse, self.journal, self.worker = 10.0, True, "", ""
        self.fingerprint = ""
        self.deadline = 0.0
        self.idle_until = time.monotonic() + START_WAIT
        self.give_up = 0.0
        self.groups: dict[int, Group] = {}  # pidfd -> group
        self.by_pid: dict[int, Group] = {}  # leader pid -> its latest group
        self.pending: dict[int, tuple[Group, float]] = {}  # ended; the agent says who records

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        while True:
            now = time.monotonic()
            if self.state == CLOSING and (not self.groups or now >= self.give_up):
                return 0
            if self.state == WAITING and (now >= self.deadline if self.groups else
                                          self.conn is None and now >= self.idle_until):
                self.close("lease", signal.SIGTERM)  # no agent came back within the lease
                continue
            if self.state == ATTACHED and self.stop_on_lapse and now >= self.deadline:
                self.lapse()
            self.escalate(now)
            poll = select.poll()
            if self.state == WAITING and self.conn is None:
                poll.register(self.listener, select.POLLIN)
            if self.conn is not None:
                poll.register(self.conn, select.POLLIN)
            for fd in self.groups:
                poll.register(fd, select.POLLIN)
            wait = self.next_due(time.monotonic())
            ready = {fd for fd, _ in poll.poll(None if wait is None else int(wait * 1000) + 1)}
            for fd in ready:
                if fd in self.groups:  # first: what ended while the agent was still there
                    self.ended(self.groups[fd])
            if self.conn is not None and self.conn.fileno() in ready:
                if self.hello_until is not None:
                    self.read_hello()
                else:
                    self.read_agent()
            elif self.hello_until is not None and time.monotonic() >= self.hello_until:
                self.drop_conn()
            if self.listener.fileno() in ready and self.conn is None:
                self.accept()

    def next_due(self, now: float) -> float | None:
        times = [g.kill_at for g in self.groups.values() if g.kill_at is not None]
        if self.state == CLOSING:
            times.append(self.give_up)
        elif self.state == WAITING and (self.groups or self.conn is None):
            times.append(self.deadline if self.groups else self.idle_until)
        elif self.stop_on_lapse and any(not (g.claimed or g.announced)
                                        for g in self.groups.values()):
            times.append(self.deadline)
        if self.hello_until is not None:
            times.append(self.hello_until)
        return max(0.0, min(times) - now) if times else None

    def lapse(self) -> None:
        """The lease's end passed with the agent attached: end every group it is not ending.
        The agent acts on the same deadline, so what it sent first is read first: a stop it
        announced is its own, and a renewal means the lease did not end. A leader already gone
        was stopped by the agent (its announcement still on the way) or ended by itself: the
        agent records either, so a claim — and a line of ours — would be a second."""
        self.read_agent()
        if self.state != ATTACHED or time.monotonic() < self.deadline:
            return
        for g in list(self.groups.values()):
            if not (g.announced or g.claimed or _gone(g.pidfd)):
                self.claim(g, "lease", signal.SIGTERM, tell=True)

    def escalate(self, now: float) -> None:
        for g in self.groups.values():
            if g.kill_at is not None and now >= g.kill_at:
                _killpg(g.pid, signal.SIGKILL)
                g.kill_at = None

    # -- connections ------------------------------------------------------------------------

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(HELLO_WAIT)  # a peer that stops reading is dropped, never waited on
        hello = {"version": VERSION, "pid": os.getpid(), "grace": self.grace,
                 "fingerprint": self.fingerprint, "tasks": len(self.groups)}
        try:
            conn.send(b"V" + json.dumps(hello).encode())
        except OSError:
            conn.close()
            return
        self.conn, self.hello_until = conn, time.monotonic() + HELLO_WAIT

    def read_hello(self) -> None:
        assert self.conn is not None
        try:
            record = self.conn.recv(READ_SIZE)
        except OSError:
            record = b""
        if record[:1] == b"X":
            self.waiter, self.conn, self.hello_until = self.conn, None, None
            self.close("mismatch", signal.SIGTERM)  # `waiter` stays open: its EOF says "done"
        elif record[:1] == b"A" and self.groups and time.monotonic() >= self.deadline:
            self.close("lease", signal.SIGTERM)  # too late: nothing to adopt
        elif record[:1] == b"A":
            self.attach(json.loads(record[1:]))
        else:
            self.drop_conn()

    def attach(self, opts: dict[str, object]) -> None:
        conn = self.conn
        assert conn is not None
        self.grace = float(opts["grace"])  # type: ignore[arg-type]
        self.stop_on_lapse = opts["policy"] == "stop"
        self.journal, self.worker = str(opts["journal"]), str(opts["worker"])
        self.fingerprint = str(opts["fingerprint"])
        try:
            for g in list(self.groups.values()):
                if not (g.announced or g.claimed or g.verdict):
                    socket.send_fds(conn, [b"G" + g.fields], [g.pidfd])
                elif g.verdict is None:
                    g.verdict = "keeper"  # its agent's stop, finished and recorded here
            conn.send(b"D%r" % self.deadline)
        except OSError:
            self.drop_conn()
            return
        conn.setblocking(False)
        self.hello_until, self.state = None, ATTACHED

    def drop_conn(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.hello_until = None, None

    def read_agent(self) -> None:
        while self.conn is not None and self.state == ATTACHED:
            try:
                record = self.conn.recv(READ_SIZE)
            except (BlockingIOError, TimeoutError):
                return
            except OSError:  # ECONNRESET and the like: the agent is gone
                record = b""
            kind, body = record[:1], record[1:]
            if not record or kind == b"H":
                self.detach()
            elif kind == b"Q":
                self.close("quit", signal.SIGKILL)  # it tried: only the stubborn are left
            elif kind == b"L":
                self.deadline = max(self.deadline, float(body))
            elif kind == b"+":
                self.watch(body)
            elif kind == b"-":
                pid, _, kill_at = body.partition(b" ")
                g = self.by_pid.get(int(pid))
                if g is not None:
                    t = float(kill_at)
                    g.announced, g.kill_at = True, t if g.kill_at is None else min(g.kill_at, t)
            elif kind in (b"W", b"Y"):
                self.verdict(int(body), "agent" if kind == b"W" else "keeper")

    def detach(self) -> None:
        """The agent left (H) or died: what ended meanwhile is the keeper's to record now."""
        self.drop_conn()
        self.state = WAITING
        self.idle_until = time.monotonic()
        for g, t in self.pending.values():
            self.record(g, t)
        self.pending.clear()

    # -- groups -----------------------------------------------------------------------------

    def watch(self, fields: bytes) -> None:
        pid, _, rest = fields.partition(b"\0")
        try:
            pidfd = os.pidfd_open(int(pid))
        except OSError:  # it is gone already: the agent sees that itself
            return
        task = rest.split(b"\0")[1].decode("utf-8", "replace")
        g = self.groups[pidfd] = self.by_pid[int(pid)] = Group(int(pid), pidfd, fields, task)
        if self.state == CLOSING:
            self.claim(g, "quit", signal.SIGKILL)

    def claim(self, g: Group, cause: str, sig: signal.Signals, tell: bool = False) -> None:
        """The keeper ends ``g`` itself (and so records it); the agent hears so first."""
        g.claimed, g.cause = True, cause
        if tell and self.conn is not None:
            with contextlib.suppress(OSError):  # full: the agent is frozen, K's queued; or gone
                self.conn.send(b"K%d" % g.pid)
        _killpg(g.pid, sig)
        g.kill_at = None if sig == signal.SIGKILL else time.monotonic() + self.grace

    def verdict(self, pid: int, who: str) -> None:
        ended = self.pending.pop(pid, None)
        if ended is not None:
            if who == "keeper":
                self.record(*ended)
            return
        g = self.by_pid.get(pid)
        if g is not None:
            g.verdict = who

    def ended(self, g: Group) -> None:
        """``g``'s leader ended: take the stragglers; record it, or let the agent say."""
        del self.groups[g.pidfd]
        if self.by_pid.get(g.pid) is g:
            del self.by_pid[g.pid]
        os.close(g.pidfd)
        t = time.monotonic()
        _killpg(g.pid, signal.SIGKILL)  # no member outlives its leader
        if g.verdict == "agent":
            return
        if self.state != ATTACHED or g.verdict == "keeper" or (g.claimed and not g.announced):
            self.record(g, t)
        else:
            self.pending[g.pid] = (g, t)

    def close(self, cause: str, sig: signal.Signals) -> None:
        """Nobody will attach again: unlink the socket, end every group (announced ones at the
        agent's own SIGKILL time), exit once they have ended."""
        if _inode(self.dirfd) == self.inode:  # still ours: not a successor's fresh keeper
            with contextlib.suppress(OSError):
                os.unlink(SOCKET, dir_fd=self.dirfd)
        self.listener.close()
        self.drop_conn()
        self.state = CLOSING
        for g in list(self.groups.values()):
            if not (g.claimed or g.announced):
                self.claim(g, cause, sig)
        for g, t in self.pending.values():
            self.record(g, t)
        self.pending.clear()
        kills = [g.kill_at for g in self.groups.values() if g.kill_at is not None]
        self.give_up = max(kills, default=time.monotonic()) + LAST_WAIT

    def record(self, g: Group, t: float) -> None:
        """The journal stop line of a group the keeper saw end."""
        if not self.journal:
            return
        cause = g.cause or ("stop" if g.announced else "exited")
        line = (f'{{"t":{t!r},"event":"stop","task":{_quote(g.task)},'
                f'"worker":{_quote(self.worker)},"by":"keeper","cause":"{cause}",'
                f'"deadline":{self.deadline!r}}}\n')
        try:
            fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _inode(dirfd: int) -> tuple[int, int] | None:
    try:
        st = os.stat(SOCKET, dir_fd=dirfd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _gone(pidfd: int) -> bool:
    """Whether the process behind ``pidfd`` has exited (readable), without waiting."""
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return bool(p.poll(0))


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or a setuid member
        os.killpg(pgid, sig)


def main(argv: list[str]) -> int:
    fd, directory = argv
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    listener = socket.socket(fileno=int(fd))
    listener.setblocking(False)
    return Keeper(listener, directory).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
