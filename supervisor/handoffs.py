"""Planned moves in flight: make-before-break.

When a worker drains or a rebalance moves a task, placement already lists the new owner; the
old owner keeps running the task until a current owner reports it running. This class
remembers who is releasing what, who is expected to confirm what, and who was told to stop
what and has not yet reported it stopped.

A task is *pinned* (no planned move may start for it) while it is in a hand-off and while any
worker told to stop it has not reported it stopped: until then that worker still runs it, and
a make-before-break move would add one more owner — replicas + 2 (chaos seed 7: a hand-off
confirmed, its old owner a message away from stopping, the next move started at once; and a
stop lost on the way to a partitioned worker while the task moved on).

    >>> h = Handoffs()
    >>> h.start("t1", old="w1")
    >>> h.expect("t1", new="w2")
    >>> dict(h.releasing("w1")), dict(h.awaiting("w2"))
    ({'t1': None}, {'t1': None})
    >>> h.release("t1")
    'w1'
    >>> h.stopping("w1", ["t1"])  # the old owner is told to stop it
    >>> dict(h.releasing("w1")), "t1" in h, "t1" in h.pinned
    ({}, False, True)
    >>> h.stopped("w1", running={})
    1
    >>> "t1" in h.pinned
    False
    >>> h.stopping("w3", ["t2"]); h.resumed("w3", ["t2"])  # given back before it stopped
    >>> "t2" in h.pinned
    False
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
        self._pins: dict[str, int] = {}
        # Tasks no planned move may touch -> how many reasons pin it (its hand-off; each
        # worker told to stop it that has not reported it stopped). Read-only by convention.
        self.pinned: Mapping[str, int] = self._pins
        self._stopping: dict[str, dict[str, None]] = {}  # worker -> told to stop, still running

    def sizes(self) -> dict[str, int]:
        return {"handoffs": len(self._old), "handoffs_by_old_owner": len(self._by_old),
                "handoffs_awaited": len(self._waiting), "pinned": len(self._pins),
                "stopping": len(self._stopping)}

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
            self._pin(task)

    def expect(self, task: str, new: str) -> None:
        """``new`` was given ``task``; its report of running it ends the hand-off."""
        if task in self._old:
            self._waiting.setdefault(new, {})[task] = None

    def old_owner(self, task: str) -> str | None:
        return self._old.get(task)

    def involves(self, worker: str) -> bool:
        """Does ``worker`` take part in a hand-off (releasing a task, awaited to confirm one,
        or told to stop one)? Its reports must then be read in full; anyone else's may take
        the settled fast path while hand-offs elsewhere are in flight."""
        return worker in self._waiting or worker in self._stopping or worker in self._by_old

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
        """End the hand-off of ``task``; returns the old owner (told to stop it, if it must,
        through `stopping`)."""
        old = self._old.pop(task, None)
        if old is not None:
            mine = self._by_old[old]
            del mine[task]
            if not mine:
                del self._by_old[old]
            self._unpin(task)
        return old

    def stopping(self, worker: str, tasks: Iterable[str]) -> None:
        """``worker`` was told to stop ``tasks``: they stay pinned until it reports them
        stopped (`stopped`) or is gone."""
        mine = None
        for task in tasks:
            if mine is None:
                mine = self._stopping.setdefault(worker, {})
            if task not in mine:
                mine[task] = None
                self._pin(task)

    def stopped(self, worker: str, running: Mapping[str, object]) -> int:
        """``worker`` reported what it runs: the tasks it was told to stop and runs no more
        are free to move again. Returns how many."""
        mine = self._stopping.get(worker)
        if not mine:
            return 0
        done = [t for t in mine if t not in running]
        for task in done:
            del mine[task]
            self._unpin(task)
        if not mine:
            del self._stopping[worker]
        return len(done)

    def resumed(self, worker: str, tasks: Iterable[str]) -> None:
        """``worker`` was told to run ``tasks`` again: it no longer stops them (without this,
        a task given back before its stop was reported would stay pinned while it runs)."""
        mine = self._stopping.get(worker)
        if not mine:
            return
        for task in tasks:
            if task in mine:
                del mine[task]
                self._unpin(task)
        if not mine:
            del self._stopping[worker]

    def _pin(self, task: str) -> None:
        pins = self._pins
        pins[task] = pins.get(task, 0) + 1

    def _unpin(self, task: str) -> None:
        pins = self._pins
        n = pins[task] - 1
        if n:
            pins[task] = n
        else:
            del pins[task]

    def forget_worker(self, worker: str) -> list[str]:
        """``worker`` is gone: hand-offs it was releasing end (nothing left to stop), and it no
        longer confirms anything. Returns the tasks it was releasing."""
        self._waiting.pop(worker, None)
        self.stopped(worker, {})  # what it was stopping is gone with it
        tasks = list(self._by_old.get(worker, ()))
        for task in tasks:
            self.release(task)
        return tasks
