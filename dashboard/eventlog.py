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
from collections.abc import Collection, Iterable
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
        # task -> the move that started it, oldest first; never more than the supervisor says
        # are in flight (`settle_handoffs`): one can end without an event (its task removed)
        self.handoffs: dict[str, dict[str, Any]] = {}
        self._by_source: dict[str, dict[str, None]] = {}  # old owner -> its tasks in handoffs

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
            self._prune_moves(float(ev["at_ms"]))
            task = ev.get("task")
            if ev.get("reason") in HANDOFF_REASONS and isinstance(task, str):
                self._end_handoff(task)  # a task moved again goes to the end: newest
                self.handoffs[task] = ev
                source = ev.get("source")
                if isinstance(source, str):
                    self._by_source.setdefault(source, {})[task] = None
        elif kind == "handoff":
            self._end_handoff(str(ev.get("task")))
        elif kind in ("timeout", "forget"):  # the supervisor ends what a gone owner released
            for task in list(self._by_source.get(str(ev.get("worker")), ())):
                self._end_handoff(task)
        return ev

    def _end_handoff(self, task: str) -> None:
        ev = self.handoffs.pop(task, None)
        if ev is None:
            return
        source = ev.get("source")
        tasks = self._by_source.get(source) if isinstance(source, str) else None
        if tasks is not None:
            tasks.pop(task, None)
            if not tasks:
                del self._by_source[ev["source"]]

    def keep_handoffs(self, tasks: Collection[str]) -> None:
        """Only ``tasks`` are in a hand-off (the supervisor's complete list of them)."""
        for task in [t for t in self.handoffs if t not in tasks]:
            self._end_handoff(task)

    def settle_handoffs(self, in_flight: int) -> None:
        """The supervisor says how many hand-offs are in flight: never show more (one that
        ended without an event — its task left the list, its new owner is gone — is not
        shown for ever); the oldest go first, as the likeliest to have ended so."""
        while len(self.handoffs) > max(0, in_flight):
            self._end_handoff(next(iter(self.handoffs)))

    def _prune_moves(self, newest_ms: float) -> None:
        moves = self._moves
        while moves and moves[0] < newest_ms - 3_600_000:
            moves.popleft()  # kept no longer than an hour

    def sizes(self) -> dict[str, int]:
        """Entries per table, for `Follower.table_sizes`."""
        return {"events": len(self.events), "moves": len(self._moves),
                "handoffs": len(self.handoffs), "handoff_sources": len(self._by_source)}

    def moves_since(self, since_ms: float) -> int:
        self._prune_moves(since_ms)
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
