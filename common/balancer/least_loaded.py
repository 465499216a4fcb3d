"""Least-loaded round robin (SRE book, chapter 20): among the eligible backends with the
fewest requests in flight, take turns. ``llrr`` counts recent errors as requests in flight, so
that a backend that fails fast does not look idle and draw all the traffic (``llrr-naive``
does not, to show that pitfall). Registered in `corral.common.balancer.pickers`.

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

# A queued entry is a ticket, ``generation * _STRIDE + slot``: a slot's tickets never repeat.
_STRIDE = 1 << 32
_MASK = _STRIDE - 1
_OFF = 1 << 40  # an ineligible slot's load is kept this far below zero


class LeastLoaded(Picker):
    """Round robin among the eligible slots with the least load, load = active + recent errors.

    Buckets by load with an incremental minimum: one FIFO queue of slots per load level, and
    ``_min``, never above the least load of an eligible slot. A pick pops the head of queue
    ``_min``; a slot whose load drops (a release, an error that expires) is appended to its new
    level and so waits behind the others there: round robin among the least loaded. Loads
    move by one at a time, so each of these is O(1).

    Each queued entry is a *ticket*, ``generation * _STRIDE + slot``, and ``_ticket[i]`` is
    slot i's latest one: live while it is queued. Queueing a slot anew (its load moved, it
    became eligible again) issues a new ticket, so whatever it left behind is stale and skipped
    when popped: a slot is queued at most once, at the back, however often its health flapped.
    (Entries judged live by their level alone came back to life when a slot returned to it:
    after 2,000 flaps one backend of five held 2,000 places in the queue.)

    A picked slot is *not* queued at its new level: in use, the least load rarely runs out —
    releases keep bringing slots down to it — and queueing every picked slot one level up
    would leave an entry there that goes stale at its release, nearly once per request. When
    the queue at ``_min`` does run out, `_rise` finds the new least load among the eligible
    slots and queues every slot at it (those queued there already first, then the others in a
    rotating order): O(eligible slots), and all of them are served before the next such scan,
    so in steady use scans are rare (docs/balancer.md, "Pickers"). The costly case is one
    eligible slot far below the rest (a backend that just recovered): a scan per pick until it
    catches up.

    Entries appended above the least load may go stale before any pick reaches them, so every
    queue is compacted after each `_budget_size` such appends: memory O(n), work amortized
    O(1).
    """

    name = "llrr"
    count_errors: ClassVar[bool] = True

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        # active, plus recent errors when they count; minus _OFF while ineligible
        self._load = [0] * n
        self._ticket = list(range(n))  # slot k's tickets: k, then k + _STRIDE, ... (unique)
        # Queues reach at least two levels above any slot's load (see `_rise`, `_enqueue`).
        self._queues: list[deque[int]] = [deque(self._ticket), deque(), deque()]
        self._min = 0  # never above the least load of an eligible slot
        self._pool = dict.fromkeys(range(n))  # the eligible slots
        self._rises = 0
        self._budget = self._budget_size = 16 * n + 1024  # appends left before a compaction

    # pick and release run once per request each, so they are written out in full.

    def pick(self) -> int:
        low = self._min
        queue = self._queues[low]
        ticket = self._ticket
        while queue:
            e = queue.popleft()
            i = e & _MASK
            if ticket[i] == e:  # a popped ticket is in no queue: no need to clear it
                self.active[i] += 1
                self._load[i] = low + 1
                return i
        return self._rise()

    def release(self, i: int) -> None:
        self.active[i] -= 1
        load = self._load
        low = load[i] - 1
        load[i] = low
        if low >= 0:  # eligible (an ineligible slot's load is kept below every level)
            ticket = self._ticket
            e = ticket[i] + _STRIDE
            ticket[i] = e
            self._queues[low].append(e)
            if low <= self._min:
                self._min = low
            else:  # above the least load: it may go stale before any pick gets there
                self._budget -= 1
                if not self._budget:
                    self._compact()

    def _rise(self) -> int:
        """The queue at the least load ran out: queue every eligible slot at the new least
        load, and pick. -1 if no slot is eligible."""
        pool = self._pool
        if not pool:
            return -1
        load, queues, ticket = self._load, self._queues, self._ticket
        low = min([load[i] for i in pool])
        while len(queues) < low + 3:
            queues.append(deque())
        slots = list(pool)
        turn = self._rises % len(slots)  # so that no slot always comes first
        self._rises += 1
        waiting = [e for e in queues[low] if ticket[e & _MASK] == e]
        queued = {e & _MASK for e in waiting}
        queues[low] = deque(waiting)
        for i in slots[turn:] + slots[:turn]:
            if load[i] == low and i not in queued:
                self._push(i, low)
        self._min = low
        return self.pick()  # finds one now

    def _push(self, i: int, low: int) -> None:
        """A new ticket for slot i at the back of queue ``low``; its old one goes stale."""
        e = self._ticket[i] + _STRIDE
        self._ticket[i] = e
        self._queues[low].append(e)

    def _enqueue(self, i: int) -> None:
        """Queue eligible slot i at its load (its load moved, or it became eligible)."""
        low = self._load[i]
        queues = self._queues
        while len(queues) < low + 3:
            queues.append(deque())
        self._push(i, low)
        if low < self._min:
            self._min = low
        self._budget -= 1
        if self._budget <= 0:
            self._compact()

    def _compact(self) -> None:
        """Drop every stale entry (each slot keeps its one live ticket, in its place)."""
        ticket, queues = self._ticket, self._queues
        for low, queue in enumerate(queues):
            queues[low] = deque([e for e in queue if ticket[e & _MASK] == e])
        self._budget = self._budget_size

    def _move(self, i: int, delta: int) -> None:
        self._load[i] += delta
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
            self._pool[i] = None
            self._load[i] += _OFF
            self._enqueue(i)
        else:
            del self._pool[i]
            self._load[i] -= _OFF
            self._ticket[i] += _STRIDE  # its queued entry goes stale


class NaiveLeastLoaded(LeastLoaded):
    """Least-loaded round robin counting only active requests: a backend that fails fast looks
    idle and takes far more than its share (the chapter's sinkholing pitfall)."""

    name = "llrr-naive"
    count_errors = False
