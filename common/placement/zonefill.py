"""Water-filling across failure domains: the next replicas of tasks that already have owners.

`fill_zoned_blocks` is the bulk path (a full placement's second round, a zone's worth of
replicas after it dies): blocks as in `strategies.fill_blocks`, but each worker's block is
taken from the tasks none of whose owners is in its top domain — the tasks are pooled by
their owners' top domains, the domains take turns, and each worker takes from the largest
pool its domain may take from (in strided order within the pool, so a worker's tasks keep
many partners). Little is left for the heap: what no other domain had room for.

`strategies.water_fill` keeps one heap of all workers; a replica that must avoid its owners'
zones then pops every entry of those zones off the top first. Equal keys are ordered by
zone (so that ties do not depend on worker names), which puts a whole zone's worth of
equally loaded workers at the top: tens of pops per replica. Here there is one heap per top
domain. A replica whose owners leave some top domain free takes, among those domains, the
one whose best worker has the lowest key (`strategies.WaterLevel` order) — every worker in
an owner-free domain gives the best spread there is — so it costs one look per domain and no
skipping (workers that own the task or are excluded from it are skipped within the chosen
domain, as in `water_fill`). A replica whose owners cover every domain with room (too few
zones alive, or full) is placed on the worker with the best zone key, then the lowest load
key, found by a scan: rare, and exact — or, with zone spread required, stays pending.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection
from itertools import groupby, zip_longest
from operator import itemgetter

from .strategies import EPS, Got, Group, Owners, Slot, strided
from .zones import Chooser

MAX_DOMAINS = 64  # beyond this many top domains one heap skips little: `water_fill` is used


def water_fill_zoned(tasks: list[str], g: Group) -> Got:
    """Place one more replica of each task (they all have owners): see the module docstring."""
    cost, cap, load, owners_of, excluded, rank = g.cost, g.cap, g.load, g.owners, g.excluded, g.rank
    zones = g.zones
    assert zones is not None, "water_fill_zoned needs zones"
    open_workers = g.workers
    heaps: dict[str, list[Slot]] = {}
    for w in open_workers:
        if cap[w] - load[w] >= cost - EPS:
            heaps.setdefault(zones.top(w), []).append(((load[w] + cost) / cap[w], cap[w],
                                                       rank[w], w))
    for h in heaps.values():
        heapq.heapify(h)
    got: Got = {}
    for task in tasks:
        owners = owners_of[task]
        banned = excluded.get(task, ()) if excluded else ()
        tops = {zones.top_of[o] for o in owners}
        if len(heaps) > len(tops) or any(d not in tops for d in heaps):
            dst = _best_free(heaps, tops, owners, banned)
        elif zones.strict:  # zone spread required: no zone without an owner has room
            dst = None
        else:
            dst = _best_spread(heaps, zones, owners, banned)
        if dst is None:
            continue
        w = dst
        owners_of[task] = (*owners, w)
        got.setdefault(w, []).append(task)
        new = load[w] = load[w] + cost
        d = zones.top(w)
        h = heaps[d]
        entry = ((new + cost) / cap[w], cap[w], rank[w], w)
        fits = new + cost <= cap[w] + EPS
        if h[0][3] == w:  # the usual case: the domain's best worker took it
            if fits:
                heapq.heapreplace(h, entry)
            else:
                heapq.heappop(h)
        else:  # it was further down (the best one owned the task): take it out, re-heap
            h.remove(next(e for e in h if e[3] == w))
            heapq.heapify(h)
            if fits:
                heapq.heappush(h, entry)
        if not h:
            del heaps[d]
    return got


def _best_free(heaps: dict[str, list[Slot]], tops: set[str], owners: Owners,
               banned: Collection[str]) -> str | None:
    """The lowest key among the top domains without owners (skipping, within a domain,
    workers the task may not go to)."""
    best: Slot | None = None
    for d, h in heaps.items():
        if d in tops:
            continue
        top = h[0]
        if top[3] in owners or top[3] in banned:
            ok = [e for e in h if e[3] not in owners and e[3] not in banned]
            if not ok:
                continue
            top = min(ok)
        if best is None or top < best:
            best = top
    return None if best is None else best[3]


def _best_spread(heaps: dict[str, list[Slot]], zones: Chooser, owners: Owners,
                 banned: Collection[str]) -> str | None:
    """Every domain with room holds an owner: the best zone key, then the lowest key."""
    paths = [zones.path[o] for o in owners]
    key = zones.topo.key
    best: tuple[tuple[int, ...], Slot] | None = None
    for h in heaps.values():
        for e in h:
            if e[3] in owners or e[3] in banned:
                continue
            k = (key(zones.path[e[3]], paths), e)
            if best is None or k < best:
                best = k
    return None if best is None else best[1][3]


def fill_zoned_blocks(tasks: list[str], g: Group) -> tuple[Got, list[str]]:
    """The bulk of a later round with zones (``tasks`` sorted): see the module docstring.
    Returns what the heap (`water_fill_zoned`) should place."""
    got: Got = {}
    cost, cap, load, owners_of, excluded, rank = g.cost, g.cap, g.load, g.owners, g.excluded, g.rank
    zones, open_workers = g.zones, list(g.workers)
    assert zones is not None, "fill_zoned_blocks needs zones"
    if not open_workers:
        return got, tasks
    n = len(tasks)
    tops = zones.top_of
    level = (sum(load[w] for w in open_workers) + n * cost) / sum(cap[w] for w in open_workers)
    pools: dict[frozenset[str], list[str]] = {}
    keys: dict[Owners, frozenset[str]] = {}
    # Sorted tasks come in runs sharing one owner tuple (an earlier round's block): one
    # look-up per run, the tasks of a run moved in C.
    first = itemgetter(0)
    pairs = zip(map(owners_of.__getitem__, tasks), tasks, strict=True)
    for owners, run in groupby(pairs, key=first):
        key = keys.get(owners)
        if key is None:
            key = keys[owners] = frozenset(tops[o] for o in owners)
        pool = pools.get(key)
        if pool is None:
            pool = pools[key] = []
        pool.extend(map(itemgetter(1), run))
    # Each pool strided by the number of workers in its domains, so that a run of it (one
    # worker's block) holds tasks of many different owners: many partners, not a few.
    members: dict[str, int] = {}
    for w in tops:
        members[tops[w]] = members.get(tops[w], 0) + 1
    for key, pool in pools.items():
        pools[key] = strided(pool, sum(members.get(d, 1) for d in key))
    taken = dict.fromkeys(pools, 0)
    deferred: list[str] = []
    # One worker of each top domain in turn, so that every domain draws on the pools all
    # along: taken zone after zone, the last zone would find only its own pool left.
    by_top: dict[str, list[str]] = {}
    for w in sorted(open_workers, key=lambda w: (rank[w], w)):
        by_top.setdefault(tops[w], []).append(w)
    turns = [w for row in zip_longest(*by_top.values()) for w in row if w is not None]
    for w in turns:
        c, lw = cap[w], load[w]
        k = min(math.floor((c - lw) / cost + EPS), math.floor((level * c - lw) / cost + EPS))
        mine: list[str] = []
        z = tops[w]
        while len(mine) < k:
            # The largest pool this domain may take from (its owners are all elsewhere).
            best, size = None, 0
            for key, pool in pools.items():
                left = len(pool) - taken[key]
                if left > size and z not in key:
                    best, size = key, left
            if best is None:
                break
            start = taken[best]
            block = pools[best][start : start + k - len(mine)]
            taken[best] = start + len(block)
            if excluded and not excluded.keys().isdisjoint(block):
                deferred.extend(t for t in block if w in excluded.get(t, ()))
                block = [t for t in block if w not in excluded.get(t, ())]
            mine.extend(block)
        if mine:
            owners_of.update(zip(mine, [(*owners_of[t], w) for t in mine], strict=True))
            got[w] = mine
            load[w] = lw + cost * len(mine)
    for key, pool in pools.items():
        deferred.extend(pool[taken[key]:])
    return got, deferred
