"""The test helpers themselves (tests/support.py, workerprocs.py): waiting that gives up and
says on what, the fake clock, the port picker shared with the chaos harness and the benchmarks
(scripts/chaostools/ports.py: ports below the ephemeral range, which an outgoing connection
never takes, each one bindable when handed out and none handed out twice in a run), and
processes that are stopped by pid with their output kept."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from chaostools import ports

from ..support import FakeClock, Proc, alive, free_port, wait_until

SLEEPER = [sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(60)"]


def test_wait_until_returns_the_value_or_raises_naming_what_it_waited_for() -> None:
    assert wait_until(lambda: 42, timeout=0.0) == 42
    calls: list[float] = []
    with pytest.raises(AssertionError, match="waiting for the moon"):
        wait_until(lambda: calls.append(time.monotonic()), timeout=0.1, what="the moon")
    assert len(calls) >= 2 and calls[-1] - calls[0] >= 0.1  # it polled until the timeout


def test_the_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(5.0)
    assert clock() == 5.0 == clock()
    assert clock.advance(0.5) == 5.5 == clock()


def test_ports_come_from_below_the_ephemeral_range_and_differ() -> None:
    got = [free_port() for _ in range(50)]
    assert len(set(got)) == len(got)
    assert all(1024 <= p < ports._ephemeral_low() for p in got)


def test_a_port_in_use_is_skipped() -> None:
    busy = ports._next_port  # the next one in the walk, taken meanwhile (or already busy)
    with socket.socket() as s:
        with contextlib.suppress(OSError):
            s.bind(("127.0.0.1", busy))
        assert free_port() != busy


def test_a_proc_keeps_its_output_and_is_stopped_by_its_pid(tmp_path: Path) -> None:
    proc = Proc(SLEEPER, tmp_path / "p.log")
    wait_until(lambda: "up" in proc.output(), what="the process's first line")
    assert proc.alive() and alive(proc.pid)
    assert proc.stop() == -signal.SIGTERM
    assert not alive(proc.pid) and proc.poll() == -signal.SIGTERM


def test_a_killed_proc_is_reaped(tmp_path: Path) -> None:
    proc = Proc(SLEEPER, tmp_path / "p.log")
    assert proc.kill() == -signal.SIGKILL
    assert not proc.alive() and not alive(proc.pid)
