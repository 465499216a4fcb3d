"""The open workers per label need: who may take a task that needs those labels, and where.

The ledger keeps the open workers (eligible, max_load > 0) in ``Ledger.open``. Placing, the
pending reasons and zone repairs ask, for one label need at a time, which of them have every
label in it (`for_need`) and how those spread over the zone tree (`tree`). Many tasks share a
need, so both answers are kept per need until the open set, a worker's labels or the topology
changes (`changed`, called by the ledger); ``version`` counts those changes, so what is
derived from the live trees (the zone-degraded set) knows when to start over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shapes import Labels
from .zones import LiveTree

if TYPE_CHECKING:
    from .ledger import Ledger


class OpenIndex:
    __slots__ = ("_book", "_for", "_trees", "version")

    def __init__(self, book: Ledger) -> None:
        self._book = book
        self._for: dict[Labels, dict[str, None]] = {}
        self._trees: dict[Labels, LiveTree] = {}
        self.version = 0  # bumps when the open set, its labels or the topology change

    def for_need(self, need: Labels) -> dict[str, None]:
        """The open workers that have every label in ``need`` (insertion order)."""
        book = self._book
        if not need:
            return book.open
        got = self._for.get(need)
        if got is None:
            labels = book.labels
            got = self._for[need] = {w: None for w in book.open if need <= labels[w]}
        return got

    def tree(self, need: Labels) -> LiveTree:
        """The zone tree of the open workers that have every label in ``need``."""
        tree = self._trees.get(need)
        if tree is None:
            book = self._book
            paths = map(book.path.__getitem__, self.for_need(need))
            tree = self._trees[need] = LiveTree(book.topo, paths)
        return tree

    def sizes(self) -> dict[str, int]:
        return {"open_for_need": len(self._for), "zone_trees": len(self._trees)}

    def changed(self) -> None:
        """The open set, a label or the topology changed: every answer is stale."""
        self.version += 1
        self._for.clear()
        self._trees.clear()
