"""Rebalancing: the search for useful moves, up to the balance criterion's fixed point.

`run` is one search, used three ways: unbudgeted, with replicas free to move more than once,
as the dry run that plans a convergence (`convergence`, which hands out its net moves); on
the replicas `place` just placed, to even them out before anybody runs them; and budgeted,
one replica of a task at a time, as a plain pass when a plan cannot go on. `balanced` is the
exact check of the criterion.

The criterion is stated in `placement`. A *useful move* takes one replica of a task from an
eligible worker a to a worker b that may take it — open (eligible, max_load > 0), room for
it, not excluded from the task, every label it requires, no replica of it yet, and a zone key
no worse than a's (`zones`: the move does not lower the task's spread) — and leaves b, after
taking it, more than the tolerance below a's utilization now:

    u_b + c/cap_b < u_a − tolerance

(so it lowers the larger of the two utilizations). Among useful moves the best has the
largest gain, max(u_a, u_b) − max(u_a − c/cap_a, u_b + c/cap_b), then the emptiest target.

A *repair* moves a replica of a zone-degraded task from its fullest domain to a live domain
holding two fewer (capacity permitting); it always improves the task's spread.

A search makes repairs first (safety before balance), then balance moves, up to the budget;
with ``once`` it never moves two replicas of one task (make-before-break needs the task's
other replicas in place while one is handed over). Balance moves go source by
source, most utilized first; each source makes its best useful move: the largest gain, then
the lowest utilization after the move on the target. The search is exhaustive, not a
shortlist: targets are scanned in order of ``(load + c_min) / cap`` (c_min the smallest task
cost), which bounds every target's utilization after any move from below, so the scan stops
exactly when no later target can do better. A source with no useful move is set aside and
looked at again only if a later move lowers some worker's utilization below what it could
use, or moves a replica of one of its tasks; nothing else can make a move useful again. So a
search ends early (fewer moves than its budget) only when no useful move and no repair is
left — except for tasks it already moved one replica of (with ``once``), ``pinned`` ones and
``frozen`` replicas. Unbudgeted and without ``once``, it ends exactly at the fixed point.

Each move lowers the sorted vector of utilizations lexicographically (both workers end below
the source's old utilization), and each repair improves one task's spread while balance
moves never lower any, so passes terminate.

Cost: a search starts with an O(W) check that returns at once when no move can be useful (the
most utilized worker is within the tolerance of the lowest possible utilization after a
move); otherwise it sorts the open workers (O(W log W)), then pays per source looked at the
scan of its tasks and of the targets in its useful band.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Container, Iterable, Iterator

from .diff import Move
from .ledger import Ledger
from .pending import placeable
from .repairs import Room, repair
from .strategies import EPS

# Orders break ties by max_load (smaller first), then rank (zone and labels), before the
# worker's name, so that what happens does not depend on names (see strategies.WaterLevel).
Entry = tuple[float, float, str, str]  # (key for the smallest cost, max_load, rank, worker)


def quick_balanced(book: Ledger, tolerance: float) -> bool:
    """True if no balance move can be useful, by bounds alone (O(W)); False means "look"."""
    if not book.costs:
        return True
    cmin = min(book.costs)
    cap, load, tasks_of = book.cap, book.load, book.tasks_of
    lowest, top = float("inf"), float("-inf")
    for w in book.open:
        c, lw = cap[w], load[w]
        if lw + cmin <= c + EPS:
            lowest = min(lowest, (lw + cmin) / c)
        if tasks_of[w]:
            top = max(top, lw / c)
    return top - tolerance <= lowest + EPS


def _twice(tasks: Iterable[str], late: Container[str] | None) -> Iterator[str]:
    """``tasks``, those in ``late`` after all the others (without copying)."""
    if late is None:
        yield from tasks
        return
    yield from (t for t in tasks if t not in late)
    yield from (t for t in tasks if t in late)


class Search:
    """One pass: targets grouped by top zone domain and sorted by their key for the smallest
    cost, sources in a max-heap by utilization, and the moves made so far."""

    def __init__(self, book: Ledger, tolerance: float, pinned: Container[str],
                 once: bool = True, movable: set[tuple[str, str]] | None = None,
                 frozen: Container[tuple[str, str]] = ()) -> None:
        self.book = book
        self.tol = tolerance
        self.pinned = pinned
        self.frozen = frozen  # (task, worker) replicas that must stay where they are
        # If given, only these replicas may move: per worker, for the sources.
        self.movable: dict[str, dict[str, None]] | None = None
        if movable is not None:
            self.movable = {}
            for t, w in movable:
                self.movable.setdefault(w, {})[t] = None
        self.once = once  # at most one replica of a task moves (a pass, not a dry run)
        self.moved: dict[str, None] = {}  # tasks with a replica moved in this pass
        self.stuck: dict[str, None] = {}  # sources found with no useful move
        self.cmin = min(book.costs) if book.costs else 1.0
        topo = book.topo
        tops = sorted({book.top_of[w] for w in book.open}) if topo.zoned else [""]
        self.groups: dict[str, list[Entry]] = {g: [] for g in tops}
        self.entry: dict[str, Entry] = {}
        for w in book.open:  # appended, then sorted once: inserting each in order is O(W²)
            self._put(w, keep_sorted=False)
        for lst in self.groups.values():
            lst.sort()
        util = book.util
        sources = book.open if self.movable is None else self.movable
        self.heap = [(-util(w), -book.cap[w], book.rank[w], w)
                     for w in sources if w in book.open and book.tasks_of[w]]
        heapq.heapify(self.heap)
        self.room: Room | None = None  # for repairs, built on demand
        self.ones: dict[str, dict[str, int]] = {}  # domain -> {domain: 1}, shared, read-only

    # -- target lists -------------------------------------------------------------------------

    def _group(self, worker: str) -> list[Entry]:
        return self.groups[self.book.top_of[worker] if self.book.topo.zoned else ""]

    def _put(self, worker: str, keep_sorted: bool = True) -> None:
        book = self.book
        cap, load = book.cap[worker], book.load[worker]
        if load + self.cmin <= cap + EPS:
            e = ((load + self.cmin) / cap, cap, book.rank[worker], worker)
            self.entry[worker] = e
            if keep_sorted:
                insort(self._group(worker), e)
            else:
                self._group(worker).append(e)

    def _reposition(self, worker: str) -> None:
        old = self.entry.pop(worker, None)
        if old is not None:
            lst = self._group(worker)
            del lst[bisect_left(lst, old)]
        self._put(worker)

    def lowest(self) -> float:
        return min((lst[0][0] for lst in self.groups.values() if lst), default=float("inf"))

    # -- moves --------------------------------------------------------------------------------

    def apply(self, move: Move) -> None:
        book, (task, a, b) = self.book, (move.task, move.source, move.target)
        book.unlink(task, a)
        book.link(task, b)
        self.moved[task] = None
        if self.movable is not None:
            del self.movable[a][task]
            self.movable.setdefault(b, {})[task] = None
        util = book.util
        for w in (a, b):
            self._reposition(w)
            if book.tasks_of[w]:
                heapq.heappush(self.heap, (-util(w), -book.cap[w], book.rank[w], w))
        if self.room is not None:
            self.room.grew(a)
        # Nothing but a lower utilization somewhere, or a change in who owns the moved task,
        # can give a stuck source a useful move: a's utilization fell, so a stuck source
        # above it may now move to a; the task's other owners may now move it elsewhere.
        threshold = (book.load[a] + self.cmin) / book.cap[a] + self.tol + EPS
        for s in [s for s in self.stuck if util(s) > threshold or s in book.owners[task]]:
            del self.stuck[s]
            heapq.heappush(self.heap, (-util(s), -book.cap[s], book.rank[s], s))

    def _keeps_spread(self, task: str, a: str, b: str) -> bool:
        book = self.book
        others = [book.path[o] for o in book.owners[task] if o != a]
        key = book.topo.key
        return key(book.path[b], others) <= key(book.path[a], others)

    def _zone_counts(self, task: str, a: str) -> tuple[dict[str, int], int]:
        """How many of the task's other owners are in each top domain, and in ``a``'s."""
        book = self.book
        top, owners = book.top_of, book.owners[task]
        if len(owners) == 2:  # the usual case: one other owner, a shared count dict
            g = top[owners[1] if owners[0] == a else owners[0]]
            one = self.ones.get(g)
            if one is None:
                one = self.ones[g] = {g: 1}
            return one, int(g == top[a])
        cnt: dict[str, int] = {}
        for x in owners:
            if x != a:
                cnt[top[x]] = cnt.get(top[x], 0) + 1
        return cnt, cnt.get(top[a], 0)

    def repair(self, task: str) -> Move | None:
        """A move that improves a zone-degraded task's spread, if one fits (`repairs`)."""
        if self.room is None:
            self.room = Room(self.book)
        return repair(self.book, task, self.room, self.frozen)

    def best_move(self, a: str) -> Move | None:
        """``a``'s best useful move: largest gain, then lowest target utilization after it."""
        book = self.book
        cap_a, u_a = book.cap[a], book.util(a)
        pinned, moved, cost = self.pinned, self.moved if self.once else {}, book.cost
        frozen = self.frozen
        mine = book.tasks_of[a] if self.movable is None else self.movable.get(a, {})
        if not mine:
            return None
        zoned = book.topo.zoned
        tasks: dict[float, Iterable[str]]
        lazy = len(book.costs) == 1 and not zoned
        if lazy:  # one cost, no zones: the worker's own set, the unmovable skipped below
            tasks = {self.cmin: mine}
        else:
            lists: dict[float, list[str]] = {}
            for t in mine:
                if t not in pinned and t not in moved and (not frozen or (t, a) not in frozen):
                    lists.setdefault(cost[t], []).append(t)
            if not lists:
                return None
            tasks = dict(lists)
        # Useful: the target after the move is still more than the tolerance below a's
        # utilization now (u_a - k > tol). Best: the largest gain (the drop of the pair's
        # larger utilization, min(c / cap_a, u_a - k)), then the lowest k.
        gmax = max(tasks) / cap_a
        floor = u_a - self.tol - EPS  # a useful target's k is below this
        best: Move | None = None
        best_g, best_k = 0.0, float("inf")
        if zoned:
            # Per task, computed when first looked at; a top domain is dead for this source
            # once every one of its tasks was turned away there for its spread alone.
            info: dict[str, tuple[dict[str, int], int]] = {}
            dead: set[str] = set()
            deep = book.topo.depth > book.topo.first
        load, owners, excluded = book.load, book.owners, book.excluded
        labels_needed = bool(book.need)
        for group, lst in self.groups.items():
            if not lst or lst[0][0] >= floor or (best is not None
                                                   and u_a - lst[0][0] <= best_g - EPS):
                continue
            for kb, cap_b, _, b in lst:
                if zoned and group in dead:
                    break
                if kb >= floor or (best is not None and (
                        u_a - kb <= best_g - EPS or (best_g >= gmax - EPS and kb >= best_k - EPS))):
                    break
                if b == a:
                    continue
                load_b = load[b]
                opts = []
                for c in tasks:
                    if load_b + c > cap_b + EPS:
                        continue
                    k = (load_b + c) / cap_b
                    if k >= floor:
                        continue
                    g = min(c / cap_a, u_a - k)
                    if best is None or g > best_g + EPS or (g >= best_g - EPS
                                                            and k < best_k - EPS):
                        opts.append((-g, k, c))
                opts.sort()
                spread_only = len(opts) == len(tasks)  # every turn-away so far: spread
                for neg_g, k, c in opts:
                    found = None
                    # A task already moved in this search goes last: make-before-break
                    # moves one replica of a task per pass, so a plan that moves another
                    # task instead hands its moves out in fewer passes.
                    late = self.moved if not self.once and self.moved else None
                    for t in _twice(tasks[c], late):
                        if b in owners[t]:
                            spread_only = False
                            continue
                        if lazy and (t in pinned or t in moved
                                     or (frozen and (t, a) in frozen)):
                            continue
                        if (labels_needed or t in excluded) and not book.may_take(t, b):
                            spread_only = False
                            continue
                        if zoned:
                            z = info.get(t)
                            if z is None:
                                z = info[t] = self._zone_counts(t, a)
                            n = z[0].get(group, 0)
                            if n > z[1]:
                                continue  # more owners there than here: the spread drops
                            if deep and n == z[1] and n > 0 and not self._keeps_spread(t, a, b):
                                spread_only = False
                                continue
                        found = t
                        break
                    if found is not None:
                        best, best_g, best_k = Move(found, a, b), -neg_g, k
                        break
                else:
                    if zoned and spread_only and opts:
                        dead.add(group)  # no task of a may go anywhere in this domain
        return best

    def balance(self, budget: int, apply: bool = True) -> list[Move]:
        """Balance moves, most utilized source first, until the budget or the fixed point.
        With ``apply`` False: the first useful move found, if any, made on nothing."""
        book, tol, heap, stuck = self.book, self.tol, self.heap, self.stuck
        util = book.util
        moves: list[Move] = []
        while len(moves) < budget and heap:
            negu, _, _, a = heap[0]
            u_a = util(a)
            if -negu != u_a or a not in book.open or not book.tasks_of[a] or a in stuck:
                heapq.heappop(heap)  # stale, or already found stuck at this utilization
                continue
            if u_a - tol <= self.lowest() + EPS:
                break  # nobody at or below this utilization has a useful move
            heapq.heappop(heap)
            move = self.best_move(a)
            if move is None:
                stuck[a] = None
                continue
            moves.append(move)
            if not apply:
                break
            self.apply(move)
        return moves


