"""Where a replica goes: the placement strategies, as pure functions over plain dicts.

Each function gets the tasks of one round and one cost (see `coverage`), the workers open for
new replicas, and the mutable ``load`` and ``owners`` maps (owners as tuples); it places what
it can, updates ``load`` and ``owners``, and returns ``(got, left)``: worker -> tasks it was
given, and the tasks it did not place. `Ledger.record` does the rest of the book-keeping.

``least-utilized`` (`water_fill`, with `fill_blocks` as its bulk fast path): each replica goes
to the open worker with the lowest utilization *after* placing it, ``(load + cost) / max_load``
(ties: lowest id). With one replica per task and unit costs this is optimal: the maximum
utilization ends as low as integer placement allows. With more replicas the rule that a
task's replicas sit on distinct workers can cost the greedy order up to one task on the most
utilized worker (seen only on tiny fleets; tests/unit/test_placement.py checks the bound), and
when capacity is short it can leave a later replica pending that a reshuffle of this round's
replicas would have placed. Coverage (first replicas) is never affected.

``proportional`` (`proportional`): the supervisor seed's rule. weight_i = free_i / Σ free with
free = max_load − load; worker i takes ceil(n × weight_i) of the round's n replicas as a
contiguous run of the task list, workers in id order. Three empty workers with max loads 10, 20
and 40 and 35 tasks: weights 1/7, 2/7, 4/7, so they take ceil(5) = 5, 10 and 20 tasks.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .zones import Chooser, Goal

# Loads are sums of costs; compare them with a little slack so 0.1 + 0.2 fits into 0.3.
EPS = 1e-9

Got = dict[str, list[str]]
Owners = tuple[str, ...]
Slot = tuple[float, float, str, str]  # (key, max_load, rank, worker): see WaterLevel


class _NoRank(dict[str, str]):
    """Every worker's rank is "" (for callers whose workers have no zones or labels)."""

    def __missing__(self, key: str) -> str:
        return ""


NO_RANK: Mapping[str, str] = _NoRank()


@dataclass(frozen=True)
class Group:
    """What one strategy call works on: replicas of one ``cost`` for ``workers`` (the open
    ones with every label they need, in insertion order). ``cap``, ``load`` and ``owners``
    are the ledger's own dicts, which the strategy updates; ``excluded``: the workers each
    task must avoid; ``rank``: ties after max_load (zone and labels); ``zones``: set when
    the replicas' spread over failure domains matters (later rounds, zoned fleets)."""

    cost: float
    workers: Mapping[str, None]
    cap: dict[str, float]
    load: dict[str, float]
    owners: dict[str, Owners]
    excluded: Mapping[str, Collection[str]]
    rank: Mapping[str, str]
    zones: Chooser | None = None


class WaterLevel:
    """The water-filling heap of one task cost, kept between calls so that a small event (a
    death, a few new tasks) does not pay O(W) to rebuild it.

    Entries are ``(key, max_load, rank, worker)`` with key ``(load + cost) / max_load`` and
    rank the worker's zone and labels (`Ledger.rank`): equal keys go to the smaller worker
    first (the bigger one then stays closer to the level: its steps are smaller), then by
    rank — choices that do not depend on worker names (two workers with equal key, max_load,
    zone and labels have equal loads too and are interchangeable, so which of them goes
    first changes no utilization and no zone spread). Whoever changes a
    worker's load, capacity or mode outside `water_fill` calls `touch`; the next call pushes a
    fresh entry for it. Old entries are not searched for: one whose key no longer matches the
    worker (or whose worker is no longer open) is stale and dropped when it reaches the top.
    """

    __slots__ = ("cost", "dirty", "heap", "valid")

    def __init__(self) -> None:
        self.cost = 0.0
        self.heap: list[Slot] = []
        self.dirty: dict[str, None] = {}
        self.valid = False

    def touch(self, worker: str) -> None:
        if self.valid:
            self.dirty[worker] = None

    def invalidate(self) -> None:
        self.valid = False
        self.dirty.clear()
        self.heap = []

    def heap_for(
        self,
        cost: float,
        open_workers: Mapping[str, None],
        cap: Mapping[str, float],
        load: Mapping[str, float],
        rank: Mapping[str, str] = NO_RANK,
    ) -> list[Slot]:
        limit = cost - EPS
        if self.valid and self.cost == cost and len(self.heap) <= 2 * len(open_workers) + 64:
            heap = self.heap
            for w in self.dirty:
                if w in open_workers and cap[w] - load[w] >= limit:
                    heapq.heappush(heap, ((load[w] + cost) / cap[w], cap[w], rank[w], w))
        else:
            heap = [
                ((load[w] + cost) / cap[w], cap[w], rank[w], w)
                for w in open_workers
                if cap[w] - load[w] >= limit
            ]
            heapq.heapify(heap)
        self.dirty.clear()
        self.heap, self.cost, self.valid = heap, cost, True
        return heap


    def lowest(self, open_workers: Mapping[str, None], cap: Mapping[str, float],
               load: Mapping[str, float]) -> float:
        """The lowest key now (inf if no worker has room): the heap brought up to date."""
        heap = self.heap_for(self.cost, open_workers, cap, load)
        while heap:
            key, size, _, w = heap[0]
            if w in open_workers and key == (load[w] + self.cost) / cap[w] and size == cap[w]:
                return key
            heapq.heappop(heap)
        return float("inf")


