"""What placement promises, checked by brute force through its public API only.

These checkers do not share code with the placement modules: zone spread, degraded tasks and
the balance criterion are computed here from scratch (see `common/placement/placement.py` for
the criterion and `common/placement/zones.py` for spread), so a test using them checks the
implementation against the written rules rather than against itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from corral.common.placement import REQUIRE, Diff, Mode, Placement
from corral.common.placement.diff import Move

EPS = 1e-6


# -- zones, from scratch --------------------------------------------------------------------


def domains(zone: str) -> list[str]:
    parts = zone.split("/") if zone else [""]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def dom(zone: str, level: int) -> str:
    d = domains(zone)
    return d[min(level, len(d)) - 1]


def depth(p: Placement) -> int:
    return max((len(domains(p.view.zone(w))) for w in p.view.workers), default=1)


def spread(zones: list[str], levels: int) -> tuple[tuple[int, ...], ...]:
    """Per level, the replicas per domain, largest first, padded: smaller is better."""
    out = []
    for level in range(1, levels + 1):
        counts = sorted(Counter(dom(z, level) for z in zones).values(), reverse=True)
        out.append(tuple(counts) + (0,) * (len(zones) - len(counts)))
    return tuple(out)


def task_spread(p: Placement, task: str, owners: Iterable[str] | None = None
                ) -> tuple[tuple[int, ...], ...]:
    owners = p.view.owners(task) if owners is None else owners
    return spread([p.view.zone(w) for w in owners], depth(p))


def is_open(p: Placement, w: str) -> bool:
    return p.view.mode(w) is Mode.ELIGIBLE and p.view.max_load(w) > 0


def may_take(p: Placement, task: str, w: str) -> bool:
    """w is open, has the task's labels, is not excluded from it and does not own it."""
    need = p.view.shape(task).require
    labels = p.view.labels(w)
    return (is_open(p, w) and all(labels.get(k) == v for k, v in need.items())
            and w not in p.view.excluded_from(task) and w not in p.view.owners(task))


def has_room(p: Placement, task: str, w: str) -> bool:
    return p.view.load(w) + p.view.tasks[task] <= p.view.max_load(w) + EPS


def uneven_nodes(p: Placement, task: str) -> list[tuple[int, str | None, set[str], set[str]]]:
    """(level, parent, fullest children, live children holding 2+ fewer) wherever the task's
    replicas are split unevenly over the live children of a node."""
    need = p.view.shape(task).require
    live = [p.view.zone(w) for w in p.view.workers
            if is_open(p, w) and all(p.view.labels(w).get(k) == v for k, v in need.items())]
    zones = [p.view.zone(w) for w in p.view.owners(task)]
    out = []
    for level in range(1, depth(p) + 1):
        counts: dict[str | None, Counter[str]] = {}
        for z in zones:
            parent = dom(z, level - 1) if level > 1 else None
            counts.setdefault(parent, Counter())[dom(z, level)] += 1
        for parent, cs in counts.items():
            fullest = max(cs.values())
            kids = {dom(z, level) for z in live if level == 1 or dom(z, level - 1) == parent}
            low = {c for c in kids if cs.get(c, 0) <= fullest - 2}
            if low:
                out.append((level, parent, {c for c, n in cs.items() if n == fullest}, low))
    return out


def degraded(p: Placement, task: str) -> bool:
    return bool(uneven_nodes(p, task))


def repair(p: Placement, task: str, pinned: Collection[str] = ()) -> Move | None:
    """A move that would repair a degraded task's spread, if one fits."""
    if task in pinned:
        return None
    view = p.view
    for level, parent, full, low in uneven_nodes(p, task):
        sources = [o for o in view.owners(task)
                   if is_open(p, o) and dom(view.zone(o), level) in full
                   and (level == 1 or dom(view.zone(o), level - 1) == parent)]
        targets = [w for w in view.workers if dom(view.zone(w), level) in low
                   and may_take(p, task, w) and has_room(p, task, w)]
        if sources and targets:
            return Move(task, sources[0], targets[0])
    return None


# -- the criterion, by brute force ----------------------------------------------------------


