"""The processes of a soak run (scripts/bench soak): two sites on loopback — a supervisor and
its fleet of ``exec`` workers each — a dashboard, and what /proc says about all of them.

Every process the run starts carries ``CORRAL_SOAK_RUN`` in its environment, and the lease
keepers and task processes the agents start inherit it: a /proc scan tells ours from everyone
else's on a shared machine (other runs use ``sleep 100000`` too), wherever the agents' process
layout puts them (a task is in a session of its own; a keeper may be). `Run.close` stops
everything by pid, each checked against its start time first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench)

from corral.client.control import request
from corral.client.errors import ControlFailed, Unreachable

BIN = Path(sys.executable).parent
EXEC = "sleep 100000"
HZ = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True)
class Info:
    """One live process of ours, as a scan found it."""

    pid: int
    start: int  # /proc starttime, clock ticks after boot: with the pid, the process's identity
    kind: str  # supervisor-a | supervisor-b | agent | keeper | task | dashboard | other
    worker: str  # agents, keepers, tasks: the worker id ("" for the rest)
    task: str  # tasks: the task id

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start


def stat_of(pid: int) -> tuple[str, int] | None:
    """(state letter, starttime) of a process, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[19])  # fields 3 and 22 of proc(5)


def alive(pid: int, start: int) -> bool:
    """The process (pid, start) still runs (a zombie has ended)."""
    st = stat_of(pid)
    return st is not None and st[1] == start and st[0] != "Z"


def birth(start: int) -> float:
    """A process's start time on CLOCK_MONOTONIC (from its starttime; ~10 ms)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.monotonic() - (uptime - start / HZ)


def rss_kb(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB
    except (OSError, IndexError, ValueError):
        return None


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class ProcScan:
    """Finds this run's processes in /proc. Each (pid, start) is read once (its environment
    and command line never change); entries of gone pids are dropped at each scan."""

    def __init__(self, run_id: str) -> None:
        self.marker = f"CORRAL_SOAK_RUN={run_id}".encode()
        self._cache: dict[int, tuple[int, Info | None]] = {}

    def scan(self) -> list[Info]:
        seen: dict[int, tuple[int, Info | None]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            st = stat_of(pid)
            if st is None or st[0] == "Z":
                continue
            cached = self._cache.get(pid)
            if cached is None or cached[0] != st[1]:
                cached = (st[1], self._classify(pid, st[1]))
            seen[pid] = cached
        self._cache = seen
        return [info for _, info in seen.values() if info is not None]

    def _classify(self, pid: int, start: int) -> Info | None:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if self.marker not in env:
            return None
        var = {k.decode(errors="replace"): v.decode(errors="replace")
               for k, _, v in (e.partition(b"=") for e in env)}
        worker = var.get("CORRAL_SOAK_WORKER", "")
        if "CORRAL_TASK" in var:  # set by the exec handler for each task's process
            return Info(pid, start, "task", worker, var["CORRAL_TASK"])
        if b"keeperproc" in argv:
            return Info(pid, start, "keeper", worker, "")
        return Info(pid, start, var.get("CORRAL_SOAK_ROLE", "other"), worker, "")


class Run:
    """Where a run's processes are started and how they are all stopped."""

    def __init__(self, workdir: Path | None) -> None:
        self.id = f"{os.getpid()}-{time.time_ns()}"
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="corral-soak-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        # The agents' runtime directory (a keeper's socket may live there): short, the run's own.
        self.runtime = Path(tempfile.mkdtemp(prefix="corral-soak-", dir="/tmp"))
        self.scan = ProcScan(self.id)
        self.popens: list[subprocess.Popen[bytes]] = []

    def spawn(self, log: str, role: str, worker: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "CORRAL_LOG_JSON": "1", "CORRAL_SOAK_RUN": self.id,
               "CORRAL_SOAK_ROLE": role, "CORRAL_SOAK_WORKER": worker,
               "XDG_RUNTIME_DIR": str(self.runtime)}
        with open(self.dir / f"{log}.log", "ab") as fh:
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=fh,
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.popens.append(p)
        return p

    def close(self) -> dict[str, int]:
        """Stop everything: the agents first (SIGTERM twice: drain, then stop at once), the
        rest by SIGTERM, then SIGKILL by pid to anything of ours a scan still finds. Returns
        what had to be killed that way, by kind."""
        live = [p for p in self.popens if p.poll() is None]
        for _ in range(2):
            for p in live:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
            _wait_all(live, 0.5)
        _wait_all(live, 10.0)
        for p in live:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
        _wait_all(live, 5.0)
        killed: dict[str, int] = {}
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            left = self.scan.scan()
            if not left:
                break
            for info in left:
                if alive(info.pid, info.start):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(info.pid, signal.SIGKILL)
                        killed[info.kind] = killed.get(info.kind, 0) + 1
            time.sleep(0.1)
        shutil.rmtree(self.runtime, ignore_errors=True)
        return killed


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))


