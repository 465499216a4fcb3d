"""Convergence: the moves from here to the balanced fixed point, planned once, handed out in
budgeted passes.

A pass that finds the placement changed since its plan was made (any event: a join, a leave,
a capacity or mode change, a task-list change, a rebuild, a drain, an exclusion) plans a new
convergence: a dry run of the rebalance search (`rebalance.dry_run`) to the fixed point —
unbudgeted, replicas free to move more than once — and, from the owners before and after,
the *net* moves: for each task, every owner it loses paired with one it gains (the same top
zone domain first). The passes hand out net moves in the order of the dry run, so:

* within one convergence a replica moves at most once and nothing is undone (a → b → a
  nets to no move at all), and the convergence ends at the dry run's fixed point;
* a pass moves at most one replica of a task (make-before-break keeps the task's other
  replicas in place while one is handed over) and leaves ``pinned`` tasks for later;
* the moves of one pass are taken together, and after them no worker is above its max_load
  and no task's zone spread is lower; a planned move that would break that waits for the
  moves that make room for it (its target's own outgoing moves), usually the next pass;
* a pass prefers moves after which no worker is more utilized than the most utilized one
  was before it (zone repairs excepted: spread comes first). Only when the plan cannot go on
  otherwise — planned moves that only make sense together, such as two full workers trading
  tasks of different costs — does a pass take moves that raise the maximum for a while
  (`raised` counts those passes); the convergence still ends at the dry run's fixed point.

If no planned move can be handed out at all although some wait on nothing pinned, the pass
falls back to the plain search (`rebalance.run`: useful moves one at a time) and the next
pass plans afresh; `fallbacks` counts those passes. Both are rare; the hypothesis tests
count them and bound how often they happen.
"""

from __future__ import annotations

from collections.abc import Container

from .diff import Move
from .ledger import Ledger
from .rebalance import dry_run, run
from .strategies import EPS


class Convergence:
    """The planned net moves not yet handed out, and the state they were planned for."""

    __slots__ = ("fallbacks", "moves", "raised", "tolerance", "version")

    def __init__(self) -> None:
        self.moves: list[Move] = []
        self.version = -1  # the ledger version the plan is valid for
        self.tolerance = 0.0
        self.fallbacks = 0
        self.raised = 0

    def current(self, book: Ledger, tolerance: float) -> bool:
        return self.version == book.version and self.tolerance == tolerance

    def plan(self, book: Ledger, tolerance: float, pinned: Container[str]) -> list[Move]:
        """The remaining planned moves, planning afresh if anything changed."""
        if not self.current(book, tolerance):
            self.moves = net_moves(book, tolerance, pinned)
            self.version, self.tolerance = book.version, tolerance
        return self.moves

    def step(self, book: Ledger, tolerance: float, budget: int, pinned: Container[str]
             ) -> list[Move]:
        """One pass: up to ``budget`` planned moves, made on ``book``."""
        if budget <= 0:
            return []
        plan = self.plan(book, tolerance, pinned)
        util = book.util
        ceiling = max((util(w) for w in book.open if book.tasks_of[w]), default=0.0)
        chosen = _choose(book, plan, budget, pinned, ceiling)
        if not chosen and plan:
            chosen = _choose(book, plan, budget, pinned, None)
            self.raised += bool(chosen)
        if not chosen and any(m.task not in pinned for m in plan):
            # Every free planned move waits on another: untie with plain useful moves.
            self.fallbacks += 1
            self.version = -1
            return run(book, tolerance, budget, pinned)
        picked = set(chosen)
        self.moves = [m for m in plan if m not in picked]
        for m in chosen:
            book.unlink(m.task, m.source)
            book.link(m.task, m.target)
        self.version = book.version
        return chosen


def net_moves(book: Ledger, tolerance: float, pinned: Container[str]) -> list[Move]:
    """The dry run's net effect as moves, in the order the dry run first took each replica
    off its owner."""
    before, after, legs = dry_run(book, tolerance, pinned)
    left: dict[tuple[str, str], int] = {}  # (task, owner) -> the leg that first moved it off
    for i, leg in enumerate(legs):
        left.setdefault((leg.task, leg.source), i)
    top = book.top_of if book.topo.zoned else None
    out: list[tuple[int, Move]] = []
    for task, old in before.items():
        new = after[task]
        gone = sorted((o for o in old if o not in new), key=lambda o: left[(task, o)])
        came = [o for o in new if o not in old]
        for src in gone:
            same = [w for w in came if top is not None and top[w] == top[src]]
            dst = same[0] if same else came[0]
            came.remove(dst)
            out.append((left[(task, src)], Move(task, src, dst)))
    out.sort(key=lambda item: item[0])
    return [m for _, m in out]


def _choose(book: Ledger, plan: list[Move], budget: int, pinned: Container[str],
            ceiling: float | None) -> list[Move]:
    """The planned moves this pass can take together (see the module docstring); with a
    ``ceiling``, none that leave a worker above it, unless the move repairs zone spread."""
    if not plan:
        return []
    cap, load = book.cap, book.load
    rejected: set[Move] = set()
    repairs: set[Move] = set()
    chosen: list[Move] = []
    while True:
        tasks = {m.task for m in chosen}
        grew = False
        for m in plan:
            if len(chosen) >= budget:
                break
            if m in rejected or m.task in tasks or m.task in pinned:
                continue
            verdict = _valid(book, m)
            if verdict is None:
                continue
            if verdict:
                repairs.add(m)
            chosen.append(m)
            tasks.add(m.task)
            grew = True
        if not grew:
            return chosen
        # Drop the last move into any worker the chosen moves would overfill, until none.
        while True:
            delta: dict[str, float] = {}
            repaired: set[str] = set()
            for m in chosen:
                c = book.cost[m.task]
                delta[m.source] = delta.get(m.source, 0.0) - c
                delta[m.target] = delta.get(m.target, 0.0) + c
                if m in repairs:
                    repaired.add(m.target)
            over = {w for w, d in delta.items() if d > EPS and (
                load[w] + d > cap[w] + EPS
                or (ceiling is not None and w not in repaired
                    and (load[w] + d) / cap[w] > ceiling + EPS))}
            if not over:
                break
            for w in over:
                last = next(m for m in reversed(chosen) if m.target == w)
                chosen.remove(last)
                rejected.add(last)


def _valid(book: Ledger, m: Move) -> bool | None:
    """Can the target take this replica from the source now, keeping the task's spread?
    None: no; True: yes, and it improves the spread (a repair); False: yes."""
    owners = book.owners[m.task]
    if m.source not in owners or m.target in owners or m.target not in book.open:
        return None
    ex = book.excluded.get(m.task)
    need = book.need.get(m.task)
    if (ex and m.target in ex) or (need and not need <= book.labels[m.target]):
        return None
    if book.topo.zoned:
        path, key = book.path, book.topo.key
        others = [path[o] for o in owners if o != m.source]
        to, frm = key(path[m.target], others), key(path[m.source], others)
        return None if to > frm else to < frm
    return False
