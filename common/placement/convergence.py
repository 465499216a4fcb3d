"""The convergence plan: the changes from here to the balanced fixed point, planned once,
handed out in budgeted passes (docs/supervisor.md, "Balance criterion", says what a
convergence promises; this is how).

A pass that finds the placement changed since its plan was made (any event: a join, a leave,
a capacity or mode change, a task-list change, a rebuild, a drain, an exclusion) plans again:
a dry run (`dry_run`) that places what is pending and rebalances, again and again, until
nothing fits and no move is useful, or until it has made `PLAN_AHEAD` moves — unbudgeted
otherwise, replicas free to move more than once (though it moves another task rather than
a second replica of one it moved, when that does as well) — and from the owners before and
after, the *net* steps: for each task, every owner its rebalance moves took a replica from,
paired with one they put a replica on (the same top zone domain first), is a move; what
placing did stays as it did it — a start (a pending replica that fits once the moves make
room) or a stop (a redundant replica displaced so that another task is covered), like
`place` itself. The passes hand the steps out in the order of the dry run, so:

* within one convergence a replica moves at most once and nothing is undone (a → b → a
  nets to no move at all), and the convergence ends at the dry run's fixed point. A long
  convergence (a zone coming back empty moves a tenth of all replicas) is planned a chunk
  of `PLAN_AHEAD` moves at a time, so that planning costs a bounded time whatever happens;
  the replicas moved by earlier chunks stay where they are in the later ones' dry runs
  (``arrived``), unless the fixed point cannot be reached otherwise (`unfrozen` counts
  that: the tests assert it stays 0 on their fleets);
* a pass makes at most ``budget`` moves (starts and stops are not hand-offs and do not
  count), never two steps for a task one of which is a move (make-before-break keeps a
  task's other replicas in place while one is handed over), and leaves ``pinned`` tasks;
* the steps of one pass are taken together, and after them no worker is above its max_load
  and no task's zone spread is lower; a step that would break that waits for the steps that
  make room for it (its target's own outgoing moves), usually the next pass;
* a pass prefers steps after which no worker is more utilized than the most utilized one
  was before it (starts and zone repairs excepted: coverage and spread come first). Only
  when the plan cannot go on otherwise — moves that only make sense together, such as two
  full workers trading tasks of different costs — does a pass take moves that raise the
  maximum for a while (`raised` counts those passes).

If no planned step can be handed out at all although some wait on nothing pinned, the pass
falls back to the plain search (`rebalance.run`: useful moves one at a time, then `place`)
and the next pass plans afresh; `fallbacks` counts those passes. The hypothesis tests assert
there are none on their fleets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container
from dataclasses import dataclass

from . import coverage, dryrun
from .diff import Diff, Move
from .ledger import Ledger
from .pending import placeable
from .rebalance import balanced, run
from .strategies import EPS, Owners


@dataclass(frozen=True)
class Step:
    """One planned change to a task: a move (source and target), a start (target only) or a
    stop (source only)."""

    task: str
    source: str | None
    target: str | None


PLAN_AHEAD = 500  # moves one plan looks ahead: bounds the time a pass may spend planning


class ConvergencePlan:
    """The planned steps not yet handed out, the state they were planned for, and the
    replicas moved since the placement was last balanced."""

    __slots__ = ("arrived", "complete", "fallbacks", "raised", "steps", "strategy",
                 "tolerance", "unfrozen", "version")

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.steps: list[Step] = []
        self.complete = True  # the plan reaches the fixed point (not just PLAN_AHEAD moves)
        self.version = -1  # the ledger version the plan is valid for
        self.tolerance = 0.0
        self.arrived: set[tuple[str, str]] = set()  # (task, worker) moved in, this convergence
        self.fallbacks = 0
        self.raised = 0
        self.unfrozen = 0

    def plan(self, book: Ledger, tolerance: float, pinned: Container[str]) -> list[Step]:
        """The remaining planned steps, planning afresh if anything changed."""
        if (self.version != book.version or self.tolerance != tolerance
                or not (self.steps or self.complete)):  # a chunk ran out: plan the next
            self.steps, self.complete, unfrozen = net_steps(
                book, tolerance, pinned, self.strategy, self.arrived)
            self.unfrozen += unfrozen
            self.version, self.tolerance = book.version, tolerance
            if not self.steps and self.complete and not pinned:
                self.arrived.clear()  # balanced: the next event starts a new convergence
        return self.steps

    def step(self, book: Ledger, tolerance: float, budget: int, pinned: Container[str]
             ) -> tuple[list[Move], Diff]:
        """One pass: up to ``budget`` planned moves (and the starts and stops due), made on
        ``book``; returns the moves and the whole pass as a diff."""
        diff = Diff()
        if budget <= 0:
            return [], diff
        plan = self.plan(book, tolerance, pinned)
        util = book.util
        ceiling = max((util(w) for w in book.open if book.tasks_of[w]), default=0.0)
        chosen = _choose(book, plan, budget, pinned, ceiling)
        if not chosen and plan:
            chosen = _choose(book, plan, budget, pinned, None)
            self.raised += bool(chosen)
        if not chosen and any(s.task not in pinned for s in plan):
            # Every free planned step waits on another: untie with plain useful moves.
            self.fallbacks += 1
            self.version = -1
            moves = (run(book, tolerance, budget, pinned, frozen=self.arrived)
                     or run(book, tolerance, budget, pinned))
            self.arrived.update((m.task, m.target) for m in moves)
            for m in moves:
                diff.remove(m.source, m.task)
                diff.add(m.target, m.task)
            return moves, diff.merge(coverage.place(book, self.strategy))
        picked = set(chosen)
        self.steps = [s for s in plan if s not in picked]
        moves = []
        for s in chosen:
            if s.source is not None:
                book.unlink(s.task, s.source)
                diff.remove(s.source, s.task)
            if s.target is not None:
                book.link(s.task, s.target)
                diff.add(s.target, s.task)
            if s.source is not None and s.target is not None:
                moves.append(Move(s.task, s.source, s.target))
                self.arrived.add((s.task, s.target))
        self.version = book.version
        if not self.steps and self.complete:
            self.arrived.clear()  # at the fixed point: the next event starts a new convergence
        return moves, diff


Seen = dict[tuple[str, str], tuple[int, bool]]  # (task, worker) -> (first step, by a move)


class Dry:
    """What a dry run found: the owners, before and after, of every task it touched; for
    each replica it took off or put on a worker, the first step at which it did and whether
    a move did it; whether it reached the fixed point; and whether it had to move replicas
    that had arrived earlier in the convergence."""

    __slots__ = ("after", "before", "complete", "unfrozen", "when")

    def __init__(self) -> None:
        self.before: dict[str, Owners] = {}
        self.after: dict[str, Owners] = {}
        self.when: Seen = {}
        self.complete = True
        self.unfrozen = False


def dry_run(book: Ledger, tolerance: float, pinned: Container[str], strategy: str,
            frozen: set[tuple[str, str]], limit: int = PLAN_AHEAD) -> Dry:
    """Place and rebalance until the fixed point or ``limit`` moves, leaving ``frozen``
    replicas where they are if it can; then put everything back."""
    out = Dry()
    when = out.when
    snap = dryrun.begin(book)
    try:
        left = limit
        while True:  # every round places or moves something, or it is the last
            placed = coverage.place(book, strategy) if placeable(book) else Diff()
            for w, d in placed.workers.items():
                for t in (*d.remove, *d.add):
                    when.setdefault((t, w), (len(when), False))
            legs = run(book, tolerance, left, pinned, once=False,
                       frozen=() if out.unfrozen else frozen)
            left -= len(legs)
            for m in legs:
                when.setdefault((m.task, m.source), (len(when), True))
                when.setdefault((m.task, m.target), (len(when), True))
            if left <= 0:
                out.complete = False
                break
            if not legs and not placed:
                if out.unfrozen or not frozen or balanced(book, tolerance, pinned):
                    break
                out.unfrozen = True  # the fixed point needs an arrived replica to move on
        out.after = {t: book.owners[t] for t in snap.owners}
    finally:
        dryrun.rollback(book)
    out.before = dict(snap.owners)
    return out


def net_steps(book: Ledger, tolerance: float, pinned: Container[str], strategy: str,
              frozen: set[tuple[str, str]]) -> tuple[list[Step], bool, bool]:
    """The dry run's net effect as steps, in the order it first made each of them; whether
    they reach the fixed point; whether an arrived replica had to move again."""
    dry = dry_run(book, tolerance, pinned, strategy, frozen)
    before, after, when = dry.before, dry.after, dry.when
    top = book.top_of if book.topo.zoned else None
    out: list[tuple[int, Step]] = []
    for task, old in before.items():
        new = after[task]
        gone = sorted((o for o in old if o not in new), key=lambda o: when[(task, o)])
        came = sorted((o for o in new if o not in old), key=lambda o: when[(task, o)])
        moved_in = [w for w in came if when[(task, w)][1]]
        for src in gone:
            dst = None
            if when[(task, src)][1] and moved_in:
                same = [w for w in moved_in if top is not None and top[w] == top[src]]
                dst = same[0] if same else moved_in[0]
                moved_in.remove(dst)
                came.remove(dst)
            out.append((when[(task, src)][0], Step(task, src, dst)))
        out.extend((when[(task, dst)][0], Step(task, None, dst)) for dst in came)
    out.sort(key=lambda item: item[0])
    return [s for _, s in out], dry.complete, dry.unfrozen


def _choose(book: Ledger, plan: list[Step], budget: int, pinned: Container[str],
            ceiling: float | None) -> list[Step]:
    """The planned steps this pass can take together (see the module docstring); with a
    ``ceiling``, none that leave a worker above it, unless a start or a spread repair."""
    cap, load = book.cap, book.load
    rejected: set[Step] = set()
    exempt: set[Step] = set()  # starts and spread repairs: the ceiling does not apply
    chosen: list[Step] = []
    while True:
        # A task with a move in this pass takes no other step in it; the starts of a task
        # in one pass must not give it more replicas than it wants.
        stepped = {s.task: s.source is not None and s.target is not None for s in chosen}
        starts = Counter(s.task for s in chosen if s.source is None)
        taken = set(chosen)
        moves = sum(stepped.values())
        grew = False
        for s in plan:
            is_move = s.source is not None and s.target is not None
            if is_move and moves >= budget:
                continue
            if s in taken or s in rejected or s.task in pinned or (s.task in stepped and (
                    is_move or stepped[s.task])):
                continue
            verdict = _valid(book, s, starts[s.task])
            if verdict is None:
                continue
            if verdict:
                exempt.add(s)
            chosen.append(s)
            taken.add(s)
            stepped[s.task] = stepped.get(s.task, False) or is_move
            starts[s.task] += s.source is None
            moves += is_move
            grew = True
        if not grew:
            return chosen
        # Drop the last step into any worker the chosen steps would overfill, until none.
        while True:
            delta: dict[str, float] = {}
            lifted: set[str] = set()
            for s in chosen:
                c = book.cost[s.task]
                if s.source is not None:
                    delta[s.source] = delta.get(s.source, 0.0) - c
                if s.target is not None:
                    delta[s.target] = delta.get(s.target, 0.0) + c
                    if s in exempt:
                        lifted.add(s.target)
            over = {w for w, d in delta.items() if d > EPS and (
                load[w] + d > cap[w] + EPS
                or (ceiling is not None and w not in lifted
                    and (load[w] + d) / cap[w] > ceiling + EPS))}
            if not over:
                break
            for w in sorted(over):
                last = next(s for s in reversed(chosen) if s.target == w)
                chosen.remove(last)
                rejected.add(last)


def _valid(book: Ledger, s: Step, starting: int = 0) -> bool | None:
    """Can this step be taken now (``starting``: starts of the task already chosen in this
    pass)? None: no; True: yes, and the ceiling does not apply to it (a start, or a move
    that improves the task's spread); False: yes."""
    owners = book.owners[s.task]
    if s.source is not None and s.source not in owners:
        return None
    if s.target is None:
        return False  # a stop
    t = s.target
    if t in owners or t not in book.open:
        return None
    ex = book.excluded.get(s.task)
    need = book.need.get(s.task)
    if (ex and t in ex) or (need and not need <= book.labels[t]):
        return None
    if s.source is None:
        if book.clash(s.task, t):
            return None
        return True if len(owners) + starting < book.want_of(s.task) else None
    if book.topo.zoned:
        path, key = book.path, book.topo.key
        others = [path[o] for o in owners if o != s.source]
        to, frm = key(path[t], others), key(path[s.source], others)
        return None if to > frm else to < frm
    return False