def water_fill(tasks: list[str], g: Group, level: WaterLevel | None = None) -> Got:
    """Greedy water-filling with a heap: O(log W) per replica. Replicas that fit nowhere (or
    only on workers that already own the task, or are excluded from it) are left out.

    With ``zones``, a task that already has owners goes to the lowest key among the workers
    giving it the best spread (`zones.Chooser`); when the goal turns out stale (the workers
    that met it have filled up), the best spread among all workers with room wins — unless
    zone spread is required, and the replica then stays pending."""
    got: Got = {}
    if not tasks:
        return got
    cost, open_workers, cap, load, owners_of = g.cost, g.workers, g.cap, g.load, g.owners
    excluded, zones, rank = g.excluded, g.zones, g.rank
    heap = (level or WaterLevel()).heap_for(cost, open_workers, cap, load, rank)
    heapreplace, heappop, heappush = heapq.heapreplace, heapq.heappop, heapq.heappush
    for task in tasks:
        owners: Collection[str] = owners_of[task]
        if excluded and task in excluded:
            owners = [*owners, *excluded[task]]  # never placed on a worker it failed on
        goal: Goal | None = zones.goal(owners_of[task]) if zones and owners_of[task] else None
        skipped: list[Slot] | None = None
        spread_out: list[Slot] | None = None  # admissible, but a worse spread
        while heap:
            key, size, _, w = heap[0]
            if w not in open_workers or key != (load[w] + cost) / cap[w] or size != cap[w]:
                heappop(heap)  # stale: the worker changed since this entry was pushed
            elif w in owners:
                # Rare: the emptiest worker already holds this task; look further down.
                if skipped is None:
                    skipped = []
                skipped.append(heappop(heap))
            elif goal is not None and zones is not None and not zones.fits(w, goal):
                if spread_out is None:
                    spread_out = []
                spread_out.append(heappop(heap))
            else:
                break
        else:
            if not spread_out or zones is None or goal is None or zones.strict:
                for item in (*(skipped or ()), *(spread_out or ())):
                    heappush(heap, item)
                continue
            # The goal was stale: take the best spread there is, and learn where room is left.
            stale = goal
            best = min(range(len(spread_out)),
                       key=lambda i: (zones.key(spread_out[i][3], stale), spread_out[i]))
            entry = spread_out.pop(best)
            zones.refresh([e[3] for e in (skipped or [])] + [e[3] for e in spread_out] + [entry[3]])
            heappush(heap, entry)
        w = heap[0][3]
        owners_of[task] = (*owners_of[task], w)
        mine = got.get(w)
        if mine is None:
            got[w] = [task]
        else:
            mine.append(task)
        new = load[w] + cost
        load[w] = new
        c = cap[w]
        if new + cost <= c + EPS:
            heapreplace(heap, ((new + cost) / c, c, rank[w], w))
        else:
            heappop(heap)
        for item in skipped or ():
            heappush(heap, item)
        for item in spread_out or ():
            heappush(heap, item)
    return got


def strided(tasks: list[str], stride: int) -> list[str]:
    """Every ``stride``-th task, then the next run, and so on: the order of a later round.

    Round 0 hands tasks out in sorted order, so runs of neighbours land on one worker (a
    block, or a cycle of equally loaded workers). Taking them in this order in the next
    round gives the tasks of one such run their next replicas from many different workers,
    not from one partner: when a worker leaves, the other replicas of its tasks are spread
    over the fleet, and its departed replicas can go almost anywhere.
    """
    if stride <= 1 or len(tasks) <= stride:
        return tasks if stride <= 1 else [*tasks[::2], *tasks[1::2]]
    seq: list[str] = []
    for start in range(stride):
        seq.extend(tasks[start::stride])
    return seq


