"""Rebalancing: move replicas from the most to the least utilized workers, within a budget.

Used when a worker joins or its capacity changes. Pure: `plan_moves` reads and updates loads
and owners through the `Placement` it is given and returns the moves in order. A move is made
only if it lowers the higher of the two workers' utilizations, so a rebalance never raises the
maximum utilization, and it stops once the spread is within ``tolerance``.

Cost: two heaps built once per call (O(W)), then O(log W) per move plus a scan of the source's
tasks; entries made stale by a move are skipped when they reach the top.
"""

from __future__ import annotations

import heapq
from collections.abc import Container
from typing import TYPE_CHECKING

from .diff import Move
from .strategies import EPS

if TYPE_CHECKING:
    from .placement import Placement

CANDIDATES = 8  # least utilized targets tried for one source before giving up on it


def plan_moves(p: Placement, tolerance: float, budget: int, pinned: Container[str]) -> list[Move]:
    open_workers = [w for w in p.eligible() if p.max_load(w) > 0]
    moves: list[Move] = []
    if len(open_workers) < 2 or budget <= 0:
        return moves
    util = p.utilization
    hi = [(-util(w), w) for w in open_workers]
    lo = [(util(w), w) for w in open_workers]
    heapq.heapify(hi)
    heapq.heapify(lo)
    is_open = set(open_workers)

    def fresh_top(heap: list[tuple[float, str]], sign: float) -> tuple[float, str] | None:
        while heap:
            key, w = heap[0]
            if w in is_open and key == sign * util(w):
                return key, w
            heapq.heappop(heap)  # stale: its worker moved since this entry was pushed
        return None

    while len(moves) < budget:
        top, bottom = fresh_top(hi, -1.0), fresh_top(lo, 1.0)
        if top is None or bottom is None:
            break
        src, u_src = top[1], -top[0]
        if u_src - bottom[0] <= tolerance + EPS:
            break
        move = _move_from(p, src, u_src, lo, is_open, tolerance, pinned)
        if move is None:
            heapq.heappop(hi)  # nothing this worker holds can go anywhere useful
            continue
        p.unassign(move.task, move.source)
        p.assign(move.task, move.target)
        moves.append(move)
        for w in (move.source, move.target):
            heapq.heappush(hi, (-util(w), w))
            heapq.heappush(lo, (util(w), w))
    return moves


def _move_from(p: Placement, src: str, u_src: float, lo: list[tuple[float, str]],
               is_open: set[str], tolerance: float, pinned: Container[str]) -> Move | None:
    """The first useful move of one of ``src``'s tasks to one of the least utilized workers."""
    util = p.utilization
    tried: list[tuple[float, str]] = []
    found = None
    while lo and len(tried) < CANDIDATES and found is None:
        key, dst = heapq.heappop(lo)
        if dst not in is_open or key != util(dst):
            continue
        tried.append((key, dst))
        if dst == src or u_src - key <= tolerance + EPS:
            continue
        cap, load = p.max_load(dst), p.load(dst)
        for task in p.tasks_of(src):
            cost = p.tasks[task]
            if task in pinned or dst in p.owners(task) or dst in p.excluded_from(task):
                continue
            if load + cost <= cap + EPS and (load + cost) / cap < u_src - EPS:
                found = Move(task, src, dst)
                break
    for item in tried:
        heapq.heappush(lo, item)
    return found
