"""How many workers this supervisor hears: the count HA compares among supervisors (leadrule.py).

A worker is *heard* while it is active and a report of its reached this supervisor within the
freshness window: the longest a healthy worker waits between reports — half its lease by
default (docs/worker.md), or `--report-interval` when that is longer — plus a tick of slack.
A leader cut off from the workers stops hearing each one a window after its last report read,
which is ``lease - window`` (half a lease less a tick, at the defaults) before that worker's
lease runs out: the time a standby has to take over (docs/supervisor.md, the timing math).

With HA the count is taken once a tick as of the last time no report waited unread (O(fleet)
per tick, nothing per report: 12–17 ms at 100,000 workers, so ~3 % of a core at the default
tick; 1–3 ms at 10,000), and handed to the daemon as a `Heard` action when it changed; the
daemon hands it to the election thread, which publishes it in etcd and compares. Without HA
nothing is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from corral.common.timers import TimerWheel

from .config import SupervisorConfig
from .effects import Effects
from .records import WorkerRecord
from .registry import Registry

HEARD = ("heard",)  # timer key: count again
REPORT_SHARE = 0.5  # a worker reports every half lease unless told otherwise (worker/config.py)


class Hearing:
    def __init__(self, config: SupervisorConfig, registry: Registry, effects: Effects,
                 wheel: TimerWheel[Any], now: float) -> None:
        self.window = max(config.report_interval, config.lease * REPORT_SHARE) + config.tick
        self.count = 0
        self._registry = registry
        self._effects = effects
        self._told = -1  # the count the daemon was last handed
        if config.ha:
            wheel.schedule_poll(HEARD, config.tick, now + config.tick)

    def hears(self, rec: WorkerRecord, judged: float) -> bool:
        """Whether ``rec`` counts as heard as of ``judged``."""
        return rec.active and rec.last_received >= judged - self.window

    def heard(self, judged: float) -> Iterator[WorkerRecord]:
        """The workers heard as of ``judged``."""
        return (r for r in self._registry if self.hears(r, judged))

    def recount(self, judged: float) -> int:
        """Count again, as of ``judged`` (reports sent later may wait unread); the daemon is
        told when the count changed."""
        since = judged - self.window
        self.count = n = sum(1 for r in self._registry if r.active and r.last_received >= since)
        if n != self._told:
            self._told = n
            self._effects.heard(n)
        return n
