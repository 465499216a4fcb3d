"""Pickers: which backend of the subset gets the next request (SRE book, chapter 20).

A picker works on *slots* 0..n-1 (positions in the client's subset) and keeps, per slot, the
numbers its owner (`corral.common.backends.BackendTable`) feeds it:

* ``eligible[i]`` — may get new requests (health, flow control and panic decided by the owner);
* ``active[i]`` — requests this client has in flight there (`pick` adds one, `release` ends one);
* ``errors[i]`` — recent errors (`add_error` / `drop_error`; the owner expires them).

`pick` returns a slot and counts the request as started, or -1 when no slot is eligible. It never
returns an ineligible slot. Every pick is O(1) or O(log n): the owner calls the notification
methods on every change instead of the picker scanning all slots per request.

=============  ==========================================================================
``rr``         round robin over the eligible slots.
``llrr``       least-loaded round robin: round robin among the slots with the fewest active
               requests, counting recent errors as active requests so that a backend that
               fails fast does not look idle and sinkhole traffic.
``llrr-naive`` the same without counting errors: the chapter's pitfall, kept to show it.
``wrr``        weighted round robin, as an earliest-deadline-first schedule: slot i's next
               turn is due 1/w_i after its last, and a heap yields the earliest (O(log n)).
``p2c``        power of two choices: two distinct random slots, the less loaded one wins.
``random``     a uniformly random eligible slot.
=============  ==========================================================================

Example::

    >>> import random
    >>> p = make_picker("llrr", 3, random.Random(0))
    >>> [p.pick(), p.pick(), p.pick()]
    [0, 1, 2]
    >>> p.release(1)
    >>> p.pick()
    1
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Sequence
from heapq import heapreplace as _heapreplace
from typing import ClassVar


class Picker:
    """The per-slot state every picker keeps, and the notifications that change it."""

    name: ClassVar[str] = ""

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n = n
        self.eligible = [True] * n
        self.active = [0] * n
        self.errors = [0] * n
        self._draw = rng.random

    def pick(self) -> int:
        raise NotImplementedError

    def release(self, i: int) -> None:
        """A request on slot i finished (whatever its outcome)."""
        self.active[i] -= 1

    def add_active(self, i: int, count: int) -> None:
        """Count ``count`` requests already in flight on slot i (after a subset change)."""
        self.active[i] += count

    def add_error(self, i: int) -> None:
        self.errors[i] += 1

    def drop_error(self, i: int) -> None:
        self.errors[i] -= 1

    def set_eligible(self, i: int, ok: bool) -> None:
        self.eligible[i] = ok

    def set_weights(self, weights: Sequence[float]) -> None:
        """Capability weights (> 0) per slot; only ``wrr`` uses them."""

    def _first_eligible_from(self, i: int) -> int:
        """The first eligible slot at or after i, round the ring; -1 if there is none."""
        eligible, n = self.eligible, self.n
        for step in range(n):
            j = (i + step) % n
            if eligible[j]:
                return j
        return -1

    def _random_eligible(self) -> int:
        """A uniformly random eligible slot, counted as started; -1 if there is none."""
        choices = [j for j in range(self.n) if self.eligible[j]]
        if not choices:
            return -1
        i = choices[int(self._draw() * len(choices))]
        self.active[i] += 1
        return i


class RoundRobin(Picker):
    """Each eligible slot in turn. Starts at a random slot so that clients sharing a subset do
    not all hit the same backend first."""

    name = "rr"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._next = rng.randrange(n) if n else 0

    def pick(self) -> int:
        i = self._next
        if i >= self.n:
            if not self.n:
                return -1
            i = 0
        if not self.eligible[i]:
            i = self._first_eligible_from(i)
            if i < 0:
                return -1
        self._next = i + 1
        self.active[i] += 1
        return i


class RandomPick(Picker):
    """A uniformly random eligible slot."""

    name = "random"

    def pick(self) -> int:
        n = self.n
        if n:
            i = int(self._draw() * n)
            if self.eligible[i]:
                self.active[i] += 1
                return i
        return self._random_eligible()


class PowerOfTwo(Picker):
    """Two distinct random slots; the one with less load (active + recent errors) wins."""

    name = "p2c"

    def pick(self) -> int:
        n = self.n
        if n < 2:
            return self._random_eligible()
        eligible, active, errors = self.eligible, self.active, self.errors
        x = self._draw() * n
        a = int(x)
        b = int((x - a) * (n - 1))  # the draw's remaining bits: one call instead of two
        if b >= a:
            b += 1
        if eligible[a] and eligible[b]:
            i = b if active[b] + errors[b] < active[a] + errors[a] else a
        elif eligible[a] or eligible[b]:
            i = a if eligible[a] else b
        else:
            return self._random_eligible()
        active[i] += 1
        return i


class LeastLoaded(Picker):
    """Round robin among the eligible slots with the least load, load = active + recent errors.

    Slots wait in one FIFO queue per load level, so a slot whose load drops back to the minimum
    queues behind the others there: round robin among the least loaded. Loads move by one at a
    time, so a change is O(1): the slot is appended to its new level's queue and its old entry
    goes stale (each entry carries a stamp; only the slot's latest stamp is live). Stale entries
    are skipped when popped and purged when a queue grows past 2n + 8 entries, which keeps
    memory bounded and the work amortized O(1).
    """

    name = "llrr"
    count_errors: ClassVar[bool] = True

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._load = [0] * n
        self._stamp = [0] * n
        self._queues: list[deque[tuple[int, int]]] = [deque()]
        self._min = 0  # never above the least live load
        self._live = n  # eligible slots, i.e. live entries
        self._limit = 2 * n + 8  # queue length that triggers a purge of stale entries
        for i in range(n):
            self._enqueue(i)

    def _enqueue(self, i: int) -> None:
        stamp = self._stamp[i] + 1
        self._stamp[i] = stamp
        load = self._load[i]
        queues = self._queues
        while len(queues) <= load:
            queues.append(deque())
        queue = queues[load]
        queue.append((i, stamp))
        if len(queue) > self._limit:
            self._purge(load)
        if load < self._min:
            self._min = load

    def _purge(self, load: int) -> None:
        live = self._stamp
        self._queues[load] = deque(e for e in self._queues[load] if live[e[0]] == e[1])

    def _move(self, i: int, delta: int) -> None:
        self._load[i] += delta
        if self.eligible[i]:
            self._enqueue(i)

    # pick and release run once per request each, so they are written out in full.

    def pick(self) -> int:
        if not self._live:
            return -1
        queues, stamps = self._queues, self._stamp
        low = self._min
        while True:
            queue = queues[low]
            while queue:
                i, stamp = queue.popleft()
                if stamps[i] == stamp:
                    self._min = low
                    self.active[i] += 1
                    low += 1
                    self._load[i] = low
                    stamps[i] = stamp = stamp + 1
                    if low == len(queues):
                        queues.append(deque())
                    queue = queues[low]
                    queue.append((i, stamp))
                    if len(queue) > self._limit:
                        self._purge(low)
                    return i
            low += 1

    def release(self, i: int) -> None:
        self.active[i] -= 1
        load = self._load[i] - 1
        self._load[i] = load
        if self.eligible[i]:
            stamps = self._stamp
            stamps[i] = stamp = stamps[i] + 1
            queue = self._queues[load]
            queue.append((i, stamp))
            if len(queue) > self._limit:
                self._purge(load)
            if load < self._min:
                self._min = load

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
        self.eligible[i] = ok
        if ok:
            self._live += 1
            self._enqueue(i)
        else:
            self._live -= 1
            self._stamp[i] += 1  # its queued entry goes stale


class NaiveLeastLoaded(LeastLoaded):
    """Least-loaded round robin counting only active requests: a backend that fails fast looks
    idle and takes far more than its share (the chapter's sinkholing pitfall)."""

    name = "llrr-naive"
    count_errors = False


class WeightedRoundRobin(Picker):
    """Earliest deadline first over the slots' weights: shares follow the weights exactly in
    the long run (each slot within one pick of its share), and a pick is one heap replace.

    A slot's turns come every ``period`` ticks, period = 2**24 × mean weight / its weight, so
    deadlines are integers; each heap entry is ``deadline << shift | slot``, one int, which
    compares faster than a (deadline, slot) tuple and still breaks ties by slot. An ineligible
    slot at the top loses its turn (its deadline moves on), so it does not get a burst of
    requests when it becomes eligible again.
    """

    name = "wrr"
    _SCALE = 1 << 24  # ticks in the period of a slot of mean weight

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._shift = max(1, n.bit_length())
        self._mask = (1 << self._shift) - 1
        self._period = [self._SCALE] * n
        self._step = [p << self._shift for p in self._period]
        # A random phase per slot, so that clients do not all start on the same backend.
        self._heap = [(int(rng.random() * self._SCALE) << self._shift) | i for i in range(n)]
        heapq.heapify(self._heap)

    def set_weights(self, weights: Sequence[float]) -> None:
        """New weights keep each slot's progress: the time left to its turn is rescaled."""
        if len(weights) != self.n or min(weights, default=1.0) <= 0:
            raise ValueError("wrr needs one positive weight per slot")
        if not self.n:
            return
        mean = sum(weights) / self.n
        period = [max(1, round(self._SCALE * mean / w)) for w in weights]
        shift, mask, old = self._shift, self._mask, self._period
        now = self._heap[0] >> shift
        self._heap = [
            ((now + ((e >> shift) - now) * period[e & mask] // old[e & mask]) << shift) | e & mask
            for e in self._heap
        ]
        heapq.heapify(self._heap)
        self._period = period
        self._step = [p << shift for p in period]

    def pick(self) -> int:
        heap = self._heap
        if not heap:
            return -1
        top = heap[0]  # written out: this is the path of nearly every pick
        i = top & self._mask
        _heapreplace(heap, top + self._step[i])
        if self.eligible[i]:
            self.active[i] += 1
            return i
        for _ in range(self.n - 1):  # at most one more turn each
            i = self._advance()
            if self.eligible[i]:
                self.active[i] += 1
                return i
        return -1

    def _advance(self) -> int:
        """Give the slot whose deadline is earliest its turn; return that slot."""
        top = self._heap[0]
        i = top & self._mask
        _heapreplace(self._heap, top + self._step[i])
        return i


PICKERS: dict[str, type[Picker]] = {
    cls.name: cls
    for cls in (
        RoundRobin,
        LeastLoaded,
        NaiveLeastLoaded,
        WeightedRoundRobin,
        PowerOfTwo,
        RandomPick,
    )
}


def make_picker(name: str, n: int, rng: random.Random) -> Picker:
    """A new picker of kind ``name`` (a key of `PICKERS`) over ``n`` slots."""
    try:
        cls = PICKERS[name]
    except KeyError:
        raise ValueError(f"unknown picker {name!r}; use one of {sorted(PICKERS)}") from None
    return cls(n, rng)