def run(book: Ledger, tolerance: float, budget: int, pinned: Container[str],
        once: bool = True, movable: set[tuple[str, str]] | None = None,
        frozen: Container[tuple[str, str]] = ()) -> list[Move]:
    """One pass (see the module docstring); with ``once`` False, replicas may move again and
    an unlimited budget ends exactly at the fixed point (the dry run of `convergence`). With
    ``movable``, only those replicas move, and no repairs are made (`coverage` uses this to
    even out the replicas it has just placed, which nobody runs yet)."""
    moves: list[Move] = []
    if budget <= 0 or len(book.open) < 1:
        return moves
    degraded = book.degraded() if movable is None else {}
    if not degraded and quick_balanced(book, tolerance):
        return moves
    s = Search(book, tolerance, pinned, once, movable, frozen)
    repairing = movable is None
    while len(moves) < budget:
        made = len(moves)
        for task in sorted(book.degraded()) if repairing else ():
            if len(moves) >= budget:
                break
            if task in pinned or (once and task in s.moved):
                continue
            move = s.repair(task)
            if move is not None:
                s.apply(move)
                moves.append(move)
        moves += s.balance(budget - len(moves))
        if len(moves) == made or not repairing or not book.degraded():
            break
    return moves


def balanced(book: Ledger, tolerance: float, pinned: Container[str]) -> bool:
    """No pending replica fits anywhere, and no repair and no useful balance move is left
    (given ``pinned``)."""
    if placeable(book):
        return False
    degraded = book.degraded()
    if not degraded and quick_balanced(book, tolerance):
        return True
    s = Search(book, tolerance, pinned)
    if any(s.repair(t) is not None for t in sorted(degraded) if t not in pinned):
        return False
    return not s.balance(1, apply=False)
