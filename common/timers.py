"""The supervisor's low-precision timers (docs/supervisor.md, "Lifecycle"): a hashed timer wheel,
`TimerWheel`, for every deadline that can be cancelled or replaced, and `LazyTimers` for the
many that only ever move later (a worker's silence).

Both fire a deadline ``t`` at the first tick boundary at or after ``t``: never early, at most
one tick late. Time is always a parameter (``expire(now)``); neither reads a clock, so tests
drive them with a fake one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable
from enum import Enum
from operator import attrgetter
from typing import Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)

# Float division can put an exact multiple of the tick a hair above or below an integer.
_EPS = 1e-9


class TimerKind(Enum):
    TIMEOUT = "timeout"
    POLL = "poll"


class Fired(NamedTuple, Generic[K]):
    """One registration that came due: its key, kind and the deadline it was due at. (A named
    tuple: at 100,000 workers a tick fires thousands, and a frozen dataclass costs ~3x more
    to build.)"""

    key: K
    kind: TimerKind
    deadline: float


_ORDER = attrgetter("deadline", "seq")


class _Entry:
    __slots__ = ("deadline", "interval", "key", "kind", "seq", "tick")

    def __init__(
        self, key: Hashable, kind: TimerKind, deadline: float, tick: int, interval: float, seq: int
    ) -> None:
        self.key = key
        self.kind = kind
        self.deadline = deadline
        self.tick = tick
        self.interval = interval
        self.seq = seq


class TimerWheel(Generic[K]):
    """A hashed timer wheel: ``slots`` buckets of ``tick`` seconds each, with the seed's two
    kinds of registration:

    * **timeout** — one-shot, at an absolute time; rescheduled (re-armed) every time its owner
      reports, which is O(1): the entry moves from one slot to another.
    * **poll** — periodic, every ``interval`` seconds. It re-arms itself from its previous
      deadline (``deadline + k * interval``), never from the time it was noticed, so it does not
      drift. If the clock jumped over several periods it fires once and skips the missed ones.

    Schedule, reschedule and cancel are O(1); `expire` costs O(ticks elapsed + fired), bounded
    by one sweep of the wheel however far the clock jumped. Keys share one namespace: scheduling
    a key that is already registered replaces its registration.

        >>> w = TimerWheel(tick=0.5, now=0.0)
        >>> w.schedule_timeout("worker-1", at=3.2)
        >>> w.schedule_poll("query", interval=10.0, first_at=10.0)
        >>> w.next_deadline()
        3.5
        >>> [f.key for f in w.expire(3.4)]
        []
        >>> [f.key for f in w.expire(3.5)]
        ['worker-1']
        >>> [(f.key, f.deadline) for f in w.expire(25.0)]
        [('query', 10.0)]
        >>> w.deadline("query")
        30.0
    """

    def __init__(self, tick: float, now: float, slots: int = 512) -> None:
        if not tick > 0:
            raise ValueError(f"tick must be > 0, got {tick!r}")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots!r}")
        self.tick = tick
        self._nslots = slots
        self._slots: list[dict[Hashable, _Entry]] = [{} for _ in range(slots)]
        self._entries: dict[Hashable, _Entry] = {}
        # Every tick index < _next has been processed by expire().
        self._next = math.floor(now / tick + _EPS) + 1
        self._seq = 0
        # A lower bound of the earliest due tick, or None when it must be recomputed.
        self._hint: int | None = None

    # -- registration ------------------------------------------------------------------------

    def schedule_timeout(self, key: K, at: float) -> None:
        """Fire ``key`` once at ``at`` (replacing any registration of ``key``)."""
        self._put(key, TimerKind.TIMEOUT, at, 0.0)

    def schedule_poll(self, key: K, interval: float, first_at: float) -> None:
        """Fire ``key`` at ``first_at`` and every ``interval`` seconds after it."""
        if not interval > 0:
            raise ValueError(f"poll interval must be > 0, got {interval!r}")
        self._put(key, TimerKind.POLL, first_at, interval)

    def cancel(self, key: K) -> bool:
        """Remove ``key``'s registration; False if it had none."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        del self._slots[entry.tick % self._nslots][key]
        return True

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def deadline(self, key: K) -> float | None:
        """When ``key`` is next due, or None if it is not registered."""
        entry = self._entries.get(key)
        return None if entry is None else entry.deadline

    # -- time --------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest tick time at which something fires, or None if nothing is registered.

        The loop uses it as its poll timeout. It may be earlier than needed after a cancel
        (waking early is harmless: `expire` then returns nothing), never later.
        """
        if not self._entries:
            return None
        if self._hint is None:
            self._hint = self._earliest_tick()
        return max(self._hint, self._next) * self.tick

    def expire(self, now: float) -> list[Fired[K]]:
        """Everything due at or before ``now``, in deadline order; polls are re-armed."""
        last = math.floor(now / self.tick + _EPS)
        if last < self._next:
            return []
        due: list[_Entry] = []
        if last - self._next + 1 >= self._nslots:
            for slot in self._slots:
                due.extend(e for e in slot.values() if e.tick <= last)
        else:
            for t in range(self._next, last + 1):
                slot = self._slots[t % self._nslots]
                if slot:
                    due.extend(e for e in slot.values() if e.tick <= t)
        self._next = last + 1
        self._hint = None
        if not due:
            return []
        due.sort(key=_ORDER)
        fired: list[Fired[K]] = []
        for e in due:
            del self._slots[e.tick % self._nslots][e.key]
            del self._entries[e.key]
            fired.append(Fired(e.key, e.kind, e.deadline))  # type: ignore[arg-type]
            if e.kind is TimerKind.POLL:
                # Re-arm from the deadline, not from now: no drift; skip periods already past.
                periods = max(1, math.floor((now - e.deadline) / e.interval + _EPS) + 1)
                self._put(e.key, TimerKind.POLL, e.deadline + periods * e.interval, e.interval)
        return fired

    # -- internals ---------------------------------------------------------------------------

    def _put(self, key: Hashable, kind: TimerKind, at: float, interval: float) -> None:
        if not -1e300 < at < 1e300:  # finite (NaN fails both comparisons)
            raise ValueError(f"deadline must be finite, got {at!r}")
        # Due at the first tick boundary at or after `at`; anything in the past fires on the
        # next expire().
        tick = math.ceil(at / self.tick - _EPS)
        if tick < self._next:
            tick = self._next
        self._seq += 1
        entry = self._entries.get(key)
        if entry is not None:
            # Re-arming (every worker report does it): move the same entry, allocate nothing.
            if entry.tick != tick:
                slots = self._slots
                del slots[entry.tick % self._nslots][key]
                slots[tick % self._nslots][key] = entry
                entry.tick = tick
            entry.kind, entry.deadline, entry.interval, entry.seq = kind, at, interval, self._seq
        else:
            entry = _Entry(key, kind, at, tick, interval, self._seq)
            self._entries[key] = entry
            self._slots[tick % self._nslots][key] = entry
        if self._hint is not None and tick < self._hint:
            self._hint = tick

    def _earliest_tick(self) -> int:
        # Look one revolution ahead; an entry found in its own revolution is the earliest.
        for t in range(self._next, self._next + self._nslots):
            slot = self._slots[t % self._nslots]
            if slot:
                best = min(e.tick for e in slot.values())
                if best <= t:
                    return best
        # Everything is more than one revolution away: a full scan (rare, and O(entries)).
        return min(e.tick for e in self._entries.values())


class LazyTimers(Generic[K]):
    """Deadlines without cancel or replace, for many keys that are re-armed all the time.

    Arming is one list append into the bucket of its tick, and `expire` hands back the keys of
    every bucket that came due: about a tenth of what a `TimerWheel` fire and re-arm costs
    (there one entry per key is kept so that it can be replaced or cancelled, and a fire sorts,
    builds a record and moves an entry). A worker's silence needs no more: its deadline only
    moves later, and its owner checks, when the old deadline comes, whether it reported since
    (then it arms the new one).

    A key armed twice comes out twice, at both ticks; the owner decides which one counts (the
    supervisor's registry keeps the tick a worker is armed for: one that comes out while it is
    armed for a later tick is ignored).

        >>> t = LazyTimers(tick=0.5, now=0.0)
        >>> t.arm("w1", 3.2), t.arm("w2", 1.0), t.arm("w1", 4.0)
        (7, 2, 8)
        >>> t.next_deadline()
        1.0
        >>> t.expire(3.4)
        ['w2']
        >>> t.expire(10.0)
        ['w1', 'w1']
        >>> t.next_deadline() is None
        True
    """

    def __init__(self, tick: float, now: float) -> None:
        if not tick > 0:
            raise ValueError(f"tick must be > 0, got {tick!r}")
        self.tick = tick
        self._buckets: dict[int, list[K]] = {}
        self._ticks: list[int] = []  # a heap of the ticks that have a bucket
        self._next = math.floor(now / tick + _EPS) + 1  # every tick below it has come out

    def __len__(self) -> int:
        """Keys armed and not yet out (a key armed twice counts twice)."""
        return sum(map(len, self._buckets.values()))

    def arm(self, key: K, at: float) -> int:
        """``key`` comes out at the first tick at or after ``at`` (the next one if ``at`` has
        passed); returns that tick's number."""
        if not -1e300 < at < 1e300:  # finite (NaN fails both comparisons)
            raise ValueError(f"deadline must be finite, got {at!r}")
        t = math.ceil(at / self.tick - _EPS)
        if t < self._next:
            t = self._next
        bucket = self._buckets.get(t)
        if bucket is None:
            self._buckets[t] = [key]
            heapq.heappush(self._ticks, t)
        else:
            bucket.append(key)
        return t

    @property
    def next_tick(self) -> int:
        """The first tick that has not come out yet: a key armed for this tick or a later one
        is still waiting."""
        return self._next

    def next_deadline(self) -> float | None:
        """The time of the earliest tick that has keys, or None."""
        return self._ticks[0] * self.tick if self._ticks else None

    def expire(self, now: float) -> list[K]:
        """The keys of every tick at or before ``now``, tick by tick, each in arming order."""
        last = math.floor(now / self.tick + _EPS)
        if last >= self._next:
            self._next = last + 1
        ticks, out = self._ticks, []
        while ticks and ticks[0] <= last:
            out.extend(self._buckets.pop(heapq.heappop(ticks)))
        return out
