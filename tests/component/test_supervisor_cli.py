"""`corral-supervisor run` as a user runs it (a process): bad flags are one clear line on stderr
and exit status 2. (The configuration's rules themselves are tested in-process in
tests/unit/test_supervisor_config.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).parent / "corral-supervisor")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "tasks: a task source is required"),
        (["--tasks", "file:x", "--lease", "-1"], "lease: expected a number of seconds from 0"),
        (["--tasks", "file:x", "--lease", "1e12"], "lease: expected a number of seconds from 0"),
        (["--tasks", "file:x", "--lease", "abc"], "lease"),
        (["--tasks", "file:x", "--tick", "0"], "tick: must be > 0"),
        (["--tasks", "file:x", "--replicas", "0"], "replicas: must be from 1 to 1000"),
        (["--tasks", "file:x", "--replicas", "5000"], "replicas: must be from 1 to 1000"),
        (["--tasks", "file:x", "--rebalance-tolerance", "2"], "rebalance_tolerance: must be"),
        (["--tasks", "file:x", "--max-failures", "-3"], "max_failures: must be from 1"),
        (["--tasks", "file:x", "--replicas", "1.5"], "replicas: expected an integer"),
        (["--tasks", "file:x", "--bind", "localhost:7760"], "bind: expected a ZeroMQ endpoint"),
        (["--tasks", "file:x", "--bind", "tcp://0.0.0.0:7760"], "bind: tcp://0.0.0.0:7760: "
         "anyone who reaches it may report as any worker; protect it with Curve keys "
         "(--authorized-keys), bind it to loopback, or accept that with --insecure"),
        (["--tasks", "file:x", "--control", "tcp://eth0:7761"], "control: tcp://eth0:7761: "
         "anyone who reaches it may drain workers"),
        (["--tasks", "file:x", "--metrics", "9464"], "metrics: expected HOST:PORT"),
        (["--tasks", "nonsense"], "tasks: expected file:PATH"),
        (["--tasks", "python:only_module"], "tasks: expected python:module:function"),
        (["--tasks", "file:x", "--lease", "2", "--renew-interval", "3"], "renew_interval"),
        (["--tasks", "file:x", "--config", "/does/not/exist.toml"], "config: cannot read"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], says: str) -> None:
    out = subprocess.run([EXE, "run", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr


def test_a_value_that_is_not_a_number_is_said_once() -> None:
    """Not "could not convert string to float: 'soon', got 'soon'": what was expected, then
    what came, once."""
    out = subprocess.run([EXE, "run", "--tasks", "file:x", "--warmup", "soon"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == ("corral-supervisor: configuration error: warmup: expected a "
                                  "number of seconds, got 'soon' (from --warmup)")


def test_bad_strategy_is_a_usage_error() -> None:
    out = subprocess.run([EXE, "run", "--tasks", "file:x", "--strategy", "magic"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "magic" in out.stderr