@dataclass(frozen=True)
class Timing:
    lease: float
    margin: float
    tick: float
    warmup: float


class Site:
    """One supervisor and its fleet of ``exec`` workers (ids ``<name>-w<i>``), its task file
    and its control endpoint."""

    def __init__(self, run: Run, name: str, tasks: int, workers: int, max_load: float,
                 timing: Timing) -> None:
        self.run, self.name, self.timing, self.max_load = run, name, timing, max_load
        self.dir = run.dir / name
        (self.dir / "journals").mkdir(parents=True, exist_ok=True)
        self.tasks_file = self.dir / "tasks.txt"
        self.listed: deque[str] = deque(f"{name}-{i:07d}" for i in range(tasks))
        self.fresh = tasks  # the next fresh id's number
        self._write_tasks()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.control = f"tcp://127.0.0.1:{free_port()}"
        self.workers = [f"{name}-w{i}" for i in range(workers)]
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.incarnations = 0
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.started: dict[str, int] = {}  # worker -> agents started with its id

    # -- the supervisor -------------------------------------------------------------------------

    def start_supervisor(self) -> None:
        t = self.timing
        self.incarnations += 1
        args = [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint,
                "--control", self.control, "--tasks", f"file:{self.tasks_file}",
                "--state-file", str(self.dir / "supervisor.epoch"),
                "--expect-workers", str(len(self.workers)), "--warmup", f"{t.warmup:g}",
                "--lease", f"{t.lease:g}", "--lease-margin", f"{t.margin:g}",
                "--tick", f"{t.tick:g}", "--log-level", "warning"]
        self.supervisor = self.run.spawn(f"{self.name}/supervisor.{self.incarnations}",
                                         f"supervisor-{self.name}", "", args)

    def kill_supervisor(self) -> float:
        assert self.supervisor is not None
        t = time.monotonic()
        self.supervisor.kill()
        self.supervisor.wait(10)
        return t

    def status(self, timeout: float = 3.0) -> dict[str, Any] | None:
        try:
            return request(self.control, "status", {}, timeout=timeout)  # type: ignore[no-any-return]
        except (Unreachable, ControlFailed):
            return None

    def ctl(self, *args: str) -> subprocess.Popen[str]:
        """``corralctl ARGS`` against this supervisor, not waited for (it takes a second to
        start on a loaded machine; the churn goes on meanwhile)."""
        return subprocess.Popen([str(BIN / "corralctl"), "--control", self.control,
                                 "--timeout", "5", *args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    # -- workers --------------------------------------------------------------------------------

    def start_agent(self, wid: str) -> subprocess.Popen[bytes]:
        n = self.started[wid] = self.started.get(wid, 0) + 1
        args = [str(BIN / "corral-worker"), "run", "--supervisor", self.endpoint, "--id", wid,
                "--handler", "exec", "--exec", EXEC, "--stop-grace", "0.5",
                "--max-load", f"{self.max_load:g}", "--drain-timeout", "5",
                "--journal", str(self.journal(wid, n)), "--log-level", "warning"]
        p = self.agents[wid] = self.run.spawn(f"{self.name}/{wid}.{n}", "agent", wid, args)
        return p

    def kill_agent(self, wid: str) -> float:
        """SIGKILL to the agent alone (a crash: what it started is left to its keeper)."""
        p = self.agents.pop(wid)
        t = time.monotonic()
        p.kill()
        p.wait(10)
        return t

    def journal(self, wid: str, n: int) -> Path:
        return self.dir / "journals" / f"{wid}.{n}.jsonl"

    def adopted(self, wid: str, since: float) -> set[tuple[str, int | None]]:
        """(task, pid) of the ``adopt`` lines any agent with this id journaled since ``since``
        (an agent that took a running task process over from its predecessor's keeper)."""
        out: set[tuple[str, int | None]] = set()
        for n in range(1, self.started.get(wid, 0) + 1):
            with contextlib.suppress(FileNotFoundError):
                for line in self.journal(wid, n).read_text().splitlines():
                    if '"adopt"' in line and line.endswith("}"):
                        e = json.loads(line)
                        if e.get("event") == "adopt" and e.get("t", 0.0) >= since:
                            out.add((e["task"], e.get("pid")))
        return out

    def lease_losses(self) -> int:
        n = 0
        for path in self.run.dir.glob(f"{self.name}/{self.name}-w*.log"):
            n += path.read_text(errors="replace").count('"lease lost')
        return n

    # -- the task list --------------------------------------------------------------------------

    def edit(self, n: int) -> None:
        """Replace the ``n`` oldest tasks with fresh ids (the count stays)."""
        for _ in range(min(n, len(self.listed))):
            self.listed.popleft()
            self.listed.append(f"{self.name}-{self.fresh:07d}")
            self.fresh += 1
        self._write_tasks()

    def _write_tasks(self) -> None:
        tmp = self.tasks_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{t}\n" for t in self.listed))
        tmp.replace(self.tasks_file)  # the supervisor never reads half a file
