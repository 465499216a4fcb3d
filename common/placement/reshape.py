"""Changing a task's shape in place: its cost, its replicas, the labels it requires.

A task list may change a known task's shape (a recorder whose bitrate, hence cost, went up; a
task that now needs 3 replicas, or a GPU). `reshape` applies the change to the ledger and sheds
what no longer fits, returning the removals in the diff; shed and missing replicas become
pending for the next `place`:

* a new cost changes every owner's load; an owner pushed over its max_load sheds the task;
* fewer replicas shed the surplus — from the most crowded zone domain first (so the spread
  that remains is the best), then from the most utilized owner;
* new required labels shed the owners that lack one (a hard constraint, at once).
"""

from __future__ import annotations

from .diff import Diff
from .ledger import Ledger
from .shapes import Labels
from .strategies import EPS


def reshape(book: Ledger, task: str, cost: float, want: int | None, need: Labels,
            diff: Diff) -> None:
    if cost != book.cost[task]:
        book.set_cost(task, cost)
        for w in [w for w in book.owners[task] if book.load[w] > book.cap[w] + EPS]:
            book.unlink(task, w)
            diff.remove(w, task)
    if want != book.want.get(task):
        book.set_want(task, want)
        while len(book.owners[task]) > book.want_of(task):
            w = surplus(book, task)
            book.unlink(task, w)
            diff.remove(w, task)
    if need != book.need_of(task):
        book.set_need(task, need)
        for w in [w for w in book.owners[task] if not need <= book.labels[w]]:
            book.unlink(task, w)
            diff.remove(w, task)


def surplus(book: Ledger, task: str) -> str:
    """The owner to shed first: the most crowded zone-wise, then the most utilized (ties:
    the bigger worker, then zone, then name)."""
    owners, key, path = book.owners[task], book.topo.key, book.path

    def crowding(w: str) -> tuple[tuple[int, ...], float, float, str, str]:
        others = [path[o] for o in owners if o != w]
        return (key(path[w], others), book.util(w), book.cap[w], book.rank[w], w)

    return max(owners, key=crowding)
