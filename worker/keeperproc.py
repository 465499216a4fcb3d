"""The lease keeper process: ends the agent's ``exec`` tasks when the agent cannot
(docs/worker.md, "The lease keeper", for operators).

Run by `corral.worker.keeper.KeeperLink` as ``python -I -S keeperproc.py FD GRACE POLICY JOURNAL
WORKER`` — the standard library only (it imports nothing of corral, so it starts in a few
milliseconds and stays under 10 MB). FD is its end of a ``SOCK_SEQPACKET`` socket pair with
the agent; each record is one message:

    L<deadline>      the worker's lease now lasts until <deadline> (CLOCK_MONOTONIC seconds)
    +<pid> <task>    a task's process group (leader <pid>, group id <pid>) is starting; sent
                     by the task's own process between fork and exec, so a freeze of the agent
                     at any instant leaves no group unknown to the keeper

It watches each leader through a pidfd (readable when the process ends, reaped or not) and:

    lease lapsed (POLICY stop)  SIGTERM to every group it has not signalled yet, SIGKILL to the
                                group GRACE seconds later; again for any group that registers
                                after the deadline. Renewals move the deadline on.
    a leader ended              SIGKILL to what is left of its group (what the agent does too
                                when a task's leader ends), and, if the keeper had signalled
                                it, a journal stop line (``"by": "keeper"``) with the time it
                                ended; else the agent writes that — unless the agent turns
                                out to be dead (its EOF comes within `ORPHAN_WAIT`: a leader's
                                PDEATHSIG comes when the agent's *thread* that started it
                                ends, which may be before the agent's sockets close)
    the agent's end closed      (the agent died, or closed it on the way out) SIGKILL to every
                                group, stop lines for those, exit 0 once all have ended (at
                                most `LAST_WAIT` seconds)

It ignores SIGTERM, SIGINT and SIGHUP: a service manager's stop or a terminal's Ctrl-C reach
the agent's whole group, and the agent — not the keeper — decides how its tasks stop. Only
SIGKILL ends it early, and the agent notices that at once (its end of the pair reads EOF).

Lifecycle::

    watching -> (lease lapsed) terminating groups -> watching    renewed, new groups start
    watching -> closing      the agent's end closed
    closing  -> exited       every group ended, or LAST_WAIT passed
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from _json import encode_basestring_ascii as _quote

LAST_WAIT = 5.0  # after the agent is gone: how long to wait for the killed leaders to end
ORPHAN_WAIT = 2.0  # a leader that ended unsignalled is the keeper's to record if the agent
#                    turns out to be dead within this long
READ_SIZE = 4096


class Group:
    __slots__ = ("kill_at", "pid", "pidfd", "signalled", "task")

    def __init__(self, pid: int, task: str, pidfd: int) -> None:
        self.pid, self.task, self.pidfd = pid, task, pidfd
        self.signalled = False  # the keeper sent it a signal: it writes the stop line
        self.kill_at: float | None = None  # when to SIGKILL it (after a SIGTERM for the lease)


class LeaseKeeper:
    def __init__(self, fd: int, grace: float, stop_on_lapse: bool, journal: str,
                 worker: str) -> None:
        self.fd, self.grace, self.stop_on_lapse = fd, grace, stop_on_lapse
        self.journal, self.worker = journal, worker
        self.deadline = 0.0
        self.groups: dict[int, Group] = {}  # pidfd -> Group
        self.poll = select.poll()
        self.poll.register(fd, select.POLLIN)
        self.agent_gone = False
        # Leaders that ended on their own while the agent seemed alive: (task, end time).
        self.unsignalled: list[tuple[str, float]] = []

    def run(self) -> int:
        closing_until: float | None = None
        while True:
            now = time.monotonic()
            wait = self.next_due(now)
            if closing_until is not None:
                if not self.groups or now >= closing_until:
                    return 0
                wait = min(wait, closing_until - now)
            timeout = None if wait == float("inf") else max(0, int(wait * 1000) + 1)
            ready = [fd for fd, _ in self.poll.poll(timeout)]
            if self.fd in ready:  # first: a dead agent's EOF comes before its PDEATHSIGs
                self.read_agent()
            for fd in ready:
                if fd != self.fd:
                    self.ended(fd)
            now = time.monotonic()
            if self.agent_gone and closing_until is None:
                closing_until = now + LAST_WAIT
                self.poll.unregister(self.fd)
                for g in self.groups.values():
                    self.signal(g, signal.SIGKILL)
                for task, t in self.unsignalled:  # they died with the agent after all
                    if now - t <= ORPHAN_WAIT:
                        self.record(task, t)
            self.unsignalled = [(task, t) for task, t in self.unsignalled
                                if now - t <= ORPHAN_WAIT]
            self.enforce(now)

    def next_due(self, now: float) -> float:
        due = float("inf")
        if self.stop_on_lapse and any(not g.signalled for g in self.groups.values()):
            due = self.deadline
        for g in self.groups.values():
            if g.kill_at is not None:
                due = min(due, g.kill_at)
        return due - now

    def read_agent(self) -> None:
        while True:
            try:
                record = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError:  # ECONNRESET and the like: the agent is gone
                record = b""
            if not record:
                self.agent_gone = True
                return
            kind, body = record[:1], record[1:]
            if kind == b"L":
                self.deadline = max(self.deadline, float(body))
            elif kind == b"+":
                pid, _, task = body.partition(b" ")
                self.watch(int(pid), task.decode("utf-8", "replace"))

    def watch(self, pid: int, task: str) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # it is gone already
            return
        self.groups[pidfd] = Group(pid, task, pidfd)
        self.poll.register(pidfd, select.POLLIN)

    def enforce(self, now: float) -> None:
        for g in list(self.groups.values()):
            if self.stop_on_lapse and now >= self.deadline and not g.signalled:
                self.signal(g, signal.SIGTERM)
                g.kill_at = now + self.grace
            elif g.kill_at is not None and now >= g.kill_at:
                self.signal(g, signal.SIGKILL)
                g.kill_at = None

    def signal(self, g: Group, sig: signal.Signals) -> None:
        g.signalled = True
        _killpg(g.pid, sig)

    def ended(self, pidfd: int) -> None:
        """The leader behind ``pidfd`` has ended: take its stragglers, record it."""
        g = self.groups.pop(pidfd, None)
        self.poll.unregister(pidfd)
        os.close(pidfd)
        if g is None:
            return
        t = time.monotonic()
        _killpg(g.pid, signal.SIGKILL)  # no member outlives its leader, whoever else is alive
        if g.signalled or self.agent_gone:
            self.record(g.task, t)
        else:
            self.unsignalled.append((g.task, t))

    def record(self, task: str, t: float) -> None:
        """A journal stop line for a task the keeper saw end."""
        if self.journal:
            line = (f'{{"t":{t!r},"event":"stop","task":{_quote(task)},'
                    f'"worker":{_quote(self.worker)},"by":"keeper","deadline":{self.deadline!r}}}\n')
            fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def _killpg(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # gone already, or a setuid member
        return False
    return True


def main(argv: list[str]) -> int:
    fd, grace, policy, journal, worker = argv
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    os.set_blocking(int(fd), False)
    keeper = LeaseKeeper(int(fd), float(grace), policy == "stop", journal if journal != "-" else "",
                    worker)
    return keeper.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
