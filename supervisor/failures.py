"""Tasks that will not run on a worker move elsewhere and stay off it for a while: one that
fails ``--max-failures`` times in a row there, and one the worker was given but did not start
within ``--start-timeout`` (`Starts`). Each exclusion keeps its reason for `corralctl tasks`
and the dashboard; after ``--failure-cooldown`` the task may go back.

    judged   -> excluded   failing max-failures times on an owner, or not started in time:
                           placement excludes it there, its replica moves
    excluded -> included   the cool-down's timer (`INCLUDE`, task, worker) fired
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral.common.timers import TimerWheel

from .assigner import Assigner
from .config import SupervisorConfig
from .counters import Counters
from .effects import Effects
from .feed import Feed
from .records import WorkerRecord

INCLUDE = "include"  # timer key tag: a task may go back to a worker it was kept off
MAX_KEPT = 10_000  # last errors kept, oldest dropped first: bounded whatever the fleet says


@dataclass(frozen=True)
class LastError:
    """A task's last failure as a worker reported it; ``t`` is on the supervisor's clock."""

    worker: str
    t: float
    error: str


class Failures:
    def __init__(self, config: SupervisorConfig, wheel: TimerWheel[Any], counters: Counters,
                 assigner: Assigner, feed: Feed, effects: Effects) -> None:
        self._max = config.max_failures
        self._cooldown = config.failure_cooldown
        self._start_timeout = config.start_timeout
        self._wheel = wheel
        self._counters = counters
        self._assigner = assigner
        self._feed = feed
        self._effects = effects
        self._why: dict[str, dict[str, str]] = {}  # task -> worker kept off -> why
        # task -> its last failure: kept past the worker's report (a task moved off the
        # worker it failed on is no longer reported there), oldest first.
        self.last: dict[str, LastError] = {}

    def last_error(self, task: str) -> LastError | None:
        return self.last.get(task)

    def check(self, rec: WorkerRecord, now: float) -> None:
        """``rec`` reports failing tasks: those at the limit move off it."""
        moved = False
        failing = rec.status.failures
        for task, (at, text) in rec.status.last_errors.items():
            if task not in failing:  # only what the report's checked failures map names
                continue
            t = min(at + rec.clock_offset, now)  # its clock to ours, never in the future
            kept = self.last.pop(task, None)
            self.last[task] = kept if kept is not None and kept.t >= t else \
                LastError(rec.id, t, text)
            if len(self.last) > MAX_KEPT:
                del self.last[next(iter(self.last))]
        for task, n in rec.status.failures.items():
            if n >= self._max and self._assigner.owns(rec.id, task):
                self._exclude(task, rec.id, f"failed {n} times in a row", now)
                self._counters.failures_moved += 1
                self._effects.log("warning", "task keeps failing; moving it",
                                  {"task": task, "worker": rec.id, "failures": n})
                moved = True
        if moved:
            self._assigner.place("failing", source=rec.id)

    def not_started(self, rec: WorkerRecord, tasks: Iterable[str], now: float) -> None:
        """``rec`` was given ``tasks`` and did not start them within --start-timeout."""
        moved = []
        for task in tasks:
            if self._assigner.owns(rec.id, task):
                self._exclude(task, rec.id, f"not started within {self._start_timeout:g} s",
                              now)
                moved.append(task)
        if moved:
            self._counters.start_timeouts += len(moved)
            self._effects.log("warning", "worker did not start tasks it was given; moving them",
                              {"worker": rec.id, "tasks": len(moved),
                               "start_timeout_s": self._start_timeout})
            self._assigner.place("not started", source=rec.id)

    def __len__(self) -> int:
        return len(self._why)

    def why(self, task: str) -> dict[str, str]:
        """The workers ``task`` is kept off, and why."""
        return dict(self._why.get(task, {}))

    def cooled(self, task: str, worker: str) -> None:
        """A cool-down ended: the task may go back to that worker."""
        kept = self._why.get(task)
        if kept is not None:
            kept.pop(worker, None)
            if not kept:
                del self._why[task]
        self._assigner.include(task, worker)

    def clear(self) -> None:
        """Demoted: the placement these exclusions were in is gone."""
        self._why = {}

    def _exclude(self, task: str, worker: str, why: str, now: float) -> None:
        self._assigner.exclude(task, worker)
        self._why.setdefault(task, {})[worker] = why
        self._wheel.schedule_timeout((INCLUDE, task, worker), now + self._cooldown)
        self._feed.add("excluded", task=task, worker=worker, reason=why)
