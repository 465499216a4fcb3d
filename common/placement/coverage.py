"""Placing pending replicas: coverage before redundancy, by cost and label need.

Round r gives an (r+1)-th owner to every pending task that has exactly r (and wants more), so
every task gets a first replica before any gets a second — when capacity is short, as many
tasks as possible run at all. Within a round, tasks are grouped by (cost, required labels):
the biggest cost first (like LPT scheduling), then those with labels to meet (they have the
fewest workers to choose from: the others fill in around them), each group sorted by id so
the result does not depend on the order tasks arrived in. A group goes only to the open
workers that have every label it requires; a replica that fits on none of them stays pending
(`pending` says why).

Coverage before redundancy holds also when the capacity is already taken: a pending task
with no owner at all that fits nowhere takes the place of a redundant replica, one of a task
that has at least two owners (`_preempt`); the displaced replica becomes pending. So with
replicas 2 and too little room, new tasks get their first replica by displacing second ones.
A replica that runs is stopped only so: when that raises coverage (one more task runs at
all), never to trade one task's redundancy for another's (a third replica stopped to give
another task its second: one more stop and start, no more tasks running).

From round 1 on, when workers have zones, a task's next replica goes to the worker with the
lowest load key among those giving it the best spread (`zones.Chooser`), so replicas land in
distinct zones whenever the live zones with room allow, else in the emptiest ones — or, with
zone spread required (`zones.REQUIRE`), nowhere: the replica stays pending.
"""

from __future__ import annotations

import heapq

from . import strategies
from .diff import Diff
from .ledger import Ledger
from .rebalance import quick_balanced, run
from .shapes import NO_LABELS, Labels
from .strategies import EPS, WaterLevel
from .zonefill import MAX_DOMAINS, fill_zoned_blocks, water_fill_zoned
from .zones import Chooser

LEAST_UTILIZED = "least-utilized"
PROPORTIONAL = "proportional"
STRATEGIES = (LEAST_UTILIZED, PROPORTIONAL)


def place(book: Ledger, strategy: str) -> Diff:
    """Place every pending replica that fits somewhere, coverage before redundancy."""
    diff = Diff()
    first = book.bare == len(book.cost)  # no replica anywhere yet: all will be fresh
    # Displaced replicas are pending again and may fit elsewhere: place until nothing moves.
    while book.pending:
        _rounds(book, strategy, diff)
        if not book.pending or not _preempt(book, diff):
            break
    if diff and strategy == LEAST_UTILIZED:
        _even_out(book, diff, first)
    return diff


def _even_out(book: Ledger, diff: Diff, first: bool) -> None:
    """Move the replicas just placed among themselves until no useful move is left: one
    task at a time, the distinct-owner rule can leave the greedy a task off (4 workers,
    replicas 2, one leaves: 13/12/11 where 12/12/12 fits). Nobody runs them yet, so this
    costs no hand-off; later rebalance passes then have nothing to do."""
    if first:
        if quick_balanced(book, 0.0):
            return
    elif diff.moved() > 4 * len(book.open):
        return  # a big batch (a zone's worth) lands close to level; passes see to the rest
    elif _fresh_settled(book, diff):
        return
    fresh = None if first else {(t, w) for w, d in diff.workers.items() for t in d.add}
    for m in run(book, 0.0, 1 << 62, (), once=False, movable=fresh):
        diff.remove(m.source, m.task)
        diff.add(m.target, m.task)


def _fresh_settled(book: Ledger, diff: Diff) -> bool:
    """No useful move of a just-placed replica can exist: the workers holding them are no
    more utilized than the lowest utilization any worker would have after taking one task
    of the smallest cost — read off the water-filling heap, without a pass over the fleet
    (a death places a few hundred replicas among thousands of workers)."""
    if not book.costs:
        return True
    cmin = min(book.costs)
    level = book.levels.get(NO_LABELS)
    if level is None or not level.valid or level.cost != cmin:
        return quick_balanced(book, 0.0)
    lowest = level.lowest(book.open, book.cap, book.load)
    util = book.util
    top = max((util(w) for w, d in diff.workers.items() if d.add and w in book.open),
              default=0.0)
    return top <= lowest + EPS


def _rounds(book: Ledger, strategy: str, diff: Diff) -> None:
    owners_of, want = book.owners, book.want
    # Sorted once: each round's batch is then a filter of this order, already sorted.
    order = sorted(book.pending)
    rounds = max(map(book.want_of, order)) if want else book.replicas
    # A fresh task list (no pending task has an owner yet): round r's batch is round r-1's
    # minus what it could not place; no lookups needed.
    fresh = book.bare == len(order)
    first = 0 if fresh else min(map(len, map(owners_of.__getitem__, order)))
    short: set[str] = set()  # tasks a round could not give a replica: they stay pending
    batch = order
    for r in range(first, rounds):
        if not fresh:
            # Those with exactly r owners: the ones that had r, and those just given their
            # r-th; a task that got nothing in an earlier round waits for the next call.
            batch = [t for t in order if len(owners_of[t]) == r]
        if want:
            batch = [t for t in batch if book.want_of(t) > r]
        if not batch:
            continue
        placed: list[str] = []
        for (cost, need), group in _groups(book, batch):
            _place_group(book, strategy, group, cost, need, r, diff, placed)
        if len(placed) < len(batch):
            missed = set(batch).difference(placed)
            short |= missed
            batch = [t for t in batch if t not in missed]
        if not fresh and len(order) > 2 * len(placed) + 64:
            order = [t for t in order if len(owners_of[t]) > r]
    book.settle(short)


