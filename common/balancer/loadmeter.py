"""A serving worker's load report: successful requests, errors and busy time per second over
its recent past — what every reply carries, and what clients' weighted round robin feeds on.

Time is cut into buckets of ``width`` seconds. The report covers the last ``buckets`` complete
buckets — the bucket being filled is left out, so the figures do not swing while it fills —
and is recomputed only when a bucket completes, so reading it for every reply costs nothing.
Utilization is the busy fraction of the serving thread (the worker serves one request at a
time); a request's busy time counts in the bucket where it ended.

    >>> m = LoadMeter(width=1.0, buckets=2, now=0.0)
    >>> m.record(0.0, 0.25, ok=True)
    >>> m.record(0.5, 0.75, ok=False)
    >>> m.roll(1.0)
    >>> (m.qps, m.utilization, m.errors)
    (1.0, 0.5, 1.0)
    >>> m.roll(3.5)  # two empty buckets since: the request has left the window
    >>> (m.qps, m.utilization, m.errors)
    (0.0, 0.0, 0.0)

Pure: time is a parameter.
"""

from __future__ import annotations

from collections import deque


class LoadMeter:
    """Counts per bucket; ``qps``, ``utilization`` and ``errors`` are the current report."""

    def __init__(self, width: float = 0.5, buckets: int = 4, now: float = 0.0) -> None:
        if not width > 0 or buckets < 1:
            raise ValueError("a load meter needs width > 0 and at least one bucket")
        self.width = width
        self._done: deque[tuple[int, int, float]] = deque(maxlen=buckets)  # (ok, errors, busy)
        self._ends = now + width  # when the bucket being filled completes
        self._ok = 0
        self._errors = 0
        self._busy = 0.0
        self.qps = 0.0
        self.utilization = 0.0
        self.errors = 0.0

    def record(self, start: float, end: float, ok: bool) -> None:
        """One request served from ``start`` to ``end``; ``ok`` False for a failure."""
        if end >= self._ends:
            self.roll(end)
        if ok:
            self._ok += 1
        else:
            self._errors += 1
        self._busy += max(0.0, end - start)

    def roll(self, now: float) -> None:
        """Complete every bucket that ended by ``now`` and recompute the report (cheap when
        none did: one comparison)."""
        if now < self._ends:
            return
        done = self._done
        done.append((self._ok, self._errors, self._busy))
        self._ok = self._errors = 0
        self._busy = 0.0
        empty = int((now - self._ends) // self.width)  # buckets that passed with nothing
        for _ in range(min(empty, done.maxlen or 0)):
            done.append((0, 0, 0.0))
        self._ends += (empty + 1) * self.width
        span = len(done) * self.width
        self.qps = sum(b[0] for b in done) / span
        self.errors = sum(b[1] for b in done) / span
        self.utilization = min(1.0, sum(b[2] for b in done) / span)
