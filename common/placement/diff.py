"""Diffs: per worker, the tasks to start and the tasks to stop.

Placement produces them; the supervisor turns each worker's part into an instruction set.
"""

from __future__ import annotations

from dataclasses import dataclass


class WorkerDiff:
    """One worker's part of a `Diff`: tasks to start and tasks to stop (insertion-ordered)."""

    __slots__ = ("add", "remove")

    def __init__(
        self, add: dict[str, None] | None = None, remove: dict[str, None] | None = None
    ) -> None:
        self.add: dict[str, None] = {} if add is None else add
        self.remove: dict[str, None] = {} if remove is None else remove

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkerDiff):
            return NotImplemented
        return self.add == other.add and self.remove == other.remove

    def __repr__(self) -> str:
        return f"WorkerDiff(add={list(self.add)}, remove={list(self.remove)})"


class Diff:
    """Per worker, the tasks to add and to remove. Adding then removing the same task on the
    same worker within one diff cancels out."""

    __slots__ = ("workers",)

    def __init__(self) -> None:
        self.workers: dict[str, WorkerDiff] = {}

    def add(self, worker: str, task: str) -> None:
        d = self.workers.get(worker)
        if d is None:
            d = self.workers[worker] = WorkerDiff()
        if task in d.remove:
            del d.remove[task]
        else:
            d.add[task] = None

    def remove(self, worker: str, task: str) -> None:
        d = self.workers.get(worker)
        if d is None:
            d = self.workers[worker] = WorkerDiff()
        if task in d.add:
            del d.add[task]
        else:
            d.remove[task] = None

    def add_many(self, worker: str, tasks: list[str]) -> None:
        d = self.workers.get(worker)
        if d is None:
            self.workers[worker] = WorkerDiff(dict.fromkeys(tasks))
        elif d.remove:
            for t in tasks:
                self.add(worker, t)
        else:
            d.add.update(dict.fromkeys(tasks))

    def merge(self, other: Diff) -> Diff:
        mine = self.workers
        for w, d in other.workers.items():
            if w not in mine:  # the usual case (a first placement: every worker): copy
                if d.add or d.remove:
                    mine[w] = WorkerDiff(dict(d.add), dict(d.remove))
                continue
            for t in d.remove:
                self.remove(w, t)
            for t in d.add:
                self.add(w, t)
        return self

    def moved(self) -> int:
        """Replicas added anywhere (each one is a task started somewhere new)."""
        return sum(len(d.add) for d in self.workers.values())

    def compact(self) -> dict[str, WorkerDiff]:
        return {w: d for w, d in self.workers.items() if d.add or d.remove}

    def __bool__(self) -> bool:
        return any(d.add or d.remove for d in self.workers.values())

    def __repr__(self) -> str:
        parts = [
            f"{w}: +{sorted(d.add)} -{sorted(d.remove)}" for w, d in sorted(self.compact().items())
        ]
        return "Diff(" + "; ".join(parts) + ")"


@dataclass(frozen=True)
class Move:
    task: str
    source: str
    target: str