def useful_move(p: Placement, tolerance: float, pinned: Collection[str] = ()
                ) -> tuple[Move, float] | None:
    """A move the criterion says should still happen: its target, after taking the replica,
    is still more than the tolerance below its source, and the task's spread does not
    drop."""
    levels = depth(p)
    for a in p.view.workers:
        if not is_open(p, a):
            continue
        ua = p.view.utilization(a)
        for task in p.view.tasks_of(a):
            if task in pinned:
                continue
            c = p.view.tasks[task]
            others = [o for o in p.view.owners(task) if o != a]
            before = spread([p.view.zone(o) for o in [*others, a]], levels)
            for b in p.view.workers:
                if b == a or not may_take(p, task, b) or not has_room(p, task, b):
                    continue
                if spread([p.view.zone(o) for o in [*others, b]], levels) > before:
                    continue  # would lower the task's spread: not a move
                gap = ua - (p.view.utilization(b) + c / p.view.max_load(b))
                if gap > tolerance + EPS:
                    return Move(task, a, b), gap
    return None


def check_balanced(p: Placement, tolerance: float, pinned: Collection[str] = ()) -> None:
    found = useful_move(p, tolerance, pinned)
    assert found is None, f"not at the fixed point: {found}"
    for task in p.view.tasks:
        fix = repair(p, task, pinned)
        assert fix is None, f"{task} degraded and repairable: {fix}"
    assert p.is_balanced(tolerance, pinned), "is_balanced disagrees with the brute force"


# -- the books ------------------------------------------------------------------------------


def check_books(p: Placement) -> None:
    """Loads, owners, pending, exclusions, labels and capacity are consistent (and zones, when
    their spread is required)."""
    check_zone_spread_required(p)
    view = p.view
    workers = set(view.workers)
    pending = view.pending()
    loads = dict.fromkeys(workers, 0.0)
    for task, cost in view.tasks.items():
        owners = view.owners(task)
        want = view.replicas_of(task)
        need = view.shape(task).require
        assert len(owners) == len(set(owners)), f"{task}: replicas not distinct: {owners}"
        assert len(owners) <= want, f"{task}: {len(owners)} owners > {want}"
        assert set(owners) <= workers, f"{task}: unknown owner in {owners}"
        assert not set(owners) & set(view.excluded_from(task)), f"{task} on an excluded worker"
        for w in owners:
            loads[w] += cost
            assert task in view.tasks_of(w)
            assert all(view.labels(w).get(k) == v for k, v in need.items()), \
                f"{task} requires {need} but runs on {w} with {view.labels(w)}"
        if len(owners) < want:
            assert pending.get(task) == want - len(owners), f"{task}: pending {pending}"
        else:
            assert task not in pending
    assert set(pending) <= set(view.tasks)
    assert view.pending_count() == len(pending)
    assert view.covered() == sum(1 for t in view.tasks if view.owners(t)), "the bare count drifted"
    for w in workers:
        assert view.load(w) == loads[w] or abs(view.load(w) - loads[w]) < EPS, f"{w} load"
        assert set(view.tasks_of(w)) <= set(view.tasks)
        assert view.load(w) <= view.max_load(w) + EPS, f"{w} above max_load"


def zone(p: Placement, w: str) -> str:
    """A worker's zone for the required spread: the first part of its zone path."""
    return p.view.zone(w).split("/")[0]


def check_zone_spread_required(p: Placement) -> None:
    """With zone spread required, no two replicas of a task are ever in one zone, and a task
    short of replicas because too few zones are live says so."""
    if p.spread != REQUIRE:
        return
    for task in p.view.tasks:
        zones = [zone(p, w) for w in p.view.owners(task)]
        assert len(zones) == len(set(zones)), f"{task}: two replicas in one zone: {zones}"
    for task, why in p.view.pending_reasons().items():
        need = p.view.shape(task).require
        live = [w for w in p.view.workers
                if is_open(p, w) and all(p.view.labels(w).get(k) == v for k, v in need.items())]
        want = p.view.replicas_of(task)
        if (len(live) >= want and not p.view.excluded_from(task)
                and len({zone(p, w) for w in live}) < want):
            assert "distinct zones" in why, (task, why)


