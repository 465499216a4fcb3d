"""Read-only views of the supervisor's state: what the control verbs return.

The JSON shapes are a contract for scripts (keep these keys; add freely):
``status`` → {phase, epoch, workers_active, workers_total, tasks_assigned, tasks_pending,
tasks_failing, …}; ``workers`` → {workers: [{id, state, active, max_load, running, utilization,
last_report_age_s, …}]}; ``assignments`` → {version, assignments: {task: [worker, …]},
pending: [task, …]}; ``tasks`` → {tasks: [{task, cost, owners, missing, failing_on}]};
``map`` → {version, epoch, workers: {id: {serve, state}}, tasks: {task: [worker, …]}} or nil
(see `corral.common.routemap`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from corral.common.routemap import MapVersions, WorkerEntry

if TYPE_CHECKING:
    from .core import SupervisorCore


def _failing(core: SupervisorCore) -> dict[str, list[str]]:
    """Task -> workers it is failing on (reported failures, or moved off after too many)."""
    out: dict[str, dict[str, None]] = {}
    for task, workers in core.placement.excluded().items():
        out.setdefault(task, {}).update(dict.fromkeys(workers))
    for rec in core.workers.values():
        if rec.active:
            for task in rec.status.failures:
                out.setdefault(task, {})[rec.id] = None
    return {t: sorted(ws) for t, ws in out.items()}


def status(core: SupervisorCore, now: float) -> dict[str, Any]:
    p = core.placement
    active = sum(1 for r in core.workers.values() if r.active)
    return {
        "phase": str(core.phase),
        "epoch": core.epoch,
        "workers_active": active,
        "workers_total": len(core.workers),
        "tasks_total": len(p.tasks),
        "tasks_assigned": sum(1 for t in p.tasks if p.owners(t)),
        "tasks_pending": len(p.pending()),
        "tasks_failing": len(_failing(core)),
        "replicas": p.replicas,
        "strategy": p.strategy,
        "handoffs": len(core.handoffs),
        "version": p.version,
        "uptime_s": round(now - core.started_at, 3),
        **_ha(core),
    }


def _ha(core: SupervisorCore) -> dict[str, Any]:
    """Who leads: without --ha a supervisor is alone; with it, the election's latest view."""
    if not core.config.ha:
        return {"role": "single"}
    role = core.role
    leader = (role.leader_info or {}).get("name") if role and not role.leader else None
    me = core.config.name or core.config.bind.rsplit("/", 1)[-1]
    members = list(role.members) if role else []
    return {
        "role": "leader" if core.leader else "standby",
        "leader": me if core.leader else leader,
        "standbys": [m for m in members if m != (me if core.leader else leader)],
        "ha_error": role.error if role else None,
    }


def workers(core: SupervisorCore, now: float) -> dict[str, Any]:
    cost = core.placement.tasks
    rows = []
    for rec in sorted(core.workers.values(), key=lambda r: r.id):
        st = rec.status
        # An inactive worker's last report is stale: its lease is gone, so is its load.
        running = sum(cost.get(t, 1.0) for t in st.running) if rec.active else 0.0
        state = rec.display_state
        rows.append({
            "id": rec.id,
            "address": st.serve or rec.identity.decode("utf-8", "replace"),
            "state": state,
            "active": rec.active,
            "drained": rec.drained,
            "max_load": st.max_load,
            "running": running,
            "assigned": len(core.placement.tasks_of(rec.id)),
            "utilization": round(running / st.max_load, 4) if st.max_load else 0.0,
            "last_report_age_s": round(now - rec.last_received, 3),
            "incarnation": f"{rec.incarnation:x}",
            "lease_held": st.lease_held,
            "failing": sorted(st.failures),
            "conflict": rec.conflict,
        })
    return {"workers": rows}


def tasks(core: SupervisorCore, worker: str | None = None, pending: bool = False) -> dict[str, Any]:
    p = core.placement
    missing = p.pending()
    failing = _failing(core)
    names: Any = p.tasks_of(worker) if worker else p.tasks
    rows = []
    for task in sorted(names):
        if pending and task not in missing:
            continue
        rows.append({
            "task": task,
            "cost": p.tasks.get(task, 1.0),
            "owners": list(p.owners(task)),
            "missing": missing.get(task, 0),
            "failing_on": failing.get(task, []),
        })
    return {"tasks": rows}


def assignments(core: SupervisorCore) -> dict[str, Any]:
    p = core.placement
    return {
        "version": p.version,
        "assignments": {t: list(p.owners(t)) for t in sorted(p.tasks)},
        "pending": sorted(p.pending()),
    }


# The routing map's version counter, per core (weakly: a core that goes away takes it along).
_MAPS: weakref.WeakKeyDictionary[SupervisorCore, MapVersions] = weakref.WeakKeyDictionary()


def route_map(core: SupervisorCore, if_newer_than: int | None = None) -> dict[str, Any] | None:
    """The request-routing map, or None when ``if_newer_than`` is already its version.

    Rebuilt only when something it is made of may have changed: the placement's version, a
    worker's reported content (its status object is replaced only then), a worker turning
    inactive, a hand-off starting or ending. O(workers) to check, O(tasks) to rebuild.
    """
    versions = _MAPS.get(core)
    if versions is None or versions.epoch != core.epoch:  # warm-up may raise the epoch
        versions = _MAPS[core] = MapVersions(core.epoch)
    signature = (
        core.placement.version,
        len(core.handoffs),
        tuple((r.id, r.incarnation, r.status.seq, r.active) for r in core.workers.values()),
    )
    current = versions.current(signature, lambda: _routing(core))
    if if_newer_than is not None and current.version <= if_newer_than:
        return None
    return versions.result()


def _routing(core: SupervisorCore) -> tuple[dict[str, tuple[str, ...]], dict[str, WorkerEntry]]:
    """Task -> the workers that serve it; worker -> where and in what state it serves.

    A task's owners are the workers the placement gives it, plus the old owner while a
    make-before-break hand-off is in flight — each only once it reports the task running, so
    a request never goes to a worker that has not started it yet (it would say not_owner)."""
    workers: dict[str, WorkerEntry] = {}
    running: dict[str, dict[str, int]] = {}
    for rec in core.workers.values():
        st = rec.status
        if rec.active and st.serve:
            workers[rec.id] = WorkerEntry(st.serve, st.state.value)
            running[rec.id] = st.running
    p, handoffs = core.placement, core.handoffs
    tasks: dict[str, tuple[str, ...]] = {}
    for task in p.tasks:
        owners = p.owners(task)
        old = handoffs.old_owner(task) if handoffs.tasks else None
        if old is not None and old not in owners:
            owners = [*owners, old]
        tasks[task] = tuple(w for w in owners if w in running and task in running[w])
    return tasks, workers
