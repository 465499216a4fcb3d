"""Rebalancing: move replicas from the most to the least utilized workers, within a budget.

Used when a worker joins or its capacity changes. Pure: it reads loads and owners and proposes
one `Move` at a time; `Placement.rebalance` applies them. A move is proposed only if it lowers
the higher of the two workers' utilizations, so a rebalance never raises the maximum
utilization, and it stops once the spread is within ``tolerance``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping

from .diff import Move
from .strategies import EPS


def best_move(
    eligible: list[str],
    tolerance: float,
    utilization: Callable[[str], float],
    cap: Mapping[str, float],
    load: Mapping[str, float],
    cost_of: Mapping[str, float],
    tasks_of: Mapping[str, Mapping[str, None]],
    owners_of: Mapping[str, list[str]],
    pinned: Container[str] = (),
    excluded: Mapping[str, Container[str]] | None = None,
) -> Move | None:
    """The first useful move from the most utilized worker toward the least utilized ones."""
    by_util = sorted(eligible, key=lambda w: (utilization(w), w))
    for src in reversed(by_util):
        u_src = utilization(src)
        if u_src - utilization(by_util[0]) <= tolerance + EPS:
            return None
        for dst in by_util:
            u_dst = utilization(dst)
            if u_src - u_dst <= tolerance + EPS or dst == src:
                break
            cap_dst = cap[dst]
            for task in tasks_of[src]:
                cost = cost_of[task]
                if task in pinned or dst in owners_of[task]:
                    continue
                if excluded and dst in excluded.get(task, ()):
                    continue
                after_dst = (load[dst] + cost) / cap_dst if cap_dst > 0 else math.inf
                if load[dst] + cost <= cap_dst + EPS and after_dst < u_src - EPS:
                    return Move(task, src, dst)
    return None
