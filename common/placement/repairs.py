"""Repairs: moves that give a zone-degraded task back its spread.

A task is degraded (see `zones`) when, under some domain, its replicas are split over the live
child domains with two counts differing by two or more. A repair takes one replica from the
fullest child to a live child holding at least two fewer: from the most crowded eligible
owner there (then the most utilized), to the worker in those children that may take it, has
room for it, and gives the best zone key, then the lowest load key. It always improves the
task's spread (the counts at that level even out; the levels above do not change), so
repairs, done before balance moves, terminate.

`Room` keeps, per domain at each level, an upper bound on the free capacity of its open
workers — built once per search and raised when a move frees room — so that a degraded task
whose emptier children have no room anywhere is passed over without a scan of the fleet.
"""

from __future__ import annotations

from collections.abc import Container

from .diff import Move
from .ledger import Ledger
from .strategies import EPS
from .zones import domain


class Room:
    """Per (level, domain), at least the largest free capacity of an open worker in it."""

    __slots__ = ("book", "free")

    def __init__(self, book: Ledger) -> None:
        self.book = book
        self.free: dict[tuple[int, str], float] = {}
        for w in book.open:
            self.grew(w)

    def _domains(self, worker: str) -> list[tuple[int, str]]:
        topo, path = self.book.topo, self.book.path[worker]
        return [(lv, domain(path, lv)) for lv in range(topo.first, topo.depth + 1)]

    def grew(self, worker: str) -> None:
        """The worker's free capacity may have grown: keep the bound an upper bound."""
        free = self.book.cap[worker] - self.book.load[worker]
        for key in self._domains(worker):
            if self.free.get(key, float("-inf")) < free:
                self.free[key] = free

    def at(self, level: int, d: str) -> float:
        return self.free.get((level, d), float("-inf"))


def repair(book: Ledger, task: str, room: Room, frozen: Container[tuple[str, str]]
           ) -> Move | None:
    """A move that improves the spread of a zone-degraded task, if one fits anywhere."""
    cost, owners, path, topo = book.cost[task], book.owners[task], book.path, book.topo
    tree = book.opens.tree(book.need_of(task))
    for node in tree.uneven([path[o] for o in owners]):
        lv = node.level
        low = [d for d in node.low if room.at(lv, d) >= cost - EPS]
        if not low:
            continue
        fullest = max(node.counts.values())
        sources = [o for o in owners if o in book.open and (task, o) not in frozen
                   and node.counts.get(domain(path[o], lv)) == fullest
                   and (lv == topo.first or domain(path[o], lv - 1) == node.parent)]
        if not sources:
            continue

        def crowding(o: str) -> tuple[tuple[int, ...], float, float, str, str]:
            others = [path[x] for x in owners if x != o]
            return (topo.key(path[o], others), book.util(o), book.cap[o], book.rank[o], o)

        src = max(sources, key=crowding)
        others = [path[x] for x in owners if x != src]
        wanted = set(low)
        best, best_key = None, None
        for w in book.opens.for_need(book.need_of(task)):
            if domain(path[w], lv) not in wanted or not book.may_take(task, w):
                continue
            c, lw = book.cap[w], book.load[w]
            if lw + cost > c + EPS:
                continue
            k = (topo.key(path[w], others), (lw + cost) / c, c, book.rank[w], w)
            if best_key is None or k < best_key:
                best, best_key = w, k
        if best is not None:
            return Move(task, src, best)
    return None
