"""The task journal: one JSON line per task start and stop, for checking overlaps afterwards.

    {"t": 12345.678, "event": "start", "task": "room-7", "worker": "w1"}

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

    def start(self, task: str) -> None:
        self._write("start", task)

    def stop(self, task: str) -> None:
        self._write("stop", task)

    def _write(self, event: str, task: str) -> None:
        if self._file is None:
            return
        line = {"t": time.monotonic(), "event": event, "task": task, "worker": self._worker}
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
