"""The daemon's loop in-process: it sleeps when idle and stops on SIGTERM through the verb."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.supervisor.config import SupervisorConfig
from corral.supervisor.daemon import Daemon

from ..e2e.procs import free_port


def test_idle_loop_sleeps_and_sigterm_stops_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tasks.txt").write_text("")
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}", allow_empty=True,
                           warmup=0.2, state_file=str(tmp_path / "epoch"))
    polls: list[Any] = []
    real_poll = zmq.Poller.poll

    def counting_poll(self: zmq.Poller, timeout: int | None = None) -> Any:
        polls.append(timeout)
        return real_poll(self, timeout)

    monkeypatch.setattr(zmq.Poller, "poll", counting_poll)
    timer = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        assert Daemon(cfg).run() == 0
    finally:
        timer.cancel()
    # Idle for 1.5 s: a few wake-ups (warm-up end, the task query, metrics snapshots), not a
    # spin. Before the wake pipe was keyed by its fd, this loop polled ~40,000 times a second.
    assert len(polls) < 30, len(polls)
    assert (tmp_path / "epoch").read_text().strip() == "1"
