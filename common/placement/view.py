"""What the placement says: read-only answers about its workers and tasks.

`PlacementView` reads the ledger a `Placement` keeps and changes nothing, so the supervisor's
status views, the assigner's decisions and the tests' checks can ask freely — per worker
(capacity, mode, zone, labels, load, tasks), per task (owners, shape, exclusions) and about
what is still short (pending replicas and why, zone-degraded tasks). Questions about balance
(`Placement.is_balanced`, `outlook`, `planned_moves`) stay on `Placement`: they plan with its
convergence. Every answer is as of now; the live ones (`tasks_of`, `excluded_from`, `tasks`)
follow later changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from . import pending
from .ledger import Ledger
from .modes import Mode
from .shapes import TaskShape

_NONE: dict[str, None] = {}


class PlacementView:
    """Read-only queries over a placement's ledger (`Placement.view`)."""

    __slots__ = ("_book",)

    def __init__(self, book: Ledger) -> None:
        self._book = book

    # -- workers -----------------------------------------------------------------------------

    @property
    def workers(self) -> list[str]:
        return list(self._book.cap)

    def has_worker(self, worker: str) -> bool:
        return worker in self._book.cap

    def max_load(self, worker: str) -> float:
        return self._book.cap[worker]

    def mode(self, worker: str) -> Mode:
        return Mode.ELIGIBLE if self._book.eligible[worker] else Mode.HOLD

    def zone(self, worker: str) -> str:
        return self._book.path[worker][-1]

    def labels(self, worker: str) -> dict[str, str]:
        return dict(sorted(self._book.labels[worker]))

    def load(self, worker: str) -> float:
        return self._book.load[worker]

    def utilization(self, worker: str) -> float:
        return self._book.util(worker)

    def tasks_of(self, worker: str) -> Mapping[str, None]:
        """The worker's tasks: a live, read-only view that stays the same object for as long
        as the worker is known (the supervisor keeps it)."""
        return self._book.tasks_of.get(worker, _NONE)

    def eligible(self) -> list[str]:
        return [w for w, e in self._book.eligible.items() if e]

    # -- tasks -------------------------------------------------------------------------------

    @property
    def tasks(self) -> Mapping[str, float]:
        """Task -> cost."""
        return self._book.cost

    def owners(self, task: str) -> Sequence[str]:
        """The workers that hold a replica of the task (a tuple; empty if none or unknown)."""
        return self._book.owners.get(task, ())

    def replicas_of(self, task: str) -> int:
        return self._book.want_of(task)

    def shape(self, task: str) -> TaskShape:
        b = self._book
        return TaskShape(b.cost[task], b.want.get(task), dict(b.need_of(task)))

    def assignment(self) -> dict[str, list[str]]:
        return {t: list(o) for t, o in self._book.owners.items()}

    def excluded(self) -> dict[str, list[str]]:
        """Every exclusion, copied (for views)."""
        return {t: list(ws) for t, ws in self._book.excluded.items()}

    def excluded_from(self, task: str) -> Collection[str]:
        """The workers ``task`` must not go to (a live, read-only view; cheap per task)."""
        return self._book.excluded.get(task, _NONE)

    # -- what is still short -----------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        """Tasks short of replicas -> how many replicas are missing."""
        b = self._book
        return {t: b.want_of(t) - len(b.owners[t]) for t in b.pending}

    def pending_count(self) -> int:
        """How many tasks are short of replicas (O(1))."""
        return len(self._book.pending)

    def covered(self) -> int:
        """How many tasks have at least one owner (O(1): the ledger counts the bare ones)."""
        return len(self._book.cost) - self._book.bare

    def pending_reasons(self) -> dict[str, str]:
        """Each pending task -> one sentence saying why it is short (see `pending`)."""
        return pending.reasons(self._book)

    def pending_reason(self, task: str) -> str | None:
        """Why ``task`` is pending; None when it is not (one task: no O(pending) work)."""
        return pending.reason(self._book, task)

    def degraded(self) -> list[str]:
        """The zone-degraded tasks, sorted (see `zones`)."""
        return sorted(self._book.degraded())

    def zone_degraded(self) -> int:
        """How many tasks are zone-degraded (a gauge)."""
        return len(self._book.degraded())
