"""The real processes of a chaos run — one `corral-supervisor run` and its `corral-worker run`s
on loopback, every worker behind its own route of the fault-injecting proxy — and what the
checker needs to know of them: when each process started, was killed, frozen and thawed.

Every process is started in a new session and stopped by its pid (a worker by its process
group). An ``exec`` worker's task processes outlive it (its lease keeper holds them, for the
next process with its id): the workers' runtime directory (``XDG_RUNTIME_DIR``) is the run's
own, and `stop_all` ends the keepers left in it, with their tasks. `stop_all` is the one way
out.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.client.control import request
from corral.client.errors import ControlFailed, Unreachable
from corral.worker.keeper import dismiss
from corral.worker.rundir import RunDir

from .checker import Process
from .ports import free_port
from .proxy import Fault, Proxy
from .schedule import Timings

BIN = Path(sys.executable).parent
# The workers' handler: log runs nothing (the agent is the task); exec runs one `sleep` process
# per task, which a freeze of the agent does not stop (its lease keeper does). A short stop
# grace: `sleep` ends at SIGTERM anyway.
HANDLERS = {
    "log": ["--handler", "log"],
    "exec": ["--handler", "exec", "--exec", "sleep 100000", "--stop-grace", "0.5"],
}


@dataclass
class Proc:
    """One process of the run. ``worker`` is None for the supervisor."""

    key: str
    worker: str | None
    popen: subprocess.Popen[bytes]
    log: Path
    journal: Path | None
    started: float
    ended: float | None = None
    killed: bool = False  # ended by us with SIGKILL (an exit code then means nothing)
    asked_to_stop: bool = False  # SIGTERM sent: exiting is expected
    frozen: list[list[float | None]] = field(default_factory=list)
    exec: bool = False  # exec handler: its tasks are processes (with a lease keeper)

    def alive(self) -> bool:
        return self.ended is None

    def record(self) -> Process:
        assert self.worker is not None
        return Process(self.key, self.worker, self.started, self.ended,
                       tuple((f[0] or 0.0, f[1]) for f in self.frozen), self.exec)


class Fleet:
    def __init__(self, workdir: Path, timings: Timings, replicas: int, max_load: float,
                 tasks: list[str], handler: str = "exec") -> None:
        self.dir = workdir
        self.handler = handler  # log | exec
        self.timings = timings
        self.replicas = replicas
        self.max_load = max_load
        (workdir / "journals").mkdir(parents=True, exist_ok=True)
        (workdir / "logs").mkdir(exist_ok=True)
        self.runtime = Path(tempfile.mkdtemp(prefix="corral-chaos-", dir="/tmp"))  # short
        self.tasks_file = workdir / "tasks.txt"
        self.write_tasks(tasks)
        self.state_file = workdir / "supervisor.epoch"
        self.port, self.control_port = free_port(), free_port()
        self.control = f"tcp://127.0.0.1:{self.control_port}"
        self.proxy = Proxy(self.port)
        self.routes: dict[str, int] = {}
        self.procs: list[Proc] = []
        self.supervisor: Proc | None = None
        self.supervisor_down = True  # until started
        self.current: dict[str, Proc] = {}  # worker id -> its latest process
        self.unexpected_exits: list[dict[str, Any]] = []

    # -- the supervisor -----------------------------------------------------------------------

    def start_supervisor(self) -> float:
        n = sum(1 for p in self.procs if p.worker is None) + 1
        args = [str(BIN / "corral-supervisor"), "run", "--bind", f"tcp://127.0.0.1:{self.port}",
                "--control", self.control, "--tasks", f"file:{self.tasks_file}",
                "--replicas", str(self.replicas), "--state-file", str(self.state_file),
                *self.timings.supervisor_args()]
        self.supervisor = self._spawn(f"supervisor#{n}", None, args, None)
        self.supervisor_down = False
        return self.supervisor.started

    def kill_supervisor(self) -> float:
        assert self.supervisor is not None
        self.supervisor_down = True
        return self._kill(self.supervisor)

    def wait_supervisor_up(self, timeout: float = 20.0) -> float | None:
        """When the supervisor first answered a control request, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Unreachable, ControlFailed):
                request(self.control, "status", {}, timeout=0.5)
                return time.monotonic()
            time.sleep(0.05)
        return None

    def query(self, verb: str, timeout: float = 2.0, **args: Any) -> Any:
        """A control verb in-process (fast); raises Unreachable or ControlFailed."""
        return request(self.control, verb, args, timeout=timeout)

    def corralctl(self, *args: str) -> Any:
        """``corralctl -o json ARGS``: the real CLI; its JSON, or None if it failed."""
        out = subprocess.run([str(BIN / "corralctl"), "--control", self.control, "--timeout",
                              "3", "-o", "json", *args], capture_output=True, text=True,
                             timeout=30, check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def sighup_supervisor(self) -> None:
        assert self.supervisor is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.supervisor.popen.pid, signal.SIGHUP)

    def write_tasks(self, tasks: list[str]) -> None:
        tmp = self.tasks_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{t}\n" for t in tasks))
        tmp.replace(self.tasks_file)  # the supervisor never reads half a file

    # -- workers ------------------------------------------------------------------------------

    def spawn_worker(self, wid: str) -> float:
        if wid not in self.routes:
            self.routes[wid] = self.proxy.add_route(wid)
        n = sum(1 for p in self.procs if p.worker == wid) + 1
        journal = self.dir / "journals" / f"{wid}.{n}.jsonl"
        args = [str(BIN / "corral-worker"), "run", "--supervisor",
                f"tcp://127.0.0.1:{self.routes[wid]}", "--id", wid, *HANDLERS[self.handler],
                "--journal", str(journal), "--max-load", f"{self.max_load:g}",
                *self.timings.worker_args()]
        proc = self._spawn(f"{wid}#{n}", wid, args, journal)
        proc.exec = self.handler == "exec"
        self.current[wid] = proc
        return proc.started

    def kill_worker(self, wid: str) -> float:
        return self._kill(self.current[wid])

    def sigstop(self, wid: str) -> float:
        p = self.current[wid]
        t = time.monotonic()
        os.kill(p.popen.pid, signal.SIGSTOP)
        p.frozen.append([t, None])
        return t

    def sigcont(self, wid: str) -> float:
        p = self.current[wid]
        t = time.monotonic()
        os.kill(p.popen.pid, signal.SIGCONT)
        if p.frozen and p.frozen[-1][1] is None:
            p.frozen[-1][1] = t
        return t

    def sigterm_worker(self, wid: str) -> float:
        p = self.current[wid]
        p.asked_to_stop = True
        t = time.monotonic()
        os.kill(p.popen.pid, signal.SIGTERM)
        return t

    def set_fault(self, wid: str, fault: Fault) -> float:
        self.proxy.set_fault(wid, fault)
        return time.monotonic()

    def live_workers(self) -> list[str]:
        return sorted(w for w, p in self.current.items() if p.alive())

    # -- bookkeeping --------------------------------------------------------------------------

    def reap(self) -> None:
        """Notice processes that ended by themselves."""
        now = time.monotonic()
        for p in self.procs:
            if p.ended is None and p.popen.poll() is not None:
                p.ended = now
                code = p.popen.returncode
                if not p.killed and (code != 0 or not p.asked_to_stop):
                    self.unexpected_exits.append({"process": p.key, "exit_code": code})

    def processes(self) -> dict[str, Process]:
        return {p.key: p.record() for p in self.procs if p.worker is not None}

    def journals(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for p in self.procs:
            if p.journal is None:
                continue
            lines: list[dict[str, Any]] = []
            with contextlib.suppress(FileNotFoundError):
                for line in p.journal.read_text().splitlines(keepends=True):
                    if line.endswith("\n"):  # a line being written is read next time
                        lines.append(json.loads(line))
            out[p.key] = lines
        return out

    def lease_losses(self) -> dict[str, int]:
        """Per worker process: how many times it logged losing its lease."""
        out: dict[str, int] = {}
        for p in self.procs:
            if p.worker is not None:
                with contextlib.suppress(FileNotFoundError):
                    n = p.log.read_text(errors="replace").count('"lease lost')
                    if n:
                        out[p.key] = n
        return out

    def stop_all(self) -> None:
        """Every process we started, by pid: workers' groups SIGKILLed, the supervisor
        SIGTERMed (SIGKILLed if it lingers); then the proxy."""
        for p in self.procs:
            if p.worker is not None and p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.popen.pid, signal.SIGKILL)
        for p in self.procs:
            if p.worker is None and p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
                try:
                    p.popen.wait(5)
                except subprocess.TimeoutExpired:
                    p.popen.kill()
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(5)
        self.reap()
        self._end_keepers()
        self.proxy.close()

    def _end_keepers(self) -> None:
        """The lease keepers the killed workers left, with their tasks; by pid if one lingers."""
        for path in sorted((self.runtime / "corral").glob("*")):
            with contextlib.suppress(OSError):
                dismiss(RunDir.at(path), wait=10.0)
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if any(a.endswith(b"keeperproc.py") for a in argv) and \
                        any(a.startswith(bytes(self.runtime) + b"/") for a in argv):
                    os.kill(int(entry.name), signal.SIGKILL)
        shutil.rmtree(self.runtime, ignore_errors=True)

    def _spawn(self, key: str, worker: str | None, args: list[str],
               journal: Path | None) -> Proc:
        log = self.dir / "logs" / f"{key.replace('#', '.')}.log"
        with log.open("ab") as fh:
            popen = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                     env={**os.environ, "CORRAL_LOG_JSON": "1",
                                          "XDG_RUNTIME_DIR": str(self.runtime)},
                                     start_new_session=True)
        proc = Proc(key, worker, popen, log, journal, time.monotonic())
        self.procs.append(proc)
        return proc

    def _kill(self, p: Proc) -> float:
        t = time.monotonic()
        p.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.popen.pid, signal.SIGKILL)
        p.popen.wait(5)
        p.ended = t
        return t
