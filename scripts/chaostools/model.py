"""The chaos checker's records: processes, faults, bounds, ownership spans and the result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .schedule import Timings

INF = math.inf
EPS = 1e-6


@dataclass(frozen=True)
class Process:
    key: str  # unique per process: "w3#2" is the second process with id w3
    worker: str
    started: float
    ended: float | None = None  # killed (SIGKILL time) or exited; None: alive at the end
    frozen: tuple[tuple[float, float | None], ...] = ()  # (SIGSTOP, SIGCONT or None)
    exec: bool = False  # its tasks are processes of their own: a freeze does not stop them


@dataclass(frozen=True)
class Fault:
    id: int
    kind: str
    target: str | None
    t0: float
    t1: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bounds:
    """Seconds. `from_timings` derives them from the daemons' timings."""

    lease: float
    failover: float
    report: float
    warmup: float
    handoff: float
    wake: float
    change: float
    slack: float

    @classmethod
    def from_timings(cls, tm: Timings, *, slack: float = 1.5,
                     max_delay: float = 0.8) -> Bounds:
        return cls(
            lease=tm.lease,
            failover=tm.lease + tm.margin + tm.tick + 2 * tm.report,
            report=tm.report,
            warmup=tm.warmup,
            handoff=2 * tm.report + 2 * max_delay + slack,
            wake=slack,
            change=3 * tm.report + 2.0 + slack,  # + starting corralctl
            slack=slack,
        )


@dataclass(frozen=True)
class Span:
    task: str
    owner: str  # process key
    worker: str
    start: float
    end: float
    resumed: bool = False  # begins at a SIGCONT
    frozen_at: float | None = None  # an exec task's process while its agent is frozen: since
    split: bool = False  # goes on where another piece of the same span ended (no new start)


@dataclass
class Result:
    violations: list[dict[str, Any]] = field(default_factory=list)
    lost_tasks: list[str] = field(default_factory=list)
    max_uncovered_s: float = 0.0
    uncovered_s: float = 0.0  # summed over tasks
    double_owner_s: float = 0.0  # more owners than replicas, not excused
    handoffs: list[float] = field(default_factory=list)  # overlap durations
    zombies: list[float] = field(default_factory=list)
    recovery: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, origin: float) -> dict[str, Any]:
        def rel(t: float) -> float:
            return round(t - origin, 3)

        return {
            "violations": [{**v, "window": [rel(v["window"][0]), rel(v["window"][1])]}
                           for v in self.violations],
            "lost_tasks": sorted(self.lost_tasks),
            "max_uncovered_s": round(self.max_uncovered_s, 3),
            "uncovered_s": round(self.uncovered_s, 3),
            "double_owner_s": round(self.double_owner_s, 3),
            "handoff_overlaps": _summary(self.handoffs),
            "zombie_overlaps": _summary(self.zombies),
            "recovery": [{**r, "t0": rel(r["t0"])} for r in self.recovery],
        }


def _summary(xs: list[float]) -> dict[str, float]:
    return {"count": len(xs), "max_s": round(max(xs, default=0.0), 3),
            "total_s": round(sum(xs), 3)}


# -- spans ---------------------------------------------------------------------------------------


