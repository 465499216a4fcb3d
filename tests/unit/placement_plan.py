"""One-shot placement, for tests: from a fleet, a task list and who runs what now, to the
new assignment.

A thin wrapper around `Placement` for a caller that has the whole picture at once rather
than a stream of events. Existing placements are kept; tasks no longer listed are
removed; missing replicas are placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from corral.common.placement import LEAST_UTILIZED, Diff, Mode, Placement, TaskShape, WorkerDiff


@dataclass(frozen=True)
class Plan:
    """The result of `plan`: the new assignment, the per-worker diffs, what is still pending."""

    assignment: dict[str, list[str]]
    diff: dict[str, WorkerDiff]
    pending: dict[str, int]


@dataclass(frozen=True)
class WorkerSpec:
    id: str
    max_load: float
    mode: Mode = Mode.ELIGIBLE
    tasks: tuple[str, ...] = ()
    zone: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


def plan(
    workers: Iterable[WorkerSpec],
    tasks: Mapping[str, float | TaskShape] | Iterable[str],
    replicas: int = 1,
    strategy: str = LEAST_UTILIZED,
) -> Plan:
    """One-shot placement: the current assignment is given by each worker's ``tasks``; tasks
    not in ``tasks`` any more are removed, missing replicas are placed, existing ones kept."""
    p = Placement(replicas, strategy)
    specs = list(workers)
    p.add_tasks(tasks)
    for spec in specs:
        p.upsert_worker(spec.id, spec.max_load, spec.mode, spec.zone, spec.labels)
    diff = Diff()
    for spec in specs:
        for task in spec.tasks:
            if not p.assign(task, spec.id):
                diff.remove(spec.id, task)
    for spec in specs:
        diff.merge(p.enforce_capacity(spec.id))
    diff.merge(p.place())
    return Plan(p.view.assignment(), diff.compact(), p.view.pending())
