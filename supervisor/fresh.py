"""Fresh worker ids per connection: a token bucket, so a flood of made-up ids costs little.

A real worker is one id on its own connection; an id that arrives on a connection that already
brought `burst` new ids within the last minute waits (its report is dropped and counted: the
next one, a report interval later, may get in). Each bucket refills at `burst` ids a minute.
Emulated fleets that share a connection among many workers raise ``--fresh-ids``.

    >>> f = FreshIds(burst=2)
    >>> [f.allow(b"c1", 0.0) for _ in range(3)], f.allow(b"c2", 0.0)
    ([True, True, False], True)
    >>> f.allow(b"c1", 30.0)  # half a minute: one id back
    True
    >>> f.prune(1000.0), len(f)  # full buckets are forgotten
    (2, 0)
"""

from __future__ import annotations

WINDOW = 60.0  # seconds in which a bucket refills completely


class FreshIds:
    __slots__ = ("_buckets", "burst")

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self._buckets: dict[bytes, tuple[float, float]] = {}  # connection -> (tokens, at)

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, identity: bytes, now: float) -> bool:
        """May connection ``identity`` bring one more new id now? (Takes it if so.)"""
        tokens, at = self._buckets.get(identity, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.burst / WINDOW)
        if tokens < 1.0:
            self._buckets[identity] = (tokens, now)
            return False
        self._buckets[identity] = (tokens - 1.0, now)
        return True

    def prune(self, now: float) -> int:
        """Forget the buckets that are full again (O(buckets); call it now and then)."""
        full = [i for i, (tokens, at) in self._buckets.items()
                if tokens + (now - at) * self.burst / WINDOW >= self.burst]
        for identity in full:
            del self._buckets[identity]
        return len(full)
