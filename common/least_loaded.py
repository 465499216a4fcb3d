"""Least-loaded round robin (SRE book, chapter 20): among the eligible backends with the
fewest requests in flight, take turns. ``llrr`` counts recent errors as requests in flight, so
that a backend that fails fast does not look idle and draw all the traffic (``llrr-naive``
does not, to show that pitfall). Registered in `corral.common.pickers`.

    >>> import random
    >>> p = LeastLoaded(3, random.Random(0))
    >>> [p.pick(), p.pick(), p.pick()]
    [0, 1, 2]
    >>> p.release(1)
    >>> p.pick()
    1
"""

from __future__ import annotations

import random
from collections import deque
from typing import ClassVar

from .picker import Picker


class LeastLoaded(Picker):
    """Round robin among the eligible slots with the least load, load = active + recent errors.

    Slots wait in one FIFO queue per load level, and ``_min`` is never above the least load
    of an eligible slot, so a pick pops the head of the lowest non-empty level and appends
    the slot to the next level up; a slot whose load drops is appended to its new level and
    so queues behind the others there: round robin among the least loaded. Loads move by one
    at a time, so every change is O(1).

    ``_level[i]`` is slot i's load if it is eligible, and its load − `_OFF` (below every
    queue) if not. An entry in queue L is live while its slot's level is L; the entry a slot
    leaves behind when its level changes goes stale and is skipped when popped (a slot that
    comes back to a level where it still has an older entry is served from that one: it was
    waiting there already). So that stale entries cannot pile up at a level no pick reaches,
    the queues are compacted after every `_budget_size` appends outside picks, which keeps
    memory O(n) and the work amortized O(1).
    """

    name = "llrr"
    count_errors: ClassVar[bool] = True
    _OFF = 1 << 40  # far more than any load

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._level = [0] * n
        # The queues reach at least two levels above every live entry's, so that a pick can
        # append to the level above without looking (only the scan upwards adds levels).
        self._queues: list[deque[int]] = [deque(range(n)), deque(), deque()]
        self._min = 0  # never above the least load of an eligible slot
        self._live = n  # eligible slots
        # Large enough that most stale entries are popped by picks before a compaction.
        self._budget = self._budget_size = 64 * n + 1024

    # pick and release run once per request each, so they are written out in full.

    def pick(self) -> int:
        queues, level = self._queues, self._level
        low = self._min
        while True:
            queue = queues[low]
            while queue:
                i = queue.popleft()
                if level[i] == low:
                    self._min = low
                    self.active[i] += 1
                    low += 1
                    level[i] = low
                    queues[low].append(i)
                    return i
            low += 1  # this level is empty: the least load is higher
            if low + 1 >= len(queues):
                if not self._live:
                    return -1  # no eligible slot (every entry popped was stale)
                queues.append(deque())

    def release(self, i: int) -> None:
        self.active[i] -= 1
        level = self._level
        low = level[i] - 1
        level[i] = low
        if low >= 0:  # eligible
            self._queues[low].append(i)
            if low < self._min:
                self._min = low
            self._budget -= 1
            if not self._budget:
                self._compact()

    def _enqueue(self, i: int) -> None:
        """Queue eligible slot i at its level (it moved there, or became eligible)."""
        low = self._level[i]
        queues = self._queues
        while len(queues) < low + 3:
            queues.append(deque())
        queues[low].append(i)
        if low < self._min:
            self._min = low
        self._budget -= 1
        if self._budget <= 0:
            self._compact()

    def _compact(self) -> None:
        """Drop every stale or repeated entry, keeping each live slot's earliest place. Most
        requests leave one stale entry behind (at the level above the minimum, which picks
        seldom reach), so this runs about once per entry: as comprehensions, not a loop."""
        level, queues = self._level, self._queues
        for low, queue in enumerate(queues):
            queues[low] = deque(dict.fromkeys([i for i in queue if level[i] == low]))
        self._budget = self._budget_size

    def _move(self, i: int, delta: int) -> None:
        self._level[i] += delta
        if self.eligible[i]:
            self._enqueue(i)

    def add_active(self, i: int, count: int) -> None:
        self.active[i] += count
        self._move(i, count)

    def add_error(self, i: int) -> None:
        self.errors[i] += 1
        if self.count_errors:
            self._move(i, 1)

    def drop_error(self, i: int) -> None:
        self.errors[i] -= 1
        if self.count_errors:
            self._move(i, -1)

    def set_eligible(self, i: int, ok: bool) -> None:
        if ok == self.eligible[i]:
            return
        super().set_eligible(i, ok)
        if ok:
            self._live += 1
            self._level[i] += self._OFF
            self._enqueue(i)
        else:
            self._live -= 1
            self._level[i] -= self._OFF  # its queued entries go stale


class NaiveLeastLoaded(LeastLoaded):
    """Least-loaded round robin counting only active requests: a backend that fails fast looks
    idle and takes far more than its share (the chapter's sinkholing pitfall)."""

    name = "llrr-naive"
    count_errors = False
