"""Read-only views: what the control verbs return, as plain JSON-able values, built only from
the query API (supervisor/queries.py).

The JSON shapes are a contract for scripts (keep these keys; add freely):
``status`` → {phase, epoch, workers_active, workers_total, tasks_assigned, tasks_pending,
tasks_failing, balanced, …}; ``workers`` → {workers: [{id, state, active, max_load, running,
utilization, last_report_age_s, zone, …}], next}; ``assignments`` → {version, assignments:
{task: [worker, …]}, pending: [task, …], next}; ``tasks`` → {tasks: [{task, cost, owners,
tokens, missing, pending_reason, failing_on}], next}; ``map`` → {version, epoch, workers: {id:
{serve, state}}, tasks: {task: [worker, …]}} or nil (see `corral.common.wire.routemap`);
``events`` → {events: [{seq, t, kind, …}], cursor, missed, now}.

Lists are paged: at most ``limit`` rows (capped at `MAX_PAGE`), from the first id after
``after``; ``next`` is the ``after`` of the following page, or nil on the last one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, TypeVar

from corral.common.wire.verbs import MAX_PAGE

from .failures import LastError
from .queries import Queries, WorkerView

T = TypeVar("T")


def _page(items: Iterator[T], limit: int | None) -> tuple[list[T], bool]:
    """Up to ``limit`` items, and whether more follow."""
    n = min(limit or MAX_PAGE, MAX_PAGE)
    rows = list(islice(items, n + 1))
    return rows[:n], len(rows) > n


def status(q: Queries, now: float) -> dict[str, Any]:
    """One notion of balanced: ``balanced`` is the criterion judged now (the outlook's dry
    run; None before the supervisor runs); ``rebalancing`` says a pass is still scheduled."""
    phase, epoch, started_at, _, _ = q.lifecycle()
    active, total = q.worker_count()
    summary = q.placement_summary()
    summary["rebalancing"] = not summary.pop("balanced")
    return {
        "phase": phase,
        "epoch": epoch,
        "workers_active": active,
        "workers_total": total,
        **summary,
        **q.outlook(now),
        "tasks_failing": q.failing_count(),
        "tables": q.table_sizes(),
        "uptime_s": round(now - started_at, 3),
        "warmup": q.warmup(now),
        "source_error": q.source_error(now),
        **_ha(q),
    }


def _ha(q: Queries) -> dict[str, Any]:
    """Who leads: without --ha a supervisor is alone; with it, the election's latest view."""
    cfg = q.config
    if not cfg.ha:
        return {"role": "single"}
    _, _, _, leading, role = q.lifecycle()
    leader = (role.leader_info or {}).get("name") if role and not role.leader else None
    me = cfg.name or cfg.bind.rsplit("/", 1)[-1]
    members = list(role.members) if role else []
    info = (role.leader_info or {}) if role else {}
    return {
        "role": "leader" if leading else "standby",
        "leader": me if leading else leader,
        "leader_control": cfg.control if leading else info.get("control"),
        "standbys": [m for m in members if m != (me if leading else leader)],
        "ha_error": role.error if role else None,
        "heard": dict(role.heard) if role else {},  # workers each member hears (leadrule.py)
    }


def worker_row(w: WorkerView, now: float) -> dict[str, Any]:
    return {
        "id": w.id,
        "address": w.address,
        "state": w.state,
        "active": w.active,
        "drained": w.drained,
        "max_load": w.max_load,
        "running": w.running,
        "assigned": w.assigned,
        "utilization": round(w.utilization, 4),
        "last_report_age_s": round(now - w.last_received, 3),
        "incarnation": f"{w.incarnation:x}",
        "lease_held": w.lease_held,
        "failing": list(w.failing),
        "conflict": w.conflict,
        "zone": w.zone,
        "labels": dict(w.labels),
        "serving": {"utilization": w.serve_utilization, "qps": w.serve_qps,
                    "errors": w.serve_errors},
    }


def workers(q: Queries, now: float, limit: int | None = None, after: str | None = None,
            state: str | None = None, zone: str | None = None) -> dict[str, Any]:
    """Workers in id order; ``state`` and ``zone`` (a prefix of the hierarchy, so ``eu-1``
    matches ``eu-1/rack-7``) filter on the supervisor."""
    views: Iterable[WorkerView] = q.workers(after)
    if state:
        views = (w for w in views if w.state == state)
    if zone:
        views = (w for w in views if w.zone == zone or w.zone.startswith(zone.rstrip("/") + "/"))
    rows, more = _page(iter(views), limit)
    return {"workers": [worker_row(w, now) for w in rows],
            "next": rows[-1].id if more else None, **_warming(q, now)}


def tasks(q: Queries, worker: str | None = None, pending: bool = False,
          prefix: str | None = None, limit: int | None = None,
          after: str | None = None, handoffs: bool = False,
          now: float | None = None) -> dict[str, Any]:
    ids = q.handoff_tasks(after) if handoffs else q.task_ids(prefix, after, worker)
    views = (q.task(t) for t in ids)
    if pending:
        views = (v for v in views if v is not None and v.missing)
    rows, more = _page((v for v in views if v is not None), limit)
    return {
        "tasks": [{
            "task": v.id, "cost": v.cost, "owners": list(v.owners),
            "tokens": dict(v.tokens), "missing": v.missing, "pending_reason": v.pending_reason,
            "handoff_from": v.releasing, "failing_on": list(v.failing_on),
            "spec": v.spec, "running_on": list(v.running_on), "states": dict(v.states),
            "excluded": dict(v.excluded),
            "last_error": _last_error(v.last_error),
        } for v in rows],
        "next": rows[-1].id if more else None,
        **_warming(q, now),
    }


def _last_error(e: LastError | None) -> dict[str, Any] | None:
    return None if e is None else {"worker": e.worker, "t": e.t, "error": e.error}


def _warming(q: Queries, now: float | None) -> dict[str, Any]:
    """What a listing adds: the supervisor's clock (``t`` values are on it) and, while it
    warms up, why the listing is empty."""
    if now is None:
        return {}
    warmup = q.warmup(now)
    return {"now": now, **({"warmup": warmup} if warmup else {})}


def assignments(q: Queries, prefix: str | None = None, limit: int | None = None,
                after: str | None = None, now: float | None = None) -> dict[str, Any]:
    ids, more = _page(q.task_ids(prefix, after), limit)
    pending = q.pending()
    if prefix:
        pending = [t for t in pending if t.startswith(prefix)]
    return {
        "version": q.placement_summary()["version"],
        "assignments": {t: list(q.owners(t)) for t in ids},
        "pending": pending[:MAX_PAGE],
        "next": ids[-1] if more else None,
        **_warming(q, now),
    }


def route_map(q: Queries, if_newer_than: int | None = None,
              epoch: int | None = None) -> dict[str, Any] | None:
    """The request-routing map, or None when the caller already holds it: ``if_newer_than``
    is the version it holds, ``epoch`` that map's epoch (omitted: this supervisor's)."""
    current, versions = q.route_map()
    if (if_newer_than is not None and epoch in (None, current.epoch)
            and current.version <= if_newer_than):
        return None
    return versions.result()


def events(q: Queries, now: float, after: int | None = None,
           limit: int | None = None) -> dict[str, Any]:
    page = q.events(after, limit or 1000)
    page["now"] = now
    page["epoch"] = q.lifecycle()[1]  # a reader sees a new leader or a restart by it
    return page
