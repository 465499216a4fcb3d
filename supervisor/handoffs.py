"""Planned moves in flight: make-before-break.

When a worker drains or a rebalance moves a task, placement already lists the new owner; the
old owner keeps running the task until a current owner reports it running. This class only
remembers who is releasing what, and who is expected to confirm what.

    >>> h = Handoffs()
    >>> h.start("t1", old="w1")
    >>> h.expect("t1", new="w2")
    >>> dict(h.releasing("w1")), dict(h.awaiting("w2"))
    ({'t1': None}, {'t1': None})
    >>> h.release("t1")
    'w1'
    >>> dict(h.releasing("w1")), "t1" in h
    ({}, False)
"""

from __future__ import annotations

from collections.abc import Mapping

_EMPTY: dict[str, None] = {}


class Handoffs:
    def __init__(self) -> None:
        self._old: dict[str, str] = {}  # task -> the old owner still running it
        # The same dict, public and read-only by convention: `if handoffs.tasks` is the hot
        # path's cheap "is anything in flight?" (no method call).
        self.tasks: Mapping[str, str] = self._old
        self._by_old: dict[str, dict[str, None]] = {}  # old owner -> its tasks being released
        # new owner -> tasks it was given whose hand-off waits for it; may hold tasks whose
        # hand-off already ended (cleaned lazily by `awaiting`)
        self._waiting: dict[str, dict[str, None]] = {}

    def __contains__(self, task: object) -> bool:
        return task in self._old

    def __len__(self) -> int:
        return len(self._old)

    def start(self, task: str, old: str) -> None:
        """``old`` keeps running ``task`` until a new owner confirms it. A task already in a
        hand-off keeps its first old owner (the one really running it)."""
        if task not in self._old:
            self._old[task] = old
            self._by_old.setdefault(old, {})[task] = None

    def expect(self, task: str, new: str) -> None:
        """``new`` was given ``task``; its report of running it ends the hand-off."""
        if task in self._old:
            self._waiting.setdefault(new, {})[task] = None

    def old_owner(self, task: str) -> str | None:
        return self._old.get(task)

    def releasing(self, worker: str) -> Mapping[str, None]:
        return self._by_old.get(worker, _EMPTY)

    def awaiting(self, worker: str) -> dict[str, None] | None:
        waiting = self._waiting.get(worker)
        if waiting is not None:
            for task in [t for t in waiting if t not in self._old]:
                del waiting[task]
            if not waiting:
                del self._waiting[worker]
                return None
        return waiting

    def release(self, task: str) -> str | None:
        """End the hand-off of ``task``; returns the old owner, who should now stop it."""
        old = self._old.pop(task, None)
        if old is not None:
            mine = self._by_old[old]
            del mine[task]
            if not mine:
                del self._by_old[old]
        return old

    def forget_worker(self, worker: str) -> list[str]:
        """``worker`` is gone: hand-offs it was releasing end (nothing left to stop), and it no
        longer confirms anything. Returns the tasks it was releasing."""
        self._waiting.pop(worker, None)
        tasks = list(self._by_old.get(worker, ()))
        for task in tasks:
            self.release(task)
        return tasks
