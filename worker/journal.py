"""The task journal: one JSON line per task start and stop, for checking overlaps afterwards
(docs/operations.md, "Checking it").

    {"t": 12345.678, "event": "start", "task": "room-7", "worker": "w1", "token": 4194305,
     "spec": "015abd7f5cc5"}
    {"t": 12399.001, "event": "stop", "task": "room-7", "worker": "w1"}

A start line carries the assignment's fencing ``token`` and, for a task with a spec, the
``spec`` version (a short hash of its text). With ``exec``, the lease keeper process appends the
stop lines of the stops it made (``"by": "keeper"``, with a ``cause``: ``lease``, the lease
ended with the agent frozen, gone or cut off; ``exited``, it ended by itself while no agent
was there; ``stop``, it finished a stop its departed agent had begun; ``mismatch``; ``quit``):
its ``t`` is when the task's process ended. Each stop has one line, the agent's or the
keeper's, never both. A task whose process a new agent adopted from the keeper (a hand-over,
or a restart within the lease) gets an ``adopt`` line in the new agent's journal, with its
token and pid: the same process runs on, nothing stopped or started.

    {"t": 12400.002, "event": "adopt", "task": "room-7", "worker": "w1", "token": 4194305,
     "pid": 31337}

``t`` is CLOCK_MONOTONIC, which every process on one machine shares, so the journals of
several workers on a host can be merged and sorted to check that no task ever had two owners
(or, with replicas, that some owner always ran it). A start line is written once the handler
has started the task and a stop line once the task has really stopped, and each line is
flushed as it is written, so a worker killed with SIGKILL loses no line it wrote.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TextIO


class Journal:
    """Appends start/stop lines to one file (created if missing, never truncated)."""

    def __init__(self, path: Path, worker_id: str) -> None:
        self._worker = worker_id
        self._file: TextIO | None = path.open("a", encoding="utf-8")

    def start(self, task: str, token: int = 0, spec_version: str = "") -> None:
        extra: dict[str, int | str] = {"token": token}
        if spec_version:
            extra["spec"] = spec_version
        self._write("start", task, extra)

    def stop(self, task: str) -> None:
        self._write("stop", task, {})

    def adopt(self, task: str, token: int, spec_version: str, pid: int) -> None:
        extra: dict[str, int | str] = {"token": token}
        if spec_version:
            extra["spec"] = spec_version
        extra["pid"] = pid
        self._write("adopt", task, extra)

    def _write(self, event: str, task: str, extra: dict[str, int | str]) -> None:
        if self._file is None:
            return
        line = {"t": time.monotonic(), "event": event, "task": task, "worker": self._worker,
                **extra}
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
