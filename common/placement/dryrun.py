"""Dry runs: journal every change to the ledger, then put it all back exactly.

A convergence is planned by trying it (`convergence.dry_run`): place and rebalance on the real
ledger, read where things ended, roll back. Rolling back must restore the state exactly —
dict order included, since the order of a worker's tasks decides what a capacity cut sheds
first and the order of pending tasks is the order they are placed in — and must not pay
O(tasks) for a dry run that touched ten of them. So `begin` copies only what changes in bulk
(loads, ``pending``, the bare count: O(W + pending)) and the owners of the pending tasks (the
strategies change owners and loads before the ledger records them); the ledger's primitives
save each other task's owners and each worker's task set the first time they change it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .strategies import Owners

if TYPE_CHECKING:
    from .ledger import Ledger


@dataclass(frozen=True)
class Snapshot:
    """What a dry run may change, as it was before it started."""

    loads: dict[str, float]
    pending: dict[str, None]
    bare: int
    version: int
    owners: dict[str, Owners] = field(default_factory=dict)
    tasks_of: dict[str, dict[str, None]] = field(default_factory=dict)


def begin(book: Ledger) -> Snapshot:
    """From now on every change to ``book`` is journaled, for `rollback`."""
    snap = Snapshot(dict(book.load), dict(book.pending), book.bare, book.version)
    snap.owners.update((t, book.owners[t]) for t in book.pending)
    book.journal = snap
    return snap


def rollback(book: Ledger) -> None:
    """Undo everything since `begin`, exactly."""
    snap, book.journal = book.journal, None
    assert snap is not None, "rollback without begin"
    for t, o in snap.owners.items():
        book.owners[t] = o
        book.recheck(t)
    for w, tasks in snap.tasks_of.items():
        mine = book.tasks_of[w]  # in place: the supervisor holds this dict
        mine.clear()
        mine.update(tasks)
    load = book.load
    for w, old in snap.loads.items():
        if load[w] != old:
            load[w] = old
            book.touch(w)
    book.pending, book.bare, book.version = snap.pending, snap.bare, snap.version
