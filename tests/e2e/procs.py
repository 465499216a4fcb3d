"""Real processes on loopback for end-to-end tests: start, wait, stop — always by pid.

Every process a test starts (a `tests.support.Proc`) is registered with a `Procs` and stopped
by it (SIGTERM, then SIGKILL after a grace period) when the test ends, whatever happened.
Waiting is bounded (`tests.support.wait_until`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..support import Proc, free_port

BIN = Path(sys.executable).parent


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
        self._answering()
        return self.proc

    def _answering(self, within: float = 30.0) -> None:
        """Return once the new process answers on its control endpoint (a loaded machine can
        take seconds to start one), or has exited (a test of a failing start sees that)."""
        from corral.client.control import request
        from corral.client.errors import Unreachable

        deadline = time.monotonic() + within
        while self.proc.alive() and time.monotonic() < deadline:
            if "control_keys" in self.opts:  # Curve: no key here, the bound port will do
                try:
                    socket.create_connection(("127.0.0.1", self.control_port), 1.0).close()
                    return
                except OSError:
                    time.sleep(0.05)
                    continue
            try:
                request(self.control, "status", {}, timeout=1.0)
                return
            except Unreachable:
                continue

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

    def heard_since(self, since: float) -> dict[str, dict[str, Any]]:
        """The workers (their rows, by id) whose latest report reached the supervisor at
        ``since`` or later. Its clock is CLOCK_MONOTONIC, as ours; it counts a report's age
        after ``asked``, so ``asked - age`` is no later than when the report arrived."""
        asked = time.monotonic()
        rows = self.query("workers")["workers"]
        return {r["id"]: r for r in rows if asked - r["last_report_age_s"] >= since}


def write_json(path: Path, value: Any) -> None:
    """Replace ``path`` with ``value`` as JSON at once: a watching source never reads half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
