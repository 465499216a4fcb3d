"""What every test folder shares: one of each.

- `wait_until`: poll a condition until it holds; raise `AssertionError` naming what was awaited
  when it does not within the timeout. Tests wait on conditions (a log line, a state, a
  counter, a file), never on time, and never assert wall-clock speed.
- `FakeClock`: the time a pure part is handed, moved by the test.
- `free_port`: a loopback port below the ephemeral range (`chaostools.ports`, shared with the
  chaos harness and the benchmarks; pytest puts scripts/ on the path, see pyproject.toml).
- `Proc`: a started process, its stdout and stderr in one log file, stopped by its pid.
- `end_keepers`: the lease keepers a test's ``exec`` workers left behind (their tasks outlive
  the agents), ended with their tasks — by the autouse fixture in tests/conftest.py, which
  also gives every test a runtime directory of its own (``XDG_RUNTIME_DIR``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaostools.ports import free_port

__all__ = ["WAIT", "FakeClock", "Proc", "alive", "end_keepers", "free_port", "keeper_pids",
           "wait_until"]

# Generous: the machines are slow and shared; a passing test never waits this long.
WAIT = 15.0
POLL_S = 0.02


def wait_until(cond: Callable[[], Any], timeout: float = WAIT, what: str = "a condition",
               interval: float = POLL_S) -> Any:
    """Poll ``cond`` until it returns something truthy, and return that. After ``timeout``
    seconds without it, raise AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class FakeClock:
    """A clock a test moves by hand: call it for the time."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class Proc:
    """A process started in a session of its own, its output (stdout and stderr) appended to
    ``log``, and stopped by its pid: `stop` asks (SIGTERM), then ends its process group
    (SIGKILL) after ``grace``; `kill` ends the process at once. An exec worker's task
    processes and lease keeper have sessions of their own (they outlive the agent by design):
    a worker asked to stop ends them itself, and `end_keepers` ends what a killed one left."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.args = args
        self.log = log
        self._fh = open(log, "ab")  # noqa: SIM115 (closed in stop and kill)
        self.popen = subprocess.Popen(args, stdout=self._fh, stderr=subprocess.STDOUT,
                                      env={**os.environ, **(env or {})}, cwd=cwd,
                                      start_new_session=True)
        self.pid = self.popen.pid

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, signum)

    def wait(self, timeout: float = WAIT) -> int:
        return self.popen.wait(timeout)

    def poll(self) -> int | None:
        return self.popen.poll()

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
            # Its process group may hold children of its own: never leave them behind.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self._fh.close()
        return self.popen.returncode

    def kill(self) -> int:
        """SIGKILL to the process alone (what a crash is: its children live on), reaped."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        code = self.popen.wait(WAIT)
        self._fh.close()
        return code

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def keeper_pids(root: Path) -> list[int]:
    """The pids of the lease keeper processes serving runtime directories under ``root``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"keeperproc.py") for a in argv) and \
                any(a.startswith(str(root).encode() + b"/") for a in argv):
            out.append(int(entry.name))
    return out


def end_keepers(root: Path) -> None:
    """End every lease keeper left under ``root`` and its tasks: asked (as an agent of another
    version would: its tasks get SIGTERM, then SIGKILL), then killed by pid if it lingers."""
    from corral.worker.keeper import dismiss
    from corral.worker.rundir import RunDir

    if not (root / "corral").exists():
        return  # no exec worker ran here
    for path in sorted((root / "corral").glob("*")):
        with contextlib.suppress(OSError):
            dismiss(RunDir.at(path), wait=WAIT)
    for pid in keeper_pids(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a process we did not start, too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