def check_pending_fits_nowhere(p: Placement) -> None:
    """After place(): a pending replica fits on no worker that may take it."""
    for task in p.view.pending():
        taken = {zone(p, o) for o in p.view.owners(task)} if p.spread == REQUIRE else set()
        for w in p.view.workers:
            if zone(p, w) in taken:
                continue  # zone spread required: that zone has a replica already
            assert not (may_take(p, task, w) and has_room(p, task, w)), \
                f"{task} pending but fits on {w}"


def check_coverage(p: Placement) -> None:
    """Coverage before redundancy: no pending task without any owner would fit in place of a
    replica of a task that has at least two."""
    for task in p.view.pending():
        if p.view.owners(task):
            continue
        c = p.view.tasks[task]
        for w in p.view.workers:
            if not may_take(p, task, w):
                continue
            for u in p.view.tasks_of(w):
                if len(p.view.owners(u)) >= 2:
                    assert p.view.load(w) - p.view.tasks[u] + c > p.view.max_load(w) + EPS, \
                        f"uncovered {task} could displace {u} ({len(p.view.owners(u))}) on {w}"


def covered(p: Placement) -> int:
    """Tasks with at least one owner."""
    return sum(1 for t in p.view.tasks if p.view.owners(t))


def check_stops_cover(p: Placement, diff: Diff, moves: Collection[Move], before: int) -> None:
    """No survivor stop without coverage gain: beside moves (whose source stops once the new
    owner runs it), a replica stops only to give a task without any owner its first, so the
    stops are at most the tasks newly covered (``before``: the count before the change)."""
    moved = {(m.source, m.task) for m in moves}
    stops = [(w, t) for w, d in diff.workers.items() for t in d.remove if (w, t) not in moved]
    assert len(stops) <= covered(p) - before, \
        f"stops {stops} without coverage gain ({before} -> {covered(p)} tasks covered)"


def check_once(moves: list[Move]) -> None:
    """Within one convergence no replica moves twice (so no a -> b -> a either)."""
    arrived: set[tuple[str, str]] = set()
    for m in moves:
        assert (m.task, m.source) not in arrived, f"{m.task} moved again from {m.source}"
        arrived.add((m.task, m.target))


def profile(p: Placement) -> list[float]:
    return sorted(round(p.view.utilization(w), 9) for w in p.view.workers)


def converge(p: Placement, tolerance: float, budget: int, pinned: Collection[str] = (),
             light: bool = False) -> list[Move]:
    """Place, then rebalance passes until the fixed point, checking every pass: within the
    budget, one replica per task, pinned tasks untouched, no spread lowered, the diff says
    what the moves say (``light``: only the budget and the one replica per task, for big
    fleets)."""
    before = covered(p)
    check_stops_cover(p, p.place(), (), before)
    moves: list[Move] = []
    while light:
        diff, ms = p.rebalance(tolerance, budget, pinned)
        assert len(ms) <= budget and len({m.task for m in ms}) == len(ms)
        if not diff:
            assert pinned or p.is_balanced(tolerance)
            check_once(moves)
            return moves
        moves += ms
    while True:
        spreads = {t: task_spread(p, t) for t in p.view.tasks}
        pending = p.view.pending()
        before = covered(p)
        diff, ms = p.rebalance(tolerance, budget, pinned)
        check_stops_cover(p, diff, ms, before)
        assert len(ms) <= budget
        assert len({m.task for m in ms}) == len(ms), "two replicas of a task in one pass"
        assert not {m.task for m in ms} & set(pinned), "moved a pinned task"
        moved = {(m.target, m.task) for m in ms}
        for w, d in diff.workers.items():  # beside the moves, only pending replicas start
            assert all((w, t) in moved or t in pending for t in d.add), (w, d)
        for m in ms:
            assert m.target in p.view.owners(m.task) and m.source not in p.view.owners(m.task)
            assert m.task in diff.workers[m.target].add
            assert m.task in diff.workers[m.source].remove
            if m.task not in pending:
                assert task_spread(p, m.task) <= spreads[m.task], f"{m} lowered the spread"
        check_books(p)
        if not diff:
            break
        moves += ms
        placed = sum(len(p.view.owners(t)) for t in p.view.tasks)
        assert len(moves) <= placed, "a replica moved twice"
    if not pinned:
        assert p.is_balanced(tolerance), "no moves left but not balanced"
    assert not p.planned_moves(tolerance, pinned) or pinned
    check_once(moves)
    return moves
