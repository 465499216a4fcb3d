"""Where a request goes by a routing map, and why: keys → tasks on a hash ring (`TaskRing`),
a task's owners in the map's order of preference (`tiers`), and `explain`. The `Router` and
``corralctl route`` both use this, so they agree. Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.common.balancer.hashring import HashRing
from corral.common.wire.routemap import READY, RouteMap, WorkerEntry

KEY_VNODES = 40  # ring points per task: every client and corralctl must use the same number


class TaskRing:
    """Keys → tasks, when tasks are partitions: consistent hashing over the task names, so a
    change of the task list moves only about 1/N of the keys."""

    def __init__(self, tasks: Mapping[str, Any]) -> None:
        self.tasks = frozenset(tasks)
        self._ring = HashRing(sorted(self.tasks), vnodes=KEY_VNODES)

    def task_for(self, key: str) -> str:
        """The task that ``key`` belongs to; LookupError if there are no tasks."""
        return self._ring.lookup(key)

    @property
    def points(self) -> int:
        """Points on the ring: KEY_VNODES per task, fewer per task past the ring's cap."""
        return self._ring.points


def tiers(owners: tuple[str, ...], workers: Mapping[str, WorkerEntry]) -> list[list[str]]:
    """The map's order of preference among a task's owners: ready ones, then the rest (a
    lame duck or a starting worker still answers for a task it owns; used only when no owner
    is ready)."""
    ready = [w for w in owners if workers[w].state == READY]
    rest = [w for w in owners if workers[w].state != READY]
    return [t for t in (ready, rest) if t]


def explain(m: RouteMap, task: str | None = None, key: str | None = None,
            ring: TaskRing | None = None) -> dict[str, Any]:
    """Where a request for ``task`` (or for ``key``, through the ring) would go by this map,
    and why. Raises LookupError for a task the map does not hold."""
    out: dict[str, Any] = {"version": m.version}
    if key is not None:
        ring = ring if ring is not None and ring.tasks == m.tasks.keys() else TaskRing(m.tasks)
        try:
            task = ring.task_for(key)
        except LookupError:
            raise LookupError(f"no tasks in map version {m.version}: key {key!r} has nowhere "
                              "to go") from None
        out["key"] = key
        points, tasks = ring.points, len(m.tasks)
        out["ring"] = (f"{tasks} tasks x {KEY_VNODES} points" if points == tasks * KEY_VNODES
                       else f"{tasks} tasks, {points} points (the ring's cap)")
    if task is None or task not in m.tasks:
        raise LookupError(f"no task {task!r} in map version {m.version}")
    owners = m.tasks[task]
    out["task"] = task
    out["owners"] = [
        {"worker": w, "serve": m.workers[w].serve, "state": m.workers[w].state,
         "why": "eligible" if m.workers[w].state == READY else
         f"avoided while any owner is ready: {m.workers[w].state.replace('_', ' ')}"}
        for w in owners
    ]
    order = tiers(owners, m.workers)
    if not order:
        out["goes_to"] = []
        out["verdict"] = "fails: no worker that serves requests runs this task"
    else:
        out["goes_to"] = order[0]
        first = order[0]
        names = ", ".join(first)
        if len(first) == 1:
            out["verdict"] = f"goes to {names}"
        else:
            out["verdict"] = f"goes to one of {names}, picked by the client's policy"
        if m.workers[first[0]].state != READY:
            out["verdict"] += " (no owner is ready; it still answers for its task)"
    return out
