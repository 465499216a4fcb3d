"""Balance over time: one sample every few seconds, kept for more than an hour by the dashboard
process (so a reload shows the past, and a browser opened now sees the last hour).

A sample holds the utilization spread (max ÷ mean and max − min over the workers that take
tasks), the pending tasks, the moves in the minute before it and the workers alive. Pure.

    >>> h = History(points=3)
    >>> for i in range(4):
    ...     _ = h.add(sample({"spread_ratio": 1.0, "spread_diff": 0.0, "alive": 3},
    ...                      {"tasks_pending": i}, moves_last_minute=0, wall_ms=i * 5000.0))
    >>> [s["pending"] for s in h.points()]
    [1, 2, 3]
"""

from __future__ import annotations

from collections import deque
from typing import Any

EVERY_S = 5.0
POINTS = 900  # 900 × 5 s = 75 minutes
SERIES = ("spread_ratio", "spread_diff", "pending", "moves_per_min", "alive")


def sample(summary: dict[str, Any], status: dict[str, Any] | None, moves_last_minute: int,
           wall_ms: float) -> dict[str, Any]:
    st = status or {}
    return {
        "at_ms": round(wall_ms),
        "spread_ratio": summary.get("spread_ratio", 1.0),
        "spread_diff": summary.get("spread_diff", 0.0),
        "pending": st.get("tasks_pending"),
        "moves_per_min": moves_last_minute,
        "alive": st.get("workers_active", summary.get("alive")),
    }


class History:
    def __init__(self, points: int = POINTS) -> None:
        self._points: deque[dict[str, Any]] = deque(maxlen=points)

    def add(self, point: dict[str, Any]) -> dict[str, Any]:
        self._points.append(point)
        return point

    def __len__(self) -> int:
        return len(self._points)

    def points(self) -> list[dict[str, Any]]:
        return list(self._points)
