"""Pickers: which backend of the subset gets the next request (SRE book, chapter 20).

A picker works on *slots* 0..n-1 (positions in the client's subset) and keeps, per slot, the
numbers its owner (`corral.common.balancer.backends.BackendTable`) feeds it:

* ``eligible[i]`` — may get new requests (health, flow control and panic decided by the owner);
* ``active[i]`` — requests this client has in flight there (`pick` adds one, `release` ends one);
* ``errors[i]`` — recent errors (`add_error` / `drop_error`; the owner expires them).

`pick` returns a slot and counts the request as started, or -1 when no slot is eligible. It never
returns an ineligible slot. Every pick is O(1) or O(log n): the owner calls the notification
methods on every change instead of the picker scanning all slots per request, since a pick
plus its release is the cost of every request. `PICKERS` (docs/balancer.md, "Pickers",
describes each, its structures and its measured cost):

* ``rr`` — round robin over the eligible slots;
* ``llrr`` — round robin among the least loaded, recent errors counted as load (no sinkhole);
* ``llrr-naive`` — the same without counting errors: the chapter's pitfall, kept to show it;
* ``wrr`` — weighted round robin as an earliest-deadline-first schedule (a heap, O(log n));
* ``p2c`` — the less loaded (active + recent errors) of two distinct random slots;
* ``random`` — a uniformly random eligible slot.

`Picker` (in `corral.common.balancer.picker`) is the state they all keep; ``llrr`` and
``llrr-naive`` live in `corral.common.balancer.least_loaded`. Example::

    >>> import random
    >>> p = make_picker("rr", 3, random.Random(0))
    >>> p.pick() in (0, 1, 2)
    True
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from heapq import heapreplace as _heapreplace

from .least_loaded import LeastLoaded, NaiveLeastLoaded
from .picker import Picker

__all__ = ["PICKERS", "LeastLoaded", "NaiveLeastLoaded", "Picker", "make_picker"]


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

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._detours += not n  # no slot: nothing to draw from

    def pick(self) -> int:
        # 30 random bits modulo n: uniform to within n / 2**30, and cheaper than
        # int(random() * n) (30 bits fit one digit of a Python int).
        if self._detours:  # some slot is ineligible (or there is none): draw once, then list
            n = self.n
            i = self._bits(30) % n if n else -1
            if i < 0 or not self.eligible[i]:
                return self._random_eligible()
        else:
            i = self._bits(30) % self.n
        self.active[i] += 1
        return i


class PowerOfTwo(Picker):
    """Two distinct random slots; the one with less load (active + recent errors) wins, the
    first drawn on a tie. So it never picks the more loaded of its two, and with two slots it
    always picks the less loaded one.

    The usual case — every slot eligible, no recent error anywhere — has a short path: one
    draw, one comparison of requests in flight. An ineligible slot or a recent error (each
    counted in ``_detours`` as it comes and goes) sends picks down the general path."""

    name = "p2c"

    def __init__(self, n: int, rng: random.Random) -> None:
        super().__init__(n, rng)
        self._others = n - 1
        self._detours += n < 2  # one slot or none: no two to compare

    def add_error(self, i: int) -> None:
        self.errors[i] += 1
        self._detours += 1

    def drop_error(self, i: int) -> None:
        self.errors[i] -= 1
        self._detours -= 1

    def pick(self) -> int:
        if self._detours:
            return self._pick_among_eligible()
        # 30 random bits modulo n: uniform to within n / 2**30, and cheaper than
        # int(random() * n) (30 bits fit one digit of a Python int). b is among the n - 1
        # others.
        bits = self._bits
        a = bits(30) % self.n
        b = bits(30) % self._others
        if b >= a:
            b += 1
        active = self.active
        if active[b] < active[a]:  # no errors anywhere: the load is what is in flight
            a = b
        active[a] += 1
        return a

    def _pick_among_eligible(self) -> int:
        """The general path: the two are drawn among the eligible slots (by rejection while
        most are eligible, else from a list of them) and their errors count as load."""
        n, eligible = self.n, self.eligible
        for _ in range(4 if n >= 2 else 0):
            x = self._draw() * n
            a = int(x)
            b = int((x - a) * (n - 1))  # the draw's remaining bits: one call instead of two
            if b >= a:
                b += 1
            if eligible[a] and eligible[b]:
                return self._less_loaded(a, b)
        choices = [j for j in range(n) if eligible[j]]
        if len(choices) < 2:
            return self._random_eligible()
        x = self._draw() * len(choices)
        a = int(x)
        b = int((x - a) * (len(choices) - 1))
        return self._less_loaded(choices[a], choices[b + (b >= a)])

    def _less_loaded(self, a: int, b: int) -> int:
        active, errors = self.active, self.errors
        i = b if active[b] + errors[b] < active[a] + errors[a] else a
        active[i] += 1
        return i


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
        if len(weights) != self.n or not all(0 < w < math.inf for w in weights):
            raise ValueError("wrr needs one finite positive weight per slot")
        if not self.n:
            return
        # Relative to the largest weight, so no sum overflows; a slot below 1e-12 of it is
        # served as if at 1e-12 (never, in practice), so no period is too large to compute.
        top = max(weights)
        relative = [max(w / top, 1e-12) for w in weights]
        mean = sum(relative) / self.n
        period = [max(1, round(self._SCALE * mean / w)) for w in relative]
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
        try:
            top = heap[0]  # written out: this is the path of nearly every pick
        except IndexError:  # no slots
            return -1
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
