"""The events the dashboard has seen, newest last, in a bounded ring: what the Events list
pages through and filters, what a worker's drill-down shows of its recent history, the moves
per minute of the balance charts and the hand-offs in progress.

Each event keeps the supervisor's fields and gets ``n`` (this dashboard's own number: the
supervisor's ``seq`` starts again with every leader) and ``at_ms`` (when it happened, on the
dashboard's wall clock, from the answer's ``now`` − the event's ``t``). Pure: no I/O, no clock.

    >>> log = EventLog(capacity=100)
    >>> evs = log.add([{"seq": 1, "t": 9.0, "kind": "timeout", "worker": "w2", "tasks": 1},
    ...                {"seq": 2, "t": 9.5, "kind": "move", "task": "t1", "to": "w1",
    ...                 "source": "w2", "reason": "worker gone"}], now=10.0, wall_ms=50_000.0)
    >>> [(e["n"], e["at_ms"]) for e in evs]
    [(1, 49000.0), (2, 49500.0)]
    >>> [e["kind"] for e in log.query(q="w2")]
    ['move', 'timeout']
    >>> log.moves_since(49_400.0)
    1
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from typing import Any

CAPACITY = 10_000
HANDOFF_REASONS = ("drain", "rebalance")  # moves that are make-before-break hand-offs
TEXT_FIELDS = ("worker", "task", "to", "source", "reason", "role")


def matches(ev: dict[str, Any], kind: str = "", q: str = "") -> bool:
    """The Events list's filter (the page applies the same one to what the stream brings):
    a kind, and a text found in the worker, task, source, target, reason or role."""
    if kind and ev.get("kind") != kind:
        return False
    if q:
        ql = q.lower()
        return any(ql in str(ev.get(f, "")).lower() for f in TEXT_FIELDS if ev.get(f))
    return True


def involves(ev: dict[str, Any], worker: str) -> bool:
    return worker in (ev.get("worker"), ev.get("to"), ev.get("source"))


class EventLog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.n = 0
        self._moves: deque[float] = deque()  # at_ms of recent moves, oldest first
        self.handoffs: dict[str, dict[str, Any]] = {}  # task -> the move that started it

    def add(self, events: Iterable[dict[str, Any]], now: float,
            wall_ms: float) -> list[dict[str, Any]]:
        """The supervisor's events (times on its clock, ``now`` being its clock at answer
        time), numbered and timed here; returns them as kept."""
        out = []
        for ev in events:
            ev = dict(ev)
            t = ev.get("t")
            ev["at_ms"] = round(wall_ms - 1000.0 * (now - t), 1) \
                if isinstance(t, int | float) else wall_ms
            out.append(self._keep(ev))
        return out

    def note(self, kind: str, wall_ms: float, **fields: Any) -> dict[str, Any]:
        """The dashboard's own events (it lost or found the supervisor, it resynchronised)."""
        return self._keep({"kind": kind, "at_ms": wall_ms, "dashboard": True, **fields})

    def _keep(self, ev: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        ev["n"] = self.n
        self.events.append(ev)
        kind = ev.get("kind")
        if kind == "move":
            self._moves.append(float(ev["at_ms"]))
            task = ev.get("task")
            if ev.get("reason") in HANDOFF_REASONS and isinstance(task, str):
                self.handoffs[task] = ev
        elif kind == "handoff":
            self.handoffs.pop(str(ev.get("task")), None)
        return ev

    def settle_handoffs(self, in_flight: int) -> None:
        """The supervisor says how many hand-offs are in flight: none means none (one that
        ended without an event, its new owner gone, is not shown for ever)."""
        if in_flight == 0:
            self.handoffs.clear()

    def moves_since(self, since_ms: float) -> int:
        while self._moves and self._moves[0] < since_ms - 3_600_000:
            self._moves.popleft()  # kept no longer than an hour
        return len(self._moves) - bisect.bisect_left(self._moves, since_ms)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` events, oldest first."""
        n = len(self.events)
        return [self.events[i] for i in range(max(0, n - limit), n)]

    def query(self, kind: str = "", q: str = "", worker: str = "", before: int | None = None,
              limit: int = 100) -> list[dict[str, Any]]:
        """Newest first: events numbered below ``before`` that pass the filter."""
        out: list[dict[str, Any]] = []
        for ev in reversed(self.events):
            if before is not None and ev["n"] >= before:
                continue
            if worker and not involves(ev, worker):
                continue
            if matches(ev, kind, q):
                out.append(ev)
                if len(out) >= limit:
                    break
        return out
