"""The change feed: what happened, in order, from a bounded ring buffer.

Every event the supervisor wants an operator (or the dashboard, or ``corralctl watch``) to
see — joins, timeouts, moves with their reason, hand-offs, rebalance passes, task-list
changes, HA role changes, refusals — gets the next sequence number and the time it happened
(the supervisor's monotonic clock; the ``events`` verb also answers its ``now``, so a reader
can tell how long ago). A reader asks for the events after the last number it saw; when that
number has fallen off the ring, the answer says how many were missed.

    >>> f = Feed(capacity=3)
    >>> f.at(10.0)
    >>> for w in ("a", "b", "c", "d"):
    ...     f.add("join", worker=w)
    >>> page = f.after(0, limit=10)
    >>> page["missed"], [e["worker"] for e in page["events"]], page["cursor"]
    (1, ['b', 'c', 'd'], 4)
    >>> f.after(4, limit=10)["events"]
    []
"""

from __future__ import annotations

from typing import Any

DEFAULT_CAPACITY = 20_000
MAX_PAGE = 5_000


class Feed:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.enabled = capacity > 0
        self._buf: list[dict[str, Any] | None] = [None] * max(capacity, 1)
        self.last = 0  # the newest event's number (0: none yet)
        self._now = 0.0

    def at(self, now: float) -> None:
        """The time of the events added next (set once per event the core handles)."""
        self._now = now

    def add(self, kind: str, **fields: Any) -> None:
        if not self.enabled:
            return
        self.last += 1
        fields["seq"], fields["t"], fields["kind"] = self.last, self._now, kind
        self._buf[self.last % self.capacity] = fields

    @property
    def held(self) -> int:
        """Events held (at most the capacity)."""
        return min(self.last, self.capacity)

    @property
    def first(self) -> int:
        """The oldest event still held (last + 1 when empty)."""
        return max(1, self.last - self.capacity + 1) if self.last else 1

    def after(self, cursor: int | None, limit: int = 1000) -> dict[str, Any]:
        """The events numbered after ``cursor`` (None: the newest ``limit``), oldest first.
        ``cursor`` in the answer is the number to ask after next time; ``missed`` counts
        events that fell off the ring before this reader saw them."""
        limit = max(1, min(limit, MAX_PAGE))
        first, last = self.first, self.last
        if cursor is None:
            cursor = max(first - 1, last - limit)
        cursor = min(max(cursor, 0), last)
        missed = max(0, first - 1 - cursor)
        start = max(cursor + 1, first)
        end = min(last, start + limit - 1)
        buf, cap = self._buf, self.capacity
        events = [buf[s % cap] for s in range(start, end + 1)]
        return {"events": events, "cursor": end if events else cursor, "missed": missed,
                "first": first, "last": last, "now": self._now}