def _groups(book: Ledger, batch: list[str]) -> list[tuple[tuple[float, Labels], list[str]]]:
    """The batch (sorted) as groups of one cost and label need, in their order."""
    cost, need = book.cost, book.need
    first = cost[batch[0]]
    uniform = len(book.costs) == 1 or all(cost[t] == first for t in batch)
    if not need and uniform:
        return [((first, NO_LABELS), batch)]
    groups: dict[tuple[float, Labels], list[str]] = {}
    if uniform:  # one cost: only the few tasks that need labels are looked at one by one
        groups[(first, NO_LABELS)] = [t for t in batch if t not in need]
        for t in [t for t in batch if t in need]:
            groups.setdefault((first, need[t]), []).append(t)
        if not groups[(first, NO_LABELS)]:
            del groups[(first, NO_LABELS)]
    else:
        for t in batch:
            groups.setdefault((cost[t], need.get(t, NO_LABELS)), []).append(t)
    # Biggest cost first (like LPT), then the most constrained: tasks that need labels go
    # before those that can go anywhere, which then fill in around them.
    order = sorted(groups, key=lambda k: (-k[0], -len(k[1]), sorted(k[1])))
    return [(k, groups[k]) for k in order]


def _place_group(book: Ledger, strategy: str, group: list[str], cost: float, need: Labels,
                 r: int, diff: Diff, placed: list[str]) -> None:
    workers = book.opens.for_need(need)
    if not workers:
        return
    if r > 0 and book.strict and book.topo.first != 1:
        return  # zone spread required, and every worker is in one zone: no second replica
    zones = None
    if r > 0 and book.topo.zoned:
        cap, load = book.cap, book.load
        room = [w for w in workers if cap[w] - load[w] >= cost - EPS]
        zones = Chooser(book.topo, book.path, book.top_of, room, book.strict)
    level = book.levels.get(need)
    if level is None:
        level = book.levels[need] = WaterLevel()
    g = strategies.Group(cost, workers, book.cap, book.load, book.owners, book.excluded,
                         book.rank, zones)
    # From round 1 on, tasks go in `strided` order (the zoned blocks stride their pools):
    # the tasks one worker got in a round get their next replicas from many workers.
    spread = r == 0
    if strategy == PROPORTIONAL:
        got, group = strategies.proportional(group, g)
        level.invalidate()
        book.record(got, diff, placed, r)
    elif len(group) >= 8 * len(workers):
        # A big batch (a full placement, a zone's worth): O(n) blocks first; the heap after.
        if zones is not None:
            got, group = fill_zoned_blocks(group, g)
        else:
            if not spread:
                group = strategies.strided(group, len(workers) + r - 1)
            got, group = strategies.fill_blocks(group, g, r)
        spread = True
        level.invalidate()
        book.record(got, diff, placed, r, spread=True)  # blocks keep owners' domains apart
    if not spread:
        group = strategies.strided(group, len(workers) + r - 1)
    if zones is not None and len(zones.room_tops) <= MAX_DOMAINS:
        got = water_fill_zoned(group, g)
        level.invalidate()  # loads changed behind its back
    else:
        got = strategies.water_fill(group, g, level)
    book.record(got, diff, placed, r)


def _preempt(book: Ledger, diff: Diff) -> bool:
    """Give pending tasks without any owner the places of redundant replicas.

    By cost (biggest first), then id. Each goes to the worker whose utilization is lowest
    after the swap, displacing the replica of the task with the most owners there (at least
    two). Nothing happens (and nothing is scanned) unless some task may want two replicas and
    some pending task has no owner.
    """
    cost = book.cost
    most = max(book.replicas, max(book.want.values(), default=0))
    if most < 2 or not book.bare:  # nothing redundant to displace, or nothing uncovered
        return False
    owners_of = book.owners
    groups: dict[tuple[float, Labels], list[str]] = {}
    for t in book.pending:
        if not owners_of[t]:
            groups.setdefault((cost[t], book.need_of(t)), []).append(t)
    displaced = False
    for c, need in sorted(groups, key=lambda g: (-g[0], sorted(g[1]))):
        tasks = sorted(t for t in groups[(c, need)] if not owners_of[t])
        displaced |= _swap_in(book, tasks, c, need, diff)
    return displaced


def _swap_in(book: Ledger, tasks: list[str], c: float, need: Labels, diff: Diff) -> bool:
    owners_of, cost, cap, load, rank = book.owners, book.cost, book.cap, book.load, book.rank
    Slot = tuple[float, float, str, str, str]

    def slot(w: str) -> Slot | None:
        """w's best replica to displace (the most redundant), keyed by w's utilization after
        the swap."""
        room = cap[w] - load[w]
        vs = [u for u in book.tasks_of[w]
              if len(owners_of[u]) >= 2 and room + cost[u] >= c - EPS]
        if not vs:
            return None
        u = min(vs, key=lambda u: (-len(owners_of[u]), -cost[u], u))
        return ((load[w] - cost[u] + c) / cap[w], cap[w], rank[w], w, u)

    heap = [e for e in map(slot, (w for w in book.opens.for_need(need) if cap[w] >= c - EPS)) if e]
    heapq.heapify(heap)
    displaced = False
    for t in tasks:
        ex = book.excluded.get(t, {})
        skipped = []
        while heap:
            entry = heapq.heappop(heap)
            w, u = entry[3], entry[4]
            if u not in book.tasks_of[w] or len(owners_of[u]) < 2:
                fresh = slot(w)  # stale: u left w or is no longer redundant enough
                if fresh:
                    heapq.heappush(heap, fresh)
                continue
            if w in owners_of[t] or w in ex:
                skipped.append(entry)
                continue
            book.unlink(u, w)
            diff.remove(w, u)
            book.link(t, w)
            diff.add(w, t)
            displaced = True
            fresh = slot(w)
            if fresh:
                heapq.heappush(heap, fresh)
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
    return displaced