def fill_blocks(tasks: list[str], g: Group, r: int) -> tuple[Got, list[str]]:
    """The bulk of a large batch in O(n) instead of O(n log W): the same per-worker counts
    as water-filling, handed out as blocks; returns what `water_fill` should place.

    Every slot whose key ``(load + j·cost) / max_load`` is at most the fluid level
    ``L = (Σ load + n·cost) / Σ max_load`` is among the n smallest keys, so greedy
    water-filling would fill it too; the remainder (at most about one per worker, more when
    some are full) goes through the heap.

    Round 0 hands out contiguous runs of the sorted task list; later rounds get the list in
    `strided` order, so that the tasks one worker got in round 0 get their next replicas
    from many workers. A task whose block lands on a worker that already owns it or is
    excluded from it is deferred to the heap. (With zones, `zonefill.fill_zoned_blocks`.)
    """
    n = len(tasks)
    got: Got = {}
    cost, open_workers, cap, load, owners_of = g.cost, list(g.workers), g.cap, g.load, g.owners
    excluded, rank = g.excluded, g.rank
    if not open_workers:
        return got, tasks
    level = (sum(load[w] for w in open_workers) + n * cost) / sum(cap[w] for w in open_workers)
    seq = tasks  # later rounds come strided already (`strided`)
    deferred: list[str] = []
    pos = 0
    # Blocks go out by rank (zone, labels), then worker id: of two workers with the same rank,
    # max_load and load, which takes which block changes no utilization and no spread.
    for w in sorted(open_workers, key=lambda w: (rank[w], w)):
        c, lw = cap[w], load[w]
        k = min(math.floor((c - lw) / cost + EPS), math.floor((level * c - lw) / cost + EPS))
        if k <= 0:
            continue
        block = seq[pos : pos + k]
        pos += len(block)
        if excluded and not excluded.keys().isdisjoint(block):
            mine = _checked_block(w, block, owners_of, excluded, deferred)
        elif r == 0:
            # Fresh tasks (the bulk of a full placement): they all get the same one-owner
            # tuple, in one C-level update.
            mine = block
            owners_of.update(dict.fromkeys(block, (w,)))
        else:
            olds = [owners_of[t] for t in block]
            if any(w in o for o in olds):
                mine = _checked_block(w, block, owners_of, excluded, deferred)
            else:
                mine = block
                owners_of.update(zip(block, [(*o, w) for o in olds], strict=True))
        if mine:
            got[w] = mine
            load[w] = lw + cost * len(mine)
        if pos >= n:
            break
    return got, seq[pos:] + deferred


def _checked_block(w: str, block: list[str], owners_of: dict[str, Owners],
                   excluded: Mapping[str, Collection[str]] | None,
                   deferred: list[str]) -> list[str]:
    """The tasks of a block that ``w`` may take: it does not own them and is not excluded
    from them; the rest are deferred."""
    mine = []
    for t in block:
        owners = owners_of[t]
        if w in owners or (excluded and w in excluded.get(t, ())):
            deferred.append(t)
        else:
            owners_of[t] = (*owners, w)
            mine.append(t)
    return mine


def proportional(tasks: list[str], g: Group) -> tuple[Got, list[str]]:
    """The seed's rule; returns the replicas it could not place within the quotas (a quota
    blocked by a worker that already owns the task, or one that shares a top zone domain with
    an owner), for a water-filling pass."""
    got: Got = {}
    cost, cap, load, owners_of = g.cost, g.cap, g.load, g.owners
    excluded, zones = g.excluded, g.zones
    free = {w: cap[w] - load[w] for w in sorted(g.workers) if cap[w] - load[w] > EPS}
    if not free or not tasks:
        return got, tasks
    total_free = sum(free.values())
    demand = cost * len(tasks)
    # ceil(n x weight_i), weight_i = free_i / total free, in cost units (a task of cost 1 is
    # one task), never above the worker's free capacity.
    quota = {w: min(f, math.ceil(demand * f / total_free - EPS)) for w, f in free.items()}
    order = list(quota)
    k = 0  # the worker whose contiguous run of the task list is being filled
    left: list[str] = []
    for task in tasks:
        owners = owners_of[task]
        tops = {zones.top(o) for o in owners} if zones is not None and owners else None
        while k < len(order) and quota[order[k]] < cost - EPS:
            k += 1
        for j in range(k, len(order)):
            w = order[j]
            if (
                quota[w] >= cost - EPS
                and w not in owners
                and load[w] + cost <= cap[w] + EPS
                and not (excluded and w in excluded.get(task, ()))
                and not (tops and zones is not None and zones.top(w) in tops)
            ):
                owners_of[task] = (*owners, w)
                load[w] += cost
                quota[w] -= cost
                got.setdefault(w, []).append(task)
                break
        else:
            left.append(task)
    return got, left
