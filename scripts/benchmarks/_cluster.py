"""A corral cluster on loopback for scripts (benchmarks, the demo): a supervisor and workers as
real processes, each stopped by pid when the cluster closes, whatever happened — and the lease
keepers that ``exec`` workers killed meanwhile left behind (the workers' runtime directory,
``XDG_RUNTIME_DIR``, is the cluster's own), with their tasks."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench, demo.py)

from corral.worker.keeper import dismiss
from corral.worker.rundir import RunDir

BIN = Path(sys.executable).parent


def fleet_parser(doc: str, tasks: int = 200, workers: int = 5) -> argparse.ArgumentParser:
    """The options every cluster benchmark shares: output, size, repetitions."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--tasks", type=int, default=tasks)
    ap.add_argument("--workers", type=int, default=workers)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    return ap


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``key`` is the median (an actual run, not an average of several)."""
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def wait_until(pred: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout:g} s")
        time.sleep(interval)


class Cluster:
    def __init__(self, tasks: list[str], workdir: Path | None = None) -> None:
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="corral-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "tasks.txt").write_text("".join(f"{t}\n" for t in tasks))
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.control = f"tcp://127.0.0.1:{free_port()}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (closed in close())
        self._logs.append(log)
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "CORRAL_LOG_JSON": "1",
                                  "XDG_RUNTIME_DIR": str(self.dir / "run")})
        self.procs[name] = p
        return p

    def start_supervisor(self, name: str = "supervisor", **opts: Any) -> subprocess.Popen[bytes]:
        args = [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint,
                "--control", self.control, "--tasks", f"file:{self.dir / 'tasks.txt'}",
                "--state-file", str(self.dir / "supervisor.epoch")]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        return self._spawn(name, args)

    def start_worker(self, wid: str, max_load: float, **opts: Any) -> subprocess.Popen[bytes]:
        args = [str(BIN / "corral-worker"), "run", "--supervisor", self.endpoint, "--id", wid,
                "--max-load", str(max_load), "--handler", "log",
                "--journal", str(self.dir / f"{wid}.journal")]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        return self._spawn(wid, args)

    def ctl(self, *args: str, json_out: bool = True) -> Any:
        cmd = [str(BIN / "corralctl"), "--control", self.control]
        if json_out:
            cmd += ["-o", "json"]
        out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        return json.loads(out.stdout) if json_out else out.stdout

    def running(self, workers: list[str]) -> dict[str, list[str]]:
        """Task -> workers running it now, from the journals."""
        out: dict[str, list[str]] = {}
        for w in workers:
            path = self.dir / f"{w}.journal"
            live: dict[str, None] = {}
            if path.exists():
                for line in path.read_text().splitlines():
                    e = json.loads(line)
                    if e["event"] in ("start", "adopt"):  # adopt: the same process runs on
                        live[e["task"]] = None
                    else:
                        live.pop(e["task"], None)
            for t in live:
                out.setdefault(t, []).append(w)
        return out

    def starts_after(self, workers: list[str], t0: float) -> dict[str, float]:
        """Task -> the first start at or after monotonic time t0 on these workers."""
        out: dict[str, float] = {}
        for w in workers:
            path = self.dir / f"{w}.journal"
            for line in path.read_text().splitlines() if path.exists() else []:
                e = json.loads(line)
                if e["event"] == "start" and e["t"] >= t0:
                    out[e["task"]] = min(out.get(e["task"], e["t"]), e["t"])
        return out

    def kill(self, name: str, signum: int = signal.SIGKILL) -> float:
        """Signal a process; returns the monotonic time of the signal."""
        t = time.monotonic()
        os.kill(self.procs[name].pid, signum)
        return t

    def close(self) -> None:
        for p in reversed(list(self.procs.values())):
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        for log in self._logs:
            log.close()
        for path in sorted((self.dir / "run" / "corral").glob("*")):
            dismiss(RunDir.at(path), wait=15.0)  # a killed exec worker's keeper and tasks
