"""What a soak run watches while the churn goes on: /proc samples of its processes, a status
poller on the never-restarted supervisor, and the task processes of every killed agent until
they are gone (or adopted by the next agent with its id).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _soakprocs import Info, birth, fd_count, rss_kb

from corral.client.control import ControlClient
from corral.client.errors import ControlFailed, Unreachable


@dataclass(frozen=True)
class Sample:
    t: float
    kind: str
    key: str  # one process: kind, worker, pid and start
    born: float  # the process's start, CLOCK_MONOTONIC
    rss_kb: int
    fds: int


class Sampler:
    """RSS and open descriptors of every long-running process of the run, a round at a time.
    Task processes (``sleep``) are counted, not sampled."""

    KINDS = ("supervisor-a", "supervisor-b", "agent", "keeper", "dashboard")

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.rounds: list[float] = []
        self.tasks: list[tuple[float, dict[str, int]]] = []  # per round: live task processes
        self.loadavg: list[float] = []

    def round(self, procs: list[Info]) -> None:
        t = time.monotonic()
        self.rounds.append(t)
        per_site: dict[str, int] = {}
        for p in procs:
            if p.kind == "task":
                site = p.worker.split("-", 1)[0]
                per_site[site] = per_site.get(site, 0) + 1
            elif p.kind in self.KINDS:
                rss, fds = rss_kb(p.pid), fd_count(p.pid)
                if rss is not None and fds is not None:
                    key = f"{p.kind}:{p.worker}:{p.pid}:{p.start}"
                    self.samples.append(Sample(t, p.kind, key, birth(p.start), rss, fds))
        self.tasks.append((t, per_site))
        with contextlib.suppress(OSError, ValueError):
            self.loadavg.append(float(Path("/proc/loadavg").read_text().split()[0]))


class Poller(threading.Thread):
    """``status`` from one supervisor every ``every`` seconds, through one control client:
    each answer's latency, each poll left unanswered within ``timeout``, and the tables."""

    def __init__(self, control: str, every: float, timeout: float) -> None:
        super().__init__(name="soak-status-poller", daemon=True)
        self.control, self.every, self.timeout = control, every, timeout
        self.latencies: list[float] = []
        self.failures: list[tuple[float, str]] = []
        self.tables: list[tuple[float, dict[str, int]]] = []  # every answer's, with its time
        self._halt = threading.Event()

    def run(self) -> None:
        with ControlClient(self.control, timeout=self.timeout) as client:
            while not self._halt.is_set():
                t0 = time.monotonic()
                try:
                    st = client.call("status")
                except (Unreachable, ControlFailed) as exc:
                    self.failures.append((t0, str(exc)[:200]))
                else:
                    self.latencies.append(time.monotonic() - t0)
                    self.tables.append((t0, st.get("tables", {})))
                self._halt.wait(max(0.0, self.every - (time.monotonic() - t0)))

    def stop(self) -> None:
        self._halt.set()
        self.join(self.timeout + 5)


@dataclass
class Tracked:
    """A task process of an agent that was killed."""

    site: str
    worker: str
    task: str
    pid: int
    killed_at: float
    deadline: float  # the kill + lease + margin + 1 s: past it, the process is left behind
    late: bool  # the agent came back only after its lease had ended
    gone_at: float | None = None
    adopted: bool = False
    judged: bool = False
    left: bool = False  # alive past the deadline, adopted by nobody
    pidfd: int = field(default=-1, repr=False)


class Leftovers(threading.Thread):
    """Watches the task processes of killed agents through pidfds (readable when a process
    ends, whoever reaps it): the time each took to go after its agent's kill, and whether any
    outlived its lease without a new agent adopting it."""

    POLL_MS = 50  # how soon a process tracked meanwhile is watched too

    def __init__(self) -> None:
        super().__init__(name="soak-leftovers", daemon=True)
        self.tracked: list[Tracked] = []
        self._open: dict[int, Tracked] = {}  # pidfd -> tracked, not gone yet
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def track(self, site: str, procs: list[Info], killed_at: float, deadline: float,
              late: bool) -> int:
        n = 0
        for p in procs:
            try:
                fd = os.pidfd_open(p.pid)
            except OSError:  # gone already (before the kill: not one it left)
                continue
            tr = Tracked(site, p.worker, p.task, p.pid, killed_at, deadline, late, pidfd=fd)
            with self._lock:
                self.tracked.append(tr)
                self._open[fd] = tr
            n += 1
        return n

    def run(self) -> None:
        while not self._halt.is_set():
            with self._lock:
                fds = list(self._open)
            if not fds:
                self._halt.wait(self.POLL_MS / 1000)
                continue
            poll = select.poll()
            for fd in fds:
                poll.register(fd, select.POLLIN)
            ready = poll.poll(self.POLL_MS)
            t = time.monotonic()
            with self._lock:
                for fd, _ in ready:
                    self._close(fd, t)

    def _close(self, fd: int, gone_at: float | None) -> None:
        tr = self._open.pop(fd, None)
        if tr is not None:
            tr.gone_at = gone_at
            os.close(fd)

    def judge(self, now: float, adopted: Any) -> None:
        """Past its deadline, a tracked process still alive is either adopted (the same pid,
        or the task, in an ``adopt`` line of the next agent: ``adopted(site, worker, since)``)
        or left behind (watched on until it goes)."""
        with self._lock:
            due = [tr for tr in self.tracked if not tr.judged and tr.deadline <= now]
        for tr in due:
            tr.judged = True
            if tr.gone_at is not None and tr.gone_at <= tr.deadline:
                continue
            took = adopted(tr.site, tr.worker, tr.killed_at)
            if (tr.task, tr.pid) in took or (tr.task, None) in took:
                tr.adopted = True
                with self._lock:
                    self._close(tr.pidfd, None)
            else:
                tr.left = True

    def pending(self) -> float | None:
        """The latest deadline not judged yet, or None."""
        with self._lock:
            due = [tr.deadline for tr in self.tracked if not tr.judged]
        return max(due) if due else None

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        with self._lock:
            for fd in list(self._open):
                self._close(fd, None)
