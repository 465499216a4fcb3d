"""When Python's cycle collector runs in the supervisor daemon.

The supervisor's state is millions of long-lived objects at fleet scale (a placement of a
million tasks), and none of it is garbage in a cycle: reference counting frees all it drops.
The collector's full passes over that state are pure cost — a quarter of the CPU at 100,000
workers when nothing was done about it. Two rules:

* **Freeze what a long step built.** A step over `FREEZE_AFTER_S` (a placement, a rebuild's
  slice) made long-lived objects: `gc.freeze` moves everything alive out of the collector's
  sight. They are still freed by reference counting; only garbage in a cycle that was alive at
  that moment would be kept, and our state holds none. O(1).
* **Pause it while work is cut into slices** (the warm-up's rebuild: tens of seconds at
  100,000 workers). Each slice adds hundreds of thousands of objects, short of a long step,
  and the growing heap set off full passes over millions of objects between slices. Off
  while the core is busy; when the work is done, what it built is frozen and the collector
  runs again.

States: RUNNING -> PAUSED (`busy` True) -> RUNNING (`busy` False: freeze, enable). A collector
the embedding program turned off stays off (`gc.isenabled()` is asked, never assumed).
"""

from __future__ import annotations

import gc

from .counters import IoCounters

FREEZE_AFTER_S = 0.05


class CycleCollector:
    def __init__(self, counters: IoCounters) -> None:
        self._counters = counters
        self.paused = False  # we turned it off for sliced work (and will turn it back on)

    def after_step(self, seconds: float) -> None:
        """A step took ``seconds``: freeze what it built if that was long."""
        if seconds > FREEZE_AFTER_S:
            gc.freeze()
            self._counters.gc_freezes += 1

    def busy(self, busy: bool) -> None:
        """Work cut into slices is under way (``busy``), or not any more."""
        if busy:
            if not self.paused and gc.isenabled():
                gc.disable()
                self.paused = True
        elif self.paused:
            gc.freeze()
            self._counters.gc_freezes += 1
            gc.enable()
            self.paused = False
