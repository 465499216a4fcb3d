"""The ledger's bulk paths, for a big task list and a rebuild that adopts what a fleet runs.

At a million tasks, one `Ledger` call per task costs seconds that a supervisor spends deaf to
its workers. These functions change the same books as `Ledger.add_task` and `Ledger.link`
would, task by task, and keep every invariant the ledger documents, but move a worker's
figures once and update the big dicts in C (``dict.update`` of ``dict.fromkeys``). They are
functions of a ledger, not methods, so the ledger stays the one place for per-task changes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping

from .ledger import Ledger


def add_plain(book: Ledger, tasks: Mapping[str, float]) -> None:
    """New tasks (none known yet), id -> cost, and nothing else: no replicas of their own, no
    required labels. All their replicas start pending, in the mapping's order."""
    if not tasks:
        return
    by_cost: dict[float, list[str]] = {}
    for task, cost in tasks.items():
        by_cost.setdefault(cost, []).append(task)
    for cost, ts in by_cost.items():
        _costs(book, ts, cost)
    _unowned(book, tasks)


def add_uniform(book: Ledger, tasks: Collection[str], cost: float) -> None:
    """`add_plain` for tasks that all cost the same (a list of bare ids): no loop in Python."""
    if tasks:
        _costs(book, tasks, cost)
        _unowned(book, tasks)


def fill(book: Ledger, tasks: Collection[str], cost: float) -> Iterator[None]:
    """`add_uniform` into a book that has no task yet, in steps (iterate it; it yields
    between them): each of the task-keyed dicts is built aside in one call, sized once, with
    hashes read from ``tasks`` if it is a dict, and copied in at the end. The book is
    untouched until the last step, so dropping the iterator midway leaves it as it was.
    Whole, not a chunk at a time: a dict grown in chunks is resized again and again, and each
    insert lands at random in its index. A step takes ~0.45 s at a million tasks."""
    c = book.intern(cost)
    costs = dict.fromkeys(tasks, c)
    yield
    owners: dict[str, tuple[str, ...]] = dict.fromkeys(tasks, ())
    yield
    pending: dict[str, None] = dict.fromkeys(tasks)
    yield
    if book.cost:
        raise RuntimeError("fill: the book has tasks already")
    # Into empty dicts, `update` from a dict copies its table whole (~40 ms a million).
    book.cost.update(costs)
    book.owners.update(owners)
    book.pending.update(pending)
    book.costs[c] = book.costs.get(c, 0) + len(costs)
    book.bare += len(costs)
    book.version += 1


def _costs(book: Ledger, tasks: Collection[str], cost: float) -> None:
    c = book.intern(cost)
    book.cost.update(dict.fromkeys(tasks, c))
    book.costs[c] = book.costs.get(c, 0) + len(tasks)


def _unowned(book: Ledger, tasks: Collection[str]) -> None:
    book.owners.update(dict.fromkeys(tasks, ()))
    book.pending.update(dict.fromkeys(tasks))
    book.bare += len(tasks)
    book.version += 1


def link_many(book: Ledger, worker: str, tasks: list[str]) -> None:
    """`Ledger.link` for many tasks of one worker, each already checked."""
    if not tasks:
        return
    if book.journal is not None:
        for task in tasks:
            book._save(task, worker)
    owners_of, want, default, pending = book.owners, book.want, book.replicas, book.pending
    cost, zoned = book.cost, book.topo.zoned
    load = book.load[worker]
    for task in tasks:
        old = owners_of[task]
        assert worker not in old, f"{task} linked to {worker} twice"
        owners = owners_of[task] = (*old, worker)
        if not old:
            book.bare -= 1
        if len(owners) >= want.get(task, default):
            pending.pop(task, None)
        load += cost[task]
        if zoned:
            book.recheck(task)
    _moved(book, worker, tasks, load)


def plain(book: Ledger) -> bool:
    """No task wants its own replica count, needs labels or excludes a worker; no zones and
    no required spread; no dry run: `link_fitting` may stand for `Placement.assign_many`'s
    checks."""
    return not (book.want or book.need or book.excluded or book.topo.zoned or book.strict
                or book.journal is not None)


def link_fitting(book: Ledger, worker: str, tasks: Iterable[str], room: float) -> list[str]:
    """In order, link each of ``tasks`` that is known, not yet the worker's, short of its
    replicas and fits in ``room`` (the worker's capacity and the rounding slack); returns
    those linked. The checks and the linking in one pass, for a plain book (see `plain`)."""
    owners_of, cost, pending, default = book.owners, book.cost, book.pending, book.replicas
    load = book.load[worker]
    take: list[str] = []
    clothed = 0  # tasks that had no owner before
    for task in tasks:
        old = owners_of.get(task)
        if old is None or worker in old or len(old) >= default:
            continue
        c = cost[task]
        if load + c > room:
            continue
        load += c
        if old:
            owners = owners_of[task] = (*old, worker)
        else:
            owners = owners_of[task] = (worker,)
            clothed += 1
        if len(owners) >= default:
            pending.pop(task, None)
        take.append(task)
    if take:
        book.bare -= clothed
        _moved(book, worker, take, load)
    return take


def _moved(book: Ledger, worker: str, tasks: list[str], load: float) -> None:
    book.tasks_of[worker].update(dict.fromkeys(tasks))
    book.load[worker] = load
    book.touch(worker)
    book.version += 1
