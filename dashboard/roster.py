"""The fleet as the dashboard knows it: the latest row of every worker, kept between listings
by the change feed, with what changed since the last look (the deltas browsers get).

A complete listing (the paged ``workers`` verb) replaces every row; between listings, feed
events patch rows at once (a ``timeout`` marks its worker inactive without waiting for the next
listing). Rows are compared without their report age, which moves with every listing: a delta
holds only rows whose state, load, zone or serving figures changed. Pure: no I/O, no clock.

    >>> f = Roster()
    >>> d = f.replace([row("a", running=2), row("b", running=4)], wall_ms=1000.0)
    >>> sorted(r["id"] for r in d.changed), d.removed
    (['a', 'b'], [])
    >>> f.replace([row("a", running=2), row("b", running=4)], wall_ms=2000.0).changed
    []
    >>> [r["state"] for r in f.apply_event({"kind": "timeout", "worker": "b"}).changed]
    ['inactive']
    >>> s = f.summary()
    >>> s["alive"], s["total"], s["mean"], s["max"]
    (1, 2, 0.2, 0.2)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

VOLATILE = ("last_report_age_s", "report_ms")  # change with every listing: not a delta
STATES = ("ready", "starting", "lame_duck", "handing_over", "drained", "inactive")
SORTS = ("id", "state", "zone", "utilization", "running", "max_load", "age", "serving")
BINS = 20  # the utilization histogram's bars (0–5 %, 5–10 %, …, 95–100 %+)


def row(wid: str, running: float = 0.0, max_load: float = 10.0, state: str = "ready",
        zone: str = "", age: float = 0.1) -> dict[str, Any]:
    """A worker row as the ``workers`` verb answers it (for examples and tests)."""
    return {"id": wid, "state": state, "active": state != "inactive", "drained": False,
            "max_load": max_load, "running": running, "assigned": 0,
            "utilization": running / max_load if max_load else 0.0, "zone": zone, "labels": {},
            "last_report_age_s": age, "serving": {"utilization": 0.0, "qps": 0.0, "errors": 0.0},
            "conflict": None}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in a.keys() | b.keys() if k not in VOLATILE)


def counts_in_spread(row: dict[str, Any]) -> bool:
    """A worker that takes tasks: ready and not drained (the balance is among these)."""
    return row.get("state") == "ready" and not row.get("drained")


@dataclass
class Delta:
    changed: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed)


class Roster:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.listed = False  # a complete listing has been seen

    def replace(self, rows: Iterable[dict[str, Any]], wall_ms: float) -> Delta:
        """A complete listing. ``report_ms`` (when the supervisor last heard each worker, on
        the dashboard's wall clock) is derived from the row's report age."""
        delta = Delta()
        fresh: dict[str, dict[str, Any]] = {}
        for r in rows:
            r = dict(r)
            r["report_ms"] = round(wall_ms - 1000.0 * float(r.get("last_report_age_s") or 0.0))
            old = self.rows.get(r["id"])
            if old is None or not _same(old, r):
                delta.changed.append(r)
            fresh[r["id"]] = r
        delta.removed = sorted(set(self.rows) - set(fresh))
        self.rows = fresh
        self.listed = True
        return delta

    def apply_event(self, ev: dict[str, Any]) -> Delta:
        """Patch rows from one feed event, ahead of the next listing."""
        kind, wid = ev.get("kind"), ev.get("worker")
        if not isinstance(wid, str):
            return Delta()
        r = self.rows.get(wid)
        if kind == "forget":  # the operator's forget: the row goes now, not at the next listing
            return Delta(removed=[wid]) if self.rows.pop(wid, None) is not None else Delta()
        if kind == "join" and r is None:
            r = row(wid, max_load=float(ev.get("max_load") or 0.0), state="starting",
                    zone=str(ev.get("zone") or ""))
            r["report_ms"] = ev.get("at_ms", 0)
            self.rows[wid] = r
            return Delta([dict(r)])
        if r is None:
            return Delta()
        before = dict(r)
        if kind == "timeout":
            r.update(state="inactive", active=False, running=0.0, utilization=0.0)
        elif kind in ("drain", "undrain"):
            r["drained"] = kind == "drain"
            if r["state"] in ("ready", "drained"):
                r["state"] = "drained" if kind == "drain" else "ready"
        elif kind == "state" and isinstance(ev.get("state"), str):
            r["state"] = ev["state"]
            r["active"] = ev["state"] != "inactive"
        elif kind in ("revive", "restart"):
            r["active"] = True
            if r["state"] == "inactive":
                r["state"] = "starting"
        return Delta([dict(r)]) if not _same(before, r) else Delta()

    def sizes(self) -> dict[str, int]:
        return {"rows": len(self.rows)}

    def summary(self) -> dict[str, Any]:
        """Counts by state, and the utilization of the workers that take tasks: mean, max,
        min, the spread (max ÷ mean and max − min) and a histogram of ``BINS`` bars."""
        by_state = dict.fromkeys(STATES, 0)
        utils: list[float] = []
        for r in self.rows.values():
            st = "drained" if r.get("drained") and r.get("state") == "ready" else r.get("state")
            by_state[str(st)] = by_state.get(str(st), 0) + 1
            if counts_in_spread(r):
                utils.append(float(r.get("utilization") or 0.0))
        hist = [0] * BINS
        for u in utils:
            hist[min(BINS - 1, max(0, int(u * BINS)))] += 1
        mean = sum(utils) / len(utils) if utils else 0.0
        hi, lo = (max(utils), min(utils)) if utils else (0.0, 0.0)
        return {
            "total": len(self.rows),
            "alive": sum(1 for r in self.rows.values() if r.get("active")),
            "by_state": by_state,
            "balanced_over": len(utils),
            "mean": round(mean, 4), "max": round(hi, 4), "min": round(lo, 4),
            "spread_ratio": round(hi / mean, 4) if mean > 0 else 1.0,
            "spread_diff": round(hi - lo, 4),
            "histogram": hist,
        }

    def page(self, *, sort: str = "id", desc: bool = False, state: str = "", zone: str = "",
             q: str = "", offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """One page of rows, filtered and sorted here, so a browser never holds the fleet."""
        rows: Iterable[dict[str, Any]] = self.rows.values()
        if state:
            rows = (r for r in rows if r.get("state") == state
                    or (state == "drained" and r.get("drained")))
        if zone:
            z = zone.rstrip("/")
            rows = (r for r in rows if r.get("zone") == z or str(r.get("zone")).startswith(z + "/"))
        if q:
            ql = q.lower()
            rows = (r for r in rows if ql in r["id"].lower())
        picked = sorted(rows, key=_sort_key(sort), reverse=desc)
        # The live workers first, whatever the order: silent ones (a flood of made-up ids, a
        # dead rack) never push the fleet off the first page.
        picked = ([r for r in picked if r.get("active", True)]
                  + [r for r in picked if not r.get("active", True)])
        return {"rows": picked[offset:offset + limit], "total": len(picked), "offset": offset,
                "limit": limit}


def _sort_key(sort: str) -> Any:
    if sort == "age":
        return lambda r: (-float(r.get("report_ms") or 0.0), r["id"])
    if sort == "serving":
        return lambda r: (float((r.get("serving") or {}).get("utilization") or 0.0), r["id"])
    if sort in ("utilization", "running", "max_load"):
        return lambda r: (float(r.get(sort) or 0.0), r["id"])
    if sort in ("state", "zone"):
        return lambda r: (str(r.get(sort) or ""), r["id"])
    return lambda r: r["id"]
