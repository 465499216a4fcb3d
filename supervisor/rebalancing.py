"""Rebalancing: after anything that can unbalance the placement, rebalance passes follow — one
per report interval, each at most the move budget, make-before-break — until one finds the
balance criterion met.

    balanced  -> pending    `want` (a join, a leave, a capacity change, a task-list change, the
                            rebuild, a drain or undrain, an exclusion expiring, a hand-off
                            ending while tasks were pinned)
    pending   -> pending    a pass moved something, or ran out of budget: another follows;
                            or a budget's worth of tasks is pinned by hand-offs, or a settle
                            window is open (`Assigner`): put off
    pending   -> balanced   a pass found nothing to move

Events come in bursts (a fleet starting), so the first pass waits a report interval and covers
them all, instead of an O(fleet) pass per report.
"""

from __future__ import annotations

from typing import Any

from corral.common.timers import TimerWheel

from .assigner import Assigner
from .feed import Feed
from .lifecycle import Lifecycle

REBALANCE = ("rebalance",)  # its timer key


class Rebalancing:
    def __init__(self, wheel: TimerWheel[Any], assigner: Assigner, life: Lifecycle, feed: Feed,
                 interval: float) -> None:
        self._wheel = wheel
        self._assigner = assigner
        self._life = life
        self._feed = feed
        self._interval = interval
        self.balanced = True  # the last pass found the criterion met
        self.skipped = 0  # passes put off while the last ones' hand-offs were in flight

    def want(self, now: float) -> None:
        """Something may have unbalanced the placement."""
        self.balanced = False
        if REBALANCE not in self._wheel:
            self._wheel.schedule_timeout(REBALANCE, now + self._interval)

    def run(self, now: float) -> None:
        """One pass (the REBALANCE timer fired). Skipped, and tried again an interval later,
        while a whole budget's worth of tasks is still pinned by hand-offs: the moves of the
        last pass have not landed, and a pass now would pay its O(fleet) search to find most
        of its plan pinned. (At 100,000 workers a supervisor behind on reading confirmations
        spent every interval on such passes and never caught up.)"""
        if not self._life.running:
            return
        assigner = self._assigner
        if assigner.settle_until is not None:  # a pass would place what the window keeps
            self._wheel.schedule_timeout(REBALANCE, max(now + self._interval,
                                                        assigner.settle_until))
            return
        if len(assigner.handoffs.pinned) >= max(1, assigner.config.move_budget):
            self.skipped += 1
            self._wheel.schedule_timeout(REBALANCE, now + self._interval)
            return
        started, balanced = assigner.rebalance()
        if started:
            self._feed.add("rebalance", moves=started)
        # Tasks pinned by a hand-off could not move: when a hand-off ends, `want` is called.
        if not balanced or started:
            self._wheel.schedule_timeout(REBALANCE, now + self._interval)
        else:
            self.balanced = True

    def stop(self) -> None:
        """Demoted: no more passes."""
        self._wheel.cancel(REBALANCE)
