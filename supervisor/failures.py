"""Failing tasks: a task that fails ``--max-failures`` times in a row on a worker moves
elsewhere and stays off that worker for ``--failure-cooldown`` (then it may go back).

    judged   -> excluded   a report shows the task failing max-failures times on an owner:
                           placement excludes it there, its replica moves
    excluded -> included   the cool-down's timer (`INCLUDE`, task, worker) fired
"""

from __future__ import annotations

from typing import Any

from corral.common.timers import TimerWheel

from .assigner import Assigner
from .config import SupervisorConfig
from .counters import Counters
from .effects import Effects
from .records import WorkerRecord

INCLUDE = "include"  # timer key tag: a task may go back to a worker it kept failing on


class Failures:
    def __init__(self, config: SupervisorConfig, wheel: TimerWheel[Any], counters: Counters,
                 assigner: Assigner, effects: Effects) -> None:
        self._max = config.max_failures
        self._cooldown = config.failure_cooldown
        self._wheel = wheel
        self._counters = counters
        self._assigner = assigner
        self._effects = effects

    def check(self, rec: WorkerRecord, now: float) -> None:
        """``rec`` reports failing tasks: those at the limit move off it."""
        moved = False
        a = self._assigner
        for task, n in rec.status.failures.items():
            if n >= self._max and a.owns(rec.id, task):
                a.exclude(task, rec.id)
                self._wheel.schedule_timeout((INCLUDE, task, rec.id), now + self._cooldown)
                self._counters.failures_moved += 1
                self._effects.log("warning", "task keeps failing; moving it",
                                  {"task": task, "worker": rec.id, "failures": n})
                moved = True
        if moved:
            a.place("failing", source=rec.id)

    def cooled(self, task: str, worker: str) -> None:
        """A cool-down ended: the task may go back to that worker."""
        self._assigner.include(task, worker)
