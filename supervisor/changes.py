"""What the current event changes: gathered while the core handles it, taken once at its end.

Every change the assigner makes while the core handles one event (a report or a batch of them,
a timer, a task list) gathers here: per worker, the tasks to add and remove (one `Diff`); the
workers that get their whole desired set as a reset instead; and the tasks whose spec changed
(their owners restart them). The core takes them (`take`) and the dispatcher turns them into
instruction sets, at most one per worker per event. The reconciler adds its corrections and
resends here too, and the intake asks whether a worker gets a set anyway (`touches`: a set
renews its lease, so no separate renewal is due).

One object for the supervisor's life: those that hold it keep it across `take`.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.common.placement import Diff


class Changes:
    __slots__ = ("diff", "resets", "respec")

    def __init__(self) -> None:
        self.diff = Diff()  # what the current event changes, per worker
        self.resets: dict[str, None] = {}  # workers that get their whole desired set
        self.respec: dict[str, None] = {}  # tasks whose spec changed in the current event

    @property
    def waiting(self) -> bool:
        """Does any worker get a set at the end of this event?"""
        return bool(self.diff.workers or self.resets)

    def touches(self, worker: str) -> bool:
        """Will the next flush send ``worker`` a set (which renews its lease too)?"""
        return worker in self.diff.workers or worker in self.resets

    def reset(self, worker: str) -> None:
        self.resets[worker] = None

    def correct(self, worker: str, add: Iterable[str], remove: Iterable[str]) -> None:
        for task in add:
            self.diff.add(worker, task)
        for task in remove:
            self.diff.remove(worker, task)

    def drop_diff(self) -> None:
        """Forget the per-worker diff gathered so far: every worker it names gets its whole
        set as a reset instead (the rebuild's last stage), which holds it."""
        self.diff = Diff()

    def take(self) -> tuple[Diff, dict[str, None], dict[str, None]]:
        """What this event changed (per-worker diff, workers to reset, tasks whose spec
        changed), and start over."""
        out = self.diff, self.resets, self.respec
        self.diff, self.resets, self.respec = Diff(), {}, {}
        return out
