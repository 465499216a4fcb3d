"""The task book: the current task list (id -> entry, with its spec), and what a new list
changes. Read by the dispatcher (specs), the rebuild and the views; written only here.

    >>> from corral.common.wire.tasklist import TaskEntry
    >>> b = TaskBook()
    >>> b.start({"a": TaskEntry(), "b": TaskEntry(spec='{"u": 1}')})
    >>> b.spec("b"), b.spec("a"), b.spec("zz")
    ('{"u": 1}', None, None)
    >>> d = b.compare({"b": TaskEntry(spec='{"u": 2}'), "c": TaskEntry()})
    >>> sorted(d.added), d.removed, d.respecified
    (['c'], ['a'], ['b'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corral.common.placement import TaskShape
from corral.common.wire.tasklist import TaskEntry


def shape_of(entry: TaskEntry) -> float | TaskShape:
    """What placement needs of a task entry (its spec is the worker's business): the bare
    cost for a plain task — a `TaskShape` validates, which costs seconds at a million tasks."""
    if entry.replicas is None and not entry.require:
        return entry.cost
    return TaskShape(entry.cost, entry.replicas, entry.require)


@dataclass(frozen=True)
class ListChange:
    """What a new task list changes against the current one."""

    added: dict[str, TaskEntry]
    removed: list[str]
    respecified: list[str]  # a new spec: their owners restart them with it
    reshaped: dict[str, float | TaskShape]  # cost, replicas or required labels changed


class TaskBook:
    def __init__(self) -> None:
        self.entries: dict[str, TaskEntry] = {}
        self.listed = False  # a task list has been applied since the book was (re)made
        self.generation = 0  # moves when tasks are added or removed
        # The source's last failure (its sentence, since when): cleared by a good list.
        self.refused: tuple[str, float] | None = None

    def refuse(self, why: str, now: float) -> None:
        """The source failed or its list was refused; the last good list stays."""
        self.refused = (why, self.refused[1] if self.refused else now)

    def accept(self) -> None:
        self.refused = None

    def spec(self, task: str) -> str | None:
        entry = self.entries.get(task)
        return entry.spec if entry is not None else None

    def start(self, tasks: Mapping[str, TaskEntry]) -> None:
        """The first list after the warm-up (or a promotion) becomes the current one."""
        self.entries = dict(tasks)
        self.listed = True
        self.generation += 1

    def clear(self) -> None:
        """No list (demoted: the next leader decides)."""
        self.entries, self.listed = {}, False
        self.generation += 1

    def compare(self, tasks: Mapping[str, TaskEntry]) -> ListChange:
        """What ``tasks`` changes; it becomes the current list."""
        old = self.entries
        change = ListChange(
            {t: e for t, e in tasks.items() if t not in old},
            [t for t in old if t not in tasks],
            [t for t, e in tasks.items() if t in old and old[t].spec != e.spec],
            {t: shape_of(e) for t, e in tasks.items()
             if t in old and shape_of(old[t]) != shape_of(e)})
        self.entries = dict(tasks)
        if change.added or change.removed:
            self.generation += 1
        return change
