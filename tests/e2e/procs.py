"""Real processes on loopback for end-to-end tests: start, wait, stop — always by pid.

Every process a test starts is registered with a `Procs` and stopped by it (SIGTERM, then
SIGKILL after a grace period) when the test ends, whatever happened. Waiting is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
# The port picker is shared with the chaos harness (scripts/chaostools/ports.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from chaostools.ports import free_port  # noqa: E402


def wait_until(pred: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05,
               what: str = "condition") -> Any:
    """Poll ``pred`` until it returns something truthy; bounded in time."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self._fh = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.popen = subprocess.Popen(args, stdout=self._fh, stderr=subprocess.STDOUT,
                                      env={**os.environ, **(env or {})},
                                      start_new_session=True)
        self.pid = self.popen.pid

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, signum)

    def wait(self, timeout: float = 15.0) -> int:
        return self.popen.wait(timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 5.0) -> int | None:
        if self.popen.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(5)
        else:
            # Its process group may hold children (exec tasks): never leave them behind.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self._fh.close()
        return self.popen.returncode

    def output(self) -> str:
        self._fh.flush()
        return self.log.read_text(errors="replace")


class Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.all: list[Proc] = []

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        p = Proc(args, self.tmp / f"{name}.log", env)
        self.all.append(p)
        return p

    def stop_all(self) -> None:
        """SIGTERM to everything, then a second one shortly after: a worker drains gracefully
        on the first (and would wait out its drain timeout, with every peer draining too) and
        stops at once on the second. Then each is reaped, SIGKILL after a grace period."""
        alive = [p for p in reversed(self.all) if p.alive()]
        for p in alive:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + 0.5
        while any(p.alive() for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in alive:
            p.signal(signal.SIGTERM)
        for p in reversed(self.all):
            p.stop()


class Supervisor:
    """A `corral-supervisor run` on free loopback ports."""

    def __init__(self, procs: Procs, tasks: str, **opts: Any) -> None:
        self.port = free_port()
        self.control_port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.control = f"tcp://127.0.0.1:{self.control_port}"
        self.state = procs.tmp / "supervisor.epoch"
        self.opts = {"warmup": 1, "lease": 3, "lease_margin": 1, "tick": 0.25,
                     "report_interval": 0.5, "state_file": str(self.state), **opts}
        self.tasks = tasks
        self.procs = procs
        self.proc = self.start()

    def start(self, name: str = "supervisor") -> Proc:
        args = [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint,
                "--control", self.control, "--tasks", self.tasks]
        for k, v in self.opts.items():
            if isinstance(v, bool):
                args.append(f"--{k.replace('_', '-')}" if v else f"--no-{k.replace('_', '-')}")
            else:
                args += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = self.procs.start(name, args, env={"CORRAL_LOG_JSON": "1"})
        return self.proc

    def ctl(self, *args: str, check: bool = True, timeout: float = 3.0) -> Any:
        out = subprocess.run([str(BIN / "corralctl"), "--control", self.control, "--timeout",
                              str(timeout), "-o", "json", *args], capture_output=True, text=True,
                             timeout=60)
        if check:
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)
        return out

    def query(self, verb: str, **args: Any) -> Any:
        from corral.client.control import request

        return request(self.control, verb, args, timeout=3.0)


def write_json(path: Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as JSON at once: a watching source never reads half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
