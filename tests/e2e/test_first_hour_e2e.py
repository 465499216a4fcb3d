"""A new user's first hour (issue 32): what the README has them run, run for real, and each
rough edge they met — a start that fails leaves no trace, errors come at start and not at
first use."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from corral.worker.events import StartTask, TaskFailed
from corral.worker.handlers import StartError, TaskContext
from corral.worker.process import ExecRunner
from corral.worker.runner import TaskExecutor

from .procs import BIN, free_port

pytestmark = pytest.mark.e2e

SUP = str(BIN / "corral-supervisor")


def run_sup(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SUP, "run", "--state-file", str(tmp / "epoch"), "--warmup", "0",
                           *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_a_start_that_fails_consumes_no_epoch(tmp_path: Path) -> None:
    """A port in use (exit 1) or a missing task file (exit 2) leaves the state file as it
    was: every failed attempt used to take an epoch."""
    (tmp_path / "epoch").write_text("41\n")
    (tmp_path / "tasks.txt").write_text("a\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        out = run_sup(tmp_path, "--tasks", f"file:{tmp_path / 'tasks.txt'}",
                      "--bind", f"tcp://127.0.0.1:{port}",
                      "--control", f"tcp://127.0.0.1:{free_port()}")
    finally:
        busy.close()
    assert out.returncode == 1 and "cannot bind" in out.stderr, out.stderr
    missing = run_sup(tmp_path, "--tasks", f"file:{tmp_path / 'typo.txt'}")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"corral-supervisor: configuration error: tasks: {tmp_path / 'typo.txt'}: no such file "
        "(create it, or give --allow-empty to start with no tasks)"]
    assert (tmp_path / "epoch").read_text() == "41\n"


def test_an_exec_start_that_fails_names_the_program() -> None:
    """Not `FileNotFoundError(2, …)`: which program could not be run, and why."""
    runner = ExecRunner("/nonexistent/rec --room {task}", 1.0, "w1")
    with pytest.raises(StartError, match=r"^cannot run '/nonexistent/rec': No such file"):
        runner.start(TaskContext("t1"))
    failed = TaskExecutor(runner, None, log=None).start(StartTask("t1"))
    assert failed == TaskFailed("t1", "cannot run '/nonexistent/rec': No such file or directory")
